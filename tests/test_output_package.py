"""Tests of the output package as a whole: light to import, one class per format, no format branches."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from hangs import HANG_SECONDS
import parallel.output
from parallel.output import FORMATS, FeatureWriter, open_writer, writer

REPOSITORY = Path(__file__).resolve().parents[1]
PACKAGE = REPOSITORY / "parallel" / "output"


def test_importing_the_output_package_and_every_name_it_exports_imports_no_tensorflow():
    code = ("import sys, parallel.output; [getattr(parallel.output, name) for name in parallel.output.__all__]; "
            "print(sorted({'tensorflow', 'keras'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True,
                          timeout=HANG_SECONDS)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_every_exported_name_is_reachable():
    for name in parallel.output.__all__:
        assert getattr(parallel.output, name) is not None
    assert set(parallel.output.__all__) <= set(dir(parallel.output))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        parallel.output.nothing  # noqa: B018 -- the attribute access is the test


def format_branches(source):
    """(line, text) of each comparison with a format's name, and in a class, with anything named
    `format`: how a class would ask which format it is."""
    tree = ast.parse(source)
    in_classes = {id(node) for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef) for node in ast.walk(cls)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for operand in [node.left, *node.comparators]:
            named = getattr(operand, "attr", None) or getattr(operand, "id", None)
            if (isinstance(operand, ast.Constant) and operand.value in FORMATS) or \
                    (id(node) in in_classes and named in ("format", "output_format")):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_branch_finder_finds_branches():
    assert format_branches("class A:\n    def f(self):\n        return self.format == 'x'\n") == \
        [(3, "self.format == 'x'")]
    assert format_branches("def f(kind):\n    return kind != 'npy'\n") == [(2, "kind != 'npy'")]


@pytest.mark.parametrize("module", sorted(path.name for path in PACKAGE.glob("*.py")))
def test_no_class_branches_on_the_output_format(module):
    assert format_branches((PACKAGE / module).read_text()) == []


@pytest.mark.parametrize("module", sorted(path.name for path in PACKAGE.glob("*.py")))
def test_no_module_is_over_400_lines(module):
    assert len((PACKAGE / module).read_text().splitlines()) <= 400


@pytest.mark.parametrize("output_format", FORMATS)
def test_open_writer_opens_the_class_of_the_format(tmp_path, output_format):
    writer_class = writer.WRITERS[output_format]
    assert issubclass(writer_class, FeatureWriter) and writer_class.format == output_format
    with open_writer(tmp_path / "out", format=output_format, feature_size=2, settings={}) as opened:
        assert type(opened) is writer_class
    assert len(set(writer.WRITERS.values())) == len(FORMATS) == 3
