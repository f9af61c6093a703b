"""search_features.py: every subcommand, its exit statuses, and image queries computed through the engine."""

import csv
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hangs import HANG_SECONDS
import run_inference
import search_features
from search_data import clustered, with_near_copy, write_npy
from serving import serving, stopped
from services import HTML_CAPTION, kept_job  # noqa: F401 -- kept_job: a fixture

ROOT = Path(__file__).resolve().parent.parent
# The threshold documented in docs/search.md for these features (seeded random VGG16 weights, fc7):
# a 90 % centre crop scores about 0.8 with its original, a half-size copy or a JPEG at quality 40
# about 0.99, other photos below 0 (at most -0.18).
THRESHOLD = 0.75


def run(*argv):
    """search_features.main's exit status (argparse's usage errors exit with 2 from inside it)."""
    try:
        return search_features.main([str(arg) for arg in argv])
    except SystemExit as exit:
        return exit.code


@pytest.fixture
def output(tmp_path):
    vectors = clustered(400)
    vectors[399] = vectors[3] * 1.001  # a near-copy
    write_npy(tmp_path / "f.npy", vectors)
    return tmp_path / "f.npy"


def test_help_lists_the_subcommands_examples_and_statuses():
    result = subprocess.run([sys.executable, str(ROOT / "search_features.py"), "--help"], capture_output=True,
                            text=True, timeout=HANG_SECONDS, cwd=ROOT)
    assert result.returncode == 0
    for text in ("index", "neighbours", "--calibrate", "serve", "exit status", "130", "docs/search.md"):
        assert text in result.stdout


def test_a_session_index_neighbours_duplicates_add_page(output, tmp_path, capsys):
    index = tmp_path / "f.npy.index"
    assert run("--quiet", "index", output) == 0
    assert (index / "index.json").is_file()
    capsys.readouterr()
    assert run("neighbours", index, "img/00003.jpg", "-k", "3") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["path"] for row in rows[:2]] == ["img/00003.jpg", "img/00399.jpg"] and len(rows) == 3
    assert float(rows[0]["score"]) == pytest.approx(1.0, abs=1e-5)
    np.save(tmp_path / "q.npy", clustered(400)[[5, 6]])
    assert run("neighbours", index, tmp_path / "q.npy", "-k", "1") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["path"] for row in rows] == ["img/00005.jpg", "img/00006.jpg"]
    assert run("duplicates", index, "--calibrate") == 0
    assert "nearest-neighbour cosine of 400 images" in capsys.readouterr().out
    assert run("--quiet", "duplicates", index, "--threshold", "0.99") == 0
    with open(index / "pairs.csv", newline="") as file:
        assert [(row["path_a"], row["path_b"]) for row in csv.DictReader(file)] == [("img/00003.jpg",
                                                                                     "img/00399.jpg")]
    assert (index / "groups.csv").read_text() == "group,size,path\n1,2,img/00003.jpg\n1,2,img/00399.jpg\n"
    assert run("add", index) == 0
    assert "added 0 rows; 400 in all" in capsys.readouterr().err
    assert run("--quiet", "page", index, "--threshold", "0.99", "--query", "img/00003.jpg") == 0
    assert "img/00399.jpg" in (index / "page" / "index.html").read_text()


def test_usage_errors_exit_2_and_write_nothing(output, tmp_path, capsys):
    before = sorted(tmp_path.iterdir())
    assert run("index", tmp_path / "missing.npy") == 2
    assert run("index", output, "--kind", "flat") == 2  # argparse
    assert run("neighbours", tmp_path / "nope.index", "x.jpg") == 2
    assert sorted(tmp_path.iterdir()) == before
    err = capsys.readouterr().err
    assert "search_features: error: output=" in err and "missing.npy is not a file" in err
    assert run("--quiet", "index", output) == 0
    index = tmp_path / "f.npy.index"
    files = {path: path.read_bytes() for path in index.iterdir()}
    assert run("index", output) == 2
    assert "exists: pass --overwrite" in capsys.readouterr().err
    assert run("neighbours", index, "not/in/the/index.jpg") == 2
    assert "is not a path in the index, a .npy file or an image file" in capsys.readouterr().err
    np.save(tmp_path / "wrong.npy", np.zeros(5, np.float32))
    assert run("neighbours", index, tmp_path / "wrong.npy") == 2
    assert run("duplicates", index, "--threshold", "2") == 2
    (tmp_path / "photo.jpg").write_bytes(b"x")
    assert run("neighbours", index, tmp_path / "photo.jpg", "--weights", tmp_path / "none.npy") == 2
    assert "--weights" in capsys.readouterr().err
    assert {path: path.read_bytes() for path in index.iterdir()} == files


def test_search_parameters_on_the_command_line(output, tmp_path, capsys):
    assert run("--quiet", "index", output, "--kind", "hnsw") == 0
    capsys.readouterr()
    assert run("neighbours", tmp_path / "f.npy.index", "img/00003.jpg", "-k", "2", "--ef-search", "16") == 0
    assert "img/00399.jpg" in capsys.readouterr().out
    assert run("neighbours", tmp_path / "f.npy.index", "img/00003.jpg", "--nprobe", "4") == 2
    assert "nprobe=4: a hnsw index takes efSearch" in capsys.readouterr().err
    # ivfpq: re-ranked with the full vectors it keeps, unless built without them.
    for flags, kept in (((), True), (("--no-full-vectors",), False)):
        assert run("--quiet", "index", output, "--kind", "ivfpq", "--overwrite", *flags) == 0
        assert (tmp_path / "f.npy.index" / "vectors.f16").exists() == kept
        capsys.readouterr()
        status = run("neighbours", tmp_path / "f.npy.index", "img/00003.jpg", "-k", "2", "--rerank", "3")
        assert status == (0 if kept else 2)
        assert ("img/00399.jpg" in capsys.readouterr().out) == kept


def test_a_failure_while_writing_exits_1(output, tmp_path, capsys):
    assert run("--quiet", "index", output) == 0
    (tmp_path / "blocker").write_text("a file, not a folder")
    status = run("--quiet", "duplicates", tmp_path / "f.npy.index", "--pairs", tmp_path / "blocker" / "pairs.csv")
    assert status == 1 and "search_features: failed:" in capsys.readouterr().err


# --- image queries and near-copies, through the engine (seeded random VGG16 weights: ~10 s) ------------------

def near_copies(folder):
    """3 smooth photos and 3 near-copies of each: a centre crop of 90 %, a resize to half, JPEG quality 40."""
    rng = np.random.default_rng(3)
    originals = []
    for index in range(3):
        image = Image.fromarray(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)).resize((320, 240), Image.BICUBIC)
        name = "photo%d" % index
        image.save(folder / (name + ".jpg"), quality=95)
        image.crop((16, 12, 304, 228)).save(folder / (name + "-crop.jpg"), quality=95)
        image.resize((160, 120), Image.LANCZOS).save(folder / (name + "-half.jpg"), quality=95)
        image.save(folder / (name + "-q40.jpg"), quality=40)
        originals.append(name)
    return originals


@pytest.fixture(scope="module")
def photo_output(tmp_path_factory, seeded_files):
    folder = tmp_path_factory.mktemp("photos")
    images = folder / "images"
    images.mkdir()
    originals = near_copies(images)
    status = run_inference.main(["--images", str(images), "--output", str(folder / "f.npy"), "--weights",
                                 str(seeded_files["npy"]), "--devices", "cpu:0", "--quiet"])
    assert status == 0
    return folder, images, originals


def test_near_copies_are_grouped_with_their_originals(photo_output, capsys):
    folder, _, originals = photo_output
    assert run("--quiet", "index", folder / "f.npy", "--index", folder / "photos.index", "--overwrite") == 0
    assert run("--quiet", "duplicates", folder / "photos.index", "--threshold", THRESHOLD) == 0
    with open(folder / "photos.index" / "groups.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    groups = {}
    for row in rows:
        groups.setdefault(row["group"], set()).add(row["path"])
    assert sorted(map(sorted, groups.values())) == sorted(
        sorted(name + suffix for suffix in (".jpg", "-crop.jpg", "-half.jpg", "-q40.jpg")) for name in originals)


def test_an_image_file_is_computed_with_the_settings_of_the_indexed_output_printing_no_tensorflow_log(
        photo_output, seeded_files, capsys):
    """In a process of its own (TensorFlow's C++ log is written on its stderr): our one line only."""
    folder, images, _ = photo_output
    assert run("--quiet", "index", folder / "f.npy", "--index", folder / "query.index", "--overwrite") == 0
    query = folder / "outside.jpg"
    shutil.copyfile(images / "photo2-crop.jpg", query)  # the same image, outside the indexed folder
    result = subprocess.run([sys.executable, str(ROOT / "search_features.py"), "neighbours",
                             str(folder / "query.index"), str(query), "-k", "2", "--weights",
                             str(seeded_files["npy"])],
                            capture_output=True, text=True, timeout=HANG_SECONDS, cwd=ROOT,
                            env={key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"})
    assert result.returncode == 0, result.stderr  # TensorFlow's C++ log hidden: our one line only
    assert result.stderr == "search_features: %s: computed by the model: not under the indexed images folder " \
        "%s\n" % (query, images.resolve()), result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows[0]["path"] == "photo2-crop.jpg" and float(rows[0]["score"]) > 0.999
    weights = Path(seeded_files["npy"])
    recorded = "the output was computed with the weights file %s (" % weights.name
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:  # weights a file: --weights is needed, and where it is
        patch.chdir(weights.parent)
        assert run("neighbours", folder / "query.index", query) == 2
    _one_line_error(capsys, recorded, "its record names the file, not where it is: pass --weights %s (found there: "
                    "that size and content)" % weights.name)


def test_an_indexed_image_given_by_its_file_is_answered_by_its_row_unless_it_changed(photo_output, seeded_files,
                                                                                    capsys, monkeypatch):
    import models.registry
    import parallel.queries
    folder, images, _ = photo_output
    index = folder / "rows.index"
    assert run("--quiet", "index", folder / "f.npy", "--index", index, "--overwrite") == 0
    capsys.readouterr()
    assert run("neighbours", index, "photo2-crop.jpg", "-k", "5") == 0  # by its key
    by_key = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    computed = []

    class Embedder:  # the engine's, as search_features builds it: watched, never run
        def __init__(self, model, **kwargs):
            pass

        def images(self, images):
            computed.append(list(images))
            return np.ones((len(images), 4096), np.float32), []

        def close(self):
            pass

    def no_model(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(parallel.queries, "ImageEmbedder", Embedder)
    monkeypatch.setattr(models.registry, "feature_model", no_model)
    file = images / "photo2-crop.jpg"
    spelled = folder / "elsewhere" / ".." / "images" / "photo2-crop.jpg"  # the same file, resolved
    (folder / "elsewhere").mkdir(exist_ok=True)
    for query in (file, spelled):
        assert run("neighbours", index, query, "-k", "5") == 0  # no --weights: none is read
        out, err = capsys.readouterr()
        assert err == "search_features: %s: its indexed row photo2-crop.jpg, unchanged since it was computed\n" \
            % query
        by_file = list(csv.DictReader(io.StringIO(out)))
        assert [(row["rank"], row["score"], row["path"]) for row in by_file] == [
            (row["rank"], row["score"], row["path"]) for row in by_key] and by_file[0]["query"] == str(query)
    assert computed == []
    # Changed since the output computed it (its time; the manifest records size and time): computed again.
    monkeypatch.undo()
    monkeypatch.setattr(parallel.queries, "ImageEmbedder", Embedder)
    times = file.stat()
    os.utime(file, ns=(times.st_atime_ns, times.st_mtime_ns + 10**9))
    try:
        assert run("neighbours", index, file, "-k", "5", "--weights", seeded_files["npy"]) == 0
    finally:
        os.utime(file, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert computed == [[file.read_bytes()]]
    assert capsys.readouterr().err == ("search_features: %s: computed by the model: changed since its row "
                                       "photo2-crop.jpg was computed (size or modification time)\n" % file)


def test_a_key_s_neighbours_import_no_tensorflow(output, tmp_path):
    """A query by key or vector needs no model: the engine (and TensorFlow, 3 s of CPU) was imported at start."""
    assert run("--quiet", "index", output) == 0
    code = ("import sys, search_features; status = search_features.main(['neighbours', sys.argv[1], 'img/00003.jpg', "
            "'-k', '2']); print('TENSORFLOW', 'tensorflow' in sys.modules); sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", code, str(output) + ".index"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, timeout=HANG_SECONDS)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "TENSORFLOW False", (done.stdout, done.stderr)
    assert "img/00003.jpg,1," in done.stdout and "img/00399.jpg" in done.stdout  # itself, then its near-copy


def test_the_python_example_of_docs_search_runs(tmp_path):
    page = (ROOT / "docs" / "search.md").read_text()
    code = page.split("## Python API")[1].split("```python\n")[1].split("```")[0]
    (tmp_path / "results").mkdir()
    write_npy(tmp_path / "results" / "features.npy", clustered(300))
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=HANG_SECONDS)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "exact 300 1.0" and lines[1].startswith("img/00000.jpg 1.0")


def _fetch(url):
    with urllib.request.urlopen(url + "index.html", timeout=HANG_SECONDS) as response:
        return response.status, response.read()


@pytest.fixture
def page(output, tmp_path):
    assert run("--quiet", "index", output) == 0
    assert run("--quiet", "page", tmp_path / "f.npy.index") == 0
    return tmp_path / "f.npy.index" / "page"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_serve_shows_the_page_on_loopback_until_stopped(page, stop):
    with serving(page) as (server, url):
        status, body = _fetch(url)
        assert status == 200 and b"f.npy" in body
        assert stopped(server, stop)


def test_serve_started_with_sigint_ignored_keeps_it_ignored_and_stops_on_sigterm(page):
    with serving(page, signal.SIG_IGN) as (server, url):
        server.send_signal(signal.SIGINT)  # discarded by the kernel as it is sent: the child ignores it
        assert _fetch(url)[0] == 200
        assert server.poll() is None
        assert stopped(server, signal.SIGTERM)


def test_serve_a_port_in_use_is_one_line_and_status_2(page):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, str(ROOT / "search_features.py"), "serve", str(page), "--port",
                                 str(port)], capture_output=True, text=True, timeout=HANG_SECONDS, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.startswith("search_features: error: port=%d on 127.0.0.1 cannot be opened" % port)
    assert result.stderr.count("\n") == 1, result.stderr


def test_serve_of_an_output_says_it_is_one_and_how_to_index_it(output, tmp_path, capsys):
    """`serve OUTPUT` said "write the page first", and its page needs an index that was never built."""
    assert run("serve", output) == 2
    assert capsys.readouterr().err == (
        "search_features: error: %s is an output, not an index: index it (search-features index %s), then serve "
        "its index (search-features serve %s.index)\n" % (output, output, output))
    assert run("serve", tmp_path) == 2  # a folder that is neither an index nor a page: as before
    assert "has no index.html: write the page first" in capsys.readouterr().err


def test_a_flag_of_one_value_given_twice_is_one_line_and_repeated_queries_are_every_one(output, tmp_path, capsys):
    """--port 1 --port 2 served on port 2, -k 3 -k 5 answered 5: the first was dropped without a word."""
    for argv in (["serve", output, "--port", "0", "--port", "0"], ["neighbours", output, "x", "-k", "3", "-k", "5"],
                 ["duplicates", output, "--threshold", "0.9", "--threshold", "0.8"]):
        assert run(*argv) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and ": given twice (" in error and error.endswith("give it once (see --help)\n")
    assert run("--quiet", "index", output) == 0
    assert run("neighbours", tmp_path / "f.npy.index", "img/00001.jpg", "img/00002.jpg", "-k", "1") == 0
    assert len(list(csv.DictReader(io.StringIO(capsys.readouterr().out)))) == 2


# --- the edges on the command line ------------------------------------------------------------------------

def _pairs(index):
    with open(index / "pairs.csv", newline="") as file:
        return [(row["path_a"], row["path_b"], float(row["score"])) for row in csv.DictReader(file)]


def test_two_images_and_six_identical_copies_are_near_copies(tmp_path, capsys):
    write_npy(tmp_path / "two.npy", with_near_copy(2))  # an image and its near-copy (raw cosine 0.999)
    assert run("--quiet", "index", tmp_path / "two.npy") == 0
    assert "raw cosines: too few rows or rows all alike" in capsys.readouterr().err
    assert run("--quiet", "duplicates", tmp_path / "two.npy.index", "--threshold", THRESHOLD) == 0
    [(left, right, score)] = _pairs(tmp_path / "two.npy.index")
    assert (left, right) == ("img/00000.jpg", "img/00001.jpg") and score > 0.99
    write_npy(tmp_path / "six.npy", np.repeat(clustered(1), 6, axis=0))
    assert run("--quiet", "index", tmp_path / "six.npy") == 0
    assert run("--quiet", "duplicates", tmp_path / "six.npy.index", "--threshold", THRESHOLD) == 0
    assert len(_pairs(tmp_path / "six.npy.index")) == 15
    assert (tmp_path / "six.npy.index" / "groups.csv").read_text().count("\n1,6,img/") == 6
    capsys.readouterr()
    assert run("neighbours", tmp_path / "six.npy.index", "img/00002.jpg", "-k", "6") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert sorted(row["path"] for row in rows) == ["img/%05d.jpg" % row for row in range(6)]
    assert all(float(row["score"]) == pytest.approx(1.0, abs=1e-5) for row in rows)


def test_calibrate_suggests_a_threshold_that_groups_the_planted_near_copies_and_nothing_else(tmp_path, capsys):
    from search_data import near_copy
    vectors = clustered(1000, seed=3)
    vectors[980:] = [near_copy(vectors[row], row) for row in range(20)]  # 20 rows copied, as a re-encoded JPEG
    write_npy(tmp_path / "copies.npy", vectors)
    write_npy(tmp_path / "none.npy", clustered(1000, seed=3))
    for name in ("copies", "none"):
        assert run("--quiet", "index", tmp_path / ("%s.npy" % name)) == 0
    capsys.readouterr()
    assert run("duplicates", tmp_path / "copies.npy.index", "--calibrate") == 0
    out = capsys.readouterr().out
    assert out.startswith("nearest-neighbour cosine of 1000 images (sample):\n")
    suggestion = out.splitlines()[-1]  # after the histogram, from which it is read
    assert suggestion.startswith("suggested threshold ") and suggestion.endswith(
        "(from 1,000 rows' nearest neighbours)") and " the 40 rows (4.0%) whose nearest neighbour scores " in suggestion
    threshold = suggestion.split()[2].rstrip(":")
    assert run("--quiet", "duplicates", tmp_path / "copies.npy.index", "--threshold", threshold) == 0
    assert sorted((left, right) for left, right, _ in _pairs(tmp_path / "copies.npy.index")) == [
        ("img/%05d.jpg" % row, "img/%05d.jpg" % (row + 980)) for row in range(20)]
    # Without copies it says so, and suggests nothing.
    assert run("duplicates", tmp_path / "none.npy.index", "--calibrate") == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "no threshold suggested: no gap in 1,000 rows' nearest neighbours sets a group of near-copies apart")


def _one_line_error(capture, *texts):
    err = capture.readouterr().err
    assert err.count("\n") == 1 and err.startswith("search_features: error: ") and "Traceback" not in err, err
    for text in texts:
        assert text in err, err


def test_ivfpq_on_too_few_rows_is_one_line_and_status_2(tmp_path, capfd):
    write_npy(tmp_path / "f.npy", clustered(35))
    assert run("--quiet", "index", tmp_path / "f.npy", "--kind", "ivfpq") == 2
    _one_line_error(capfd, "kind=ivfpq needs at least 256 rows", "holds 35", "use --kind exact or hnsw")
    assert not (tmp_path / "f.npy.index").exists()
    write_npy(tmp_path / "g.npy", clustered(300))  # enough, though fewer than faiss would like: no warning
    assert run("--quiet", "index", tmp_path / "g.npy", "--kind", "ivfpq") == 0
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("indexed 300 rows"), err


def test_a_row_that_is_not_finite_is_left_out_and_named(tmp_path, capsys):
    vectors = with_near_copy(400)
    vectors[5, 0] = np.inf
    write_npy(tmp_path / "f.npy", vectors)
    assert run("--quiet", "index", tmp_path / "f.npy") == 0
    err = capsys.readouterr().err
    assert "search_features: left out 1 row with values that are not finite (inf or nan): img/00005.jpg\n" in err
    assert "indexed 399 rows" in err and "recall@10 at build 1.0" in err
    assert run("neighbours", tmp_path / "f.npy.index", "img/00000.jpg", "-k", "2") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["path"] for row in rows] == ["img/00000.jpg", "img/00399.jpg"]
    assert run("--quiet", "duplicates", tmp_path / "f.npy.index", "--threshold", "0.9") == 0
    assert ("img/00000.jpg", "img/00399.jpg") in [pair[:2] for pair in _pairs(tmp_path / "f.npy.index")]
    capsys.readouterr()
    np.save(tmp_path / "q.npy", vectors[5])
    assert run("neighbours", tmp_path / "f.npy.index", tmp_path / "q.npy") == 2
    _one_line_error(capsys, "query vector 0 holds values that are not finite")


def test_a_damaged_index_or_output_is_one_line_and_status_2(output, tmp_path, capsys):
    assert run("--quiet", "index", output) == 0
    (tmp_path / "f.npy.index" / "index.json").write_text(json.dumps(["not", "an", "object"]))
    for command in (("neighbours", tmp_path / "f.npy.index", "img/00001.jpg"), ("add", tmp_path / "f.npy.index"),
                    ("duplicates", tmp_path / "f.npy.index"), ("page", tmp_path / "f.npy.index")):
        capsys.readouterr()
        assert run(*command) == 2, command
        _one_line_error(capsys, "f.npy.index is damaged (index.json holds a list, not an object): build it again")
    with open(tmp_path / "f.csv", "w") as file:
        file.write("path,f_0,f_1\n" + "".join("a%d.jpg,1.0,%d.5\n" % (row, row) for row in range(10)))
    (tmp_path / "f.csv.run.json").write_text(json.dumps({"version": 1, "settings": {"format": "csv"},
                                                         "state": "complete", "rows": 12, "bytes": 0, "parts": 0}))
    assert run("index", tmp_path / "f.csv") == 2
    _one_line_error(capsys, "10 rows, but its record f.csv.run.json says 12 are committed")


def test_page_does_not_replace_an_index_html_it_did_not_write(output, tmp_path, capsys):
    assert run("--quiet", "index", output) == 0
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<html>mine</html>")
    capsys.readouterr()
    assert run("--quiet", "page", tmp_path / "f.npy.index", "--out", site) == 2
    _one_line_error(capsys, "index.html exists and is not a page search-features wrote: pass --overwrite")
    assert (site / "index.html").read_text() == "<html>mine</html>" and sorted(site.iterdir()) == [site / "index.html"]
    assert run("--quiet", "page", tmp_path / "f.npy.index", "--out", site, "--overwrite") == 0
    assert run("--quiet", "page", tmp_path / "f.npy.index", "--out", site) == 0  # now its own page


def _page_data(page):
    """The data of a page search_features wrote, and its text outside the data's script element."""
    text = page.read_text()
    head, rest = text.split('<script type="application/json" id="data">')
    payload, tail = rest.split("</script>", 1)
    return json.loads(payload.replace("<\\/", "</")), head + tail


def test_neighbours_and_the_page_show_the_values_kept_beside_each_row(kept_job, tmp_path, capsys):
    index, expected = kept_job
    query = sorted(expected)[3]  # its caption holds HTML
    assert expected[query]["txt"] == HTML_CAPTION
    capsys.readouterr()
    assert run("neighbours", index, query, "-k", "8") == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert list(rows[0]) == ["query", "rank", "score", "path", "kept:txt", "kept:json"]
    assert rows[0]["path"] == query and sorted(row["path"] for row in rows) == sorted(expected)
    assert [(row["kept:txt"], row["kept:json"]) for row in rows] == [
        (expected[row["path"]]["txt"] or "", expected[row["path"]]["json"] or "") for row in rows]
    assert run("--quiet", "page", index, "--query", query, "-k", "3", "--threshold", "-1", "--out",
               tmp_path / "page") == 0
    data, outside = _page_data(tmp_path / "page" / "index.html")
    [shown] = data["queries"]
    assert shown["kept"] == expected[query] and len(shown["neighbours"]) == 3
    assert all(found["kept"] == expected[found["path"]] for found in shown["neighbours"])
    [group] = data["groups"]  # every row, at a cosine of -1
    assert sorted(member["path"] for member in group["members"]) == sorted(expected)
    assert all(member["kept"] == expected[member["path"]] for member in group["members"])
    assert "bold" not in outside and "caption of" not in outside  # data only, put on the page as text


# ----------------------------------------------------------------------------- text queries (CLIP)

SENTENCES = ["a photo of a dog", "a red square", "Ein Hund am Strand 🏖️"]


def _colour_images(count, seed=3):
    """uint8 [count, 224, 224, 3]: smooth colour images (upsampled noise), each its own."""
    rng = np.random.default_rng(seed)
    return np.stack([np.asarray(Image.fromarray(rng.integers(0, 255, (4, 4, 3), dtype=np.uint8)).resize(
        (224, 224), Image.BICUBIC)) for _ in range(count)])


@pytest.fixture(scope="module")
def clip_output(tmp_path_factory, photographs):
    """An output of CLIP's embedding layer, with the settings its model records: the image tower's embeddings
    of the five photographs and 15 colour images, by a small CLIP of the real layout under ViT-B/32's name
    (tests/small_clip.py), whose weights' identity the settings record. Yields (folder, weights, rows)."""
    from models.clip import clip
    from parallel import engine
    from parallel.devices import resolve_devices
    from parallel.output import open_writer
    from small_clip import SMALL, small_clip
    folder = tmp_path_factory.mktemp("clip-output")
    with small_clip(folder / "clip") as weights:
        spec = clip.ImageModel(SMALL).feature_model(weights=str(weights))
        images = np.concatenate([photographs, _colour_images(15)])
        with engine.DeviceRunner(spec, resolve_devices(devices="cpu:0", gpu_count=0), per_device_batch=10) as runner:
            rows = runner.run(images)
        paths = ["photo%d.jpg" % row for row in range(5)] + ["colour%02d.png" % row for row in range(15)]
        writer = open_writer(folder / "f.npy", format="npy", feature_size=rows.shape[1], settings=spec.settings)
        writer.write(paths, rows)
        writer.close()
        yield folder, weights, rows


def _text_embeddings(weights, sentences):
    """The sentences' embeddings by CLIP's text tower and tokenizer themselves (not through search_features)."""
    from models.clip.clip import TextTower
    from models.clip.clip_tokenizer import Tokenizer
    with TextTower("clip_vit_b32", weights=str(weights)) as tower:
        return tower.embed(Tokenizer.from_folder(tower.tokenizer_folder).encode(sentences))


def test_a_text_query_s_scores_are_clip_s_cosines(clip_output, capsys):
    folder, weights, rows = clip_output
    index = folder / "f.npy.index"
    assert run("--quiet", "index", folder / "f.npy") == 0
    meta = json.loads((index / "index.json").read_text())
    assert meta["centre"]["centred"] is False and "text tower's space" in meta["centre"]["reason"]
    assert not any(meta["mean"])
    capsys.readouterr()
    assert run("neighbours", index, "photo2.jpg", "--text", SENTENCES[0], "--text", SENTENCES[1], "-k", "20",
               "--weights", weights) == 0
    found = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["query"] for row in found[::20]] == ["photo2.jpg"] + SENTENCES[:2]  # paths first, then sentences
    cosines = _text_embeddings(weights, SENTENCES[:2]) @ rows.T / np.linalg.norm(rows, axis=1)
    for number, sentence in enumerate(SENTENCES[:2]):
        ranked = [row for row in found if row["query"] == sentence]
        scores = np.array([float(row["score"]) for row in ranked])
        expected = {"photo%d.jpg" % row if row < 5 else "colour%02d.png" % (row - 5): cosines[number, row]
                    for row in range(20)}
        np.testing.assert_allclose(scores, [expected[row["path"]] for row in ranked], atol=1e-5)
        assert list(scores) == sorted(scores, reverse=True) and len(ranked) == 20
        assert scores.max() - scores.min() >= 100 * 1e-5  # the images score apart: the check can fail


def test_text_queries_on_an_output_without_a_text_tower_are_one_line_and_status_2(clip_output, output, tmp_path,
                                                                                  capsys):
    folder, weights, _ = clip_output
    assert run("--quiet", "index", output) == 0  # VGG16's relu7 (search_data.SETTINGS)
    capsys.readouterr()
    assert run("neighbours", tmp_path / "f.npy.index", "--text", "a dog") == 2
    _one_line_error(capsys, "a text query needs an output of a model with a text tower",
                    "this output's model is 'vgg16'")
    assert run("neighbours", tmp_path / "f.npy.index") == 2
    assert "give a QUERY, --text SENTENCE or --caption SENTENCE" in capsys.readouterr().err
    # CLIP's layer pooled is not in the text tower's space.
    settings = json.loads((folder / "f.npy.run.json").read_text())["settings"]
    write_npy(tmp_path / "pooled.npy", clustered(20), settings=dict(settings, layer="pooled", feature_size="64"))
    assert run("--quiet", "index", tmp_path / "pooled.npy") == 0
    capsys.readouterr()
    assert run("neighbours", tmp_path / "pooled.npy.index", "--text", "a dog", "--weights", weights) == 2
    _one_line_error(capsys, "needs clip_vit_b32's layer embedding", "holds layer 'pooled'")


def test_a_text_query_needs_the_output_s_weights_and_an_uncentred_index(clip_output, tmp_path, capsys):
    from search.index import Index
    from small_clip import write_small_clip
    folder, weights, _ = clip_output
    index = tmp_path / "clip.index"
    assert run("--quiet", "index", folder / "f.npy", "--index", index) == 0
    capsys.readouterr()
    assert run("neighbours", index, "--text", "a dog") == 2  # computed with a folder: --weights is needed
    _one_line_error(capsys, "the output was computed with the weights file model.safetensors (",
                    "pass --weights %s (found there: that size and content)" % (weights / "model.safetensors"))
    other = write_small_clip(tmp_path / "other", seed=1)
    assert run("neighbours", index, "--text", "a dog", "--weights", other) == 2
    _one_line_error(capsys, "--weights %s is not the weights the output was computed with" % other)
    # Centred on the images' mean (asked for in Python), the index cannot take a sentence.
    centred = Index.build(folder / "f.npy", tmp_path / "centred.index", centre=True)
    assert centred.meta["centre"]["centred"] is True  # these rows allow a centre: not centring was CLIP's choice
    assert run("neighbours", tmp_path / "centred.index", "--text", "a dog", "--weights", weights) == 2
    _one_line_error(capsys, "is centred on its rows' mean, which a sentence's embedding cannot be "
                                         "compared with")


def test_an_empty_or_blank_sentence_is_refused_in_one_line(clip_output, capsys):
    folder, weights, _ = clip_output
    index = folder / "blank.index"
    assert run("--quiet", "index", folder / "f.npy", "--index", index) == 0
    capsys.readouterr()
    assert run("neighbours", index, "--text", "a dog", "-k", "1", "--weights", weights) == 0  # a sentence is taken
    capsys.readouterr()
    for texts, blank in ((("",), "''"), (("a dog", " \t "), "' \\t '"), (("\n", "a dog"), "'\\n'")):
        flags = [flag for text in texts for flag in ("--text", text)]
        assert run("neighbours", index, *flags, "--weights", weights) == 2
        _one_line_error(capsys, "neighbours: --text %s has no words: give a sentence" % blank)
    assert run("page", index, "--text", "", "--weights", weights) == 2
    _one_line_error(capsys, "page: --text '' has no words")
    assert not (index / "page").exists()


def test_a_page_shows_a_text_query_with_its_images(clip_output, capsys):
    folder, weights, _ = clip_output
    index = folder / "page.index"
    assert run("--quiet", "index", folder / "f.npy", "--index", index) == 0
    assert run("--quiet", "page", index, "--text", "a <b>dog</b> on a beach", "--query", "photo1.jpg", "-k", "3",
               "--weights", weights) == 0
    text = (index / "page" / "index.html").read_text()
    data = json.loads(text.split('<script type="application/json" id="data">')[1].split("</script>")[0]
                      .replace("<\\/", "</"))
    assert [(query["label"], query["text"], len(query["neighbours"])) for query in data["queries"]] == [
        ("photo1.jpg", False, 3), ("a <b>dog</b> on a beach", True, 3)]
    outside = text.split('<script type="application/json"')[0] + text.split("</script>", 1)[1]
    assert "dog" not in outside  # the sentence is data only, put on the page as text by its script


COLOURS = {"red": (220, 30, 30), "green": (40, 170, 60), "blue": (30, 60, 210), "yellow": (240, 220, 40),
           "black": (15, 15, 15), "white": (245, 245, 245)}


def test_with_clip_s_weights_a_sentence_finds_the_image_it_names(tmp_path, capsys):
    """Meaningful only with the published weights (random ones rank at random): skipped without them."""
    from real_clip import MISSING, real_clip
    found = real_clip()
    if found is None:
        pytest.skip(MISSING)
    weights = found[0]
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for name, colour in COLOURS.items():  # a plain colour, a little grain as a photograph has
        pixels = np.clip(np.array(colour) + rng.normal(0, 6, (256, 256, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(images / ("%s.png" % name))
    assert run_inference.main(["--images", str(images), "--output", str(tmp_path / "f.npy"), "--model",
                               "clip_vit_b32", "--weights", weights, "--devices", "cpu:0", "--quiet"]) == 0
    assert run("--quiet", "index", tmp_path / "f.npy") == 0
    capsys.readouterr()
    flags = [flag for name in COLOURS for flag in ("--text", "a photo of the colour %s" % name)]
    assert run("neighbours", tmp_path / "f.npy.index", *flags, "-k", "1", "--weights", weights) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [row["path"] for row in rows] == ["%s.png" % name for name in COLOURS], rows
