"""Files of the Hugging Face hub at a pinned commit, fetched by `huggingface_hub` into its own cache and checked
against the hub's hash (or a pinned SHA-256).

    file = HubFile("facebook/dinov2-small", "ed25f3a31f01632728cabb09d1542f84ab7b0056", "model.safetensors",
                   sha256="ae1e99fc...", what="DINOv2 ViT-S/14 weights (88 MB)", random_command="python -m ...")
    path = hub_file(file)   # <cache>/models--facebook--dinov2-small/snapshots/ed25f3a3.../model.safetensors

The download is huggingface_hub's `hf_hub_download`, with what it brings: its cache ($HF_HUB_CACHE, else
$HF_HOME/hub, else ~/.cache/huggingface/hub; a file it downloaded before, for any program, is found there), a
token for gated and private repositories (HF_TOKEN, or `hf auth login`), a mirror or a proxy of the hub
(HF_ENDPOINT), offline mode (HF_HUB_OFFLINE=1: the cache only, no request), and a connection cut during a
download resumed where it stopped (Range requests). HF_ENDPOINT and HF_HUB_OFFLINE are read when a file is
asked for, not when huggingface_hub was imported.

What it does not do, this module does: the revision is a commit id (40 hex digits), never a branch (a branch
moves, and the features with it); the hub must answer for that commit (its X-Repo-Commit); and the bytes
downloaded are hashed and compared with the file's pinned SHA-256, else with the hub's own hash of it: the
SHA-256 it publishes for a file stored in LFS (its X-Linked-Etag, which huggingface_hub takes as the file's
ETag), or the git blob SHA-1 of a small file kept in git (a tokenizer's vocab.json). A mismatch keeps nothing:
the file is taken out of the cache again. A file already in the cache at that commit is used as is, like any
file given with --weights (the model's reader still checks its arrays and shapes).

Every failure is one line (a WeightsError) saying what to do: set HF_TOKEN, or pass a downloaded folder.
"""

import dataclasses
import hashlib
import logging
import os
import re
from pathlib import Path

from models.files import WeightsError

log = logging.getLogger("parallel")

HUB_ENDPOINT = "https://huggingface.co"  # huggingface_hub's default, when HF_ENDPOINT is not set
COMMIT = re.compile(r"[0-9a-f]{40}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's reading of a boolean environment variable


@dataclasses.dataclass(frozen=True)
class HubFile:
    """One file of a Hugging Face hub repository at a pinned commit.

    Attributes:
      repo: "owner/name" ("facebook/dinov2-small").
      revision: the commit id, 40 hex digits.
      filename: the file's path in the repository ("model.safetensors").
      sha256: the file's SHA-256 (64 hex digits), or None to check it against the hash the hub publishes.
      what: what the file holds, for messages ("DINOv2 ViT-S/14 weights (88 MB)").
      random_command: the command that writes random weights in its layout, offered when it cannot be had.

    Raises:
      ValueError: a revision that is not a commit id, or a sha256 that is not 64 hex digits.
    """

    repo: str
    revision: str
    filename: str
    sha256: object
    what: str
    random_command: str

    def __post_init__(self):
        if not isinstance(self.revision, str) or not COMMIT.fullmatch(self.revision):
            raise ValueError("revision=%r; expected a commit id (40 lowercase hex digits), not a branch"
                             % (self.revision,))
        if self.sha256 is not None and not (isinstance(self.sha256, str) and _SHA256.fullmatch(self.sha256)):
            raise ValueError("sha256=%r; expected 64 lowercase hex digits, or None" % (self.sha256,))
        if self.repo.count("/") != 1:
            raise ValueError("repo=%r; expected owner/name" % (self.repo,))

    @property
    def url(self):
        """<HF_ENDPOINT, else https://huggingface.co>/<repo>/resolve/<revision>/<filename>."""
        return "%s/%s/resolve/%s/%s" % (hub_endpoint(), self.repo, self.revision, self.filename)

    @property
    def identity(self):
        """The file's part of a job's identity: repository, commit, name, and its SHA-256 when pinned."""
        checked = "sha256 %s" % self.sha256 if self.sha256 else "sha256 from the hub's X-Linked-Etag"
        return "hub %s@%s %s, %s" % (self.repo, self.revision, self.filename, checked)

    @property
    def download_command(self):
        """huggingface_hub's command that downloads this commit's files into a folder of one's choosing."""
        return "hf download %s --revision %s --local-dir FOLDER" % (self.repo, self.revision)


class HubFileAbsent(WeightsError):
    """The commit has no such file (the hub answered 404 EntryNotFound): for a file that may be absent."""


class HubUnreachable(WeightsError):
    """The hub could not be reached (no network, a proxy refusing, a timeout): for a file that may be passed over."""


def hub_endpoint():
    """The hub's address: $HF_ENDPOINT (a mirror, a proxy; tests point it at a loopback server), else huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or HUB_ENDPOINT).rstrip("/")


def hub_offline():
    """Whether huggingface_hub's offline mode is asked for: $HF_HUB_OFFLINE (or $TRANSFORMERS_OFFLINE) is 1, ON,
    YES or TRUE."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in _TRUE


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


def _absent_marker(file, cache_dir=None):
    """huggingface_hub's record that `file`'s commit has no such file: <cache>/models--<owner>--<name>/.no_exist/
    <revision>/<filename>, an empty file written when the hub answered 404."""
    return (Path(cache_dir or hub_cache_dir()) / ("models--" + file.repo.replace("/", "--")) / ".no_exist"
            / file.revision / file.filename)


def cached_absent(file, cache_dir=None):
    """Whether the cache records that `file`'s commit has no such file: what is known of it offline."""
    return _absent_marker(file, cache_dir).exists()


def hub_file(file, cache_dir=None):
    """Path of a hub file: in huggingface_hub's cache, or downloaded into it by huggingface_hub, then checked.

    Args:
      file: the HubFile.
      cache_dir: the hub's cache folder (default `hub_cache_dir()`).

    Returns:
      Path of the file, in the cache's snapshot folder of the commit.

    Raises:
      HubFileAbsent: the commit has no such file.
      WeightsError: offline mode or no network with the file not in the cache, a gated or private repository
        without a token that has access, a commit the repository lacks, a hub that gives no hash or another
        one than the pinned SHA-256, a download whose bytes do not match (nothing kept), an HTTP error.
    """
    cache_dir = Path(cache_dir or hub_cache_dir())
    target = cache_path(file, cache_dir)
    if target.is_file():
        return target
    if hub_offline():
        raise WeightsError("%s is not in the hub's cache (%s) and HF_HUB_OFFLINE is set: pass a downloaded folder, "
                           "--weights FOLDER (%s), or random weights: %s"
                           % (_named(file), cache_dir, _where_online(file), file.random_command))
    from huggingface_hub import hf_hub_download

    try:
        metadata = _metadata(file)
    except HubFileAbsent:
        try:  # recorded as huggingface_hub records it, so that offline the file is known to be absent
            _absent_marker(file, cache_dir).parent.mkdir(parents=True, exist_ok=True)
            _absent_marker(file, cache_dir).touch()
        except OSError:
            pass  # a cache that cannot be written is said when a file is written into it
        raise
    expected = _expected_digest(file, metadata)
    log.info("downloading %s from %s", file.what, file.url)
    try:
        path = Path(hf_hub_download(file.repo, file.filename, revision=file.revision, cache_dir=cache_dir,
                                    endpoint=hub_endpoint()))
    except Exception as error:  # huggingface_hub's and its HTTP client's errors, told apart by _hub_error
        raise _hub_error(error, file) from None
    _check_download(path, expected, file)
    return path


def hub_has(file):
    """Whether the hub has `file` at its commit (one HEAD request; nothing is downloaded). False offline, or when
    the hub cannot be asked."""
    if hub_offline():
        return False
    try:
        _metadata(file)
    except WeightsError:
        return False
    return True


def _metadata(file):
    """huggingface_hub's HfFileMetadata of `file` (its HEAD request: commit, ETag, size), or the one-line error."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    endpoint = hub_endpoint()
    try:
        return get_hf_file_metadata(hf_hub_url(file.repo, file.filename, revision=file.revision, endpoint=endpoint),
                                    endpoint=endpoint)
    except Exception as error:
        raise _hub_error(error, file) from None


def _named(file):
    """The file in messages: owner/name@commit filename."""
    return "%s@%s %s" % (file.repo, file.revision, file.filename)


def _where_online(file):
    """How to download the commit's files into a folder of one's own, where there is a network."""
    return "`%s` where there is a network" % file.download_command


def _expected_digest(file, metadata):
    """The hash the downloaded bytes must have: the pinned SHA-256, else the hub's (its ETag of the file: a
    SHA-256 for LFS, a git blob SHA-1 for a file in git), refused before anything is downloaded when the hub
    answers for another commit, gives no hash, or another SHA-256 than the pinned one."""
    if metadata.commit_hash != file.revision:
        raise WeightsError("%s answered for commit %s when %s was asked for (not a Hugging Face hub? see "
                           "HF_ENDPOINT): nothing was downloaded"
                           % (hub_endpoint(), metadata.commit_hash, _named(file)))
    etag = (metadata.etag or "").lower()
    if file.sha256:
        if _SHA256.fullmatch(etag) and etag != file.sha256:
            raise WeightsError("the hub gives %s SHA-256 %s, not the pinned %s: nothing was downloaded"
                               % (_named(file), etag, file.sha256))
        return file.sha256
    if _SHA256.fullmatch(etag) or COMMIT.fullmatch(etag):
        return etag
    raise WeightsError("the hub gave no hash of %s (ETag %r), and none is pinned: nothing was downloaded; pass a "
                       "downloaded folder, --weights FOLDER" % (_named(file), metadata.etag))


def _check_download(path, expected, file):
    """Hashes the file huggingface_hub put at `path` (SHA-256, or the git blob SHA-1 for 40 hex digits); a
    mismatch takes it out of the cache (the snapshot's link and the blob it points to) and is one line."""
    hasher = hashlib.sha1(b"blob %d\0" % path.stat().st_size) if len(expected) == 40 else hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 22):
            hasher.update(chunk)
    if hasher.hexdigest() == expected:
        return
    blob = path.resolve()
    for stale in {path, blob}:
        stale.unlink(missing_ok=True)
    kind = "git blob SHA-1" if len(expected) == 40 else "SHA-256"
    raise WeightsError("the file downloaded from %s has %s %s, expected %s; nothing was kept"
                       % (file.url, kind, hasher.hexdigest(), expected))


def _hub_error(error, file):
    """The one-line WeightsError of a failed request of huggingface_hub (`error`: what it raised)."""
    from huggingface_hub import errors

    status = getattr(getattr(error, "response", None), "status_code", None)
    if isinstance(error, errors.RemoteEntryNotFoundError):
        return HubFileAbsent("%s@%s has no %s" % (file.repo, file.revision, file.filename))
    if isinstance(error, errors.GatedRepoError) or (
            isinstance(error, errors.RepositoryNotFoundError) and status in (401, 403)):
        return WeightsError("%s is gated or private (HTTP %s): accept its terms on the hub and set HF_TOKEN to a "
                            "token with access to it (or run `hf auth login`); or pass a downloaded folder, "
                            "--weights FOLDER" % (file.repo, status))
    if isinstance(error, errors.RepositoryNotFoundError):
        return WeightsError("the hub has no repository %s (HTTP %s): check the name" % (file.repo, status))
    if isinstance(error, errors.RevisionNotFoundError):
        return WeightsError("%s has no commit %s (HTTP %s): check the commit" % (file.repo, file.revision, status))
    if isinstance(error, errors.HfHubHTTPError):
        return WeightsError("cannot download %s: %s answered HTTP %s" % (_named(file), file.url, status))
    if isinstance(error, errors.FileMetadataError):
        return WeightsError("%s does not answer as a Hugging Face hub for %s (%s); check HF_ENDPOINT"
                            % (hub_endpoint(), _named(file), str(error).split(".")[0]))
    import httpx2  # huggingface_hub's HTTP client: its transport errors are a network that cannot be reached
    if isinstance(error, (httpx2.TransportError, errors.OfflineModeIsEnabled, errors.LocalEntryNotFoundError)):
        reason = str(error).splitlines()[0][:80] if str(error) else type(error).__name__
        return HubUnreachable("cannot download %s from %s (%s): offline? pass a downloaded folder, --weights FOLDER "
                              "(%s), or random weights: %s"
                              % (_named(file), hub_endpoint(), reason, _where_online(file), file.random_command))
    if isinstance(error, OSError):  # the cache cannot be written, or the download ended short of its size
        return WeightsError("downloading %s into the hub's cache failed: %s"
                            % (_named(file), error.strerror or str(error).splitlines()[0]))
    raise error  # anything else is a bug, not a download's failure
