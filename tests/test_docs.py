"""README.md and docs/*.md: every relative link reaches a file (and its heading), and every code block runs.

Every fenced block of README.md and docs/*.md is one of three kinds, told apart by its language tag
and the line just before it:

- ```text: what a command prints, or a listing of files. Never run.
- ```bash or ```python, run by a test as written: RUNS names the test that runs it (the block is found
  by its page and its first line). The test makes the data the block needs in tmp_path and talks to
  nothing beyond 127.0.0.1 (the README's first commands run with every proxy pointed at a closed port
  of 127.0.0.1, so a download would fail).
- ```bash or ```python that cannot run here (GPUs, a scheduler, a download, the suite itself), marked by
  the line just before it:

      <!-- not run: why, and which test covers what it does -->

test_every_code_block_is_run_or_marked collects the blocks from the files: a block that is none of
these (a new one, or one whose first line changed) fails the suite, and so does a RUNS entry that
names no block or a test that does not exist.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from hangs import HANG_SECONDS

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\S*)$")
NOT_RUN = re.compile(r"^<!-- not run: (\S.*\S) -->$")

# (page, the block's first line) -> the test that runs the block as written.
RUNS = {
    ("README.md", "python3 -m venv .venv && source .venv/bin/activate "):
        "test_the_readme_first_commands_run_offline_as_written",
    ("README.md", "from collections import defaultdict"):
        "test_the_readme_first_commands_run_offline_as_written",
    ("README.md", "python search_features.py index results/features.csv"):
        "test_the_readme_first_commands_run_offline_as_written",
    ("README.md", "from parallel.inputs.tars import read_member"): "test_a_tar_member_is_read_back_as_the_docs_show",
    ("docs/images.md", "import io"): "test_a_tar_member_is_read_back_as_the_docs_show",
    ("docs/outputs.md", "from collections import defaultdict"):
        "test_a_csv_output_is_read_as_the_outputs_page_shows",
    ("docs/outputs.md", "import pandas as pd"): "test_kept_values_are_read_as_the_outputs_page_shows",
    ("docs/many-hosts.md", "import pandas as pd"): "test_kept_shards_are_read_as_the_many_hosts_page_shows",
    ("docs/python-api.md", "from models import vgg16"):
        "tests/test_engine.py::test_the_python_api_page_example_runs",
    ("docs/python-api.md", "import numpy as np"): "test_the_python_api_model_and_replication_examples_run",
    ("docs/python-api.md", "from parallel import ReplicatedVariables"):
        "test_the_python_api_model_and_replication_examples_run",
    ("docs/search.md", "import numpy as np"):
        "tests/test_search_features.py::test_the_python_example_of_docs_search_runs",
    ("docs/search.md", "import json"): "tests/test_search_service.py::test_the_service_example_of_docs_search_runs",
    ("docs/search.md", "from search import Index"):
        "tests/test_search_captions.py::test_the_python_example_of_docs_search_captions_runs",
    ("docs/outputs.md", "import numpy as np"):
        "tests/test_text_pass.py::test_the_text_file_is_read_as_the_outputs_page_shows",
    ("docs/search.md", "python search_features.py index train.npy"):
        "tests/test_search_curation.py::test_the_curation_walk_through_of_docs_search_runs",
}


class Block:
    """A fenced block of a page: `page` (relative to the repository), `line` (of its fence, from 1),
    `language` (its tag, "" when none), `text`, and `not_run` (the reason its marker gives, or None)."""

    def __init__(self, page, line, language, text, not_run):
        self.page, self.line, self.language, self.text, self.not_run = page, line, language, text, not_run

    @property
    def first_line(self):
        return self.text.splitlines()[0] if self.text else ""

    def __repr__(self):
        return "%s:%d" % (self.page, self.line)


def blocks(path):
    """The fenced blocks of the Markdown page at `path`, in order."""
    lines, found, start = path.read_text().splitlines(), [], None
    for number, line in enumerate(lines):
        fence = FENCE.match(line)
        if not fence:
            continue
        if start is None:
            start, language = number, fence.group(1)
        else:
            marker = NOT_RUN.match(lines[start - 1]) if start else None
            found.append(Block(str(path.relative_to(ROOT)), start + 1, language,
                               "\n".join(lines[start + 1:number]) + "\n", marker.group(1) if marker else None))
            start = None
    assert start is None, "%s: a block opened at line %d is never closed" % (path.relative_to(ROOT), start + 1)
    return found


def runner(key):
    """The block of code, not marked, that the RUNS key `key` names: the one of its page that starts so."""
    page, first_line = key
    matches = [block for block in blocks(ROOT / page) if block.language != "text" and block.not_run is None
               and block.first_line.startswith(first_line)]
    assert len(matches) == 1, "%s: %d blocks start with %r" % (page, len(matches), first_line)
    return matches[0]


def code(page, first_line):
    """The text of the block of `page` that starts with `first_line` (a key of RUNS)."""
    assert (page, first_line) in RUNS, "add (%r, %r) to RUNS" % (page, first_line)
    return runner((page, first_line)).text


def test_every_code_block_is_run_or_marked():
    run = {repr(runner(key)): test for key, test in RUNS.items()}
    for path in PAGES:
        text = path.read_text()
        markers = len(re.findall(r"<!-- not run", text))
        found = blocks(path)
        assert markers == sum(block.not_run is not None for block in found), (
            "%s: a <!-- not run: ... --> marker that is not the line just before a fence" % path.relative_to(ROOT))
        for block in found:
            assert block.language in ("text", "bash", "python"), "%r: tag it text, bash or python" % block
            if block.language == "text":
                assert block.not_run is None and repr(block) not in run, "%r: a text block is never run" % block
            elif block.not_run is None:
                assert repr(block) in run, ("%r (%r) is neither run by a test (RUNS in tests/test_docs.py) nor "
                                            "marked <!-- not run: why -->" % (block, block.first_line))
            else:
                assert repr(block) not in run, "%r is marked not run, and RUNS runs it" % block
                for module, name in re.findall(r"(tests/\w+\.py)(?:::(\w+))?", block.not_run):
                    there = (ROOT / module).exists() and (not name or "\ndef %s(" % name in (ROOT / module).read_text())
                    named = module + "::" * bool(name) + name
                    assert there, "%r: its marker names %s, which is not there" % (block, named)
    for test in set(RUNS.values()):
        module, _, name = test.rpartition("::")
        source = (ROOT / module).read_text() if module else Path(__file__).read_text()
        assert "\ndef %s(" % name in source, "RUNS names %s: no such test" % test


# --- links ---------------------------------------------------------------------------------------------


def prose(text):
    """The page without its code blocks and inline code, where a [x](y) is no link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def anchors(path):
    """The anchors GitHub gives the headings of a Markdown page: lower case, punctuation dropped, spaces as -."""
    headings = re.findall(r"^#+ (.*)$", prose(path.read_text()), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def relative_links():
    for page in PAGES:
        for target in LINK.findall(prose(page.read_text())):
            if not re.match(r"[a-z]+:", target):
                yield page, target


def test_the_pages_exist_and_the_readme_links_every_docs_page():
    assert len(PAGES) >= 10
    readme_targets = {target.split("#")[0] for page, target in relative_links() if page.name == "README.md"}
    assert {"docs/%s" % page.name for page in PAGES[1:]} <= readme_targets


@pytest.mark.parametrize("page, target", list(relative_links()),
                         ids=lambda value: value.name if isinstance(value, Path) else value)
def test_every_relative_link_reaches_a_file_and_its_heading(page, target):
    path, _, anchor = target.partition("#")
    destination = (page.parent / path).resolve() if path else page
    assert destination.exists(), "%s links to %s: no such file" % (page.relative_to(ROOT), target)
    if anchor and destination.suffix == ".md":
        assert anchor in anchors(destination), ("%s links to %s: no such heading (there: %s)"
                                                % (page.relative_to(ROOT), target, sorted(anchors(destination))))


def test_no_page_links_to_a_section_of_the_readme():
    for page, target in relative_links():
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        assert not (anchor and destination == ROOT / "README.md"), (
            "%s links to %s: the README's sections are docs/ pages now" % (page.relative_to(ROOT), target))


# --- the README's commands --------------------------------------------------------------------------------


def offline_environment(home):
    """os.environ for a child that can reach nothing but 127.0.0.1: every proxy is a closed loopback port."""
    env = {key: value for key, value in os.environ.items() if not key.lower().endswith("_proxy")}
    closed = "http://127.0.0.1:9"
    env.update(http_proxy=closed, https_proxy=closed, HTTP_PROXY=closed, HTTPS_PROXY=closed, no_proxy="127.0.0.1",
               NO_PROXY="127.0.0.1", HOME=str(home), KERAS_HOME=str(home / ".keras"), TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=str(ROOT))
    return env


def ignored(paths):
    """Those of `paths` (relative to the repository) that its .gitignore does not ignore."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("git, or the repository's .git, is missing: .gitignore is not checked")
    check = subprocess.run(["git", "check-ignore", "--no-index", "--verbose", "--non-matching", *paths], cwd=ROOT,
                           capture_output=True, text=True)
    return [line.split("\t", 1)[1] for line in check.stdout.splitlines() if line.startswith("::\t")]


@pytest.fixture
def clone(tmp_path):
    """tmp_path/clone, for the README's first commands; the 553 MB of random weights they write are removed after
    (pytest keeps the folders of its last runs)."""
    yield tmp_path / "clone"
    (tmp_path / "clone" / "vgg16-random.npy").unlink(missing_ok=True)


def test_the_readme_first_commands_run_offline_as_written(tmp_path, clone, monkeypatch):
    """The first block after its install line (the install is .ci/run's), in a folder that holds the
    repository's two scripts as a clone does, offline; then the README's pandas and search snippets on
    what it wrote; everything it left is ignored by .gitignore."""
    home = tmp_path / "home"
    clone.mkdir()
    home.mkdir()
    for script in ("run_inference.py", "search_features.py"):
        (clone / script).symlink_to(ROOT / script)
    first = code("README.md", "python3 -m venv .venv && source .venv/bin/activate ")
    install = first.splitlines()[:2]  # a virtual environment, and the package in it: as .ci/run makes them
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert install[1].startswith("pip install -e . ") and all(
        command.strip() in ci for command in install[0].split("#")[0].split("&&")), (install, ci)
    commands = first.splitlines()[2:]
    assert len(commands) == 3 and not any(line.startswith(("pip ", "python3 -m venv")) for line in commands), first
    env = offline_environment(home)
    done = subprocess.run(["bash", "-e", "-c", "\n".join(commands)], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=HANG_SECONDS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^8 images: 8 written, 0 failed, 0 already done, 0 skipped in .* -> results/features.csv",
                     done.stderr, re.M), done.stderr[-3000:]

    monkeypatch.chdir(clone)
    namespace = {}
    exec(compile(code("README.md", "from collections import defaultdict"), "README.md", "exec"), namespace)
    assert namespace["features"].shape == (8, 4096) and list(namespace["features"].index) == [
        "%d.jpg" % index for index in range(8)]
    assert set(namespace["features"].dtypes) == {np.dtype(np.float32)}  # as the README says: not float64

    search = code("README.md", "python search_features.py index results/features.csv")
    search = subprocess.run(["bash", "-e", "-c", search], cwd=clone, env=env, capture_output=True, text=True,
                            timeout=HANG_SECONDS)
    assert search.returncode == 0 and "nearest-neighbour cosine of 8 images" in search.stdout, search.stderr[-3000:]

    left = sorted(path.relative_to(clone).as_posix() for path in clone.rglob("*") if path.is_file()
                  and not path.is_symlink())
    assert {"photos/0.jpg", "vgg16-random.npy", "results/features.csv"} <= set(left), left
    assert ignored(left) == []


def test_the_readme_begins_in_a_virtual_environment_and_names_the_live_service():
    """It said to pip install into whatever Python was there (Debian's refuses: externally-managed-environment),
    and never spoke of `serve`, the live search service."""
    readme = (ROOT / "README.md").read_text()
    first = blocks(ROOT / "README.md")[0]
    assert first.first_line.startswith("python3 -m venv .venv && source .venv/bin/activate "), first.first_line
    assert "search_features.py serve results/features.csv.index" in readme
    assert "(docs/search.md#the-service)" in readme


def test_the_readme_test_command_is_what_ci_runs():
    """.ci/run runs the README's test command as written, after installing the browser the README names."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    readme = (ROOT / "README.md").read_text()
    tests = [block for block in blocks(ROOT / "README.md") if "pytest" in block.text]
    assert len(tests) == 1 and len(tests[0].text.splitlines()) == 1, tests
    command = tests[0].first_line.split("#")[0].strip()
    assert command == "pip install -e '.[test]' && python -m pytest -q" and command in ci
    assert "sudo apt-get install chromium" in readme and "/usr/bin/chromium" in readme
    assert any("apt-get install" in line and line.rstrip().endswith(" chromium") for line in ci), ci
    assert ci.index(command) == len(ci) - 1  # last: its status is CI's


# --- the other blocks, each on data the test makes ---------------------------------------------------------


@pytest.fixture
def tar_in_store(tmp_path, s3_store, monkeypatch):
    """s3://bucket/shards/000007.tar holding a/0001.jpg (on the session's S3 server on loopback), and the
    index a job over it writes, feats.parquet.members.parquet, in the current folder (tmp_path): the image."""
    import tarfile
    from PIL import Image
    from parallel.inputs.tar_stream import stream_members
    from parallel.inputs.tars import write_index
    from stores import BUCKET, upload
    image = tmp_path / "a" / "0001.jpg"
    image.parent.mkdir()
    Image.new("RGB", (20, 10), (200, 30, 60)).save(image)
    (tmp_path / "shards").mkdir()
    with tarfile.open(tmp_path / "shards" / "000007.tar", "w") as tar:
        tar.add(image, arcname="a/0001.jpg")
    upload(tmp_path / "shards", "s3://%s/shards/" % BUCKET)
    entries = []
    list(stream_members("s3://%s/shards/000007.tar" % BUCKET, entries))
    monkeypatch.chdir(tmp_path)
    write_index("feats.parquet.members.parquet", entries)
    return image.read_bytes()


def test_a_tar_member_is_read_back_as_the_docs_show(tar_in_store):
    namespace = {}
    exec(compile(code("README.md", "from parallel.inputs.tars import read_member"), "README.md", "exec"), namespace)
    assert namespace["data"] == tar_in_store
    namespace = {}
    exec(compile(code("docs/images.md", "import io"), "docs/images.md", "exec"), namespace)
    assert namespace["data"] == tar_in_store and namespace["image"].size == (20, 10)


def test_kept_values_are_read_as_the_outputs_page_shows(job_images, tmp_path, monkeypatch):
    import job_child
    from dataset_files import caption, write_files
    from parallel import jobs
    (data,) = write_files("hf", job_images, tmp_path / "data", 24)
    monkeypatch.chdir(tmp_path)
    jobs.run(job_child.config(str(data), Path("feats.parquet"), "parquet", keep=("caption",)))
    namespace = {}
    exec(compile(code("docs/outputs.md", "import pandas as pd"), "docs/outputs.md", "exec"), namespace)
    table = namespace["table"]
    assert len(table) == 23
    names = sorted(path.relative_to(job_images).as_posix() for path in job_images.rglob("*.png"))
    assert list(table["kept:caption"]) == [caption(name) for name in names if name != "a/bad.png"]


def colour_job(folder, output, **settings):
    """Runs tests/colour_jobs.py's model over 5 images (one unreadable) made in `folder`/images, into `output`."""
    from colour_jobs import config_for, make_images
    from parallel import jobs
    make_images(folder / "images", 5, bad={"b/img_02.png"})
    return jobs.run(config_for(folder, folder / "images", output=output, **settings))


def test_a_csv_output_is_read_as_the_outputs_page_shows(tmp_path, monkeypatch):
    summary = colour_job(tmp_path, tmp_path / "results" / "features.csv")
    assert summary.written == 4
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code("docs/outputs.md", "from collections import defaultdict"), "docs/outputs.md", "exec"),
         namespace)
    features = namespace["features"]
    assert list(features.index) == ["a/img_01.png", "a/img_03.png", "b/img_00.png", "b/img_04.png"]
    assert features.shape == (4, 6) and set(features.dtypes) == {np.dtype(np.float32)}  # as the page says
    from colour_jobs import MODEL
    from parallel import extract
    paths, computed = extract(MODEL, tmp_path / "images")  # each value is the one computed
    assert paths == list(features.index)
    np.testing.assert_array_equal(features.to_numpy(), computed.reshape(4, 6))


def test_kept_shards_are_read_as_the_many_hosts_page_shows(tmp_path, monkeypatch):
    """Kept by one process (--shard-size, --keep-shards without --distributed): the dataset ranks keep."""
    summary = colour_job(tmp_path, tmp_path / "feats.parquet", output_format="parquet", shard_size=2,
                         keep_shards=True)
    assert summary.written == 4
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code("docs/many-hosts.md", "import pandas as pd"), "docs/many-hosts.md", "exec"), namespace)
    assert sorted(namespace["frame"]["path"]) == ["a/img_01.png", "a/img_03.png", "b/img_00.png", "b/img_04.png"]


def test_the_python_api_model_and_replication_examples_run(tmp_path, monkeypatch):
    """The two examples of "Any model function", one after the other as the page reads."""
    from colour_jobs import make_images
    make_images(tmp_path / "photos", 3)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code("docs/python-api.md", "import numpy as np"), "docs/python-api.md", "exec"), namespace)
    assert len(namespace["paths"]) == 3 and namespace["features"].shape == (3, 3)
    exec(compile(code("docs/python-api.md", "from parallel import ReplicatedVariables"), "docs/python-api.md", "exec"),
         namespace)
    np.testing.assert_allclose(namespace["features"], np.tile([[200.0, 100.0, 50.0]], (5, 1)))


def test_a_missing_folder_is_named_as_the_python_api_page_quotes_it(tmp_path, monkeypatch):
    from colour_jobs import MODEL
    from parallel import extract
    page = (ROOT / "docs" / "python-api.md").read_text()
    assert "`images=photos/ is not a folder`" in page
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="^images=photos/ is not a folder$"):
        extract(MODEL, "photos/")
