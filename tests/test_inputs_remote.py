"""Objects of a store through fsspec: described, listed, fetched, retried (S3 and HTTP on loopback)."""

import numpy as np
import pytest
from PIL import Image

from parallel.inputs import remote
from parallel.inputs.decode import ImageError, decode_row
from stores import store


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_SECONDS", 0.01)


def test_urls_and_paths():
    assert remote.is_url("s3://b/k.jpg") and remote.is_url("https://h/p.jpg")
    assert not remote.is_url("photos/a.jpg") and not remote.is_url("/abs/a.jpg") and not remote.is_url("c:/x")
    assert remote.locate("s3://b/photos/", "a/b.jpg") == "s3://b/photos/a/b.jpg"
    assert remote.locate("/root", "https://h/p.jpg") == "https://h/p.jpg"
    assert remote.locate("/root", "a/b.jpg") == "/root/a/b.jpg"


def test_the_endpoint_is_the_store_s_own_variable(s3_store, monkeypatch):
    assert remote.store_options("s3://b/k") == {"endpoint_url": s3_store}
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    assert remote.store_options("s3://b/k") == {"endpoint_url": "http://127.0.0.1:1"}
    assert remote.store_options("https://h/p") == {}


def test_objects_listed_in_order_with_size_time_and_etag(s3_store):
    store().pipe("bucket/listing/b.jpg", b"12345")
    store().pipe("bucket/listing/a/c.PNG", b"1")
    store().pipe("bucket/listing/readme.txt", b"1")
    listed = remote.list_objects("s3://bucket/listing/", lambda name: not name.endswith(".txt"))
    assert [(name, size) for name, size, _, _ in listed] == [("a/c.PNG", 1), ("b.jpg", 5)]
    assert all(mtime > 0 and len(etag) == 32 for _, _, mtime, etag in listed)
    size, mtime, etag = remote.describe("s3://bucket/listing/b.jpg")
    assert (size, etag) == (5, listed[1][3])
    store().pipe("bucket/listing/b.jpg", b"54321")  # replaced, same size: the etag tells
    assert remote.describe("s3://bucket/listing/b.jpg")[2] != etag
    assert remote.describe("s3://bucket/listing/none.jpg") == (-1, -1, "")
    assert remote.fetch("s3://bucket/listing/b.jpg", 1, 3) == b"43"
    with pytest.raises(ImageError) as missing:
        remote.fetch("s3://bucket/listing/none.jpg")
    assert missing.value.kind == "missing"


def test_a_failing_store_is_tried_again_then_recorded_as_unreachable(http_server, tmp_path):
    Image.fromarray(np.full((4, 4, 3), 90, np.uint8)).save(http_server.root / "a.png")
    url = http_server.url + "/a.png"
    http_server.failures["/a.png"] = remote.TRIES - 1  # throttled, then served
    images = np.zeros((1, 2, 2, 3), np.uint8)
    assert remote.decode_url_row(url, images, 0, (2, 2), "crop", 10 ** 6) is None
    assert (images[0] == 90).all() and len(http_server.refused) == remote.TRIES - 1
    Image.fromarray(np.full((4, 4, 3), 90, np.uint8)).save(tmp_path / "a.png")  # the rules of a file's decode
    from_file = np.zeros_like(images)
    decode_row(str(tmp_path / "a.png"), from_file, 0, (2, 2), "crop", 10 ** 6)
    assert (from_file == images).all()
    http_server.failures["/a.png"] = remote.TRIES
    kind, message = remote.decode_url_row(url, images, 0, (2, 2), "crop", 10 ** 6)
    assert kind == "unreachable" and "did not answer after %d tries" % remote.TRIES in message, message
    assert remote.decode_url_row(http_server.url + "/none.png", images, 0, (2, 2), "crop", 10 ** 6)[0] == "missing"


def test_a_stream_broken_mid_way_is_reopened_where_it_broke(http_server, monkeypatch):
    monkeypatch.setattr(remote, "STREAM_BLOCK", 1024)
    data = bytes(range(256)) * 20
    (http_server.root / "t.tar").write_bytes(data)
    with remote.open_stream(http_server.url + "/t.tar") as stream:
        first = stream.read(1024)
        http_server.failures["/t.tar"] = 2  # the next ranged GETs fail twice
        rest = stream.read()
    assert first + rest == data and len(http_server.refused) == 2


def test_a_plain_install_is_told_which_extra_to_install(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_fsspec(name, *args, **kwargs):
        if name.startswith("fsspec"):
            raise ImportError("No module named 'fsspec'", name="fsspec")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_fsspec)
    with pytest.raises(ValueError, match=r"reading s3://b/k needs s3fs.*pip install -e '\.\[cloud\]'"):
        remote.filesystem("s3://b/k")
