"""Advisory locks between processes, on the output's file system: one writer per output, one manifest.

`flock` locks are released by the kernel when their holder dies (even by SIGKILL), so a killed
run never leaves a stale lock behind; on NFS, Linux maps them to the server's byte-range locks.

The lock file exists only while it is held: the holder removes it before letting go, so a
folder looks after a run as it did before. That is safe because whoever locks a file then checks
that the path still names it; if not (the holder it waited for removed it), it locks the path's
new file instead. So two processes never both hold the lock of one path. A SIGKILLed holder
leaves its file, empty and unlocked; the next run to take the lock removes it.
"""

import contextlib
import errno
import fcntl
import os
import shutil
import time


class Busy(RuntimeError):
    """Another process holds the lock."""


@contextlib.contextmanager
def exclusive(path, wait_seconds=0.0, poll_seconds=0.1):
    """Holds an exclusive lock on the file `path` (created if needed, removed after) for the `with` block.

    Args:
      path: str or Path of the lock file; its folder must exist.
      wait_seconds: how long to wait for another holder to let go; 0: do not wait.
      poll_seconds: how often to try again while waiting.

    Raises:
      Busy: another process held it for `wait_seconds`.
      OSError: the lock file cannot be created, or the file system has no locks (ENOLCK).
    """
    descriptor = _lock(path, time.monotonic() + wait_seconds, poll_seconds)
    try:
        yield
    finally:
        try:
            if _names(path, descriptor):  # not removed by the block itself (a folder removed with it)
                os.unlink(path)  # before letting go: a waiter then finds the path gone, or a new file
        except OSError:
            pass  # a read-only folder, say: the file stays, unlocked and harmless
        finally:
            os.close(descriptor)  # closing releases the lock


def _lock(path, deadline, poll_seconds):
    """A descriptor of the file `path` names, locked by this process; retried until the two agree."""
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            while not _try_lock(descriptor):
                if time.monotonic() >= deadline:
                    raise Busy("%s is held by another process" % path)
                time.sleep(poll_seconds)
            if _names(path, descriptor):
                return descriptor
        except BaseException:
            os.close(descriptor)
            raise
        os.close(descriptor)  # its holder removed it as it let go: the path's file now is free or new


def _try_lock(descriptor):
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False
    return True


def _names(path, descriptor):
    """Whether `path` is now the name of the open file `descriptor`."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def remove_unlocked(parent, lock_name):
    """Removes each folder in `parent` whose lock file `lock_name` no process holds (its process is
    gone), then `parent` if it is left empty; folders whose lock is held are left alone."""
    if not parent.exists():
        return
    for folder in parent.iterdir():
        try:
            with exclusive(folder / lock_name):
                shutil.rmtree(folder, ignore_errors=True)
        except (Busy, OSError):
            pass  # alive, or already gone
    try:
        parent.rmdir()
    except OSError:
        pass  # a folder is alive
