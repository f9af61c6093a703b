"""What every model's weights reader shares, with neither TensorFlow nor h5py: the error, the magic number
that tells a file's layout, a file's identity by content, and the kind of model a checkpoint's folder says it is.
"""

import hashlib
import json
import os
import re
from pathlib import Path

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
NPY_MAGIC = b"\x93NUMPY"
# What a weights file is, by its first bytes: (magic, what it is, the suffix of the models' files of that layout).
_LAYOUTS = ((NPY_MAGIC, "a NumPy .npy file", ".npy"), (HDF5_MAGIC, "an HDF5 file", ".h5"),
            (b"PK\x03\x04", "a zip archive (as PyTorch's .pt and .bin checkpoints are)", None))
# The family folder of models/ that reads each kind of checkpoint: config.json's model_type (transformers'), or
# "open_clip" for a folder with open_clip_config.json and no config.json.
MODEL_TYPES = {"clip": "clip", "open_clip": "clip", "dinov2": "dinov2", "dinov2_with_registers": "dinov2",
               "siglip": "siglip", "siglip2": "siglip"}


class WeightsError(ValueError):
    """A weights file that cannot be used: the message names the file, the layer and the shapes."""


def read_magic(path):
    """The first 8 bytes of a weights file, which tell its layout (HDF5's and .npy's magic numbers).

    Raises:
      WeightsError: the file is missing or cannot be opened (one line naming it and why).
    """
    try:
        with open(path, "rb") as handle:
            return handle.read(8)
    except OSError as error:
        raise WeightsError("weights=%s: %s" % (path, error.strerror or error)) from None


def layout_of(magic):
    """What a weights file is, by its first 8 bytes `magic` (`read_magic`): ("a NumPy .npy file", ".npy"),
    ("an HDF5 file", ".h5"), a zip archive or a Python pickle (PyTorch's checkpoints: suffix None); None for
    another layout (safetensors has no magic number)."""
    for start, what, suffix in _LAYOUTS:
        if magic.startswith(start):
            return what, suffix
    if magic[:1] == b"\x80" and magic[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):  # pickle protocols 2 to 5
        return "a Python pickle (as PyTorch's older .bin checkpoints are)", None
    return None


def fingerprint(path):
    """Identifies a weights file (a pathlib.Path) by content, cheaply: size and a hash of its first and last MiB."""
    digest = hashlib.sha256()
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            digest.update(handle.read(1 << 20))
            handle.seek(max(0, size - (1 << 20)))
            digest.update(handle.read(1 << 20))
    except OSError as error:
        raise WeightsError("weights=%s: %s" % (path, error.strerror or error)) from None
    return "%s (%d bytes, sha256 of ends %s)" % (path.name, size, digest.hexdigest()[:16])


_FINGERPRINT = re.compile(r"(?P<name>.+) \((?P<size>\d+) bytes, sha256 of ends [0-9a-f]{16}\)")


def fingerprinted_name(identity):
    """The file name a `fingerprint` records (what an output's settings keep of a weights file: not where
    it is), or None when `identity` is not a file's fingerprint (Keras's or the hub's published weights)."""
    match = _FINGERPRINT.fullmatch(identity) if isinstance(identity, str) else None
    return match.group("name") if match else None


def find_fingerprinted(identity, folders):
    """The files whose `fingerprint` is `identity`, looked for by its name in `folders` and their subfolders
    (one level: a checkpoint's folder), in that order: where an output's weights file may still be.

    Args:
      identity: a `fingerprint` (an output's settings["weights"]).
      folders: Paths to look in; one that cannot be listed is passed over.

    Returns:
      list of Path (as `folders` name them), without duplicates; [] for an identity that is no fingerprint.
    """
    name = fingerprinted_name(identity)
    if name is None:
        return []
    size = int(_FINGERPRINT.fullmatch(identity).group("size"))
    found, seen = [], set()
    for folder in folders:
        try:
            below = sorted(entry.path for entry in os.scandir(folder) if entry.is_dir())
        except OSError:
            continue
        for candidate in [Path(folder) / name] + [Path(path) / name for path in below]:
            try:
                same = candidate.stat().st_size == size and candidate.resolve() not in seen \
                    and fingerprint(candidate) == identity
            except (OSError, WeightsError):
                continue
            if same:
                seen.add(candidate.resolve())
                found.append(candidate)
    return found


def checkpoint_model_type(folder):
    """What a checkpoint's folder says it is: its config.json's model_type ("clip", "dinov2", "siglip", ...), else
    "open_clip" when it has open_clip_config.json, else None (no config to tell).

    Raises:
      WeightsError: a config.json that is not a JSON object (one line naming it).
    """
    folder = Path(folder)
    config = folder / "config.json"
    if config.is_file():
        try:
            values = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise WeightsError("%s cannot be read as JSON: %s" % (config, str(error).splitlines()[0])) from None
        if not isinstance(values, dict):
            raise WeightsError("%s is not a JSON object" % config)
        return values.get("model_type")
    return "open_clip" if (folder / "open_clip_config.json").is_file() else None
