"""Files of the Hugging Face hub at a pinned revision: found in the hub's cache, or downloaded into it and checked
by SHA-256.

    file = HubFile("facebook/dinov2-small", "ed25f3a31f01632728cabb09d1542f84ab7b0056", "model.safetensors",
                   sha256="ae1e99fc...", what="DINOv2 ViT-S/14 weights (88 MB)", random_command="python -m ...")
    path = hub_file(file)   # <cache>/models--facebook--dinov2-small/snapshots/ed25f3a3.../model.safetensors

The cache is the one `huggingface_hub` uses ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub),
in its layout, so that a file it already downloaded at that revision is found without a download; a file
downloaded here is a plain file where huggingface_hub keeps a link to its blob, which it reads alike.

The revision is a commit id (40 hex digits), never a branch: a branch moves, and the features with it. The
SHA-256 is the file's, from public sources (docs/models.md names them); a file whose SHA-256 could not be found
(`sha256=None`) is checked against the hub's own answer instead, as huggingface_hub checks a download: for a
file stored in LFS the hub sends its SHA-256 as the `X-Linked-Etag` header of the `resolve` URL's first
(redirecting) answer; for a small file kept in git (a tokenizer's vocab.json) its `ETag` is the file's git blob
SHA-1. The download itself is Keras's files' (`imagenet_download.download`):
written beside the target, checked, synced, renamed.
"""

import dataclasses
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

from models.files import WeightsError
from models.imagenet_download import download, offline_error

HUB_ENDPOINT = "https://huggingface.co"
_COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclasses.dataclass(frozen=True)
class HubFile:
    """One file of a Hugging Face hub repository at a pinned commit.

    Attributes:
      repo: "owner/name" ("facebook/dinov2-small").
      revision: the commit id, 40 hex digits.
      filename: the file's path in the repository ("model.safetensors").
      sha256: the file's SHA-256 (64 hex digits), or None to check it against the hash the hub publishes
        (`hub_digest`).
      what: what the file holds, for messages ("DINOv2 ViT-S/14 weights (88 MB)").
      random_command: the command that writes random weights in its layout, offered when offline.
      endpoint: the hub's address (tests point it at a loopback server).

    Raises:
      ValueError: a revision that is not a commit id, or a sha256 that is not 64 hex digits.
    """

    repo: str
    revision: str
    filename: str
    sha256: object
    what: str
    random_command: str
    endpoint: str = HUB_ENDPOINT

    def __post_init__(self):
        if not isinstance(self.revision, str) or not _COMMIT.fullmatch(self.revision):
            raise ValueError("revision=%r; expected a commit id (40 lowercase hex digits), not a branch"
                             % (self.revision,))
        if self.sha256 is not None and not (isinstance(self.sha256, str) and _SHA256.fullmatch(self.sha256)):
            raise ValueError("sha256=%r; expected 64 lowercase hex digits, or None" % (self.sha256,))
        if self.repo.count("/") != 1:
            raise ValueError("repo=%r; expected owner/name" % (self.repo,))

    @property
    def url(self):
        """https://huggingface.co/<repo>/resolve/<revision>/<filename>."""
        return "%s/%s/resolve/%s/%s" % (self.endpoint.rstrip("/"), self.repo, self.revision, self.filename)

    @property
    def identity(self):
        """The file's part of a job's identity: repository, commit, name, and its SHA-256 when pinned."""
        checked = "sha256 %s" % self.sha256 if self.sha256 else "sha256 from the hub's X-Linked-Etag"
        return "hub %s@%s %s, %s" % (self.repo, self.revision, self.filename, checked)


def hub_cache_dir():
    """huggingface_hub's cache folder: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home) / "hub"


def cache_path(file, cache_dir=None):
    """Where `file` is in the cache: <cache>/models--<owner>--<name>/snapshots/<revision>/<filename>."""
    return (Path(cache_dir or hub_cache_dir()) / ("models--" + file.repo.replace("/", "--")) / "snapshots"
            / file.revision / file.filename)


def hub_file(file, cache_dir=None):
    """Path of a hub file, downloading it into the cache if it is absent.

    An existing cache file is used as is, like any file given with --weights (the model's reader still checks
    its tensors and shapes). A download is checked against `file.sha256`, or, when it is None, against the
    hub's X-Linked-Etag; a mismatch keeps nothing.

    Args:
      file: the HubFile.
      cache_dir: the hub's cache folder (default `hub_cache_dir()`).

    Returns:
      Path of the file.

    Raises:
      WeightsError: offline, an HTTP error, a hash mismatch, no SHA-256 from the hub when one is needed, or a
        cache that cannot be written.
    """
    target = cache_path(file, cache_dir)
    if target.is_file():
        return target
    digest = file.sha256 or hub_digest(file)
    return download(file.url, target, digest, file.what, file.random_command)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """The hub's answer itself, not where it redirects: the X-Linked-Etag is on the redirect."""

    def redirect_request(self, *args, **kwargs):
        return None


def hub_digest(file):
    """The hash the hub publishes for `file`: the SHA-256 of a file in LFS (its X-Linked-Etag header), else the
    git blob SHA-1 of a file kept in git (its ETag), without quotes.

    Raises:
      WeightsError: offline, an HTTP error, or neither in the answer.
    """
    request = urllib.request.Request(file.url, method="HEAD", headers={"Accept-Encoding": "identity"})
    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=60) as response:
            headers = response.headers
    except urllib.error.HTTPError as error:
        if not 300 <= error.code < 400:
            raise WeightsError("cannot download the %s: %s answered HTTP %d %s"
                               % (file.what, file.url, error.code, error.reason)) from None
        headers = error.headers
    except (urllib.error.URLError, OSError) as error:
        raise offline_error(file.url, error, file.what, file.filename, file.random_command) from None
    linked = _unquoted(headers.get("X-Linked-Etag"))
    if _SHA256.fullmatch(linked):
        return linked
    etag = _unquoted(headers.get("ETag"))
    if not linked and _COMMIT.fullmatch(etag):  # 40 hex digits: a git blob's SHA-1
        return etag
    raise WeightsError("the hub gave no hash for %s (X-Linked-Etag %r, ETag %r), and none is pinned: nothing was "
                       "downloaded; pass weights=PATH" % (file.url, headers.get("X-Linked-Etag"), headers.get("ETag")))


def _unquoted(etag):
    return (etag or "").strip().removeprefix("W/").strip('"').lower()
