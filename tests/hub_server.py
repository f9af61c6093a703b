"""A Hugging Face hub on loopback, answering the requests huggingface_hub makes, for the tests of downloads; the
fixture `fake_hub` (every test file has it, through conftest.py) points huggingface_hub at one.

    with FakeHub() as hub:                       # HF_ENDPOINT=hub.endpoint
        hub.add("owner/model", COMMIT, "model.safetensors", content)              # stored in LFS
        hub.add("owner/model", COMMIT, "vocab.json", text, lfs=False)            # kept in git

What huggingface_hub's `hf_hub_download` asks (file_download.py, utils/_http.py of huggingface_hub 2.3):
- HEAD <endpoint>/<repo>/resolve/<commit>/<file>. A file in LFS answers 302 to another host (the CDN: here
  another port of 127.0.0.1, so that huggingface_hub stops at the redirect and drops the Authorization header),
  with X-Repo-Commit, X-Linked-Etag (the SHA-256 of the file) and X-Linked-Size; a file in git answers 200 with
  X-Repo-Commit, ETag (its git blob SHA-1) and Content-Length. An absent file: 404 with X-Error-Code
  EntryNotFound; an unknown commit: 404 RevisionNotFound; a gated repository without the token: 401 GatedRepo.
- GET of the redirect's Location (or of the resolve URL for a file in git), with a Range header when it resumes
  a download cut short.
Every request is recorded: (method, path, Authorization header, Range header).
"""

import hashlib
import http.server
import threading

import pytest


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    """A FakeHub, HF_ENDPOINT pointing at it; huggingface_hub's settings as a fresh machine has them: an empty
    HF_HOME (tmp_path / "hf-home"), no token, online."""
    for name in ("HF_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        yield hub


def git_blob_sha1(content):
    """The SHA-1 git names a file's content by ("blob <size>\\0" then the bytes): the hub's ETag of a file in git."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class FakeHub:
    """The hub and its CDN, two HTTP servers on 127.0.0.1, serving the files `add` gives them.

    Attributes:
      endpoint: the hub's address (what HF_ENDPOINT is set to).
      requests: [(method, path, Authorization or None, Range or None)], in order, the CDN's included.
    """

    def __init__(self):
        self.requests, self._files, self._gated, self._cut = [], {}, {}, set()
        self._hub = self._serve(self._answer_hub)
        self._cdn = self._serve(self._answer_cdn)
        self.endpoint = "http://127.0.0.1:%d" % self._hub.server_port

    def add(self, repo, commit, filename, content, lfs=True, etag=None, answered_commit=None):
        """Serves `content` as `filename` of `repo` at `commit`; `etag` replaces the true hash (a lying hub),
        `answered_commit` the commit its X-Repo-Commit names."""
        digest = hashlib.sha256(content).hexdigest() if lfs else git_blob_sha1(content)
        self._files[(repo, commit, filename)] = (content, lfs, etag or digest, answered_commit or commit)

    def gate(self, repo, token):
        """Makes `repo` gated: its files are answered only with "Authorization: Bearer <token>"."""
        self._gated[repo] = "Bearer %s" % token

    def cut_once(self, filename):
        """The next GET of `filename`'s bytes sends half of them, then closes the connection."""
        self._cut.add(filename)

    def commits(self, repo):
        return {commit for name, commit, _ in self._files if name == repo}

    # ------------------------------------------------------------------------- the two servers

    def _serve(self, answer):
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_HEAD(self):
                hub.requests.append(("HEAD", self.path, self.headers.get("Authorization"), self.headers.get("Range")))
                answer(self, body=False)

            def do_GET(self):
                hub.requests.append(("GET", self.path, self.headers.get("Authorization"), self.headers.get("Range")))
                answer(self, body=True)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return server

    def _answer_hub(self, handler, body):
        parts = handler.path.lstrip("/").split("/", 4)  # owner, name, "resolve", commit, file
        if len(parts) != 5 or parts[2] != "resolve":
            return _error(handler, 404, "RepoNotFound")
        repo, commit, filename = "/".join(parts[:2]), parts[3], parts[4]
        if repo in self._gated and handler.headers.get("Authorization") != self._gated[repo]:
            return _error(handler, 401, "GatedRepo")
        if commit not in self.commits(repo):
            return _error(handler, 404, "RevisionNotFound" if self.commits(repo) else "RepoNotFound")
        if (repo, commit, filename) not in self._files:
            return _error(handler, 404, "EntryNotFound", commit)
        content, lfs, etag, answered_commit = self._files[(repo, commit, filename)]
        if lfs:
            handler.send_response(302)
            handler.send_header("Location", "http://127.0.0.1:%d/blobs/%s/%s/%s"
                                % (self._cdn.server_port, repo, commit, filename))
            handler.send_header("X-Linked-Etag", '"%s"' % etag)
            handler.send_header("X-Linked-Size", str(len(content)))
            handler.send_header("ETag", '"%s"' % git_blob_sha1(b"version https://git-lfs.github.com/spec/v1\n"))
            handler.send_header("X-Repo-Commit", answered_commit)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return None
        handler.send_response(200)
        handler.send_header("ETag", '"%s"' % etag)
        handler.send_header("X-Repo-Commit", answered_commit)
        return self._send(handler, filename, content, body)

    def _answer_cdn(self, handler, body):
        parts = handler.path.split("/", 5)  # "", "blobs", owner, name, commit, file
        key = ("/".join(parts[2:4]), parts[4], parts[5]) if len(parts) == 6 else None
        if key not in self._files:
            return _error(handler, 404, None)
        handler.send_response(200 if handler.headers.get("Range") is None else 206)
        return self._send(handler, key[2], self._files[key][0], body)

    def _send(self, handler, filename, content, body):
        """The bytes asked for (from a Range's start), cut short once if `cut_once` asked it."""
        start = int(handler.headers["Range"].split("=")[1].split("-")[0]) if handler.headers.get("Range") else 0
        if start:
            handler.send_header("Content-Range", "bytes %d-%d/%d" % (start, len(content) - 1, len(content)))
        handler.send_header("Content-Length", str(len(content) - start))
        handler.end_headers()
        if not body:
            return None
        if filename in self._cut:
            self._cut.discard(filename)
            handler.wfile.write(content[start:start + (len(content) - start) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            return None
        handler.wfile.write(content[start:])
        return None

    def close(self):
        for server in (self._hub, self._cdn):
            server.shutdown()
            server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _error(handler, status, code, commit=None):
    handler.send_response(status)
    if code:
        handler.send_header("X-Error-Code", code)
    if commit:
        handler.send_header("X-Repo-Commit", commit)
    handler.send_header("Content-Length", "0")
    handler.end_headers()
