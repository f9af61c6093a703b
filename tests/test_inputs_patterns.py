"""A pattern's files: bash's brace expansion, then globs."""

import pytest

from parallel.inputs.patterns import expand, expand_braces, names_files


def test_brace_patterns_expand_as_bash_expands_them():
    assert expand_braces("s/{000..003}.tar") == ["s/000.tar", "s/001.tar", "s/002.tar", "s/003.tar"]
    assert expand_braces("s/{8..11}.tar") == ["s/8.tar", "s/9.tar", "s/10.tar", "s/11.tar"]
    assert expand_braces("s/{2..0}.tar") == ["s/2.tar", "s/1.tar", "s/0.tar"]
    assert expand_braces("{a,b}/{0..1}.tar") == ["a/0.tar", "a/1.tar", "b/0.tar", "b/1.tar"]
    assert expand_braces("plain{x}.tar") == ["plain{x}.tar"]


def test_a_glob_is_its_files_and_one_that_matches_none_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("0.tar", "1.tar", "sub/2.tar"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    assert sorted(expand("**/*.tar")) == [str(tmp_path / name) for name in ("0.tar", "1.tar", "sub/2.tar")]
    assert expand("{0..1}.tar") == [str(tmp_path / "0.tar"), str(tmp_path / "1.tar")]
    with pytest.raises(ValueError, match=r"^images=\*\.parquet names no Parquet file: the glob \*\.parquet matches "
                                         r"none$"):
        expand("*.parquet", "Parquet file")
    assert names_files("0.tar") and names_files("x-*") and not names_files("sub")
