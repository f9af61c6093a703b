"""The engine end to end with a cheap model, so that it runs in milliseconds on CPU."""

import csv
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from long_paths import make_deep_folder, write_relative
from PIL import Image

from parallel import engine, jobs
from parallel.jobs import single_host
from parallel.devices import resolve_devices
from parallel.decode import load_image
from parallel.staging import StagedRunner

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


def make_images(folder, count, bad=(), seed=1):
    """`count` small PNGs of distinct colours in two sub-folders; names in `bad` get garbage bytes."""
    rng = np.random.default_rng(seed)
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
    return jobs.Config(**settings)


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


def test_a_rerun_resumes_and_computes_nothing_twice(tmp_path):
    images = tmp_path / "images"
    make_images(images, 5)
    first = jobs.run(config_for(tmp_path, images))
    before = (tmp_path / "out" / "features.csv").read_bytes()
    second = jobs.run(config_for(tmp_path, images))
    assert (first.written, second.written, second.already_done) == (5, 0, 5)
    assert (tmp_path / "out" / "features.csv").read_bytes() == before


# --- job identity: an output belongs to one folder and the images it held --------------------------------


def test_an_output_of_another_folder_is_refused_naming_both(tmp_path):
    """Case 1 of the issue: X/a.png and Y/a.png, the same output: the second run must not say "already done"."""
    first, second = tmp_path / "X", tmp_path / "Y"
    make_images(first, 3)
    make_images(second, 3, seed=2)  # the same names, other pixels
    jobs.run(config_for(tmp_path, first))
    output = tmp_path / "out" / "features.csv"
    before = output.read_bytes()
    with pytest.raises(ValueError) as refused:
        jobs.run(config_for(tmp_path, second))
    message = str(refused.value)
    assert str(first.resolve()) in message and str(second.resolve()) in message
    assert "--overwrite" in message and "--output" in message and "\n" not in message
    assert output.read_bytes() == before
    summary = jobs.run(config_for(tmp_path, second, overwrite=True))
    assert (summary.written, summary.already_done) == (3, 0)
    assert output.read_bytes() != before


def _job(tmp_path, count=6, **overrides):
    images = tmp_path / "images"
    names = make_images(images, count)
    jobs.run(config_for(tmp_path, images, **overrides))
    return images, names, tmp_path / "out" / "features.csv"


def test_an_image_added_since_the_job_started_is_refused_before_the_weights_load(tmp_path):
    images, names, output = _job(tmp_path)
    before = output.read_bytes()
    (images / "a" / "img_00b.png").write_bytes((images / names[0]).read_bytes())
    loads = []
    model = engine.ModelSpec(name="colour", fn=colour_model, image_size=SIZE, output_name="colour",
                             load_weights=lambda: loads.append(1) or WEIGHTS, settings={"model": "colour"})
    with pytest.raises(ValueError, match=r"1 image added \(a/img_00b.png\).*--overwrite"):
        jobs.run(config_for(tmp_path, images, model=model))
    assert loads == [] and output.read_bytes() == before


@pytest.mark.parametrize("change", ["replaced", "touched", "removed"])
def test_an_image_changed_or_removed_after_its_row_was_written_is_refused(tmp_path, change):
    """Case 2 of the issue: the row of a replaced image would be stale."""
    images, names, output = _job(tmp_path)
    before = output.read_bytes()
    target = images / names[2]
    if change == "replaced":
        Image.new("RGB", (20, 30), (1, 2, 3)).save(target)
    elif change == "touched":
        os.utime(target, ns=(0, target.stat().st_mtime_ns + 1))
    else:
        target.unlink()
    with pytest.raises(ValueError, match="1 image %s after its row was written \\(%s\\)"
                                         % ("removed" if change == "removed" else "changed", names[2])):
        jobs.run(config_for(tmp_path, images))
    assert output.read_bytes() == before


@pytest.mark.parametrize("output_format", ["csv", "parquet", "npy"])
def test_a_repaired_image_without_a_row_is_computed_and_the_output_stays_sorted(tmp_path, output_format):
    images = tmp_path / "images"
    names = make_images(images, 9, bad={"a/img_01.png"})
    output = tmp_path / "out" / ("features." + output_format)
    first = jobs.run(config_for(tmp_path, images, output=output, output_format=output_format))
    assert (first.written, first.failed) == (8, 1)
    Image.new("RGB", (20, 30), (9, 9, 9)).save(images / "a" / "img_01.png")  # repaired
    second = jobs.run(config_for(tmp_path, images, output=output, output_format=output_format))
    assert (second.written, second.failed, second.already_done) == (1, 0, 8)
    # The same bytes as one run over the repaired folder: the late row is in its place.
    fresh = tmp_path / "fresh" / output.name
    jobs.run(config_for(tmp_path, images, output=fresh, output_format=output_format))
    assert output.read_bytes() == fresh.read_bytes()
    if output_format == "npy":
        assert (output.parent / (output.name + ".paths.csv")).read_bytes() == \
            (fresh.parent / (fresh.name + ".paths.csv")).read_bytes()
    elif output_format == "csv":
        assert [path for path, _ in read_rows(output)[1]] == names
    third = jobs.run(config_for(tmp_path, images, output=output, output_format=output_format))
    assert (third.written, third.already_done) == (0, 9)  # its new size and time were recorded
    make_images(images, 9)  # rewrites every file, each of which has a row now
    with pytest.raises(ValueError, match="9 images changed after its row was written"):
        jobs.run(config_for(tmp_path, images, output=output, output_format=output_format))


def test_an_image_removed_before_its_row_was_written_is_reported_missing(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 4, bad={"b/img_00.png"})
    jobs.run(config_for(tmp_path, images))
    (images / "b" / "img_00.png").unlink()
    summary = jobs.run(config_for(tmp_path, images))
    assert (summary.discovered, summary.failed, summary.already_done) == (4, 1, 3)
    with open(tmp_path / "out" / "features.csv.errors.csv", newline="") as handle:
        assert [(row["path"], row["kind"]) for row in csv.DictReader(handle)] == [("b/img_00.png", "missing")]
    assert names[0] == "a/img_01.png"


def test_a_missing_manifest_is_refused_once_rows_are_committed(tmp_path):
    images, _, output = _job(tmp_path, count=3)
    output.with_name("features.csv.manifest.parquet").unlink()
    with pytest.raises(ValueError, match="manifest.parquet is missing.*--overwrite"):
        jobs.run(config_for(tmp_path, images))


def test_a_job_without_a_committed_row_freezes_the_folder_as_it_is_now(tmp_path):
    images = tmp_path / "images"
    make_images(images, 3, bad={"a/img_01.png", "b/img_00.png", "b/img_02.png"})
    first = jobs.run(config_for(tmp_path, images))
    assert (first.written, first.failed) == (0, 3)
    make_images(images, 5)  # nothing was committed: nothing can be stale or out of order
    second = jobs.run(config_for(tmp_path, images))
    assert (second.discovered, second.written, second.failed) == (5, 5, 0)


def test_the_output_and_its_files_inside_the_images_folder_are_never_images(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 4)
    output = images / "feats.png"  # an image extension, inside the folder
    for output_format in ("csv", "npy"):
        summary = jobs.run(config_for(tmp_path, images, output=output, output_format=output_format,
                                        overwrite=True))
        assert (summary.discovered, summary.written, summary.failed) == (4, 4, 0)
        again = jobs.run(config_for(tmp_path, images, output=output, output_format=output_format))
        assert (again.discovered, again.already_done, again.failed) == (4, 4, 0)
    assert names == sorted(names)


def test_overwrite_never_replaces_an_input_image(tmp_path):
    images = tmp_path / "images"
    names = make_images(images, 3)
    photo = images / names[0]
    before = photo.read_bytes()
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="is a file under --images"):
            jobs.run(config_for(tmp_path, images, output=photo, overwrite=overwrite))
    assert photo.read_bytes() == before
    assert not os.path.exists(str(photo) + ".run.json")


@pytest.mark.parametrize("name_it", ["absolute", "through_dots", "hard_link"])
def test_an_output_is_never_an_image_of_a_list_however_the_list_names_it(tmp_path, name_it):
    """--images-from listing images outside --images: --output set to one of them, even with --overwrite, is
    refused before anything is written, and the photo is intact."""
    elsewhere, images = tmp_path / "elsewhere", tmp_path / "images"
    names = make_images(elsewhere, 3)
    images.mkdir()
    photo = elsewhere / names[0]
    listed = {"absolute": str(photo), "through_dots": "../elsewhere/" + names[0],
              "hard_link": str(tmp_path / "linked.png")}[name_it]
    if name_it == "hard_link":
        os.link(photo, listed)
    listing = tmp_path / "list.txt"
    listing.write_text("\n".join([listed] + [str(elsewhere / name) for name in names[1:]]) + "\n")
    before = photo.read_bytes()
    for overwrite in (False, True):
        with pytest.raises(ValueError, match="--output .* is one of the job's images"):
            jobs.run(config_for(tmp_path, images, output=photo, overwrite=overwrite, images_from=listing))
    assert photo.read_bytes() == before
    assert not os.path.exists(str(photo) + ".run.json") and not os.path.exists(str(photo) + ".lock")


def test_a_job_resumed_with_another_step_geometry_is_warned_about(job_images, tmp_path, caplog, monkeypatch):
    import job_child
    output = tmp_path / "out.csv"
    monkeypatch.setattr(single_host, "StopRequest", lambda: _StopAfter(2))
    jobs.run(job_child.config(job_images, output, "csv", per_device_batch=2))
    monkeypatch.undo()
    with caplog.at_level("WARNING", logger="parallel"):
        summary = jobs.run(job_child.config(job_images, output, "csv", per_device_batch=3))
    assert summary.already_done == 4
    assert "was started with another step geometry (per_device_batch=2, this process 3 (--batch-size))" in caplog.text


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
    monkeypatch.setattr(single_host, "open_runner", StagedRunner)
    summary = jobs.run(config_for(tmp_path, images, num_devices=3, output=tmp_path / "staged.csv"))
    assert (summary.written, summary.failed) == (8, 1)
    assert (tmp_path / "staged.csv").read_bytes() == (tmp_path / "fed.csv").read_bytes()


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
    page = (Path(__file__).resolve().parent.parent / "docs" / "python-api.md").read_text()
    example = page.split("# Python API")[1].split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(tmp_path)
    make_images(tmp_path / "photos", 3)
    os.symlink(seeded_files["npy"], tmp_path / "vgg16.npy")
    namespace = {}
    exec(compile(example, "docs/python-api.md", "exec"), namespace)
    assert namespace["features"].shape == (3, 4096) and len(namespace["paths"]) == 3
    assert namespace["summary"].written == 3
    frame = __import__("pandas").read_parquet(tmp_path / "results" / "photos.parquet")
    assert list(frame["path"]) == namespace["paths"]
    np.testing.assert_array_equal(np.stack(frame["fc7"]), namespace["features"])


# --- the final merge: a full disk, a signal ------------------------------------------------------------


def wide_model(images):
    """uint8 [N, 16, 16, 3] -> float32 [N, 19200]: big rows that do not compress, so that a few fill a small disk."""
    scale = tf1.get_variable("colour/scale", [3], initializer=tf1.zeros_initializer())
    pixels = tf.cast(images, tf.float32) * scale
    return tf.tile(tf.reshape(pixels, [-1, 768]), [1, 25]) * tf.linspace(1.0, 2.0, 19200)


WIDE = engine.ModelSpec(name="wide", fn=wide_model, image_size=SIZE, load_weights=lambda: WEIGHTS,
                        output_name="wide", settings={"model": "wide"})


@pytest.mark.parametrize("output_format", ["parquet", "npy"])
def test_a_full_disk_during_the_final_merge_is_a_run_error_and_a_rerun_finishes(tmp_path, small_disk, output_format):
    if output_format == "parquet" and not small_disk.real:
        pytest.skip("needs a real small file system (root): pyarrow does not write through os.write")
    images = tmp_path / "images"
    make_images(images, 6)
    reference = tmp_path / ("reference." + output_format)
    jobs.run(config_for(tmp_path, images, model=WIDE, output=reference, output_format=output_format))
    output = small_disk.folder / ("out." + output_format)
    small_disk.leave_free(700 * 1024)  # the parts (6 x 77 KB) fit; the merged copy beside them does not
    with pytest.raises(engine.RunError, match="disk full while writing .*rows committed, rerun to resume"):
        jobs.run(config_for(tmp_path, images, model=WIDE, output=output, output_format=output_format))
    small_disk.free_space()
    summary = jobs.run(config_for(tmp_path, images, model=WIDE, output=output, output_format=output_format))
    assert (summary.written, summary.already_done) == (0, 6)
    assert output.read_bytes() == reference.read_bytes()


# --- exit statuses: a full disk is never a usage error (2 means nothing was written) -------------------


@pytest.mark.parametrize("free", [0, 4096])  # the sidecar cannot be written; the data file's header cannot
def test_a_full_disk_at_the_first_write_is_a_run_error(tmp_path, small_disk, free):
    images = tmp_path / "images"
    make_images(images, 4)
    small_disk.leave_free(free)
    with pytest.raises(engine.RunError, match="^disk full while writing .*out.csv: 0 rows committed, rerun to "
                                              "resume$"):
        jobs.run(config_for(tmp_path, images, output=small_disk.folder / "out.csv"))
    small_disk.free_space()
    assert jobs.run(config_for(tmp_path, images, output=small_disk.folder / "out.csv")).written == 4


def test_a_rerun_with_nothing_to_compute_says_so(tmp_path):
    images = tmp_path / "images"
    make_images(images, 4)
    output = jobs.run(config_for(tmp_path, images)).output
    assert jobs.run(config_for(tmp_path, images)).line() == "4 images: all already done -> %s" % output
    distribution = jobs.Distribution(kind="static", rank=0, world_size=1, shard_size=2, wait_seconds=5)
    sharded = tmp_path / "sharded.csv"
    jobs.run(config_for(tmp_path, images, output=sharded, distribution=distribution))
    again = jobs.run(config_for(tmp_path, images, output=sharded, distribution=distribution))
    assert again.line() == "4 images: all already done -> %s" % sharded


def test_a_full_disk_inside_a_shard_is_a_run_error_and_a_rerun_finishes(tmp_path, monkeypatch):
    import errno
    from parallel.output.parquet_writer import ParquetWriter
    images = tmp_path / "images"
    make_images(images, 4)
    distribution = jobs.Distribution(kind="static", rank=0, world_size=1, shard_size=2, wait_seconds=5)
    config = config_for(tmp_path, images, distribution=distribution)

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with monkeypatch.context() as patch:
        patch.setattr(ParquetWriter, "_finish", full)  # a shard's merge of its parts fills the disk
        with pytest.raises(engine.RunError, match="^disk full while writing .*shard-000000.*features.parquet: "
                                                  "[0-9]+ rows committed, rerun to resume$"):
            jobs.run(config)
    summary = jobs.run(config)
    assert (summary.written, summary.pending_shards) == (4, ())


class _StopAfter:
    """A StopRequest whose signal comes after `batches` batches, as a SIGTERM part-way would."""

    def __init__(self, batches):
        self.batches = batches

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        pass

    @property
    def signal_name(self):  # the loop asks once per batch
        self.batches -= 1
        return "SIGTERM" if self.batches <= 0 else None


@pytest.mark.parametrize("output_format", ["csv", "parquet", "npy"])
def test_a_stopped_run_resumed_gives_the_bytes_of_an_uninterrupted_one(job_images, tmp_path, monkeypatch,
                                                                       output_format):
    """Steps start at fixed positions of the job's images: an image that failed before the stop and is retried
    by the rerun does not shift which images share a step, so a model whose rows depend on that (as oneDNN's
    may, in the last bits) gives the same rows."""
    import job_child
    from outputs import job_outputs

    def run(output):
        return jobs.run(job_child.config(job_images, output, output_format, per_device_batch=2,
                                           batch_dependent=True))
    run(tmp_path / ("single." + output_format))
    resumed = tmp_path / ("resumed." + output_format)
    monkeypatch.setattr(single_host, "StopRequest", lambda: _StopAfter(8))  # a/bad.png (the 13th image) is behind
    stopped = run(resumed)
    assert stopped.interrupted and stopped.failed == 1 and stopped.written == 15
    monkeypatch.undo()
    summary = run(resumed)
    assert (summary.written, summary.failed, summary.already_done) == (8, 1, 15)
    assert job_outputs(resumed) == job_outputs(tmp_path / ("single." + output_format))
