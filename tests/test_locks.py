"""Locks between processes: exclusive, released when the holder dies, waited for with a time limit."""

import subprocess
import sys
import time

import pytest

from parallel import locks


def test_a_second_holder_is_refused_or_waits_for_the_first(tmp_path):
    path = tmp_path / "out.lock"
    with locks.exclusive(path):
        started = time.monotonic()
        with pytest.raises(locks.Busy, match="out.lock is held by another process"):
            with locks.exclusive(path, wait_seconds=0.3):
                pass
        assert time.monotonic() - started >= 0.3
    with locks.exclusive(path, wait_seconds=0):  # released
        pass


def test_a_killed_holder_leaves_no_lock_behind(tmp_path):
    path = tmp_path / "out.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; "
                               "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
                               "print('held', flush=True); time.sleep(60)", str(path)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    with pytest.raises(locks.Busy):
        with locks.exclusive(path):
            pass
    holder.kill()
    holder.wait()
    with locks.exclusive(path, wait_seconds=2):
        pass
