"""The ImageNet file: Keras's cache, the download checked and stored durably, failures that leave nothing."""

import dataclasses
import hashlib
import http.server
import logging
import os
import socket
import threading

import pytest

from models import imagenet_download
from models.files import WeightsError


def vgg16_file(cache_dir=None, url=imagenet_download.VGG16_FILE.url, md5=imagenet_download.VGG16_FILE.digest):
    """`keras_file` of VGG16's file, downloaded from `url` and checked against `md5`."""
    file = dataclasses.replace(imagenet_download.VGG16_FILE, url=url, digest=md5)
    return imagenet_download.keras_file(file, cache_dir)


class _OneFileServer:
    """Serves `content` on loopback (tests never touch the network)."""

    def __init__(self, content):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/%s" % (self.server.server_port, imagenet_download.VGG16_FILE.name)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_the_keras_cache_file_is_used_without_downloading(tmp_path, monkeypatch):
    cached = tmp_path / "models" / imagenet_download.VGG16_FILE.name
    cached.parent.mkdir()
    cached.write_bytes(b"cached")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert vgg16_file(url="http://127.0.0.1:9/unreachable") == cached


def test_a_download_is_checked_and_stored_durably(tmp_path, monkeypatch):
    content = b"weights" * 1000
    events = []
    real_fsync, real_replace = imagenet_download.os.fsync, imagenet_download.os.replace
    monkeypatch.setattr(imagenet_download.os, "fsync", lambda descriptor: (
        events.append(("fsync", os.readlink("/proc/self/fd/%d" % descriptor))), real_fsync(descriptor))[1])
    monkeypatch.setattr(imagenet_download.os, "replace", lambda source, target: (
        events.append(("replace", str(source), str(target))), real_replace(source, target))[1])
    server = _OneFileServer(content)
    try:
        with pytest.raises(WeightsError, match="has MD5 .* expected 0+; nothing was kept"):
            vgg16_file(tmp_path, url=server.url, md5="0" * 32)
        assert list(tmp_path.iterdir()) == []  # neither the file nor the models/ folder it made
        assert not any(event[0] == "replace" for event in events)
        events.clear()
        path = vgg16_file(tmp_path, url=server.url, md5=hashlib.md5(content).hexdigest())
    finally:
        server.close()
    assert path == tmp_path / "models" / imagenet_download.VGG16_FILE.name and path.read_bytes() == content
    assert [p.name for p in path.parent.iterdir()] == [imagenet_download.VGG16_FILE.name]
    # The file's data are synced before the rename, and the folder after it.
    [(_, temporary), replace, folder] = events
    assert replace == ("replace", temporary, str(path)) and folder == ("fsync", str(path.parent))


def _closed_port_url():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return "http://127.0.0.1:%d/%s" % (closed.getsockname()[1], imagenet_download.VGG16_FILE.name)


def test_offline_is_one_line_pointing_to_weights_and_the_random_weights_command_and_leaves_no_folder(tmp_path,
                                                                                                    caplog):
    url = _closed_port_url()
    keras_home = tmp_path / "keras"  # like a first run: not even ~/.keras exists
    with caplog.at_level(logging.DEBUG), pytest.raises(WeightsError, match=r"offline\? pass weights=PATH") as error:
        vgg16_file(keras_home, url=url)
    assert url in str(error.value) and "\n" not in str(error.value)
    # The parameter, for the Python API; and the command that makes weights with no download at all.
    assert str(error.value).endswith("python -m models.weight_files random vgg16-random.npy")
    assert caplog.records == []  # the error is the only line the user sees
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("existing", ["nothing", "keras home", "models folder"])
def test_a_failed_download_removes_the_folders_it_made_and_only_those(tmp_path, existing):
    keras_home = tmp_path / "keras"
    if existing != "nothing":
        (keras_home / "models" if existing == "models folder" else keras_home).mkdir(parents=True)
    before = sorted(tmp_path.rglob("*"))
    server = _OneFileServer(b"not the weights")
    try:
        with pytest.raises(WeightsError, match="nothing was kept"):
            vgg16_file(keras_home, url=server.url, md5="0" * 32)
    finally:
        server.close()
    assert sorted(tmp_path.rglob("*")) == before
