"""search/indexed_images.py through the service's /api/image: only the image indexed is served. A link swapped in
for an indexed image (to a file outside the images folder, or to another image in it), a file changed since it was
indexed, a file that is no image, a tar swapped for a link, an object replaced: each refused with its status and
one line, and nothing of the file swapped in is sent."""

import os
import tarfile

import pytest

from parallel.inputs.manifest import Manifest, manifest_path
from search.index import Index
from search.service import Service
from search_data import SETTINGS, clustered, write_npy
from services import Running, png

SECRET = b"not for the web: the service's user's private file"


@pytest.fixture
def folder_job(tmp_path):
    """An output of 10 rows img/00000.jpg ... whose first 4 are PNG files under tmp_path/images, the manifest a
    job writes beside it, and its index; a private file outside the images folder. Returns (Index, images)."""
    images = tmp_path / "images"
    (images / "img").mkdir(parents=True)
    for row in range(4):
        (images / "img" / ("%05d.jpg" % row)).write_bytes(png((40 + 4 * row, 30), row))
    (tmp_path / "secret.txt").write_bytes(SECRET)
    output = tmp_path / "f.npy"
    write_npy(output, clustered(10), settings=dict(SETTINGS, images=str(images.resolve())))
    Manifest.scan(images).save(manifest_path(output))
    return Index.build(output, tmp_path / "f.index"), images


def _image(service, row):
    return service.request("/api/image?row=%d" % row)


def _refused(answer, status, *words):
    got, body, headers = answer
    assert got == status and isinstance(body, dict) and body == {"status": status, "error": body["error"]}, body
    assert "\n" not in body["error"] and all(word in body["error"] for word in words), body["error"]
    assert "not for the web" not in body["error"]
    assert headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"


def _swap_for_link(path, target):
    """`path` replaced by a symbolic link to `target`, keeping nothing of what it was."""
    os.unlink(path)
    os.symlink(target, path)


def test_an_indexed_image_unchanged_is_served(folder_job):
    index, images = folder_job
    with Running(Service(index)) as service:
        status, data, headers = _image(service, 1)
    assert status == 200 and data == (images / "img" / "00001.jpg").read_bytes()
    assert headers["Content-Type"] == "image/png" and headers["X-Content-Type-Options"] == "nosniff"


def test_a_link_swapped_in_for_an_indexed_image_is_refused(folder_job, tmp_path):
    index, images = folder_job
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(png((40, 30), 7))  # an image, so only the folder check refuses it
    _swap_for_link(images / "img" / "00000.jpg", tmp_path / "secret.txt")
    _swap_for_link(images / "img" / "00001.jpg", outside)
    _swap_for_link(images / "img" / "00002.jpg", images / "img" / "00003.jpg")  # another indexed image
    os.utime(images / "img" / "00003.jpg", ns=(0, 10**18))  # its time is surely not row 2's
    with Running(Service(index)) as service:
        _refused(_image(service, 0), 404, "the image of row 0 cannot be read", "outside the folder")
        _refused(_image(service, 1), 404, "the image of row 1 cannot be read", "outside the folder")
        _refused(_image(service, 2), 409, "the image of row 2 changed since it was indexed",
                 "size or modification time")


def test_a_file_changed_since_it_was_indexed_is_409_and_one_that_is_no_image_404(folder_job):
    index, images = folder_job
    first, second, third = (images / "img" / ("%05d.jpg" % row) for row in range(3))
    first.write_bytes(first.read_bytes() + b"more")  # its size
    times = second.stat()
    os.utime(second, ns=(times.st_atime_ns, times.st_mtime_ns + 1))  # its time only, by a nanosecond
    recorded = third.stat()
    third.write_bytes(SECRET.ljust(recorded.st_size, b" "))  # no image, with the size and time recorded
    os.utime(third, ns=(recorded.st_atime_ns, recorded.st_mtime_ns))
    with Running(Service(index)) as service:
        for row in (0, 1):
            _refused(_image(service, row), 409, "the image of row %d changed since it was indexed" % row)
        _refused(_image(service, 2), 404, "the image of row 2 cannot be read", "not an image")


def test_what_is_not_a_regular_file_or_not_recorded_is_404(folder_job, tmp_path):
    index, images = folder_job
    (images / "img" / "00005.jpg").write_bytes(png((40, 30), 5))  # a row's file put there after the job
    os.unlink(images / "img" / "00000.jpg")
    os.mkfifo(images / "img" / "00000.jpg")  # never opened: reading it would wait for a writer
    with Running(Service(index)) as service:
        _refused(_image(service, 5), 404, "the output's manifest does not record img/00005.jpg")
        _refused(_image(service, 6), 404, "the image of row 6 cannot be read", "No such file")  # indexed, no file
        _refused(_image(service, 0), 404, "not a regular file")
        os.unlink(manifest_path(tmp_path / "f.npy"))
    with Running(Service(index)) as service:  # read on the first image asked: none now
        _refused(_image(service, 1), 404, "the output's manifest does not record img/00001.jpg",
                 "the output has no manifest")


def test_a_link_swapped_in_between_the_check_and_the_open_is_never_followed(folder_job, tmp_path, monkeypatch):
    """The swap made at the worst moment: once the file's real path was found inside the folder and stat'ed."""
    index, images = folder_job
    image = str(images.resolve() / "img" / "00000.jpg")
    real_stat = os.stat

    def stat_then_swap(path, *args, **kwargs):
        status = real_stat(path, *args, **kwargs)
        if os.fspath(path) == image and not os.path.islink(image):
            _swap_for_link(image, tmp_path / "secret.txt")
        return status

    with Running(Service(index)) as service:
        monkeypatch.setattr(os, "stat", stat_then_swap)
        answer = _image(service, 0)
    assert answer[0] == 404 and SECRET not in str(answer[1]).encode()


def test_a_tar_swapped_for_a_link_is_refused(tmp_path):
    from parallel.inputs.tars import MEMBERS_SUFFIX, Entry, member_key, write_index
    from parallel.output import open_writer
    data = png((30, 20), 5)
    (tmp_path / "a.png").write_bytes(data)
    shard = tmp_path / "shard.tar"
    with tarfile.open(shard, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(tmp_path / "a.png", arcname="a.png")
    with tarfile.open(shard) as tar:
        info = tar.getmember("a.png")
    key = member_key("a.png", str(shard))
    write_index(str(tmp_path / "f.npy") + MEMBERS_SUFFIX, [Entry(key, info.offset_data, info.size)])
    recorded = shard.stat()
    Manifest([str(shard)], [recorded.st_size], [recorded.st_mtime_ns], [""]).save(manifest_path(tmp_path / "f.npy"))
    writer = open_writer(tmp_path / "f.npy", format="npy", feature_size=64, settings=SETTINGS)
    writer.write([key] + ["img/%d.jpg" % row for row in range(9)], clustered(10))
    writer.close()
    private = tmp_path / "private.tar"  # a file of the same layout elsewhere: the same range holds an image
    with tarfile.open(private, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(tmp_path / "a.png", arcname="a.png")
    with Running(Service(Index.build(tmp_path / "f.npy", tmp_path / "f.index"))) as service:
        assert _image(service, 0)[1] == data
        _swap_for_link(shard, private)
        _refused(_image(service, 0), 409, "the image of row 0 changed since it was indexed")


def test_an_object_replaced_since_it_was_indexed_is_409(tmp_path, s3):
    from parallel.inputs.remote import describe
    from parallel.output import open_writer
    url = s3.url("photos/a.png")
    s3.filesystem.pipe_file("%s/photos/a.png" % s3.bucket, png((30, 20), 6))
    Manifest([url], *([value] for value in describe(url))).save(manifest_path(tmp_path / "f.npy"))
    writer = open_writer(tmp_path / "f.npy", format="npy", feature_size=64, settings=SETTINGS)
    writer.write([url] + ["img/%d.jpg" % row for row in range(9)], clustered(10))
    writer.close()
    with Running(Service(Index.build(tmp_path / "f.npy", tmp_path / "f.index"))) as service:
        assert _image(service, 0)[0] == 200
        s3.filesystem.pipe_file("%s/photos/a.png" % s3.bucket, png((30, 20), 7))
        _refused(_image(service, 0), 409, "the image of row 0 changed since it was indexed")
