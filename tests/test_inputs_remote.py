"""Objects of a store through fsspec: described, listed, fetched, retried (S3 and HTTP on loopback)."""

import numpy as np
import pytest
from PIL import Image

from parallel.inputs import locations, remote
from parallel.locations import is_url
from parallel.inputs.decode import ImageError, decode_row
import stores
from stores import store, tar_bytes


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(remote, "BACKOFF_SECONDS", 0.01)


def test_urls_and_paths():
    assert is_url("s3://b/k.jpg") and is_url("https://h/p.jpg")
    assert not is_url("photos/a.jpg") and not is_url("/abs/a.jpg") and not is_url("c:/x")
    assert locations.locate("s3://b/photos/", "a/b.jpg") == "s3://b/photos/a/b.jpg"
    assert locations.locate("/root", "https://h/p.jpg") == "https://h/p.jpg"
    assert locations.locate("/root", "a/b.jpg") == "/root/a/b.jpg"


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
    monkeypatch.setattr(locations, "STREAM_BLOCK", 1024)
    data = bytes(range(256)) * 20
    (http_server.root / "t.tar").write_bytes(data)
    with locations.open_stream(http_server.url + "/t.tar") as stream:
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


# --- pinned versions: an object replaced since it was listed is not read ----------------------------------


def png(value):
    """The bytes of a 4x4 PNG of one grey `value`."""
    import io
    buffer = io.BytesIO()
    Image.fromarray(np.full((4, 4, 3), value, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def no_waits(monkeypatch):
    """The waits between tries, recorded instead of slept: [seconds, ...]."""
    waits = []
    monkeypatch.setattr(remote.time, "sleep", waits.append)
    return waits


def test_an_image_object_replaced_after_it_was_listed_fails_as_changed_and_is_not_tried_again(s3_store, monkeypatch):
    from parallel.inputs.reader import ImageReader
    store().pipe("bucket/pinned/a.png", png(10))
    store().pipe("bucket/pinned/b.png", png(20))
    listed = remote.list_objects("s3://bucket/pinned/", lambda name: True)
    store().pipe("bucket/pinned/a.png", png(30))  # replaced between the listing and the fetch
    waits = no_waits(monkeypatch)
    paths, versions = [name for name, _, _, _ in listed], [etag for _, _, _, etag in listed]
    with ImageReader("s3://bucket/pinned/", paths, batch_size=2, size=(2, 2), versions=versions) as reader:
        (batch,) = list(reader)
    assert batch.paths == ["b.png"] and (batch.features_of_paths(batch.images) == 20).all()
    assert [(failure.path, failure.kind) for failure in batch.failures] == [("a.png", "changed")]
    assert "changed since the job listed it (ETag %s, now %s)" % (versions[0], remote.describe(
        "s3://bucket/pinned/a.png")[2]) in batch.failures[0].message
    assert waits == []  # the object is there, and another: never tried again
    with ImageReader("s3://bucket/pinned/", paths, batch_size=2, size=(2, 2)) as reader:  # no versions: as it is
        assert [(batch.images == 30).all() for batch in reader] == [False]
    with pytest.raises(ValueError, match="one version per path"):
        ImageReader("s3://bucket/pinned/", paths, batch_size=2, versions=versions[:1])


def replace_after_first_read(monkeypatch, replace):
    """Wraps remote.fetch: `replace()` runs once, right after the first ranged read returns (a deterministic
    moment in the middle of a tar being read). Returns the list of the (start, stop) read."""
    reads = []
    real = remote.fetch

    def fetch(url, start=None, stop=None, version=None):
        data = real(url, start, stop, version)
        reads.append((start, stop))
        if len(reads) == 1:
            replace()
        return data
    monkeypatch.setattr(remote, "fetch", fetch)
    return reads


def test_a_tar_in_a_store_replaced_while_it_is_read_stops_at_the_change_with_object_changed(s3_store, monkeypatch):
    from parallel.inputs import tar_stream
    from parallel.inputs.streams import StreamReader
    monkeypatch.setattr(locations, "STREAM_BLOCK", 4096)  # the tar in several ranged GETs
    old = tar_bytes([("%d.png" % number, png(10) + bytes(1500)) for number in range(4)])
    new = tar_bytes([("%d.png" % number, png(90) + bytes(1500)) for number in range(4)])
    store().pipe("bucket/pinned/t.tar", old)
    recorded = remote.describe("s3://bucket/pinned/t.tar")[2]
    reads = replace_after_first_read(monkeypatch, lambda: store().pipe("bucket/pinned/t.tar", new))
    items, index = [], []
    with pytest.raises(remote.ObjectChanged) as changed:
        for item in tar_stream.stream_members("s3://bucket/pinned/t.tar", index):
            items.append(item)
    assert (changed.value.url, changed.value.recorded) == ("s3://bucket/pinned/t.tar", recorded)
    assert changed.value.now == remote.describe("s3://bucket/pinned/t.tar")[2] != recorded
    assert len(reads) == 1 and 0 < len(items) < 4  # what came before the change, of the old tar only
    assert all(data == png(10) + bytes(1500) for _, data in items)
    # The version the job recorded, given: the replaced tar is refused when opened, nothing read.
    monkeypatch.undo()
    with pytest.raises(remote.ObjectChanged, match="t.tar changed since the job listed it"):
        list(tar_stream.stream_members("s3://bucket/pinned/t.tar", [], version=recorded))
    # Through the stream reader, the change reaches its caller as itself (the job layer catches it).
    store().pipe("bucket/pinned/t.tar", old)
    monkeypatch.setattr(locations, "STREAM_BLOCK", 4096)
    replace_after_first_read(monkeypatch, lambda: store().pipe("bucket/pinned/t.tar", new))
    with pytest.raises(remote.ObjectChanged):
        members = tar_stream.stream_members("s3://bucket/pinned/t.tar", [])
        with StreamReader(members, batch_size=1, size=(2, 2)) as reader:
            list(reader)


class _Versioned(stores._Handler):
    """An HTTP server's handler that sends each file's ETag and honours If-Match (412), as stores do."""

    def _etag(self):
        import hashlib
        from pathlib import Path
        path = Path(self.translate_path(self.path))
        return '"%s"' % hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None

    def end_headers(self):
        if self._etag():
            self.send_header("ETag", self._etag())
        super().end_headers()

    def do_GET(self):
        wanted = self.headers.get("If-Match")
        if wanted and wanted != self._etag():
            return self.send_error(412, "Precondition Failed")
        return super().do_GET()


@pytest.fixture
def versioned_server(tmp_path):
    """An HTTP server on 127.0.0.1 with ETags and If-Match, over tmp_path/"versioned"."""
    import http.server
    import threading
    root = tmp_path / "versioned"
    root.mkdir()
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *args, **kwargs: _Versioned(*args, directory=str(root), **kwargs))
    server.failures, server.refused, server.root = {}, [], root
    server.url = "http://127.0.0.1:%d" % server.server_address[1]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_that_gives_only_a_last_modified_time_is_asked_if_unmodified_since(http_server, monkeypatch):
    import aiohttp
    (http_server.root / "a.png").write_bytes(png(10))
    recorded = remote.describe(http_server.url + "/a.png")[2]
    asked = []
    real = aiohttp.ClientSession._request

    def request(session, method, url, **options):
        asked.append((options.get("headers") or {}).copy())
        return real(session, method, url, **options)
    monkeypatch.setattr(aiohttp.ClientSession, "_request", request)
    assert remote.fetch(http_server.url + "/a.png", version=recorded) == png(10)
    assert recorded.endswith(" GMT") and asked[-1] == {"If-Unmodified-Since": recorded}


def test_over_https_reads_ask_for_the_recorded_etag_too(versioned_server, monkeypatch):
    from parallel.inputs import tar_stream
    (versioned_server.root / "a.png").write_bytes(png(10))
    url = versioned_server.url + "/a.png"
    recorded = remote.describe(url)[2]
    assert recorded and remote.fetch(url, version=recorded) == png(10)
    (versioned_server.root / "a.png").write_bytes(png(30))
    with pytest.raises(remote.ObjectChanged):
        remote.fetch(url, version=recorded)
    images = np.zeros((1, 2, 2, 3), np.uint8)
    assert remote.decode_url_row(url, images, 0, (2, 2), "crop", 10 ** 6, version=recorded)[0] == "changed"
    assert remote.decode_url_row(url, images, 0, (2, 2), "crop", 10 ** 6) is None and (images == 30).all()
    monkeypatch.setattr(locations, "STREAM_BLOCK", 4096)
    (versioned_server.root / "t.tar").write_bytes(tar_bytes([("%d.png" % n, png(10) + bytes(1500)) for n in range(4)]))
    replace_after_first_read(monkeypatch, lambda: (versioned_server.root / "t.tar").write_bytes(
        tar_bytes([("%d.png" % n, png(90) + bytes(1500)) for n in range(4)])))
    with pytest.raises(remote.ObjectChanged):
        list(tar_stream.stream_members(versioned_server.url + "/t.tar", []))


# --- bounded waits: ours are the only retries ----------------------------------------------------------------


class FailingStore:
    """A server on 127.0.0.1 that fails every request: "503" answers S3's SlowDown at once, "silent" accepts
    and never answers. After `ceiling` requests it answers 404 at once, so that a client retrying far
    more than it should fails its test in moments instead of waiting minutes. `settled()` counts them."""

    def __init__(self, mode, ceiling=40):
        import socket
        import threading
        self.mode, self.ceiling, self.requests, self.held = mode, ceiling, 0, []
        self.markers, self.accepted = set(), threading.Condition()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def settled(self):
        """The requests so far, counting every connection a client opened before this call, even one this server
        has not accepted yet (a silent try's client gives up without waiting for that): a marker connection of
        ours, queued behind them, is accepted after them, since a listener accepts in the order of arrival."""
        import socket
        from hangs import HANG_SECONDS
        with socket.socket() as marker:
            marker.bind(("127.0.0.1", 0))
            with self.accepted:
                self.markers.add(marker.getsockname())
            marker.connect(self.listener.getsockname())
            with self.accepted:
                if not self.accepted.wait_for(lambda: marker.getsockname() not in self.markers, HANG_SECONDS):
                    raise AssertionError("the marker connection was not accepted in %d s" % HANG_SECONDS)
                return self.requests

    def _serve(self):
        while True:
            try:
                connection, peer = self.listener.accept()
            except OSError:
                return
            with self.accepted:
                marker = peer in self.markers
                self.markers.discard(peer)
                self.requests += not marker
                self.accepted.notify_all()
            if marker:
                connection.close()
                continue
            if self.mode == "silent" and self.requests <= self.ceiling:
                self.held.append(connection)  # read, never answered
                continue
            head = connection.recv(65536)
            status, body = ("503 Slow Down", b"<Error><Code>SlowDown</Code><Message>Reduce your request rate"
                                              b"</Message></Error>") if self.requests <= self.ceiling else \
                ("404 Not Found", b"<Error><Code>NoSuchKey</Code><Message>none</Message></Error>")
            connection.sendall(b"HTTP/1.1 %s\r\nContent-Type: application/xml\r\nContent-Length: %d\r\n"
                               b"Connection: close\r\n\r\n%s" % (status.encode(), len(body),
                                                                     b"" if head.startswith(b"HEAD") else body))
            connection.close()

    def close(self):
        self.listener.close()
        for connection in self.held:
            connection.close()


@pytest.mark.parametrize("scheme", ["s3", "http"])
@pytest.mark.parametrize("mode", ["503", "silent"])
def test_a_store_that_fails_every_get_is_given_up_after_our_tries_only(s3_store, monkeypatch, mode, scheme):
    """What bounds the time a failing store costs, counted rather than timed: the requests (one a try), the waits
    between tries (recorded: time.sleep is patched), and each request's read timeout as its client holds it."""
    failing = FailingStore(mode)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", failing.url)
    monkeypatch.setattr(remote, "READ_TIMEOUT_SECONDS", 0.3, raising=False)  # a try of the silent store: 0.3 s
    url = "s3://bucket/k.png" if scheme == "s3" else failing.url + "/k.png"
    clients = []
    real_filesystem = remote.filesystem
    monkeypatch.setattr(remote, "filesystem", lambda url: clients.append(real_filesystem(url)) or clients[-1])
    waits = no_waits(monkeypatch)  # anyone's time.sleep in this process: ours, or a store client's own backoff
    try:
        for pinned in ({}, {"version": "0123456789abcdef0123456789abcdef"}):  # and pinned to a recorded ETag
            before = failing.settled()
            with pytest.raises(ImageError) as failed:
                remote.fetch(url, **pinned)
            assert failed.value.kind == "unreachable", failed.value
            assert failing.settled() - before == remote.TRIES  # one request a try: no retries inside ours
    finally:
        failing.close()
    backoff = [remote.BACKOFF_SECONDS * 2 ** attempt for attempt in range(remote.TRIES - 1)]
    assert waits == backoff + backoff  # our waits between tries, and no wait of the stores' own
    assert clients and all(read_timeout(fs) == 0.3 for fs, _ in clients)  # a silent try ends after 0.3 s


def read_timeout(fs):
    """The read timeout of the requests fsspec filesystem `fs` makes: botocore's for S3, aiohttp's for HTTP."""
    if hasattr(fs, "client_kwargs") and "timeout" in fs.client_kwargs:  # fsspec's HTTPFileSystem: aiohttp's
        return fs.client_kwargs["timeout"].sock_read
    return fs.s3.meta.config.read_timeout  # s3fs: its botocore client, made by the first request
