"""docs/layout.md names every module of parallel/, models/ and search/, and only those."""

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
