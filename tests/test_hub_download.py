"""Hugging Face hub files: the URL and identity of a pinned file, the hub's cache layout, the checked download
(against the pinned SHA-256, or the hub's X-Linked-Etag) on a loopback server, never the network."""

import dataclasses
import hashlib
import http.server
import socket
import threading

import pytest

from models import hub_download
from models.files import WeightsError

CONTENT = b"safetensors bytes" * 500
SHA256 = hashlib.sha256(CONTENT).hexdigest()
FILE = hub_download.HubFile("owner/model", "0123456789abcdef0123456789abcdef01234567", "model.safetensors",
                            sha256=SHA256, what="test weights (8 kB)",
                            random_command="python -m models.weight_files random x.safetensors")


class _Hub:
    """A hub on loopback: `resolve` URLs redirect (302) to the blob, with `etag` as X-Linked-Etag; the blob is
    `content`. Records the requests."""

    def __init__(self, content=CONTENT, etag=SHA256, git_etag=None):
        """`git_etag`: a file the hub keeps in git, not LFS: `resolve` answers the file itself, with this ETag."""
        requests = self.requests = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self, body):
                requests.append((self.command, self.path))
                if "/resolve/" in self.path and git_etag is not None:
                    self.send_response(200)
                    self.send_header("ETag", '"%s"' % git_etag)
                    self.send_header("Content-Length", str(len(content)))
                    self.end_headers()
                    if body:
                        self.wfile.write(content)
                    return
                if "/resolve/" in self.path:
                    self.send_response(302)
                    self.send_header("Location", "/blob")
                    if etag is not None:
                        self.send_header("X-Linked-Etag", '"%s"' % etag)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                if body:
                    self.wfile.write(content)

            def do_GET(self):
                self._answer(True)

            def do_HEAD(self):
                self._answer(False)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = "http://127.0.0.1:%d" % self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hub():
    servers = []

    def start(**options):
        servers.append(_Hub(**options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_url_identity_and_the_checks_of_a_pin():
    assert FILE.url == ("https://huggingface.co/owner/model/resolve/0123456789abcdef0123456789abcdef01234567/"
                        "model.safetensors")
    assert FILE.identity == ("hub owner/model@0123456789abcdef0123456789abcdef01234567 model.safetensors, sha256 "
                             + SHA256)
    assert "X-Linked-Etag" in dataclasses.replace(FILE, sha256=None).identity
    with pytest.raises(ValueError, match="revision='main'; expected a commit id"):
        dataclasses.replace(FILE, revision="main")
    with pytest.raises(ValueError, match="sha256='abc'"):
        dataclasses.replace(FILE, sha256="abc")


def test_the_cache_is_huggingface_hub_s(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_download.hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    assert hub_download.cache_path(FILE) == (tmp_path / "cache" / "models--owner--model" / "snapshots"
                                             / FILE.revision / "model.safetensors")


def test_a_cached_file_is_used_without_the_network(tmp_path):
    cached = hub_download.cache_path(FILE, tmp_path)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"cached")
    unreachable = dataclasses.replace(FILE, endpoint="http://127.0.0.1:9")
    assert hub_download.hub_file(unreachable, tmp_path) == cached


def test_a_pinned_download_follows_the_redirect_and_is_checked(tmp_path, hub):
    server = hub(etag="0" * 64)  # a pinned SHA-256 does not ask the hub
    path = hub_download.hub_file(dataclasses.replace(FILE, endpoint=server.endpoint), tmp_path)
    assert path == hub_download.cache_path(FILE, tmp_path) and path.read_bytes() == CONTENT
    assert [command for command, _ in server.requests] == ["GET", "GET"]
    with pytest.raises(WeightsError, match="has SHA-256 .* expected 0+; nothing was kept"):
        hub_download.hub_file(dataclasses.replace(FILE, endpoint=server.endpoint, sha256="0" * 64), tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_without_a_pin_the_download_is_checked_against_the_hub_s_x_linked_etag(tmp_path, hub):
    unpinned = dataclasses.replace(FILE, sha256=None)
    server = hub()
    path = hub_download.hub_file(dataclasses.replace(unpinned, endpoint=server.endpoint), tmp_path)
    assert path.read_bytes() == CONTENT and server.requests[0] == ("HEAD", "/owner/model/resolve/%s/model.safetensors"
                                                                   % FILE.revision)
    lying = hub(etag="f" * 64)
    with pytest.raises(WeightsError, match="expected f+; nothing was kept"):
        hub_download.hub_file(dataclasses.replace(unpinned, endpoint=lying.endpoint), tmp_path / "lying")
    silent = hub(etag=None)
    with pytest.raises(WeightsError, match="the hub gave no hash .* none is pinned: nothing was downloaded"):
        hub_download.hub_file(dataclasses.replace(unpinned, endpoint=silent.endpoint), tmp_path / "silent")
    assert [command for command, _ in silent.requests] == ["HEAD"]
    assert not (tmp_path / "lying").exists() and not (tmp_path / "silent").exists()


@pytest.mark.parametrize("sha256", [SHA256, None])
def test_offline_is_one_line_offering_a_path_and_the_random_command(tmp_path, sha256):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        endpoint = "http://127.0.0.1:%d" % closed.getsockname()[1]
    with pytest.raises(WeightsError, match=r"cannot download the test weights \(8 kB\) .*offline\? pass "
                                           r"weights=PATH") as error:
        hub_download.hub_file(dataclasses.replace(FILE, endpoint=endpoint, sha256=sha256), tmp_path / "cache")
    assert "\n" not in str(error.value) and str(error.value).endswith(FILE.random_command)
    assert list(tmp_path.iterdir()) == []


def test_a_file_the_hub_keeps_in_git_is_checked_against_its_git_blob_sha1(tmp_path, hub):
    """vocab.json and merges.txt are not in LFS: the hub's ETag is their git blob SHA-1 (`git hash-object`)."""
    vocabulary = b'{"a</w>": 0}\n' * 100
    blob = hashlib.sha1(b"blob %d\0" % len(vocabulary) + vocabulary).hexdigest()
    unpinned = dataclasses.replace(FILE, filename="vocab.json", sha256=None)
    server = hub(content=vocabulary, git_etag=blob)
    path = hub_download.hub_file(dataclasses.replace(unpinned, endpoint=server.endpoint), tmp_path)
    assert path.read_bytes() == vocabulary and [command for command, _ in server.requests] == ["HEAD", "GET"]
    changed = hub(content=vocabulary + b" ", git_etag=blob)
    with pytest.raises(WeightsError, match="has git blob SHA-1 [0-9a-f]{40}, expected %s; nothing was kept" % blob):
        hub_download.hub_file(dataclasses.replace(unpinned, endpoint=changed.endpoint), tmp_path / "changed")
    assert not (tmp_path / "changed").exists()
