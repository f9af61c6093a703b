"""search/image_rows.py: an image file is its indexed row only when it is one of the output's images, unchanged."""

import os

import pytest

from parallel.inputs.manifest import Manifest, manifest_path
from search.image_rows import ImageRows
from search.index import Index
from search_data import SETTINGS, clustered, write_npy


@pytest.fixture
def indexed(tmp_path):
    """An output of 40 rows img/00000.jpg ... of the images under tmp_path/images (files of a few bytes: never
    decoded here), its manifest as a job writes it, and its index. Returns (Index, images folder)."""
    images = tmp_path / "images"
    (images / "img").mkdir(parents=True)
    for row in range(40):
        (images / "img" / ("%05d.jpg" % row)).write_bytes(b"image %d" % row)
    output = tmp_path / "f.npy"
    write_npy(output, clustered(40), settings=dict(SETTINGS, images=str(images.resolve())))
    Manifest.scan(images).save(manifest_path(output))
    return Index.build(output, tmp_path / "f.index"), images


def test_an_unchanged_image_under_the_images_folder_is_its_row(indexed, tmp_path, monkeypatch):
    index, images = indexed
    rows = ImageRows(index)
    assert rows.row(images / "img" / "00005.jpg") == (5, None)
    monkeypatch.chdir(images / "img")
    assert rows.row("00006.jpg") == (6, None)  # relative to the current folder
    assert rows.row("../img/00007.jpg") == (7, None)
    (tmp_path / "favourite.jpg").symlink_to(images / "img" / "00008.jpg")  # a link to an indexed image
    assert rows.row(tmp_path / "favourite.jpg") == (8, None)


def test_what_cannot_be_proven_the_same_image_is_computed(indexed, tmp_path):
    index, images = indexed
    rows = ImageRows(index)
    image = images / "img" / "00009.jpg"
    times = image.stat()
    os.utime(image, ns=(times.st_atime_ns, times.st_mtime_ns + 1))
    assert rows.row(image) == (None, "changed since its row img/00009.jpg was computed (size or modification time)")
    (images / "img" / "00010.jpg").write_bytes(b"another image, as long")  # size
    assert rows.row(images / "img" / "00010.jpg")[0] is None
    (tmp_path / "copy.jpg").write_bytes((images / "img" / "00011.jpg").read_bytes())
    assert rows.row(tmp_path / "copy.jpg") == (None, "not under the indexed images folder %s" % images.resolve())
    (images / "new.jpg").write_bytes(b"new")
    assert rows.row(images / "new.jpg") == (None, "new.jpg is not a row of the index")
    assert rows.row(images / "img" / "00012.jpg") == (12, None)
    os.unlink(manifest_path(tmp_path / "f.npy"))  # no manifest: nothing to compare with
    assert ImageRows(index).row(images / "img" / "00012.jpg") == (
        None, "the output's manifest does not record img/00012.jpg: it cannot be proven unchanged")
    for settings in ({"input": "tars"}, {"images": "s3://bucket/images"}, {"images": None}):
        index.meta["source"]["settings"] = dict(dict(SETTINGS, images=str(images.resolve())), **settings)
        assert ImageRows(index).row(images / "img" / "00012.jpg") == (
            None, "the indexed output's images are not a folder of files")
