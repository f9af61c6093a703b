"""The engine end to end with a cheap model, so that it runs in milliseconds on CPU."""

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from hangs import HANG_SECONDS
from colour_jobs import MODEL, SIZE, WEIGHTS, config_for, make_images, read_rows
from long_paths import make_deep_folder, write_relative
from parallel import engine, jobs
from parallel.devices import resolve_devices
from parallel.devices.staging import StagedRunner
from parallel.inputs.decode import load_image
from parallel.inputs.resize import Resize
from parallel.jobs import worker

tf1 = tf.compat.v1


def test_features_do_not_depend_on_devices_or_batch_size(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 7)
    results = {}
    # One device, a step an image (the reference) or one step for all; several devices, with a last step that
    # does not fill them (7 images: steps of 6 leave 1, of 4 leave 3) or a single step for all.
    for num_devices, per_device_batch in ((1, 1), (1, 8), (3, 2), (4, 1), (4, 8)):
        output = tmp_path / ("out_%d_%d.csv" % (num_devices, per_device_batch))
        summary = jobs.run(config_for(tmp_path, images, num_devices, per_device_batch, output=output))
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
    jobs.run(config_for(tmp_path, images, num_devices=2, per_device_batch=2, workers=3, prefetch_batches=2))
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
    summary = jobs.run(config_for(tmp_path, images, num_devices=2, per_device_batch=2))
    assert (summary.written, summary.failed, summary.already_done, summary.skipped) == (7, 2, 0, 0)
    assert summary.written + summary.failed + summary.already_done + summary.skipped == summary.discovered == 9
    assert summary.exit_status == engine.EXIT_SOME_FAILED
    _, rows = read_rows(tmp_path / "out" / "features.csv")
    assert [path for path, _ in rows] == [n for n in names if n not in ("a/img_03.png", "b/img_04.png")]
    with open(tmp_path / "out" / "features.csv.errors.csv", newline="") as handle:
        failures = list(csv.DictReader(handle))
    assert sorted(row["path"] for row in failures) == ["a/img_03.png", "b/img_04.png"]
    assert str(summary.failed) in summary.line()


def test_an_image_whose_path_is_too_long_to_open_is_a_failure_not_a_silence(tmp_path):
    images = tmp_path / "images"
    make_images(images, 2)
    deep = make_deep_folder(images)
    write_relative(deep / "deep.png", (images / "a" / "img_01.png").read_bytes())
    summary = jobs.run(config_for(tmp_path, images))
    assert (summary.discovered, summary.written, summary.failed) == (3, 2, 1)
    with open(tmp_path / "out" / "features.csv.errors.csv", newline="") as handle:
        [failure] = list(csv.DictReader(handle))
    assert failure["path"].endswith("/deep.png") and failure["kind"] == "unreadable"
    assert "too long" in failure["message"]


def test_strict_stops_at_the_first_bad_image(tmp_path):
    images = tmp_path / "images"
    make_images(images, 4, bad={"a/img_01.png"})
    with pytest.raises(engine.RunError, match="a/img_01.png"):
        jobs.run(config_for(tmp_path, images, strict=True))


@pytest.mark.parametrize("make, message", [
    (lambda root: None, "is not a folder"),
    (lambda root: (root.mkdir(), (root / "notes.txt").write_text("x")), "contains no images"),
])
def test_bad_image_folders_are_usage_errors_and_leave_no_output(tmp_path, make, message):
    images = tmp_path / "images"
    make(images)
    with pytest.raises(ValueError, match=message):
        jobs.run(config_for(tmp_path, images))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("field, value, message", [
    ("per_device_batch", 0, "per_device_batch must be at least 1; got 0"),
    ("resize", "squash", "resize must be one of crop, stretch; got 'squash'"),
    ("output_format", "xlsx", "output_format must be one of csv, parquet, npy; got 'xlsx'"),
    ("workers", 0, "workers must be at least 1; got 0"),
    ("prefetch_batches", 0, "prefetch_batches must be at least 1; got 0"),
])
def test_config_refuses_bad_values_naming_them(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        config_for(tmp_path, tmp_path, **{field: value})


def test_a_run_through_the_staged_runner_writes_the_same_bytes(tmp_path, monkeypatch):
    """The engine stages on GPUs; on CPU devices, where it does not, a staged run must write the same file."""
    images = tmp_path / "images"
    make_images(images, 9, bad={"a/img_03.png"})
    jobs.run(config_for(tmp_path, images, num_devices=3, output=tmp_path / "fed.csv"))
    monkeypatch.setattr(worker, "open_runner", StagedRunner)
    summary = jobs.run(config_for(tmp_path, images, num_devices=3, output=tmp_path / "staged.csv"))
    assert (summary.written, summary.failed) == (8, 1)
    assert (tmp_path / "staged.csv").read_bytes() == (tmp_path / "fed.csv").read_bytes()


# --- the model's resize rule reaches every decode of a job ---------------------------------------------------

PIXEL_SIZE = (8, 8)


def pixel_model(images):
    """uint8 [N, 8, 8, 3] -> float32 [N, 192]: the pixels themselves (times a weight of 1): a row shows its decode."""
    scale = tf1.get_variable("pixels/scale", [1], initializer=tf1.zeros_initializer())
    return tf.reshape(tf.cast(images, tf.float32), [-1, PIXEL_SIZE[0] * PIXEL_SIZE[1] * 3]) * scale


def pixel_spec(**resize):
    return engine.ModelSpec(name="pixels", fn=pixel_model, image_size=PIXEL_SIZE, output_name="pixel",
                            load_weights=lambda: {"pixels/scale": np.ones(1, np.float32)},
                            settings={"model": "pixels"}, **resize)


def test_the_model_s_resize_rule_reaches_the_folder_reader_a_tar_a_retry_and_extract(tmp_path):
    from parallel.inputs.tars import member_key
    from parallel.output.record import read_record
    from stores import write_tars
    images = tmp_path / "images"
    names = make_images(images, 5)  # 30x20 PNGs
    model, rule = pixel_spec(resize_filter="bicubic", resize_short_side=12), Resize("crop", "bicubic", 12)
    expected = np.stack([load_image(images / name, PIXEL_SIZE, rule).reshape(-1) for name in names])
    assert (expected != np.stack([load_image(images / name, PIXEL_SIZE).reshape(-1) for name in names])).mean() > 0.5
    jobs.run(config_for(tmp_path, images, model=model, output=tmp_path / "folder.csv"))
    _, rows = read_rows(tmp_path / "folder.csv")
    np.testing.assert_array_equal(np.stack([values for _, values in rows]), expected)
    settings = read_record(tmp_path / "folder.csv")["settings"]
    assert (settings["resize"], settings["resize_filter"], settings["resize_short_side"]) == ("crop", "bicubic", "12")
    tars = write_tars(images, tmp_path / "tars", 3)
    jobs.run(config_for(tmp_path, str(tmp_path / "tars" / "*.tar"), model=model, output=tmp_path / "tars.csv"))
    _, rows = read_rows(tmp_path / "tars.csv")
    by_name = {key.split("://")[1].split("::")[0]: values for key, values in rows}
    np.testing.assert_array_equal(np.stack([by_name[name] for name in names]), expected)
    keys = [member_key(name, str(tars[number // 3])) for number, name in enumerate(names)]
    for listed in images, keys:  # the Python API: a folder; tar members (engine.member_decoder)
        _, features = engine.extract(model, listed)
        np.testing.assert_array_equal(features, expected)
    config = config_for(tmp_path, images, model=model)  # a retry: images computed again at their places
    runner = engine.DeviceRunner(model, config.devices, per_device_batch=config.per_device_batch)
    try:
        paths, features, failures = engine.extract_rows(config, runner, names[3:], [3, 4], len(names))
        assert (paths, failures) == (names[3:], [])
        np.testing.assert_array_equal(features, expected[3:])
        decode = engine.member_decoder(keys, None)
        paths, features, failures = engine.extract_rows(config, runner, keys[:1], [0], 3, decode=decode)
        assert (paths, failures) == (keys[:1], [])
        np.testing.assert_array_equal(features, expected[:1])
    finally:
        runner.close()


def test_a_model_that_keeps_the_default_rule_reads_and_records_as_before(tmp_path):
    """VGG16's, ResNet50's, EfficientNetB0's, ConvNeXt's: the centre square, bilinear, in one Pillow call; no new
    key in the job's settings, so their outputs and sidecars stay byte for byte what they were."""
    images = tmp_path / "images"
    names = make_images(images, 3)
    expected = []
    for name in names:
        with Image.open(images / name) as image:  # the decode's resize before models gave their own
            width, height = image.size
            side = min(width, height)
            box = ((width - side) // 2, (height - side) // 2, (width - side) // 2 + side, (height - side) // 2 + side)
            expected.append(np.asarray(image.convert("RGB").resize(PIXEL_SIZE[::-1], Image.BILINEAR, box=box)))
    config = config_for(tmp_path, images, model=pixel_spec(), output=tmp_path / "default.csv")
    assert sorted(config.settings) == ["image_size", "images", "model", "resize"]
    jobs.run(config)
    _, rows = read_rows(tmp_path / "default.csv")
    np.testing.assert_array_equal(np.stack([values for _, values in rows]), np.stack(expected).reshape(3, -1))


# --- the Python API ------------------------------------------------------------------------------------


def test_extract_gives_what_run_writes_for_a_folder_and_for_a_list(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 5, bad={"b/img_02.png"})
    paths, features = engine.extract(MODEL, images, devices="cpu:0,cpu:1", per_device_batch=2)
    jobs.run(config_for(tmp_path, images))
    _, rows = read_rows(tmp_path / "out" / "features.csv")
    assert paths == [path for path, _ in rows] == [name for name in names if name != "b/img_02.png"]
    assert features.dtype == np.float32 and features.shape == (4, 6)
    np.testing.assert_array_equal(features, np.stack([values for _, values in rows]))
    listed = [str(images / name) for name in reversed(paths)]  # any order, absolute paths
    again, features_again = engine.extract(MODEL, listed)
    assert again == listed
    np.testing.assert_array_equal(features_again, features[::-1])


@pytest.mark.parametrize("kwargs, message", [
    (dict(images=[]), "images must be a folder or a non-empty list of files; got \\[\\]"),
    (dict(per_device_batch=0), "per_device_batch must be at least 1; got 0"),
    (dict(devices=3), "devices must be a Devices or device names"),
])
def test_extract_refuses_bad_arguments_naming_them(tmp_path, kwargs, message):
    arguments = dict(model=MODEL, images=tmp_path)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        engine.extract(**arguments)


def test_the_python_api_page_example_runs(tmp_path, monkeypatch, seeded_files):
    """As written, in the folder of the README's first commands: on the images and the weights file they write
    (the same layout of seeded random weights; two images of the README's folder)."""
    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "python-api.md").read_text()
    example = page.split("# Python API")[1].split("```python\n")[1].split("```")[0]
    readme_first = (root / "README.md").read_text().split("```bash\n")[1].split("```")[0]
    weights = re.search(r'weights="([^"]+)"', example).group(1)
    assert "python -m models.weight_files random %s " % weights in readme_first, (weights, readme_first)
    assert "'photos/%d.jpg'" in readme_first and '"photos/"' in example
    monkeypatch.chdir(tmp_path)
    make_images(tmp_path / "photos", 2)
    os.symlink(seeded_files["npy"], tmp_path / weights)
    namespace = {}
    exec(compile(example, "docs/python-api.md", "exec"), namespace)
    assert namespace["features"].shape == (2, 4096) and len(namespace["paths"]) == 2
    assert namespace["summary"].written == 2
    frame = __import__("pandas").read_parquet(tmp_path / "results" / "photos.parquet")
    assert list(frame["path"]) == namespace["paths"]
    np.testing.assert_array_equal(np.stack(frame["fc7"]), namespace["features"])


def test_extract_takes_a_store_prefix_and_object_urls_as_it_takes_a_folder(tmp_path, s3_store, http_server):
    import shutil
    from stores import BUCKET, upload
    images = tmp_path / "images"
    make_images(images, 5, bad={"b/img_02.png"})
    paths, features = engine.extract(MODEL, images)
    upload(images, "s3://%s/extract/photos/" % BUCKET)  # on the loopback S3 server of the session
    listed, from_prefix = engine.extract(MODEL, "s3://%s/extract/photos" % BUCKET)
    assert listed == paths
    np.testing.assert_array_equal(from_prefix, features)
    shutil.copytree(images, http_server.root / "photos")  # half the list over HTTP, half from the store
    urls = [("s3://%s/extract/photos/%s" if number % 2 else "%s/photos/%s") % (BUCKET if number % 2 else
            http_server.url, path) for number, path in enumerate(reversed(paths))]
    again, from_urls = engine.extract(MODEL, urls)
    assert again == urls
    np.testing.assert_array_equal(from_urls, features[::-1])


def test_extract_takes_tar_members_streamed_or_by_byte_range_from_an_index(tmp_path, s3_store):
    from parallel.inputs.tar_stream import stream_members
    from parallel.inputs.tars import member_key, write_index
    from stores import BUCKET, upload, write_tars
    images = tmp_path / "images"
    make_images(images, 5, bad={"b/img_02.png"})
    paths, features = engine.extract(MODEL, images)
    tars = write_tars(images, tmp_path / "tars", 3)
    upload(tmp_path / "tars", "s3://%s/extract-tars/" % BUCKET)
    for where in [str(tar) for tar in tars], ["s3://%s/extract-tars/%s" % (BUCKET, tar.name) for tar in tars]:
        keys = [member_key(path, tar) for tar in where for path in paths if tar.endswith(
            "%06d.tar" % (sorted(paths + ["b/img_02.png"]).index(path) // 3))]
        assert len(keys) == len(paths)
        streamed, from_stream = engine.extract(MODEL, keys[::-1])  # each tar read once, front to back
        entries = []
        for tar in where:
            list(stream_members(tar, entries))  # the index a job writes: each member's offset and size
        index = tmp_path / "members.parquet"
        write_index(index, entries)
        ranged, from_ranges = engine.extract(MODEL, keys[::-1] + [keys[0].replace("img", "gone")], index=index)
        assert streamed == ranged == keys[::-1]  # a member not in the index fails alone, left out
        np.testing.assert_array_equal(from_stream, features[::-1])
        np.testing.assert_array_equal(from_ranges, features[::-1])


# TensorFlow's own lines on stderr: absl's log ("I0000 00:00:1795740601.211910    3903 port.cc:153] oneDNN ...")
# and its notice before it, or their words.
TENSORFLOW_LOG = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\S+\s+\d+ \S+:\d+\]|absl::InitializeLog|oneDNN|cuda|cuInit", re.M)


@pytest.mark.parametrize("first, level", [("from parallel import Config, extract, resolve_devices, run", None),
                                          ("from models import vgg16", "0")], ids=["quiet", "user-level-0"])
def test_extract_from_python_prints_no_tensorflow_log(tmp_path, first, level):
    """A notebook's or a script's calls: TensorFlow's C++ log, even what it prints while its libraries load
    (before TF_CPP_MIN_LOG_LEVEL is read), is not shown; the user's own TF_CPP_MIN_LOG_LEVEL=0 shows it all.

    The library imports TensorFlow first (the engine, lazily; or a model module, as the docs' example does),
    then job_child's colour model (whose import would set the level) is made. That import skipped Keras, which
    TensorFlow imports eagerly (parallel/native_log.py): a run imports none, and Keras imports afterwards.
    """
    make_images(tmp_path / "images", 3)
    code = ("import sys; sys.path.insert(0, %r)\n" % str(Path(__file__).parent) + first + "\n"
            "import job_child\n"
            "from parallel import Config, extract, resolve_devices, run\n"
            "model = job_child.colour_model()\n"
            "paths, features = extract(model, %r)\n" % str(tmp_path / "images") +
            "summary = run(Config(model=model, images=%r, output=%r, devices=resolve_devices(devices='cpu:0')))\n"
            % (str(tmp_path / "images"), str(tmp_path / "features.csv")) +
            "print(len(paths), features.shape, summary.written, 'keras' in sys.modules)\n")
    if level is None:  # once is enough: a process of its own importing Keras costs a second of CPU
        code += ("import keras, tensorflow as tf\n"
                 "print(tf.keras.optimizers.Adam is keras.optimizers.Adam, keras.src.optimizers.Adam.__name__)\n")
    environment = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        environment["TF_CPP_MIN_LOG_LEVEL"] = level
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_SECONDS,
                          cwd=str(Path(__file__).parent.parent), env=environment)
    assert done.returncode == 0 and done.stdout.split()[:5] == ["3", "(3,", "6)", "3", "False"], done.stderr
    assert done.stdout.split()[5:] == (["True", "Adam"] if level is None else []), done.stdout
    if level is None:
        assert not TENSORFLOW_LOG.search(done.stderr), done.stderr
    else:  # the lines of its libraries' loading, as TensorFlow prints them, and its later log
        assert "absl::InitializeLog" in done.stderr and TENSORFLOW_LOG.search(done.stderr), done.stderr
