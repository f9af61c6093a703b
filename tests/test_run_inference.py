"""The CLI end to end with VGG16 (seeded random weights in tensorflow-vgg's npy layout)."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import run_inference
from parallel.writer import sidecar_path

REPOSITORY = Path(__file__).resolve().parent.parent
NAMES = ["a/one.jpg", "a/two, with comma.png", "b/日本.jpg", "b/c/=four.jpg", "five.JPG"]


@pytest.fixture(scope="module")
def weights_file(seeded_files):
    return seeded_files["npy"]


def make_images(folder, names=NAMES, size=(40, 30)):
    rng = np.random.default_rng(0)
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size[::-1] + (3,), dtype=np.uint8)).save(
            path, format="PNG" if name.endswith(".png") else "JPEG")
    return folder


def main(*argv):
    return run_inference.main([str(arg) for arg in argv])


def read(path):
    return pd.read_csv(path, index_col="path", keep_default_na=False, dtype={"path": object})


@pytest.mark.parametrize("make, flags, message", [
    (lambda tmp: tmp / "nowhere", [], "--images .*nowhere is not a folder"),
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", [], "contains no images"),
    (make_images, ["--batch-size", "0"], "--batch-size must be at least 1; got 0"),
    (make_images, ["--gpus", "3"], "GPU 3 not found; this machine has CPU:0"),
    (make_images, ["--devices", "tpu:0"], "must name a CPU or GPU"),
    (make_images, ["--weights", "missing.npy"], "--weights missing.npy is not a file"),
    (make_images, ["--weights", "{notes}"], "is neither a tensorflow-vgg vgg16.npy nor a Keras .h5"),
])
def test_usage_errors_are_one_line_exit_2_and_leave_no_output(tmp_path, capsys, weights_file, make, flags, message):
    (tmp_path / "notes.txt").write_text("not weights")
    images = make(tmp_path)
    flags = [flag.replace("{notes}", str(tmp_path / "notes.txt")) for flag in flags]
    if "--weights" not in flags:
        flags += ["--weights", weights_file]
    output = tmp_path / "out" / "features.csv"
    assert main("--images", images, "--output", output, "--quiet", *flags) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("run_inference: error: "), error
    assert __import__("re").search(message, error), error
    assert not output.parent.exists()


def test_gpus_and_devices_together_are_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        main("--images", ".", "--gpus", "0", "--devices", "cpu:0")
    assert stop.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_features_by_path_do_not_depend_on_devices_or_batch_size(tmp_path, capsys, weights_file):
    images = make_images(tmp_path / "images")
    frames = {}
    for devices, batch in (("cpu:0", 2), ("cpu:0,cpu:1,cpu:2", 1)):
        output = tmp_path / ("%d-%d.csv" % (devices.count(",") + 1, batch))
        assert main("--images", images, "--output", output, "--weights", weights_file,
                    "--devices", devices, "--batch-size", batch) == 0
        assert "5 images: 5 written, 0 failed" in capsys.readouterr().err
        frames[devices] = read(output)
    single, parallel = frames.values()
    assert list(single.index) == sorted(NAMES)  # keyed by relative path, in sorted order
    assert list(single.columns) == ["fc7_%d" % i for i in range(4096)]
    assert single.dtypes.unique().tolist() == [np.float64]
    np.testing.assert_allclose(parallel.to_numpy(), single.to_numpy(), rtol=1e-5,
                               atol=1e-5 * np.abs(single.to_numpy()).max())
    assert (single.to_numpy() < 0).any()  # fc7 is before the ReLU


def test_layer_relu7_and_parquet(tmp_path, weights_file):
    images = make_images(tmp_path / "images", NAMES[:2])
    output = tmp_path / "features.parquet"
    assert main("--images", images, "--output", output, "--weights", weights_file, "--layer", "relu7",
                "--format", "parquet", "--quiet") == 0
    frame = pd.read_parquet(output)
    features = np.stack(frame["relu7"])
    assert list(frame["path"]) == sorted(NAMES[:2]) and features.shape == (2, 4096)
    assert features.dtype == np.float32 and features.min() >= 0


def test_some_images_failed_is_exit_3_with_an_errors_file(tmp_path, capsys, weights_file):
    images = make_images(tmp_path / "images", NAMES[:2])
    (images / "broken.jpg").write_bytes(b"<html>")
    output = tmp_path / "features.csv"
    assert main("--images", images, "--output", output, "--weights", weights_file) == 3
    assert "3 images: 2 written, 1 failed" in capsys.readouterr().err
    errors = pd.read_csv(str(output) + ".errors.csv")
    assert list(errors["path"]) == ["broken.jpg"] and list(errors["kind"]) == ["not_an_image"]
    assert list(read(output).index) == sorted(NAMES[:2])


def test_other_settings_are_refused_until_overwrite(tmp_path, capsys, weights_file):
    images = make_images(tmp_path / "images", NAMES[:1])
    output = tmp_path / "features.csv"
    assert main("--images", images, "--output", output, "--weights", weights_file, "--quiet") == 0
    before = output.read_bytes()
    assert main("--images", images, "--output", output, "--weights", weights_file, "--layer", "relu7") == 2
    assert "layer" in capsys.readouterr().err and output.read_bytes() == before
    assert main("--images", images, "--output", output, "--weights", weights_file, "--layer", "relu7",
                "--overwrite", "--quiet") == 0
    assert list(read(output).columns)[0] == "relu7_0"


# ----------------------------------------------------------------------------- signals, in real processes

def start(images, output, weights_file, *flags):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, str(REPOSITORY / "run_inference.py"), "--images", str(images), "--output", str(output),
         "--weights", str(weights_file), "--devices", "cpu:0", "--batch-size", "1", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPOSITORY)


def rows_in(output):
    try:
        return output.read_bytes().count(b"\n") - 1
    except FileNotFoundError:
        return -1


def wait_for_rows(child, output, rows, timeout=120):
    deadline = time.monotonic() + timeout
    while rows_in(output) < rows:
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "no rows after %d s" % timeout
        time.sleep(0.05)


@pytest.fixture(scope="module")
def many_images(tmp_path_factory):
    names = ["img_%03d.jpg" % index for index in range(24)]
    return make_images(tmp_path_factory.mktemp("many"), names, size=(32, 32)), names


@pytest.fixture(scope="module")
def uninterrupted(many_images, weights_file, tmp_path_factory):
    images, _ = many_images
    output = tmp_path_factory.mktemp("reference") / "features.csv"
    child = start(images, output, weights_file, "--quiet")
    assert child.wait(timeout=300) == 0, child.communicate()
    return output.read_bytes()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_stop_cleanly_and_a_rerun_resumes(tmp_path, many_images, weights_file, uninterrupted,
                                                             signum):
    images, names = many_images
    output = tmp_path / "features.csv"
    child = start(images, output, weights_file)
    wait_for_rows(child, output, 2)
    child.send_signal(signum)
    _, error = child.communicate(timeout=120)
    assert child.returncode == 130, error
    assert "Rerun the same command to resume" in error and "Traceback" not in error
    done = rows_in(output)
    assert 2 <= done < len(names)
    rerun = start(images, output, weights_file)
    _, error = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, error
    assert "%d already done" % done in error
    assert output.read_bytes() == uninterrupted


def test_sigkill_at_random_moments_then_rerun_gives_the_uninterrupted_output(tmp_path, many_images, weights_file,
                                                                             uninterrupted):
    images, names = many_images
    output = tmp_path / "features.csv"
    rng = random.Random(4)
    kills = 0
    while kills < 4:
        child = start(images, output, weights_file, "--quiet")
        before = max(rows_in(output), 0)
        if before >= len(names) - 2:
            child.wait(timeout=300)
            break
        wait_for_rows(child, output, before + 1)
        time.sleep(rng.uniform(0, 0.4))  # somewhere inside a later batch, a write or a commit
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        kills += 1
    committed = json.loads(sidecar_path(output).read_text())["rows"]
    final = start(images, output, weights_file)
    _, error = final.communicate(timeout=300)
    assert final.returncode == 0, error
    assert kills >= 3
    # Only the images without a committed row were computed again.
    assert "%d written, 0 failed, %d already done" % (len(names) - committed, committed) in error, error
    assert output.read_bytes() == uninterrupted
