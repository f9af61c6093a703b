"""What every model's weights reader shares, with neither TensorFlow nor h5py: the error, the magic number
that tells a file's layout, and a file's identity by content.
"""

import hashlib

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


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
