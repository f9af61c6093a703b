"""Keras's weight files: found in Keras's cache, or downloaded into it and checked by hash.

`weights="imagenet"` means the file Keras itself uses, `$KERAS_HOME/models/<file>` (default `~/.keras`),
e.g. `vgg16_weights_tf_dim_ordering_tf_kernels.h5` for VGG16. If it is absent it is downloaded from where
Keras gets it and checked against Keras's published hash (MD5 or SHA-256, as Keras's `get_file` tells them
apart: by length); the model's reader then reads it like any other file given with --weights. Every model
describes its files with a `KerasFile`. Keras's files are not on the Hugging Face hub: the hub's files are
huggingface_hub's to fetch (`hub_download.py`).
"""

import dataclasses
import hashlib
import http.client
import logging
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from models.files import WeightsError
from parallel.messages import Progress  # standard library only (tqdm on first use): no engine
from parallel.output.durable import fsync, temporary_then_rename  # standard library only: no engine

log = logging.getLogger("parallel")

KERAS_APPLICATIONS = "https://storage.googleapis.com/tensorflow/keras-applications/"


@dataclasses.dataclass(frozen=True)
class KerasFile:
    """One of Keras's weight files.

    Attributes:
      name: the file name in Keras's cache folder `models/`.
      url: where Keras downloads it from.
      digest: Keras's published hash of it: 32 hex digits are an MD5, 64 a SHA-256.
      what: what the file holds, for messages ("VGG16 ImageNet weights (553 MB)").
      random_command: the command that writes random weights in its layout, offered when offline.
    """

    name: str
    url: str
    digest: str
    what: str
    random_command: str

    @property
    def identity(self):
        """The file's part of a job's identity: Keras's name and hash."""
        return "imagenet (Keras %s, %s %s)" % (self.name, "md5" if len(self.digest) == 32 else "sha256",
                                               self.digest)


VGG16_FILE = KerasFile(
    name="vgg16_weights_tf_dim_ordering_tf_kernels.h5",
    url=KERAS_APPLICATIONS + "vgg16/vgg16_weights_tf_dim_ordering_tf_kernels.h5",
    digest="64373286793e3c8b2b4e3219cbf3544b",  # Keras's published hash of that file
    what="VGG16 ImageNet weights (553 MB)",
    random_command="python -m models.weight_files random vgg16-random.npy")


def keras_cache_dir():
    """Keras's home folder: $KERAS_HOME, or ~/.keras."""
    return Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras")


def keras_file(file, cache_dir=None):
    """Path of one of Keras's weight files, downloading it into Keras's cache if it is absent.

    An existing cache file is used as is, like any file given with --weights (its layers and shapes are
    still checked when it is read); else the file is fetched by `download`.

    Args:
      file: the KerasFile.
      cache_dir: Keras's home folder (default `keras_cache_dir()`); the file goes in `models/`.

    Returns:
      Path of the file.

    Raises:
      WeightsError: offline, an HTTP error, a hash mismatch or a cache that cannot be written.
    """
    target = Path(cache_dir or keras_cache_dir()) / "models" / file.name
    if target.is_file():
        return target
    return download(file.url, target, file.digest, file.what, file.random_command)


def download(url, target, digest, what, random_command):
    """Downloads `url` into the file `target`, checked against `digest`, durably: every Keras file's download.

    The file appears only complete and durable (written beside it, synced, renamed, the folder synced); a
    hash mismatch keeps nothing, and a failed download leaves nothing behind, not even the folders it
    created.

    Args:
      url: where to download from (redirects are followed).
      target: Path of the file to write.
      digest: its expected hash: 32 hex digits are an MD5, 64 a SHA-256 (Keras's `get_file` tells them apart
        by length, too).
      what: what the file holds, for messages ("VGG16 ImageNet weights (553 MB)").
      random_command: the command that writes random weights in its layout, offered when offline.

    Returns:
      target.

    Raises:
      WeightsError: offline, an HTTP error, a hash mismatch or a folder that cannot be written.
    """
    try:
        response = urllib.request.urlopen(url, timeout=60)
    except (urllib.error.URLError, OSError) as error:
        raise offline_error(url, error, what, target.name, random_command) from None
    # Said once the server answers, so that offline the error above is the only line.
    log.info("downloading %s from %s", what, url)
    with response:
        created = _missing_folders(target.parent)
        try:
            _download(response, target, url, digest, what)
        except BaseException:
            for folder in created:  # innermost first; a folder something else wrote into stays
                try:
                    folder.rmdir()
                except OSError:
                    pass
            raise
    return target


def offline_error(url, error, what, name, random_command):
    """The one-line WeightsError of a download that could not start (`error`: the URLError or OSError), saying
    what to pass instead: a path (a file called `name`), or the command writing random weights."""
    reason = getattr(error, "reason", None) or error
    return WeightsError("cannot download the %s from %s (%s): offline? pass weights=PATH (e.g. %s), or write "
                        "random weights to try the installation: %s" % (what, url, reason, name, random_command))


def _missing_folders(folder):
    """`folder` and those of its parents that do not exist, innermost first."""
    missing = []
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    return missing


def _download(response, target, url, digest, what):
    """Writes the body of `response` to `target`: temporary file, hash check, fsync, rename, fsync folder."""
    expected = digest.lower()
    algorithm = "md5" if len(expected) == 32 else "sha256"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # A temporary file of its own: two processes may fill the same cache at once.
        renaming = temporary_then_rename(target, unique=True)
    except OSError as error:
        raise WeightsError("cannot write the cache folder %s: %s; pass weights=PATH"
                           % (target.parent, error.strerror or error)) from None
    try:
        with renaming as temporary:  # synced and renamed on success; removed on any exception
            hasher = hashlib.new(algorithm)
            total = response.headers.get("Content-Length")
            with open(temporary, "wb") as handle:
                with Progress(sys.stderr.isatty(), total=int(total) if total else None, unit="B", unit_scale=True,
                              desc=what.split(" (")[0]) as progress:
                    while True:
                        chunk = response.read(1 << 20)
                        if not chunk:
                            break
                        handle.write(chunk)
                        hasher.update(chunk)
                        progress.update(len(chunk))
            if hasher.hexdigest() != expected:
                name = {"md5": "MD5", "sha256": "SHA-256"}[algorithm]
                raise WeightsError("the file downloaded from %s has %s %s, expected %s; nothing was kept"
                                   % (url, name, hasher.hexdigest(), expected))
        fsync(target.parent)  # the rename is durable only once the folder is
    except (OSError, http.client.HTTPException) as error:
        raise WeightsError("downloading %s into %s failed: %s"
                           % (url, target.parent, getattr(error, "strerror", None) or error)) from None
