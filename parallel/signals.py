"""Ctrl-C and SIGTERM: the first stops cleanly, a second stops at once.

    first signal, in the loop      the batch in flight is finished and committed, then the run
                                   returns with `Summary.interrupted` (StopRequest)
    first signal, elsewhere        start-up or the final merge: KeyboardInterrupt at once (nothing
                                   in flight to keep; a merge left half-done is redone by a rerun)
    second signal (the CLI only)   the process exits with status 130 within moments, even while
                                   the main thread is inside a device step (exit_on_second_signal)
    around the run (the CLI only)  status 130 too, from the program's first statement (its imports)
                                   until it begins to exit, e.g. just after the summary, with the
                                   program's one line saying so (exit_on_signal)

One policy for the whole run (`handled`): SIGTERM always stops as above; SIGINT does too, unless
the process was started with SIGINT ignored (`nohup cmd &`, a shell's background job, some CI
runners), in which case it stays ignored from start-up to exit, as those callers expect.

Why a watchdog thread: Python runs signal handlers in the main thread between bytecodes, and
the main thread can spend seconds inside `Session.run`, which does not return to Python. The
C-level handler writes each signal's number to a wakeup file descriptor at once; a thread
blocked on reading it sees the second one immediately. Exiting there is safe because every
commit is durable before it counts (the same reason a SIGKILL loses nothing).
"""

import contextlib
import os
import signal
import sys
import threading

# No logging here (imported when a warning is due): a program imports this module first, before anything
# that takes time, so that its handlers cover the program's start-up (`exit_on_signal`, `run_as_program`).

EXIT_INTERRUPTED = 130
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_exit_message = None  # the line exit_on_signal's handler writes before it exits (None: none)


def handled(signum):
    """Whether the run takes `signum` (SIGINT or SIGTERM) over: SIGTERM always; SIGINT unless ignored.

    An ignored SIGINT is one the process inherited (`nohup cmd &`, a background job) or that its
    embedding program chose; either way the run leaves it ignored, in every stage.
    """
    return signum == signal.SIGTERM or signal.getsignal(signum) is not signal.SIG_IGN


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


class StopRequest:
    """Within `with StopRequest() as stop:`, SIGINT/SIGTERM set `stop.signal_name` instead of raising.

    The loop checks `signal_name` between batches. Outside the block (and in a thread other
    than the main one, where handlers cannot be set) signals keep their usual effect, and an
    ignored SIGINT stays ignored inside it too (see `handled`).
    """

    def __init__(self):
        self.signal_name = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in filter(handled, STOP_SIGNALS):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.signal_name is not None:  # a second one, where no watchdog exits first
            raise KeyboardInterrupt(signal.Signals(signum).name)
        self.signal_name = signal.Signals(signum).name
        # A terminal echoes "^C" without a newline: start the warning on a line of its own.
        newline = "\n" if _is_terminal(sys.stderr) else ""
        import logging  # here, not at the top: see the imports
        logging.getLogger("parallel").warning(
            "%s%s received: finishing the batch in flight, then stopping (again to stop at once)",
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
    exits with status 130 at once, wherever the main thread is. An ignored SIGINT stays
    ignored (see `handled`). On leaving the block the previous handlers come back. From the
    main thread only.

    Args:
      message: one line, e.g. "stopped at once; rerun the same command to resume".
    """
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    previous_wakeup = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    for signum in filter(handled, STOP_SIGNALS):
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


def run_as_program(module_name, program):
    """Whether the module named `module_name` (its `__name__`) is starting as the program `program`.

    It is when run as a script or with `python -m` (it is `__main__` then), or when the console
    script `program` (pip's wrapper: `from module import console`) imports it. Imported by anything
    else (a test, another program) it is not, and leaves the process's signal handlers alone.

    Args:
      module_name: the module's `__name__`, e.g. "run_inference".
      program: its console script's name, e.g. "run-inference".
    """
    if module_name == "__main__":
        return True
    script = os.path.basename(getattr(sys.modules.get("__main__"), "__file__", None) or "")
    for suffix in (".exe", "-script.pyw", "-script.py"):  # the wrapper's name on Windows
        script = script.removesuffix(suffix)
    return script == program


def exit_on_signal(signums=STOP_SIGNALS, message=None):
    """For a program, first thing: until the process begins to exit, SIGINT/SIGTERM exit with 130.

        from parallel import signals   # the program's first statements, before what takes time to import
        if signals.run_as_program(__name__, "run-inference"):
            signals.exit_on_signal(message="run-inference: interrupted; rerun the same command to resume")
        import numpy
        ...
        def console():
            signals.exit_on_signal(message=...)   # again, for whoever imports the module and calls console()
            signals.exit_now(main())   # main() may use exit_on_second_signal: it hands these back

    Without it, Python's default handlers rule until the program's own handling begins and once
    it ends: a Ctrl-C while the modules are imported prints a KeyboardInterrupt traceback, a
    SIGTERM kills the process with status 143. An ignored SIGINT stays ignored (see `handled`).
    From the main thread only. Once the process exits (`exit_now`), its status is decided: a
    signal while the kernel frees its memory (a moment with a large model, more with a GPU
    driver) cannot change it, as for any process.

    Args:
      signums: the signals taken (default both; SIGINT alone for a program that handles only it).
      message: one line written to stderr before the process exits so (None: none), so that a status 130
        never comes without a word, whenever the signal lands: before the program's own handling of
        the run begins, or after it ends (the run done, its summary printed or about to be).
    """
    global _exit_message
    _exit_message = message
    for signum in filter(handled, signums):
        signal.signal(signum, _exit_interrupted)


def _exit_interrupted(signum, frame):
    if _exit_message is not None:
        line = "\n%s\n" % _exit_message if _is_terminal(sys.stderr) else "%s\n" % _exit_message
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except RuntimeError:  # the signal came inside a write to stderr (a reentrant call): past its buffer
            try:
                os.write(sys.stderr.fileno(), line.encode("utf-8", "replace"))
            except (AttributeError, OSError, ValueError):
                pass
        except (AttributeError, OSError, ValueError):  # no stderr to write to
            pass
    exit_now(EXIT_INTERRUPTED)


def exit_now(status):
    """Flushes stdout and stderr and ends the process with `status`, skipping the interpreter's teardown.

    For a program whose work is durable when it returns (every commit is fsync'ed before it
    counts): what is left is freeing memory and TensorFlow's shutdown, seconds that only delay
    the exit status.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, RuntimeError, ValueError):  # closed, or a write it interrupted
            pass
    os._exit(status)


def by_a_signal(error):
    """Whether `error` was raised because a signal's KeyboardInterrupt cut something short (its chain holds one).

    A native module's initialisation (pybind11) turns the KeyboardInterrupt of a SIGTERM during
    `import tensorflow` into ImportError("initialization failed"), raised from it.
    """
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, KeyboardInterrupt):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False
