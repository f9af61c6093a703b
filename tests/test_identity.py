"""Job identity and freezing on one process: an output belongs to one folder and the images it held."""

import csv
import os

import pytest
import tensorflow as tf
from PIL import Image

from colour_jobs import SIZE, WEIGHTS, StopAfter, colour_model, config_for, make_images, read_rows
from parallel import engine, jobs
from parallel.jobs import distributed

tf1 = tf.compat.v1


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


def _flip_middle_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("state", ["stopped", "finished"])
@pytest.mark.parametrize("output_format", ["csv", "npy"])
def test_a_damaged_manifest_removed_as_told_is_made_anew_and_every_row_of_the_same_images_is_kept(
        tmp_path, monkeypatch, state, output_format):
    """Refused in one line saying to remove it; removed, it is frozen again from the folder, and the rows the ledger
    proves computed from the same images are kept: no second refusal, nothing computed twice."""
    images = tmp_path / "images"
    make_images(images, 8, bad={"a/img_03.png"})
    output = tmp_path / "out" / ("features." + output_format)
    config = config_for(tmp_path, images, output=output, output_format=output_format, shard_size=2)
    with monkeypatch.context() as patch:
        if state == "stopped":  # in shard 2: shards 0 and 1 in the output
            patch.setattr(distributed, "StopRequest", lambda: StopAfter(3))
        first = jobs.run(config)
    manifest = output.with_name(output.name + ".manifest.parquet")
    _flip_middle_byte(manifest)
    with pytest.raises(ValueError, match=r"manifest.parquet is damaged .*: remove it and rerun") as refused:
        jobs.run(config)
    assert "\n" not in str(refused.value)
    manifest.unlink()
    summary = jobs.run(config)
    assert (summary.written, summary.already_done, summary.failed) == (7 - first.written, first.written, 1)
    fresh = tmp_path / "fresh" / output.name
    jobs.run(config_for(tmp_path, images, output=fresh, output_format=output_format, shard_size=2))
    assert output.read_bytes() == fresh.read_bytes()


def test_a_manifest_made_anew_from_a_folder_changed_since_writes_the_output_afresh(tmp_path):
    """The rows of an image changed after they were written are not those of the image now: without the manifest
    that recorded it, the ledger's digest of each shard's images says so, and the output is written afresh."""
    images, names, output = _job(tmp_path, count=6, shard_size=2)
    Image.new("RGB", (20, 30), (1, 2, 3)).save(images / names[3])  # in shard 1, after its row was written
    output.with_name(output.name + ".manifest.parquet").unlink()
    summary = jobs.run(config_for(tmp_path, images, shard_size=2))
    assert (summary.written, summary.already_done) == (6, 0)
    fresh = tmp_path / "fresh.csv"
    jobs.run(config_for(tmp_path, images, output=fresh, shard_size=2))
    assert output.read_bytes() == fresh.read_bytes()


def test_a_missing_manifest_with_other_settings_is_refused_with_nothing_written(tmp_path):
    images, _, output = _job(tmp_path, count=3)
    manifest = output.with_name(output.name + ".manifest.parquet")
    manifest.unlink()
    before = sorted(output.parent.iterdir())
    with pytest.raises(ValueError, match=r"written with other settings \(resize='crop', not 'stretch'\)"):
        jobs.run(config_for(tmp_path, images, resize="stretch"))
    assert sorted(output.parent.iterdir()) == before


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
    monkeypatch.setattr(distributed, "StopRequest", lambda: StopAfter(2))
    jobs.run(job_child.config(job_images, output, "csv", per_device_batch=2))
    monkeypatch.undo()
    with caplog.at_level("WARNING", logger="parallel"):
        summary = jobs.run(job_child.config(job_images, output, "csv", per_device_batch=3))
    assert summary.already_done == 4
    assert "was started with another step geometry (per_device_batch=2, this process 3 (--batch-size))" in caplog.text
