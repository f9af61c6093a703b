"""Keras's ImageNet VGG16 file: found in Keras's cache, or downloaded into it.

`weights="imagenet"` means the file Keras itself uses,
`$KERAS_HOME/models/vgg16_weights_tf_dim_ordering_tf_kernels.h5` (default `~/.keras`). If it is
absent it is downloaded from where Keras gets it and checked against Keras's published MD5;
`weight_files.load_weights` then reads it like any other .h5 file.
"""

import hashlib
import http.client
import logging
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from models.weight_files import WeightsError
from parallel.messages import Progress  # standard library only (tqdm on first use): no engine
from parallel.output.durable import fsync, temporary_then_rename  # standard library only: no engine

log = logging.getLogger("parallel")

IMAGENET_URL = ("https://storage.googleapis.com/tensorflow/keras-applications/"
                "vgg16/vgg16_weights_tf_dim_ordering_tf_kernels.h5")
IMAGENET_MD5 = "64373286793e3c8b2b4e3219cbf3544b"  # Keras's published hash of that file
IMAGENET_FILE = "vgg16_weights_tf_dim_ordering_tf_kernels.h5"


def keras_cache_dir():
    """Keras's home folder: $KERAS_HOME, or ~/.keras."""
    return Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras")


def imagenet_weights(cache_dir=None, url=IMAGENET_URL, md5=IMAGENET_MD5):
    """Path of Keras's ImageNet VGG16 file, downloading it into Keras's cache if it is absent.

    The download is checked against Keras's published MD5; a mismatch keeps nothing. The
    file appears in the cache only complete and durable (written beside it, synced, renamed,
    the folder synced). An existing cache file is used as is, like any file given with
    --weights (its layers and shapes are still checked when it is read). A failed download
    leaves nothing behind, not even the folders it created.

    Args:
      cache_dir: Keras's home folder (default `keras_cache_dir()`); the file goes in `models/`.
      url: where to download from.
      md5: expected hex MD5 of the file.

    Returns:
      Path of the file.

    Raises:
      WeightsError: offline, an HTTP error, a hash mismatch or a cache that cannot be written.
    """
    target = Path(cache_dir or keras_cache_dir()) / "models" / IMAGENET_FILE
    if target.is_file():
        return target
    try:
        response = urllib.request.urlopen(url, timeout=60)
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", None) or error
        raise WeightsError("cannot download the ImageNet weights from %s (%s): offline? pass weights=PATH (a "
                           "vgg16.npy or %s), or write random weights to try the installation: python -m "
                           "models.weight_files random vgg16-random.npy" % (url, reason, IMAGENET_FILE)) from None
    # Said once the server answers, so that offline the error above is the only line.
    log.info("downloading VGG16 ImageNet weights (553 MB) from %s", url)
    with response:
        created = _missing_folders(target.parent)
        try:
            _download(response, target, url, md5)
        except BaseException:
            for folder in created:  # innermost first; a folder something else wrote into stays
                try:
                    folder.rmdir()
                except OSError:
                    pass
            raise
    return target


def _missing_folders(folder):
    """`folder` and those of its parents that do not exist, innermost first."""
    missing = []
    for candidate in (folder, *folder.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    return missing


def _download(response, target, url, md5):
    """Writes the body of `response` to `target`: temporary file, MD5 check, fsync, rename, fsync folder."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # A temporary file of its own: two processes may fill the same cache at once.
        renaming = temporary_then_rename(target, unique=True)
    except OSError as error:
        raise WeightsError("cannot write Keras's cache folder %s: %s; pass weights=PATH"
                           % (target.parent, error.strerror or error)) from None
    try:
        with renaming as temporary:  # synced and renamed on success; removed on any exception
            digest = hashlib.md5()
            with open(temporary, "wb") as handle:
                total = response.headers.get("Content-Length")
                with Progress(sys.stderr.isatty(), total=int(total) if total else None, unit="B", unit_scale=True,
                              desc="VGG16 weights") as progress:
                    while True:
                        chunk = response.read(1 << 20)
                        if not chunk:
                            break
                        handle.write(chunk)
                        digest.update(chunk)
                        progress.update(len(chunk))
            if digest.hexdigest() != md5:
                raise WeightsError("the file downloaded from %s has MD5 %s, expected %s; nothing was kept"
                                   % (url, digest.hexdigest(), md5))
        fsync(target.parent)  # the rename is durable only once the folder is
    except (OSError, http.client.HTTPException) as error:
        raise WeightsError("downloading %s into %s failed: %s"
                           % (url, target.parent, getattr(error, "strerror", None) or error)) from None
