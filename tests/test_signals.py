"""Signals: a second Ctrl-C stops at once, even inside a device step; SIGTERM at start-up is a clean stop;
an inherited ignored SIGINT stays ignored; status 130 from the programs' first statement until they exit.

Each test sets the SIGINT its process and its children start with (a child gets SIGINT at its
default when the parent handles it, ignored when the parent ignores it): the suite passes however
it is started, from a terminal or as a background job that inherited SIGINT ignored (tested).
"""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hangs import HANG_SECONDS
from parallel.signals import StopRequest, exit_on_second_signal

REPOSITORY = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def sigint_as_from_a_terminal():
    """SIGINT raises KeyboardInterrupt here, and children start with it at its default, as from a terminal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def sigint_ignored():
    """Ignores SIGINT here in the block; children started in it inherit that, as from `nohup cmd &`."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

# The engine with a model whose every step sleeps inside Session.run (tests/slow_child.py): the main
# thread is in C++ for seconds, as on a long GPU step, and Python signal handlers cannot run. Its process is
# forked from the session's zygote (tests/forked_children.py), TensorFlow imported already: what these tests
# signal is the run, once its handling is in place; the child starts with the signal handlers a fresh `python`
# started from this process would have. The programs' own start-up is signalled in fresh processes below.
SLOW_CHILD = Path(__file__).resolve().parent / "slow_child.py"


def make_images(folder, count):
    folder.mkdir()
    rng = np.random.default_rng(0)
    for index in range(count):
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(folder / ("%02d.png" % index))


def start(zygote, tmp_path, step_seconds=0.0, load_seconds=0.0):
    """The slow child forked from `zygote`, or with None a fresh `python` (a signal during its start-up: a forked
    child's once hung there for HANG_SECONDS, its SIGTERM taken only when the loading ended)."""
    from forked_children import as_exec_leaves_sigint
    marker = tmp_path / "marker"
    marker.write_text("")
    if zygote is None:
        child = subprocess.Popen(
            [sys.executable, str(SLOW_CHILD), str(tmp_path / "images"), str(tmp_path / "out.csv"), str(marker),
             str(step_seconds), str(load_seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return child, marker
    child = zygote.spawn(
        [SLOW_CHILD, tmp_path / "images", tmp_path / "out.csv", marker, step_seconds, load_seconds],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, sigint=as_exec_leaves_sigint())
    return child, marker


def wait_for(marker, text, count, child):
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while marker.read_text().count(text) < count:
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            raise AssertionError("never saw %d %r: %s" % (count, text, child.communicate()))
        time.sleep(0.02)


def committed_rows(tmp_path):
    """Rows the job writing out.csv has committed (in it, its shards or its attempt: tests/outputs.py)."""
    from outputs import committed_rows as rows
    return rows(tmp_path / "out.csv")


def test_a_second_signal_stops_at_once_even_inside_a_device_step(tmp_path, job_child_zygote):
    """The step never ends while the test lasts (it sleeps HANG_SECONDS): the child exits only if the second
    signal stops it inside the step, whatever the machine's load."""
    make_images(tmp_path / "images", 8)
    child, marker = start(job_child_zygote, tmp_path, step_seconds=HANG_SECONDS)
    wait_for(marker, "step", 1, child)
    time.sleep(0.3)  # well inside the step
    child.send_signal(signal.SIGINT)
    time.sleep(0.3)  # two signals, not one delivered for both
    child.send_signal(signal.SIGINT)
    _, errors = child.communicate(timeout=HANG_SECONDS)
    assert child.returncode == 130, errors
    assert "stopped at once; rerun the same command to resume" in errors
    # (The first signal's own warning never ran: its Python handler waits for the step to end.)
    # What was committed is intact; a rerun (the same job, here) completes the output, in order, each image once.
    import slow_child
    from parallel import jobs
    assert jobs.run(slow_child.config(tmp_path / "images", tmp_path / "out.csv")).exit_status == 0
    with open(tmp_path / "out.csv", newline="") as handle:
        paths = [line.split(",")[0] for line in handle.read().splitlines()[1:]]
    assert paths == ["%02d.png" % index for index in range(8)]


def test_a_signal_during_start_up_is_a_clean_stop_with_status_130(tmp_path):
    """The weights never finish loading while the test lasts (HANG_SECONDS): the child exits only if the signal
    stops its start-up. SIGTERM, which would kill the process (143) if the run did not take it; a SIGINT takes the
    same handler there (test_the_cli_block_restores_handlers_and_the_wakeup_fd)."""
    make_images(tmp_path / "images", 2)
    child, marker = start(None, tmp_path, load_seconds=HANG_SECONDS)
    wait_for(marker, "loading", 1, child)
    child.send_signal(signal.SIGTERM)
    _, errors = child.communicate(timeout=HANG_SECONDS)
    assert child.returncode == 130, errors  # not 143 (killed by SIGTERM) nor -2
    assert errors.strip().splitlines()[-1] == "interrupted; rerun the same command to resume"
    assert not (tmp_path / "out.csv").exists()  # the weights were still loading: nothing written


def test_stop_request_turns_the_first_signal_into_a_flag_and_restores_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs at the next bytecode
        assert stop.signal_name == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):  # a second one, without the CLI's watchdog
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_cli_block_restores_handlers_and_the_wakeup_fd():
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    threads = threading.active_count()
    for signum in (signal.SIGTERM, signal.SIGINT):  # the first of either, outside the loop (start-up); one a block
        with exit_on_second_signal("unused"):
            assert signal.getsignal(signum) is not before[signum]
            with pytest.raises(KeyboardInterrupt, match=signal.Signals(signum).name):  # like Ctrl-C, not a kill
                os.kill(os.getpid(), signum)
                time.sleep(0.05)
        assert {signum: signal.getsignal(signum) for signum in before} == before
        assert signal.set_wakeup_fd(-1) == -1  # none left behind
        assert threading.active_count() == threads


@pytest.mark.parametrize("terminal", [True, False])
def test_the_warning_starts_on_a_new_line_after_a_terminal_s_echoed_c(monkeypatch, caplog, terminal):
    class Stream:
        def isatty(self):
            return terminal
    monkeypatch.setattr(sys, "stderr", Stream())
    with caplog.at_level("WARNING", logger="parallel"), StopRequest() as stop:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
    assert stop.signal_name == "SIGINT"
    [record] = [record for record in caplog.records if "SIGINT received" in record.getMessage()]
    assert record.getMessage().startswith("\n") == terminal


def test_a_signal_during_the_final_merge_stops_cleanly_and_a_rerun_finishes(tmp_path, monkeypatch):
    """SIGTERM while the parts are merged: KeyboardInterrupt (the CLI exits 130 and says to rerun),
    nothing half-written, and the rerun merges again."""
    import job_child
    from parallel import jobs
    make_images(tmp_path / "images", 4)
    reference, output = tmp_path / "reference.npy", tmp_path / "out.npy"
    jobs.run(job_child.config(tmp_path / "images", reference, "npy"))
    real_replace = os.replace

    def replace(source, target, *args, **kwargs):
        if os.fspath(target) == str(output):  # the merged file going into place: the merge's last step
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)  # the handler raises here
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        with exit_on_second_signal("unused"):
            jobs.run(job_child.config(tmp_path / "images", output, "npy"))
    monkeypatch.undo()
    assert not output.exists() and not os.path.exists(str(output) + ".tmp")
    summary = jobs.run(job_child.config(tmp_path / "images", output, "npy"))
    assert (summary.written, summary.already_done) == (0, 4)
    assert output.read_bytes() == reference.read_bytes()


def test_an_ignored_sigint_stays_ignored_in_every_stage_and_sigterm_is_always_taken():
    """`nohup cmd &` starts a run with SIGINT ignored: start-up, the loop and the merge all leave it so."""
    previous_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with sigint_ignored(), exit_on_second_signal("unused"):
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # SIGTERM always stops cleanly
            with StopRequest() as stop:
                assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
                assert stop.signal_name is None
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
                assert stop.signal_name == "SIGTERM"
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous_term)


def test_a_run_started_with_sigint_ignored_ignores_it_in_the_loop_and_stops_cleanly_on_sigterm(tmp_path,
                                                                                              job_child_zygote):
    make_images(tmp_path / "images", 12)
    with sigint_ignored():
        child, marker = start(job_child_zygote, tmp_path, step_seconds=0.5, load_seconds=1)
    wait_for(marker, "loading", 1, child)
    child.send_signal(signal.SIGINT)  # start-up
    wait_for(marker, "step", 1, child)
    child.send_signal(signal.SIGINT)  # the loop
    wait_for(marker, "step", 3, child)  # still going
    child.send_signal(signal.SIGTERM)
    _, errors = child.communicate(timeout=HANG_SECONDS)
    assert child.returncode == 130, errors
    assert "SIGTERM received: finishing the batch in flight" in errors and "SIGINT" not in errors
    assert 4 <= committed_rows(tmp_path) < 12
    assert "%d written" % committed_rows(tmp_path) in errors.strip().splitlines()[-1]


def with_sigint(disposition):
    """A `preexec_fn` for a child: it starts with SIGINT at `disposition`, whatever this process has it at."""
    return lambda: signal.signal(signal.SIGINT, disposition)


def read_until(stream, text):
    """The lines a child writes on `stream` up to the one that holds `text` (all of them if it never comes)."""
    lines = []
    for line in stream:
        lines.append(line)
        if text in line:
            break
    return lines


# The command line with the job replaced by one that returns at once, and a summary whose status is
# read only once the test has closed the child's stdin: the process is still there after printing the
# summary line, for as long as the test needs (as when an exit takes time). Nothing of the job is made
# (no model, no devices: no TensorFlow, a moment of no concern here: the handlers the run hands back are
# set again in Python as it ends, whatever TensorFlow did).
CLI_CHILD = textwrap.dedent("""
    import os, runpy, sys, types
    repository = sys.argv[1]
    sys.path.insert(0, repository)
    from parallel import devices, jobs, loop

    class SlowToExit(loop.Summary):
        @property
        def exit_status(self):
            os.read(0, 1)  # until stdin is closed; a signal runs its handler here
            return super().exit_status

    sys.modules["models.vgg16"] = types.SimpleNamespace(feature_model=lambda **flags: None)
    devices.resolve_devices = lambda *args, **kwargs: None
    jobs.Config = lambda **settings: settings
    jobs.run = lambda config: SlowToExit(discovered=2, written=2)
    sys.argv = [repository + "/run_inference.py"] + sys.argv[2:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_just_after_the_summary_line_exits_130(tmp_path, signum):
    make_images(tmp_path / "images", 2)
    child = subprocess.Popen([sys.executable, "-c", CLI_CHILD, str(REPOSITORY), "--images", str(tmp_path / "images"),
                              "--output", str(tmp_path / "out.csv"), "--devices", "cpu:0"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=with_sigint(signal.SIG_DFL))
    lines = read_until(child.stderr, "2 images: 2 written")
    child.send_signal(signum)
    _, errors = child.communicate(timeout=HANG_SECONDS)
    assert child.returncode == 130, lines + [errors]  # not -15 nor -2: killed by the signal
    # A status 130 always comes with a line saying so: the run did end, a rerun finds it done.
    assert lines[-1].startswith("2 images: 2 written")
    assert errors == "run_inference: interrupted; rerun the same command to resume\n"


# A sitecustomize for a child: the child's first import of numpy (which the programs import first of
# what takes time: a quarter of a second with PIL and polars) says so on stderr, then waits for the test.
BLOCKED_IMPORT = textwrap.dedent("""
    import os, sys

    class BlockNumpy:
        def find_spec(self, name, path=None, target=None):
            if name == "numpy":
                sys.meta_path.remove(self)
                sys.stderr.write("importing numpy\\n")
                sys.stderr.flush()
                os.read(0, 1)  # until stdin is closed; a signal runs its handler here
            return None

    sys.meta_path.insert(0, BlockNumpy())
""")

# pip's wrapper of a console script (setup.cfg: run-inference = run_inference:console).
CONSOLE_SCRIPT = textwrap.dedent("""
    import sys
    from run_inference import console
    if __name__ == '__main__':
        sys.argv[0] = sys.argv[0].removesuffix('.exe')
        sys.exit(console())
""")


def start_importing(tmp_path, program, sigint):
    """`python program --help`, with SIGINT at `sigint`, stopped in its first import of numpy: (child, its stderr
    up to there)."""
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(BLOCKED_IMPORT)
    script = REPOSITORY / program
    if program == "run-inference":  # the console script, named as pip installs it
        script = tmp_path / program
        script.write_text(CONSOLE_SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hooks), str(REPOSITORY)]))
    # At its default, SIGINT is as sigint_as_from_a_terminal leaves it for children (not set again here, so that
    # test_the_signal_tests_pass_when_the_suite_is_started_with_sigint_ignored sees that fixture at work).
    child = subprocess.Popen([sys.executable, str(script), "--help"], cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             preexec_fn=None if sigint is signal.SIG_DFL else with_sigint(sigint))
    return child, read_until(child.stderr, "importing numpy")


@pytest.mark.parametrize("program, signum", [
    ("run_inference.py", signal.SIGTERM), ("run_inference.py", signal.SIGINT), ("run-inference", signal.SIGTERM),
    ("run-inference", signal.SIGINT), ("search_features.py", signal.SIGINT)])
def test_a_signal_while_the_program_imports_its_modules_exits_130_without_a_traceback(tmp_path, program, signum):
    """Before main() (numpy, PIL, polars: a quarter of a second): Python's default handlers would print a
    KeyboardInterrupt traceback, or let SIGTERM kill the process (143). (search_features takes Ctrl-C only.)"""
    child, lines = start_importing(tmp_path, program, signal.SIG_DFL)
    assert lines[-1:] == ["importing numpy\n"], lines
    child.send_signal(signum)
    _, errors = child.communicate(timeout=HANG_SECONDS)
    assert child.returncode == 130, errors
    assert len(errors.splitlines()) <= 1 and "Traceback" not in errors, errors


@pytest.mark.parametrize("program", ["run_inference.py", "search_features.py"])
def test_an_ignored_sigint_stays_ignored_while_the_program_imports_its_modules(tmp_path, program):
    child, lines = start_importing(tmp_path, program, signal.SIG_IGN)
    assert lines[-1:] == ["importing numpy\n"], lines
    child.send_signal(signal.SIGINT)  # discarded at once: ignored
    _, errors = child.communicate(timeout=HANG_SECONDS)  # closes stdin: the import goes on, then --help
    assert child.returncode == 0, errors


def test_importing_the_programs_leaves_signal_handlers_alone():
    """Tests (and other programs) import run_inference and search_features: only the program sets handlers."""
    code = ("import signal, run_inference, search_features; "
            "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
            "signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)")
    child = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True,
                           timeout=HANG_SECONDS, preexec_fn=with_sigint(signal.SIG_DFL))
    assert child.stdout.split() == ["True", "True"], child.stderr


def test_a_signal_after_the_loop_s_last_look_still_stops_the_run_before_the_output_is_written(tmp_path, monkeypatch):
    """A first SIGTERM once the loop has looked for one the last time (here: while the last shard is committed):
    the run stops all the same, before the output's final write, with status 130 (it went on and gave 0), and
    the rerun writes the output an uninterrupted run writes."""
    import job_child
    from parallel import jobs
    from parallel.jobs.shards import ShardedJob
    make_images(tmp_path / "images", 4)
    reference, output = tmp_path / "reference.csv", tmp_path / "out.csv"
    jobs.run(job_child.config(tmp_path / "images", reference, "csv"))
    real_commit = ShardedJob.commit

    def commit(job, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # StopRequest's handler sets its flag at the next call
        return real_commit(job, *args, **kwargs)

    monkeypatch.setattr(ShardedJob, "commit", commit)
    summary = jobs.run(job_child.config(tmp_path / "images", output, "csv"))
    monkeypatch.undo()
    assert (summary.interrupted, summary.exit_status, summary.written, summary.skipped) == (True, 130, 4, 0)
    rerun = jobs.run(job_child.config(tmp_path / "images", output, "csv"))
    assert (rerun.exit_status, rerun.written, rerun.already_done) == (0, 0, 4)
    assert output.read_bytes() == reference.read_bytes()


def test_the_signal_tests_pass_when_the_suite_is_started_with_sigint_ignored():
    """As a background job of a script, or under `nohup`, pytest and its children inherit SIGINT ignored.

    The tests that depend on it: SIGINT sent to a child the test started at its default (sigint_as_from_a_terminal
    sets that), and to the test process. Without tests/conftest.py, which these tests do not use (it imports
    TensorFlow: seconds)."""
    selected = ["tests/test_signals.py::" + name for name in (
        "test_a_signal_while_the_program_imports_its_modules_exits_130_without_a_traceback[run_inference.py-2]",
        "test_stop_request_turns_the_first_signal_into_a_flag_and_restores_handlers",
        "test_the_cli_block_restores_handlers_and_the_wakeup_fd",
        "test_the_warning_starts_on_a_new_line_after_a_terminal_s_echoed_c")]
    with sigint_ignored():
        suite = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                                  "--noconftest", *selected],
                                 cwd=REPOSITORY, env=dict(os.environ, PYTHONPATH=str(REPOSITORY)),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ignored = next(line for line in Path("/proc/%d/status" % suite.pid).read_text().splitlines()
                   if line.startswith("SigIgn:"))
    assert int(ignored.split()[1], 16) & (1 << (signal.SIGINT - 1)), ignored
    output, _ = suite.communicate(timeout=HANG_SECONDS)
    assert suite.returncode == 0, output
    assert "5 passed" in output, output
