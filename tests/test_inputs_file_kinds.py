"""Tars, Parquet and TFRecord files told by their names, and a folder that holds such files instead of images."""

import pytest

from parallel.inputs.file_kinds import PARQUET, TARS, TFRECORD, file_kind, files_instead_of_images


def touch(folder, *names):
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"")


def test_a_file_s_kind_is_its_ending():
    assert [file_kind(name) for name in ("a.tar", "b.PARQUET", "c.tfrecords.gz", "d.tfrec", "e.json", "f.tar.gz")] \
        == [TARS, PARQUET, TFRECORD, TFRECORD, None, None]


def test_img2dataset_s_folder_is_its_parquet_files_and_a_folder_with_an_image_anywhere_is_a_folder(tmp_path):
    """img2dataset writes 00000.parquet, 00000_stats.json, ...: --images of its folder was 'no images'."""
    touch(tmp_path, "00000.parquet", "00000_stats.json", "00001.parquet", ".cache/x.parquet", "run/out.csv",
          "run/out.csv.shards/shard-000000/features.parquet")
    kind, files = files_instead_of_images(str(tmp_path), "pq/", own=str(tmp_path / "run" / "out.csv"))
    assert (kind, sorted(files)) == (PARQUET, [str(tmp_path / "00000.parquet"), str(tmp_path / "00001.parquet")])
    touch(tmp_path, ".thumbnails/photo.png")  # an image under a hidden name is an image of a folder job, as always
    assert files_instead_of_images(str(tmp_path), "pq/") is None
    (tmp_path / ".thumbnails" / "photo.png").unlink()
    touch(tmp_path, "deep/er/photo.JPG")
    assert files_instead_of_images(str(tmp_path), "pq/") is None
    (tmp_path / "empty").mkdir()
    assert files_instead_of_images(str(tmp_path / "empty"), "empty/") is None


def test_a_folder_of_no_image_and_files_of_two_kinds_names_the_pattern_of_each(tmp_path):
    touch(tmp_path, "a.parquet", "b.parquet", "shards/0.tar", "c.tfrecord", "d.tfrecord.gz")
    with pytest.raises(ValueError) as refused:
        files_instead_of_images(str(tmp_path), "data")
    assert str(refused.value) == (
        "images=data holds no image, and 2 Parquet files and 1 tar and 2 TFRecord files: a job reads files of one "
        "kind: pass images='data/*.parquet' or images='data/**/*.tar' or images='data/*{.tfrecord,.tfrecord.gz}'")
