"""Advisory locks between processes, on the output's file system: one writer per output, one manifest.

`flock` locks are released by the kernel when their holder dies (even by SIGKILL), so a killed
run never leaves a stale lock behind; on NFS, Linux maps them to the server's byte-range locks.
"""

import contextlib
import errno
import fcntl
import os
import time


class Busy(RuntimeError):
    """Another process holds the lock."""


@contextlib.contextmanager
def exclusive(path, wait_seconds=0.0, poll_seconds=0.1):
    """Holds an exclusive lock on the file `path` (created if needed) for the `with` block.

    Args:
      path: str or Path of the lock file; its folder must exist.
      wait_seconds: how long to wait for another holder to let go; 0: do not wait.
      poll_seconds: how often to try again while waiting.

    Raises:
      Busy: another process held it for `wait_seconds`.
      OSError: the lock file cannot be created, or the file system has no locks (ENOLCK).
    """
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as error:
                if error.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise Busy("%s is held by another process" % path) from None
                time.sleep(poll_seconds)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock
