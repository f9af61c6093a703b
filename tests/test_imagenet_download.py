"""The ImageNet file: Keras's cache, the download checked and stored durably, failures that leave nothing."""

import hashlib
import http.server
import socket
import threading

import pytest

from models import imagenet_download
from models.weight_files import WeightsError


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
        self.url = "http://127.0.0.1:%d/%s" % (self.server.server_port, imagenet_download.IMAGENET_FILE)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_the_keras_cache_file_is_used_without_downloading(tmp_path, monkeypatch):
    cached = tmp_path / "models" / imagenet_download.IMAGENET_FILE
    cached.parent.mkdir()
    cached.write_bytes(b"cached")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert imagenet_download.imagenet_weights(url="http://127.0.0.1:9/unreachable") == cached


def test_a_download_is_checked_and_stored_atomically(tmp_path):
    content = b"weights" * 1000
    server = _OneFileServer(content)
    try:
        with pytest.raises(WeightsError, match="has MD5 .* expected 0+; nothing was kept"):
            imagenet_download.imagenet_weights(tmp_path, url=server.url, md5="0" * 32)
        assert list((tmp_path / "models").iterdir()) == []
        path = imagenet_download.imagenet_weights(tmp_path, url=server.url, md5=hashlib.md5(content).hexdigest())
    finally:
        server.close()
    assert path == tmp_path / "models" / imagenet_download.IMAGENET_FILE and path.read_bytes() == content
    assert [p.name for p in path.parent.iterdir()] == [imagenet_download.IMAGENET_FILE]


def test_offline_is_one_line_pointing_to_weights_path(tmp_path):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(WeightsError, match=r"offline\? pass --weights PATH") as error:
        imagenet_download.imagenet_weights(tmp_path, url="http://127.0.0.1:%d/x.h5" % port)
    assert "\n" not in str(error.value)
    assert list((tmp_path / "models").iterdir()) == []
