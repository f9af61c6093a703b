"""docs/layout.md names every module of parallel/, models/ and search/, and only those; setup.cfg installs every
package and its data."""

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_layout_page_agrees_with_the_tree():
    page = (ROOT / "docs" / "layout.md").read_text()
    layout = page.split("# Layout")[1].split("```")[1]
    listed, folder = set(), None
    for line in layout.splitlines():
        match = re.match(r"( *)(\S+)", line)
        if not match:
            continue
        indent, name = len(match.group(1)), match.group(2)
        if indent == 0:
            folder = name.rstrip("/") if name.endswith("/") else None
            top = folder
        elif name.endswith("/"):
            folder = "%s/%s" % (top, name.rstrip("/"))
        elif name.endswith(".py") and folder is not None:
            listed.add("%s/%s" % (folder if indent > 2 else top, name))
    actual = {str(path.relative_to(ROOT)) for package in ("parallel", "models", "search")
              for path in (ROOT / package).rglob("*.py") if path.name != "__init__.py" or package == "parallel"}
    actual.discard("parallel/output/__init__.py")
    assert listed == actual, ("in docs/layout.md only: %s; in the tree only: %s"
                              % (sorted(listed - actual), sorted(actual - listed)))


def test_every_package_is_installed():
    """setup.cfg's `packages =` names every folder of parallel/, models/ and search/ that is a package (a new
    model family's folder too), so that `pip install .` installs it."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    listed = {name.strip() for name in setup["options"]["packages"].replace("\n", ",").split(",") if name.strip()}
    actual = {".".join(path.parent.relative_to(ROOT).parts) for package in ("parallel", "models", "search")
              for path in (ROOT / package).rglob("__init__.py")}
    assert listed == actual, ("in setup.cfg only: %s; in the tree only: %s"
                              % (sorted(listed - actual), sorted(actual - listed)))


def test_every_package_data_file_is_in_its_package():
    """Each file `[options.package_data]` names is in the folder of the package it is listed under (CLIP's
    clip_test_merges.txt in models/clip/, where models/clip/clip_tokenizer.py reads it)."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    missing = [(package, pattern.strip()) for package, patterns in setup["options.package_data"].items()
               for pattern in patterns.split(",")
               if not list((ROOT / package.replace(".", "/")).glob(pattern.strip()))]
    assert not missing, "package data that is not there: %s" % missing
