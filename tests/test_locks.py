"""Locks between processes: exclusive, released when the holder dies, waited for with a time limit, and
no lock file left behind by a run that let go."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import job_child
from hangs import HANG_SECONDS
from parallel import jobs
from parallel.jobs import locks
from parallel.output import OutputError

REPOSITORY = Path(__file__).resolve().parent.parent


def lock_files(folder):
    return sorted(path.relative_to(folder).as_posix() for path in Path(folder).rglob("*.lock"))


class Clock:
    """time.monotonic and time.sleep for the locks module: a sleep advances the clock, and is recorded."""

    def __init__(self):
        self.now, self.waits = 1000.0, []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.waits.append(seconds)
        self.now += seconds
        assert len(self.waits) < 1000, "still waiting after %.1f s of the clock" % sum(self.waits)


def test_a_second_holder_is_refused_or_waits_for_the_first(tmp_path, monkeypatch):
    path = tmp_path / "out.lock"
    with locks.exclusive(path):
        clock = Clock()
        monkeypatch.setattr(locks, "time", clock)
        with pytest.raises(locks.Busy, match="out.lock is held by another process"):
            with locks.exclusive(path, wait_seconds=0.3, poll_seconds=0.1):
                pass
        assert len(clock.waits) == 3 and sum(clock.waits) >= 0.3  # it tried every 0.1 s for the 0.3 s asked for
        monkeypatch.undo()
    with locks.exclusive(path, wait_seconds=0):  # released
        pass


def test_the_lock_file_exists_while_held_and_a_refused_holder_leaves_none(tmp_path):
    path = tmp_path / "out.lock"
    with locks.exclusive(path):
        assert os.listdir(tmp_path) == ["out.lock"]
        with pytest.raises(locks.Busy):
            with locks.exclusive(path):
                pass
        assert os.listdir(tmp_path) == ["out.lock"]  # the holder's, still held
    assert os.listdir(tmp_path) == []


def test_a_block_that_removes_the_lock_s_folder_is_fine(tmp_path):
    folder = tmp_path / "attempt"
    folder.mkdir()
    with locks.exclusive(folder / ".lock"):
        (folder / ".lock").unlink()
        folder.rmdir()
    assert os.listdir(tmp_path) == []


def test_a_killed_holder_leaves_no_lock_behind(tmp_path):
    path = tmp_path / "out.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; "
                               "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); "
                               "print('held', flush=True); time.sleep(%d)" % HANG_SECONDS, str(path)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "held\n"
    with pytest.raises(locks.Busy):
        with locks.exclusive(path):
            pass
    holder.kill()
    holder.wait()
    assert path.exists()  # a killed holder cannot remove its file ...
    with locks.exclusive(path, wait_seconds=2):
        pass
    assert not path.exists()  # ... the next holder does


# Each process takes the lock again and again; inside, it creates a file that must not exist (another
# holder inside at the same time would have created it). The holders remove the lock file as they let
# go, while the others are waiting on it, opening it, or creating a new one.
CONTENDER = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from parallel.jobs import locks
path, inside, rounds = sys.argv[2], sys.argv[3], int(sys.argv[4])
for _ in range(rounds):
    with locks.exclusive(path, wait_seconds=float(sys.argv[5]), poll_seconds=0.0002):
        try:
            os.close(os.open(inside, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            sys.exit("two holders at once")
        time.sleep(0.0002)
        os.unlink(inside)
"""


def test_processes_contending_while_the_holder_removes_the_file_never_hold_it_together(tmp_path):
    path, inside = tmp_path / "out.lock", tmp_path / "inside"
    contenders = [subprocess.Popen([sys.executable, "-c", CONTENDER, str(REPOSITORY), str(path), str(inside), "400",
                                    str(HANG_SECONDS)],
                                   stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for contender in contenders:
        _, errors = contender.communicate(timeout=HANG_SECONDS)
        assert contender.returncode == 0, errors
    assert os.listdir(tmp_path) == []


def test_no_lock_file_is_left_by_a_run_a_sharded_job_or_a_refused_run(job_images, tmp_path):
    single = tmp_path / "single" / "out.csv"
    jobs.run(job_child.config(job_images, single, "csv"))
    assert lock_files(single.parent) == []
    sharded = tmp_path / "sharded" / "out.parquet"
    for rank in range(2):
        jobs.run(job_child.config(job_images, sharded, "parquet", jobs.Distribution(
            kind="static", rank=rank, world_size=2, shard_size=5, wait_seconds=5)))
    assert sharded.exists() and lock_files(sharded.parent) == []
    refused = tmp_path / "refused" / "out.csv"
    refused.parent.mkdir()
    with locks.exclusive(Path(str(refused) + ".lock")):  # another run is writing it
        with pytest.raises(OutputError, match="another run is writing"):
            jobs.run(job_child.config(job_images, refused, "csv"))
        assert lock_files(refused.parent) == ["out.csv.lock"]  # the other run's
    assert lock_files(refused.parent) == [] and lock_files(job_images) == []
