"""The command line in a process of its own, with job_child's colour model in VGG16's place.

    python tests/cli_child.py [run_inference.py's flags]

For the tests of the command line's plumbing (signals, kills, resuming, Ray's driver), which need a real
process but not VGG16's 553 MB of weights and 15 GFLOPs an image: run_inference.py runs as the program
(`runpy`, as `python run_inference.py`), its signal handling, log and exit status its own; only the model
`--model vgg16` names is job_child's colour model (uint8 [N, 8, 8, 3] -> float32 [N, 6]), and `--weights`
is not read. In the environment, CLI_CHILD_STEP_SECONDS makes each of its steps take that long (a sleep
inside Session.run, as a real model's compute), so that a signal or a kill lands in the middle of a run, and
CLI_CHILD_LOAD_SECONDS its weights (the start-up). CLI_CHILD_SIGTERM_AT_RUN_END=1 sends the process a SIGTERM of
its own at one moment, no race: as the run's own signal handling hands the handlers back, before the summary line.

The fake goes into sys.modules before run_inference imports anything: importing the real models.vgg16
would import TensorFlow before the command line silences its log. Nothing is imported here that the
program would not import itself before its first statement, but runpy and the standard library.
"""

import dataclasses
import os
import runpy
import sys
import types
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPOSITORY = TESTS.parent


def feature_model(**flags):
    """models.vgg16.feature_model's stand-in: job_child's colour model, whatever the flags."""
    import time
    import job_child
    model = job_child.colour_model(step_seconds=float(os.environ.get("CLI_CHILD_STEP_SECONDS", "0")))
    load_seconds = float(os.environ.get("CLI_CHILD_LOAD_SECONDS", "0"))

    def load_weights():
        time.sleep(load_seconds)
        return job_child.WEIGHTS

    return dataclasses.replace(model, load_weights=load_weights)


def sigterm_as_the_run_ends():
    """Makes the program send itself a SIGTERM as its run's own signal handling ends (before it imports that)."""
    import contextlib
    import signal
    from parallel import signals
    run_handling = signals.exit_on_second_signal

    @contextlib.contextmanager
    def then_signalled(message):
        with run_handling(message):
            yield
        os.kill(os.getpid(), signal.SIGTERM)  # its handler runs at once, in this thread: the next bytecode

    signals.exit_on_second_signal = then_signalled


if __name__ == "__main__":
    sys.path[:1] = [str(REPOSITORY), str(TESTS)]  # the repository's modules, then job_child
    sys.modules["models.vgg16"] = types.SimpleNamespace(feature_model=feature_model)
    if os.environ.get("CLI_CHILD_SIGTERM_AT_RUN_END"):
        sigterm_as_the_run_ends()
    sys.argv[0] = str(REPOSITORY / "run_inference.py")
    runpy.run_path(sys.argv[0], run_name="__main__")
