"""Ctrl-C and SIGTERM: the first stops cleanly, a second stops at once.

    first signal, in the loop      the batch in flight is finished and committed, then the run
                                   returns with `Summary.interrupted` (StopRequest)
    first signal, elsewhere        start-up or the final merge: KeyboardInterrupt at once (nothing
                                   in flight to keep; a merge left half-done is redone by a rerun)
    second signal (the CLI only)   the process exits with status 130 within moments, even while
                                   the main thread is inside a device step (exit_on_second_signal)

Why a watchdog thread: Python runs signal handlers in the main thread between bytecodes, and
the main thread can spend seconds inside `Session.run`, which does not return to Python. The
C-level handler writes each signal's number to a wakeup file descriptor at once; a thread
blocked on reading it sees the second one immediately. Exiting there is safe because every
commit is durable before it counts (the same reason a SIGKILL loses nothing).
"""

import contextlib
import logging
import os
import signal
import sys
import threading

log = logging.getLogger("parallel")

EXIT_INTERRUPTED = 130
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


class StopRequest:
    """Within `with StopRequest() as stop:`, SIGINT/SIGTERM set `stop.signal_name` instead of raising.

    The loop checks `signal_name` between batches. Outside the block (and in a thread other
    than the main one, where handlers cannot be set) signals keep their usual effect.
    """

    def __init__(self):
        self.signal_name = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.signal_name is not None:  # a second one, where no watchdog exits first
            raise KeyboardInterrupt(signal.Signals(signum).name)
        self.signal_name = signal.Signals(signum).name
        # A terminal echoes "^C" without a newline: start the warning on a line of its own.
        newline = "\n" if _is_terminal(sys.stderr) else ""
        log.warning("%s%s received: finishing the batch in flight, then stopping (again to stop at once)",
                    newline, self.signal_name)

    def __exit__(self, *exc_info):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}


def _is_terminal(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def exit_on_second_signal(message):
    """For a command-line program: SIGTERM acts like Ctrl-C, and a second one exits at once.

        with exit_on_second_signal("stopped at once; rerun the same command to resume"):
            ...  # the whole program

    Inside the block, SIGTERM raises KeyboardInterrupt as SIGINT does (instead of killing the
    process with status 143), and the second SIGINT/SIGTERM writes `message` to stderr and
    exits with status 130 at once, wherever the main thread is. On leaving the block the
    previous handlers come back. From the main thread only.

    Args:
      message: one line, e.g. "stopped at once; rerun the same command to resume".
    """
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for signum in STOP_SIGNALS:
        if previous[signum] is not signal.SIG_IGN:  # e.g. SIGINT ignored by `nohup ... &`
            signal.signal(signum, _interrupt)
    watcher = threading.Thread(target=_watch, args=(read_end, message), name="second-signal", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(write_end)  # the watcher reads the end of the pipe and returns
        watcher.join()
        os.close(read_end)


def _watch(read_end, message):
    """Counts SIGINT/SIGTERM as the C handler reports them; exits the process on the second."""
    stop_numbers = {int(signum) for signum in STOP_SIGNALS}
    seen = 0
    while True:
        data = os.read(read_end, 64)
        if not data:
            return
        seen += sum(1 for number in data if number in stop_numbers)
        if seen >= 2:
            try:
                sys.stderr.write("\n%s\n" % message)
                sys.stderr.flush()
            finally:
                os._exit(EXIT_INTERRUPTED)
