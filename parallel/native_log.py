"""TensorFlow's C++ start-up log, held to TF_CPP_MIN_LOG_LEVEL when the library first imports TensorFlow (and
that import without Keras).

While its libraries load, TensorFlow 2.21's C++ code prints, twice, before any setting is read:

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1795740601.211910    3903 port.cc:153] oneDNN custom operations are on. ...
    I0000 00:00:1795740601.212218    3903 cudart_stub.cc:31] Could not find cuda drivers on your machine, ...

TF_CPP_MIN_LOG_LEVEL governs what TensorFlow logs afterwards, not these lines. So `import parallel` (and
`import models`, which imports it) puts a finder first on `sys.meta_path` that catches the process's first
`import tensorflow`, wherever it is written (the engine's modules, a model's), and runs that import with
descriptor 2 held in a temporary file: then it gives back to descriptor 2 every line the level lets through
(any line that is not TensorFlow's: a Python warning of the import is kept). The level is the user's
TF_CPP_MIN_LOG_LEVEL, else 3 (set then, so that TensorFlow's later log is quiet too): 0 keeps every line.
The command line, which owns its process, sends descriptor 2 to /dev/null instead
(`hide_for_the_command_line`).

That import also runs without TensorFlow's eager import of Keras (`without_eager_keras`): TensorFlow 2.21
imports `keras.src.optimizers` as it loads, within a try that skips it when it cannot be imported, only to
register Keras's optimizers for SavedModels. Keras 3 and the pandas it imports cost one to two seconds of CPU
in every process that imports TensorFlow (each job, each rank, each Ray worker), and inference never uses them.
Keras imports as usual afterwards (`import keras`, `tf.keras`): only that one import is skipped.

Standard library only: importing it imports no TensorFlow.
"""

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile

LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
DEFAULT_LEVEL = "3"  # what TensorFlow logs: 0 everything, 1 no INFO, 2 no WARNING either, 3 no ERROR either

# An absl line: severity, date, time, thread, file:line]. Its severity as TF_CPP_MIN_LOG_LEVEL counts them.
_ABSL_LINE = re.compile(rb"^([IWEF])\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [^\]\n]*\] ")
_SEVERITY = {b"I": 0, b"W": 1, b"E": 2, b"F": 3}
_BEFORE_INITIALIZE_LOG = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"


def quiet_first_import():
    """Makes the process's first `import tensorflow` print only what TF_CPP_MIN_LOG_LEVEL lets through.

    Does nothing when TensorFlow is imported already (its start-up lines are printed) or the finder is
    in place. Called by `parallel/__init__.py`, once per process.
    """
    if "tensorflow" not in sys.modules and not any(isinstance(finder, _FirstImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FirstImport())


def min_log_level():
    """TF_CPP_MIN_LOG_LEVEL as TensorFlow reads it (`std::istringstream >> int`): 0 when unset or no number."""
    number = re.match(r"\s*([+-]?\d+)", os.environ.get(LEVEL_VARIABLE, ""))
    return int(number.group(1)) if number else 0


def kept_lines(text, level):
    """The lines of `text` (bytes, what descriptor 2 received) that TF_CPP_MIN_LOG_LEVEL=`level` lets through.

    Lines that are not TensorFlow's absl log are all kept.
    """
    kept = []
    for line in text.splitlines(keepends=True):
        absl = _ABSL_LINE.match(line)
        if absl:
            severity = _SEVERITY[absl.group(1)]
        else:
            severity = 0 if line.rstrip() == _BEFORE_INITIALIZE_LOG else None  # a notice of the lines after it
        if severity is None or severity >= level:
            kept.append(line)
    return b"".join(kept)


@contextlib.contextmanager
def held_to_level():
    """Within: descriptor 2 goes to a temporary file; after: its lines that the level lets through go to
    descriptor 2 (see the module docstring). With level 0, or no descriptor 2 to take, nothing is held."""
    os.environ.setdefault(LEVEL_VARIABLE, DEFAULT_LEVEL)  # a value the user set is kept
    level = min_log_level()
    if level <= 0:
        yield
        return
    saved = held = None
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no stderr, descriptor 2 or temporary file
        sys.stderr.flush()  # what Python wrote before goes out first
        saved = os.dup(2)
        held = tempfile.TemporaryFile()
    if held is None:
        if saved is not None:
            os.close(saved)
        yield
        return
    with held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(AttributeError, OSError, ValueError):
                sys.stderr.flush()  # what Python wrote meanwhile is in the file, in its place
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            _write_all(2, kept_lines(held.read(), level))


def _write_all(descriptor, data):
    while data:
        data = data[os.write(descriptor, data):]


class _FirstImport(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` as the finders after it do, its loader running the import within held_to_level()."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once: and so the finders after it find the real spec
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _HeldLoader(spec.loader)
        return spec


_EAGER_KERAS = "keras.src.optimizers"  # what tensorflow/__init__.py (2.21) imports eagerly


@contextlib.contextmanager
def without_eager_keras():
    """Within: `import keras.src.optimizers` raises ImportError, unless Keras is imported or being imported
    (then TensorFlow's import of it runs as usual). After: Keras imports as if nothing happened."""
    blocked = "keras" not in sys.modules and _EAGER_KERAS not in sys.modules
    if blocked:
        sys.modules[_EAGER_KERAS] = None  # the import system's "not found"
    try:
        yield
    finally:
        if blocked and _EAGER_KERAS in sys.modules and sys.modules[_EAGER_KERAS] is None:
            del sys.modules[_EAGER_KERAS]


class _HeldLoader(importlib.abc.Loader):
    """`loader`, its module executed within held_to_level() and without_eager_keras(); the module keeps `loader`
    as its own."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        with held_to_level(), without_eager_keras():
            self.loader.exec_module(module)


def hide_for_the_command_line():
    """Hides TensorFlow's start-up noise (oneDNN, CUDA, CPU-feature notices) unless --verbose.

    TF_CPP_MIN_LOG_LEVEL stops most of it, but some lines are printed by C++ code before
    that setting is read. So file descriptor 2 goes to /dev/null, and Python's own stderr
    (our messages, the progress bar, the log) keeps writing to the real one.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
    if "tensorflow" in sys.modules or not hasattr(os, "dup"):
        return
    try:
        sys.stderr.flush()
        real_stderr = os.dup(2)
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
    except (OSError, ValueError):  # no real descriptor 2 (embedded, captured): leave it alone
        return
    sys.stderr = open(real_stderr, "w", buffering=1, encoding=sys.stderr.encoding,
                      errors="backslashreplace")
