"""README.md and docs/*.md: every relative link reaches a file (and its heading), and the README's commands run."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


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


def test_the_readme_sample_images_command_writes_images(tmp_path):
    readme = (ROOT / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.startswith('python -c "') and "photos" in line)
    code = command[len('python -c "'):-1]
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=60)
    images = sorted((tmp_path / "photos").iterdir())
    assert len(images) == 8
    for path in images:
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB" and image.size == (320, 240)


def test_the_readme_keeps_the_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -e '.[test]' && python -m pytest -q\n" in ci
    first_block = (ROOT / "README.md").read_text().split("```bash\n")[1].split("```")[0].splitlines()
    assert first_block[0].startswith("pip install -e . && python run_inference.py --images ")
    assert first_block[1].startswith("pip install -e '.[test]' && python -m pytest -q ")
