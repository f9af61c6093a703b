"""The engine end to end with a cheap model, so that it runs in milliseconds on CPU."""

import csv
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from parallel import engine
from parallel import reader as reader_module
from parallel import writer as writer_module
from parallel.devices import resolve_devices
from parallel.reader import load_image

tf1 = tf.compat.v1
SIZE = (16, 16)


def colour_model(images):
    """uint8 [N, 16, 16, 3] -> float32 [N, 2, 3]: per-image mean colour times a weight, and its square."""
    scale = tf1.get_variable("colour/scale", [3], initializer=tf1.zeros_initializer())
    mean = tf.reduce_mean(tf.cast(images, tf.float32), axis=[1, 2]) * scale
    return tf.stack([mean, mean * mean], axis=1)


WEIGHTS = {"colour/scale": np.array([1.0, 0.5, 0.25], np.float32)}
MODEL = engine.ModelSpec(name="colour", fn=colour_model, image_size=SIZE, load_weights=lambda: WEIGHTS,
                         output_name="colour", settings={"model": "colour"})


def make_images(folder, count, bad=()):
    """`count` small PNGs of distinct colours in two sub-folders; names in `bad` get garbage bytes."""
    rng = np.random.default_rng(1)
    names = []
    for index in range(count):
        name = "%s/img_%02d.png" % ("a" if index % 2 else "b", index)
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name in bad:
            path.write_bytes(b"<html>not an image</html>")
        else:
            Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(path)
        names.append(name)
    return sorted(names)


def config_for(tmp_path, images, num_devices=1, per_device_batch=2, **overrides):
    settings = dict(model=MODEL, images=images, output=tmp_path / "out" / "features.csv",
                    devices=resolve_devices(devices=",".join("cpu:%d" % i for i in range(num_devices)), gpu_count=0),
                    per_device_batch=per_device_batch, workers=2)
    settings.update(overrides)
    return engine.Config(**settings)


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return rows[0], [(row[0], np.array(row[1:], np.float32)) for row in rows[1:]]


def test_features_do_not_depend_on_devices_or_batch_size(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 7)
    results = {}
    for num_devices in (1, 3, 4):
        for per_device_batch in (1, 2, 8):
            output = tmp_path / ("out_%d_%d.csv" % (num_devices, per_device_batch))
            summary = engine.run(config_for(tmp_path, images, num_devices, per_device_batch, output=output))
            assert (summary.written, summary.failed, summary.exit_status) == (7, 0, engine.EXIT_OK)
            header, rows = read_rows(output)
            results[num_devices, per_device_batch] = rows
    assert header == ["path"] + ["colour_%d" % i for i in range(6)]
    reference = results[1, 1]
    assert [path for path, _ in reference] == names  # relative, '/'-separated, sorted
    for key, rows in results.items():
        assert [path for path, _ in rows] == names, key
        np.testing.assert_allclose(np.stack([v for _, v in rows]), np.stack([v for _, v in reference]),
                                   rtol=1e-5, err_msg=str(key))


def test_the_pipeline_writes_what_a_sequential_loop_computes(tmp_path):
    """Decode threads, prefetch, several devices and the writer thread change nothing: the rows are
    those of decoding, running and writing one image at a time, in sorted order."""
    images = tmp_path / "images"
    names = make_images(images, 9)
    engine.run(config_for(tmp_path, images, num_devices=2, per_device_batch=2, workers=3, prefetch_batches=2))
    _, rows = read_rows(tmp_path / "out" / "features.csv")
    runner = engine.DeviceRunner(MODEL, resolve_devices(devices="cpu:0", gpu_count=0), per_device_batch=1)
    try:
        expected = [runner.run(load_image(images / name, SIZE)[np.newaxis])[0] for name in names]
    finally:
        runner.close()
    assert [path for path, _ in rows] == names
    np.testing.assert_array_equal(np.stack([values for _, values in rows]), np.stack(expected))
    # And the model computes what it says: the mean colour times the weights, then its square.
    mean = load_image(images / names[0], SIZE).reshape(-1, 3).mean(axis=0) * WEIGHTS["colour/scale"]
    np.testing.assert_allclose(rows[0][1], np.concatenate([mean, mean ** 2]), rtol=1e-5)


def test_every_image_is_accounted_for_and_bad_ones_cost_no_batch_mate(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 9, bad={"a/img_03.png", "b/img_04.png"})
    summary = engine.run(config_for(tmp_path, images, num_devices=2, per_device_batch=2))
    assert (summary.written, summary.failed, summary.already_done, summary.skipped) == (7, 2, 0, 0)
    assert summary.written + summary.failed + summary.already_done + summary.skipped == summary.discovered == 9
    assert summary.exit_status == engine.EXIT_SOME_FAILED
    _, rows = read_rows(tmp_path / "out" / "features.csv")
    assert [path for path, _ in rows] == [n for n in names if n not in ("a/img_03.png", "b/img_04.png")]
    with open(tmp_path / "out" / "features.csv.errors.csv", newline="") as handle:
        failures = list(csv.DictReader(handle))
    assert sorted(row["path"] for row in failures) == ["a/img_03.png", "b/img_04.png"]
    assert str(summary.failed) in summary.line()


def test_a_rerun_resumes_and_computes_nothing_twice(tmp_path):
    images = tmp_path / "images"
    make_images(images, 5)
    first = engine.run(config_for(tmp_path, images))
    before = (tmp_path / "out" / "features.csv").read_bytes()
    second = engine.run(config_for(tmp_path, images))
    assert (first.written, second.written, second.already_done) == (5, 0, 5)
    assert (tmp_path / "out" / "features.csv").read_bytes() == before
    make_images(images, 6)  # one new image: only it is computed
    third = engine.run(config_for(tmp_path, images))
    assert (third.written, third.already_done) == (1, 5)
    _, rows = read_rows(tmp_path / "out" / "features.csv")
    assert len(rows) == 6 and len({path for path, _ in rows}) == 6


def test_strict_stops_at_the_first_bad_image(tmp_path):
    images = tmp_path / "images"
    make_images(images, 4, bad={"a/img_01.png"})
    with pytest.raises(engine.RunError, match="a/img_01.png"):
        engine.run(config_for(tmp_path, images, strict=True))


@pytest.mark.parametrize("make, message", [
    (lambda root: None, "is not a folder"),
    (lambda root: (root.mkdir(), (root / "notes.txt").write_text("x")), "contains no images"),
])
def test_bad_image_folders_are_usage_errors_and_leave_no_output(tmp_path, make, message):
    images = tmp_path / "images"
    make(images)
    with pytest.raises(ValueError, match=message):
        engine.run(config_for(tmp_path, images))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field, value, message", [
    ("per_device_batch", 0, "--batch-size must be at least 1; got 0"),
    ("resize", "squash", "--resize 'squash'"),
    ("output_format", "xlsx", "--format 'xlsx'"),
    ("workers", 0, "--workers must be at least 1; got 0"),
])
def test_config_refuses_bad_values_naming_them(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        config_for(tmp_path, tmp_path, **{field: value})


def test_out_of_memory_halves_the_step_and_loses_no_row(tmp_path, caplog):
    runner = engine.DeviceRunner(MODEL, resolve_devices(devices="cpu:0,cpu:1", gpu_count=0), per_device_batch=4)
    real_run = runner.session.run
    fed = []

    def run_with_small_memory(fetches, feed_dict):
        rows = sum(len(value) for value in feed_dict.values())
        fed.append(rows)
        if rows > 2:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
        return real_run(fetches, feed_dict)

    images = np.random.default_rng(0).integers(0, 255, (7, 16, 16, 3), dtype=np.uint8)
    expected = runner.run(images)
    runner.session.run = run_with_small_memory
    np.testing.assert_array_equal(runner.run(images), expected)
    assert fed[:3] == [7, 4, 2] and runner.max_rows_per_step == 2
    assert "out of memory" in caplog.text
    runner.close()


@pytest.mark.parametrize("slow_stage", ["reader", "writer"])
def test_the_summary_says_which_stage_the_devices_waited_for(tmp_path, monkeypatch, slow_stage):
    images = tmp_path / "images"
    make_images(images, 6)
    # Each slowed step takes 0.1 s; the model takes milliseconds.
    target = (reader_module, "_decode_row") if slow_stage == "reader" else (writer_module.FeatureWriter, "write")
    real = getattr(*target)

    def slowed(*args):
        time.sleep(0.1)
        return real(*args)
    monkeypatch.setattr(*target, slowed)
    summary = engine.run(config_for(tmp_path, images, per_device_batch=1, workers=1, prefetch_batches=1))
    assert summary.written == 6
    stages = {"reader": summary.reader_wait_seconds, "writer": summary.writer_wait_seconds}
    assert stages[slow_stage] >= 0.4, (summary, slow_stage)
    other = "writer" if slow_stage == "reader" else "reader"
    assert stages[other] < stages[slow_stage] / 2, summary
    assert 0 < summary.device_seconds and sum(stages.values()) + summary.device_seconds <= summary.seconds + 1e-3
    assert "devices busy %.0f%%" % (100 * summary.device_seconds / summary.seconds) in summary.line()
