"""Stores on loopback for the tests of remote inputs: an S3 server (moto) and an HTTP server, and tars.

    s3_store (session fixture) -> S3 endpoint "http://127.0.0.1:PORT"; AWS_* variables set for this
                                 process and its children (AWS_ENDPOINT_URL_S3: the store's convention)
    http_server (fixture)     -> HTTPServer over a folder; `failures[path] = n`: the next n GETs of
                                 path answer 503 (a throttled or failing store)
    write_tars(root, tars, per_tar) -> tar paths: the images under root, in sorted order, as tars
    tar_bytes(members)        -> the bytes of a tar of members [(name, bytes)]
    upload(folder, url)       every file under folder, to the store under the prefix url

Nothing here talks to anything but 127.0.0.1.
"""

import http.server
import io
import logging
import os
import socket
import tarfile
import threading
from pathlib import Path

import pytest

BUCKET = "bucket"


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="session")
def s3_store():
    """A moto S3 server on 127.0.0.1, with BUCKET made; the AWS variables point every process at it."""
    from moto.server import ThreadedMotoServer
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    endpoint = "http://127.0.0.1:%d" % port
    saved = {name: os.environ.get(name) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                     "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL_S3")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL_S3=endpoint)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        store().mkdir(BUCKET)
        yield endpoint
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


_STORES = {}  # (process, endpoint) -> its s3fs filesystem


def store():
    """The s3fs filesystem of the test server (its endpoint from AWS_ENDPOINT_URL_S3), its listings' cache emptied.

    One a process and endpoint: a new one makes a botocore session, which reads its endpoint tables (MBs of
    JSON) and builds an SSL context: its first write cost 0.23 s of CPU here, a write through this one 0.006 s."""
    import s3fs
    key = (os.getpid(), os.environ["AWS_ENDPOINT_URL_S3"])
    if key not in _STORES:
        _STORES[key] = s3fs.S3FileSystem(endpoint_url=key[1], skip_instance_cache=True)
    _STORES[key].invalidate_cache()
    return _STORES[key]


def upload(folder, url):
    """Every file under `folder` to the store, under the prefix `url` (s3://bucket/...)."""
    fs = store()
    prefix = url[len("s3://"):].rstrip("/")
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file():
            fs.pipe(prefix + "/" + path.relative_to(folder).as_posix(), path.read_bytes())


def image_paths(root, pattern="*.png"):
    """The image files under `root` named like `pattern`, relative, sorted: a folder job's keys."""
    return sorted(path.relative_to(root).as_posix() for path in Path(root).rglob(pattern))


def write_tars(root, folder, per_tar, extra=None, pattern="*.png"):
    """The images under `root`, in sorted order, as tars of `per_tar` members in `folder`: their paths.

    Member names are the folder keys ("a/00.png"). `extra`: {tar index: [(name, bytes)]} of more
    members appended to that tar (a .json, say).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = image_paths(root, pattern)
    tars = []
    for number, start in enumerate(range(0, len(names), per_tar)):
        path = folder / ("%06d.tar" % number)
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
            for name in names[start:start + per_tar]:
                tar.add(Path(root) / name, arcname=name)
            for name, data in (extra or {}).get(number, ()):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        tars.append(path)
    return tars


def tar_bytes(members, tar_format=tarfile.GNU_FORMAT):
    """The bytes of a tar of `members` [(name, bytes)], in that order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _failing(self):
        left = self.server.failures.get(self.path, 0)
        if left:
            self.server.failures[self.path] = left - 1
            self.server.refused.append(self.path)
            self.send_error(503, "Slow Down")
            return True
        return False

    def do_GET(self):
        if self._failing():
            return
        wanted = self.headers.get("Range")
        if not wanted:
            return super().do_GET()
        path = Path(self.translate_path(self.path))  # a range, as a store answers it (SimpleHTTP ignores them)
        if not path.is_file():
            return self.send_error(404)
        data = path.read_bytes()
        first, _, last = wanted.split("=", 1)[1].partition("-")
        first, last = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
        self.send_response(206)
        self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, len(data)))
        self.send_header("Content-Length", str(last - first + 1))
        self.end_headers()
        self.wfile.write(data[first:last + 1])

    def do_HEAD(self):
        if not self._failing():
            super().do_HEAD()


def serve(root, port=0):
    """An HTTP server on 127.0.0.1:`port` (0: a free one) serving `root`, started: `.url`, `.root`,
    `.failures`, `.refused`; stop it with shutdown() and server_close()."""
    handler = lambda *args, **kwargs: _Handler(*args, directory=str(root), **kwargs)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.failures, server.refused = {}, []
    server.root, server.url = root, "http://127.0.0.1:%d" % server.server_address[1]
    # shutdown() waits for the poll under way: 0.05 s, not the default 0.5 s.
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture
def http_server(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/"site" (see `serve`)."""
    root = tmp_path / "site"
    root.mkdir()
    server = serve(root)
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
