"""Tests of parallel/output/durable.py: temp-then-rename, atomic replace, the regular-file refusal."""

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hangs import HANG_SECONDS
from parallel.output.durable import (FOLDER, REGULAR_FILE, OutputError, is_disk_full, new_file_mode, refuse_unless,
                                     replace_atomically, temporary_then_rename)

REPOSITORY = Path(__file__).resolve().parents[1]


def test_importing_it_loads_only_the_standard_library():
    """models/ writes its downloads with it: it must not bring in the engine's dependencies."""
    code = ("import sys; before = set(sys.modules); import parallel.output.durable; "
            "print(sorted(name for name in set(sys.modules) - before "
            "if name.split('.')[0] not in sys.stdlib_module_names | {'parallel'}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True,
                          timeout=HANG_SECONDS)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_temporary_then_rename_replaces_on_success_and_removes_the_temporary_on_failure(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    (tmp_path / "out.bin.tmp").write_bytes(b"left by a killed run")
    with temporary_then_rename(target) as temporary:
        assert temporary == tmp_path / "out.bin.tmp" and not temporary.exists()  # the leftover is gone
        temporary.write_bytes(b"new")
    assert target.read_bytes() == b"new" and sorted(path.name for path in tmp_path.iterdir()) == ["out.bin"]
    with pytest.raises(RuntimeError, match="half-written"):
        with temporary_then_rename(target) as temporary:
            temporary.write_bytes(b"half")
            raise RuntimeError("half-written")
    assert target.read_bytes() == b"new" and sorted(path.name for path in tmp_path.iterdir()) == ["out.bin"]


def test_unique_temporaries_do_not_collide_and_leave_nothing_on_failure(tmp_path):
    target = tmp_path / "weights.h5"
    first, second = temporary_then_rename(target, unique=True), temporary_then_rename(target, unique=True)
    with first as first_temporary, second as second_temporary:
        assert first_temporary != second_temporary
        assert first_temporary.name.startswith("weights.h5.") and first_temporary.name.endswith(".tmp")
        first_temporary.write_bytes(b"one")
        second_temporary.write_bytes(b"two")  # neither removes nor overwrites the other's file
    # Each renamed its own whole file; the last to finish (the outer `with`) is in place.
    assert target.read_bytes() == b"one" and [path.name for path in tmp_path.iterdir()] == ["weights.h5"]
    with pytest.raises(KeyboardInterrupt):
        with temporary_then_rename(target, unique=True) as temporary:
            temporary.write_bytes(b"partial")
            raise KeyboardInterrupt
    assert target.read_bytes() == b"one" and [path.name for path in tmp_path.iterdir()] == ["weights.h5"]
    with pytest.raises(FileNotFoundError):  # a folder that is not there: raised when it is made
        temporary_then_rename(tmp_path / "missing" / "weights.h5", unique=True)


@pytest.mark.parametrize("unique", [False, True])
def test_a_renamed_file_has_the_mode_of_a_new_file_whatever_its_temporary_had(tmp_path, unique):
    """The random CLIP weights were written 0o600 (the safetensors library's temporary; mkstemp's, unique)."""
    previous = os.umask(0o027)
    try:
        assert new_file_mode() == 0o640
        with temporary_then_rename(tmp_path / "weights.safetensors", unique=unique) as temporary:
            temporary.write_bytes(b"weights")
            os.chmod(temporary, 0o600)  # as the library leaves it
        assert stat.S_IMODE((tmp_path / "weights.safetensors").stat().st_mode) == 0o640
    finally:
        os.umask(previous)
    assert new_file_mode() == 0o666 & ~previous


def test_replace_atomically_leaves_the_new_content_and_no_temporary(tmp_path):
    target = tmp_path / "record.json"
    replace_atomically(target, b"first")
    replace_atomically(target, b"second")
    assert target.read_bytes() == b"second" and [path.name for path in tmp_path.iterdir()] == ["record.json"]


def test_refuse_unless_names_what_is_there_and_never_follows_a_link(tmp_path, make_node):
    (tmp_path / "file").write_bytes(b"")
    (tmp_path / "folder").mkdir()
    make_node(tmp_path / "link", "symbolic link", tmp_path / "file")
    assert refuse_unless(tmp_path / "missing", REGULAR_FILE, "advice") is None
    assert refuse_unless(tmp_path / "file" / "below", REGULAR_FILE, "advice") is None  # a parent that is a file
    assert refuse_unless(tmp_path / "file", REGULAR_FILE, "advice") == REGULAR_FILE
    assert refuse_unless(tmp_path / "folder", FOLDER, "advice") == FOLDER
    with pytest.raises(OutputError) as raised:
        refuse_unless(tmp_path / "folder", REGULAR_FILE, "choose another --output")
    assert str(raised.value) == "%s is a folder; not replacing it: choose another --output" % (tmp_path / "folder")
    with pytest.raises(OutputError, match="link is a symbolic link; not replacing it: advice$"):
        refuse_unless(tmp_path / "link", REGULAR_FILE, "advice")


def test_is_disk_full_is_a_full_disk_or_quota_only():
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_disk_full(PermissionError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(ValueError("not an OSError"))
