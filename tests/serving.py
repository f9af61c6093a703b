"""A `search_features.py serve` child on a free loopback port: the tests of the page's server and of the service.

    with serving(page_or_index) as (child, url):       # url: what its first line announces
    with serving(index, program=TESTS / "search_child.py", arguments=["--weights", weights]) as (child, url):
        ...
        assert stopped(child, signal.SIGTERM)          # exit 0, nothing on stderr but an index's "answers: ..."
        status, lines = stop(child, signal.SIGTERM)    # or: its status and the lines after its first
"""

import contextlib
import signal
import subprocess
import sys
from pathlib import Path

from hangs import HANG_SECONDS

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


@contextlib.contextmanager
def serving(target, sigint=signal.SIG_DFL, program=ROOT / "search_features.py", arguments=()):
    """The `serve` child of `target`, started with SIGINT's disposition `sigint` (SIG_DFL, or SIG_IGN as a shell's
    background job or a batch system starts it), whatever this process's is; yields (child, URL announced).
    `program`: search_features.py, or a stand-in that runs it (tests/search_child.py); `arguments`: more flags."""
    def disposition():
        signal.signal(signal.SIGINT, sigint)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    child = subprocess.Popen([sys.executable, str(program), "serve", str(target), "--port", "0",
                              *map(str, arguments)],
                             stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=disposition)
    try:
        announced = child.stderr.readline()  # the socket is listening once this is printed
        assert announced.startswith("serving ") and " at http://127.0.0.1:" in announced, announced
        yield child, announced.split(" at ")[1].split()[0]
    finally:
        child.kill()
        child.stderr.close()


def stop(child, signum):
    """(exit status, [the lines `child` printed after its first]) once `signum` has stopped it."""
    child.send_signal(signum)
    status = child.wait(timeout=HANG_SECONDS)
    return status, child.stderr.read().splitlines()


def stopped(child, signum):
    """Whether `child` stops on `signum` with status 0 (a signal is how it is stopped: not a failure) and printed
    nothing after its first line but, for an index, what its service answers ("answers: ..."): no traceback, no
    line a request (--quiet)."""
    status, lines = stop(child, signum)
    return status == 0 and (lines == [] or (len(lines) == 1 and lines[0].startswith("answers: ")))
