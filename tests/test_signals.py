"""Signals: a second Ctrl-C stops at once, even inside a device step; SIGTERM at start-up is a clean stop."""

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

from parallel.signals import StopRequest, exit_on_second_signal

REPOSITORY = Path(__file__).resolve().parent.parent

# The engine with a model whose every step sleeps inside Session.run (a numpy_function): the main
# thread is in C++ for seconds, as on a long GPU step, and Python signal handlers cannot run.
CHILD = textwrap.dedent("""
    import os, sys, time
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    sys.path.insert(0, sys.argv[1])
    images, output, marker, step_seconds, load_seconds = sys.argv[2:7]
    import numpy as np
    import tensorflow as tf
    from parallel import engine
    from parallel.devices import resolve_devices
    from parallel.signals import exit_on_second_signal

    tf1 = tf.compat.v1

    def note(text):
        with open(marker, "a") as handle:
            handle.write(text + "\\n")

    def slow_step(values):
        note("step")
        time.sleep(float(step_seconds))
        return values

    def model(batch):
        scale = tf1.get_variable("slow/scale", [3], initializer=tf1.zeros_initializer())
        mean = tf.reduce_mean(tf.cast(batch, tf.float32), axis=[1, 2]) * scale
        slowed = tf.numpy_function(slow_step, [mean], tf.float32)
        slowed.set_shape([None, 3])
        return slowed

    def load_weights():
        note("loading")
        time.sleep(float(load_seconds))
        return {"slow/scale": np.array([1.0, 0.5, 0.25], np.float32)}

    spec = engine.ModelSpec(name="slow", fn=model, image_size=(8, 8), load_weights=load_weights,
                            output_name="slow", settings={"model": "slow"})
    config = engine.Config(model=spec, images=images, output=output, per_device_batch=2, workers=1,
                           devices=resolve_devices(devices="cpu:0", gpu_count=0))
    try:
        with exit_on_second_signal("stopped at once; rerun the same command to resume"):
            summary = engine.run(config)
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        sys.exit(130)
    print(summary.line(), file=sys.stderr)
    sys.exit(summary.exit_status)
""")


def make_images(folder, count):
    folder.mkdir()
    rng = np.random.default_rng(0)
    for index in range(count):
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(folder / ("%02d.png" % index))


def start(tmp_path, step_seconds=0.0, load_seconds=0.0):
    marker = tmp_path / "marker"
    marker.write_text("")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(REPOSITORY), str(tmp_path / "images"), str(tmp_path / "out.csv"),
         str(marker), str(step_seconds), str(load_seconds)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return child, marker


def wait_for(marker, text, count, child, timeout=60):
    deadline = time.monotonic() + timeout
    while marker.read_text().count(text) < count:
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            raise AssertionError("never saw %d %r: %s" % (count, text, child.communicate()))
        time.sleep(0.02)


def committed_rows(tmp_path):
    with open(tmp_path / "out.csv", newline="") as handle:
        return handle.read().count("\n") - 1


def test_a_second_signal_stops_at_once_even_inside_a_device_step(tmp_path):
    make_images(tmp_path / "images", 8)
    child, marker = start(tmp_path, step_seconds=6)
    wait_for(marker, "step", 1, child)
    time.sleep(0.3)  # well inside the 6 s step
    child.send_signal(signal.SIGINT)
    time.sleep(0.3)
    sent = time.monotonic()
    child.send_signal(signal.SIGINT)
    _, errors = child.communicate(timeout=30)
    took = time.monotonic() - sent
    assert child.returncode == 130, errors
    assert took < 2.0, took  # not the 5 s left of the step
    assert "stopped at once; rerun the same command to resume" in errors
    # (The first signal's own warning never ran: its Python handler waits for the step to end.)
    # What was committed is intact; a rerun completes the output, in order, each image once.
    child, _ = start(tmp_path)
    _, errors = child.communicate(timeout=60)
    assert child.returncode == 0, errors
    with open(tmp_path / "out.csv", newline="") as handle:
        paths = [line.split(",")[0] for line in handle.read().splitlines()[1:]]
    assert paths == ["%02d.png" % index for index in range(8)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_start_up_is_a_clean_stop_with_status_130(tmp_path, signum):
    make_images(tmp_path / "images", 2)
    child, marker = start(tmp_path, load_seconds=30)
    wait_for(marker, "loading", 1, child)
    sent = time.monotonic()
    child.send_signal(signum)
    _, errors = child.communicate(timeout=30)
    assert child.returncode == 130, errors  # not 143 (killed by SIGTERM) nor -2
    assert time.monotonic() - sent < 2.0
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
    with exit_on_second_signal("unused"):
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):  # the first SIGTERM: like Ctrl-C, not a kill
            os.kill(os.getpid(), signal.SIGTERM)
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
    from parallel import engine
    make_images(tmp_path / "images", 4)
    reference, output = tmp_path / "reference.npy", tmp_path / "out.npy"
    engine.run(job_child.config(tmp_path / "images", reference, "npy"))
    real_replace = os.replace

    def replace(source, target, *args, **kwargs):
        if os.fspath(target) == str(output):  # the merged file going into place: the merge's last step
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)  # the handler raises here
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        with exit_on_second_signal("unused"):
            engine.run(job_child.config(tmp_path / "images", output, "npy"))
    monkeypatch.undo()
    assert not output.exists() and not os.path.exists(str(output) + ".tmp")
    summary = engine.run(job_child.config(tmp_path / "images", output, "npy"))
    assert (summary.written, summary.already_done) == (0, 4)
    assert output.read_bytes() == reference.read_bytes()
