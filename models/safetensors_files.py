"""The safetensors layout (Hugging Face's `model.safetensors`, open_clip's `open_clip_model.safetensors`): read
into NumPy and checked, and written durably.

    tensors = read_tensors("model.safetensors")        # {"embeddings.cls_token": float32 [1, 1, 384], ...}
    write_tensors("random.safetensors", tensors, {"format": "pt"})

A safetensors file is an 8-byte little-endian header length, a JSON header ({name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}) and the tensors' bytes. The `safetensors` library
checks the header and reads every dtype NumPy has; NumPy has no bfloat16, so a BF16 tensor is read here from
its offsets and widened by hand (a bfloat16 is the upper 16 bits of a float32: `uint16 << 16` viewed as
float32, exact). Floats (F32, F16, BF16) are returned as float32, everything else as stored.

No TensorFlow, so that the `random` command starts at once.
"""

import json
import struct
from pathlib import Path

import numpy as np

from models.files import WeightsError, layout_of
from parallel.output.durable import fsync, temporary_then_rename  # standard library only: no engine

_WIDENED = ("F16", "F32", "BF16")  # returned as float32
_HEADER_LIMIT = 100 << 20  # the library's own bound on a header (100 MB)


def read_tensors(path):
    """Every tensor of a safetensors file, as NumPy arrays.

    Args:
      path: the file (str or Path).

    Returns:
      {tensor name: np.ndarray} in the file's order: float32 for F32, F16 and BF16 tensors, other dtypes
      (I64, U8, ...) as stored.

    Raises:
      WeightsError (one line naming the file): missing or unreadable, not a safetensors file, a header that
        is not valid, or data that ends before the header says (truncated).
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    header = _header(path)
    tensors = {}
    try:
        with safe_open(str(path), framework="numpy") as file:
            for name in file.keys():
                dtype = header[name]["dtype"]
                array = _bfloat16(path, header, name) if dtype == "BF16" else file.get_tensor(name)
                tensors[name] = array.astype(np.float32, copy=False) if dtype in _WIDENED else array
    except SafetensorError as error:
        message = str(error)
        what = ("is truncated or damaged" if "not fully covered" in message or "incomplete" in message
                else "is not a valid safetensors file")
        raise WeightsError("weights=%s %s (%s)" % (path, what, message)) from None
    except (TypeError, ValueError) as error:  # a dtype NumPy does not know (F8_E4M3, ...)
        raise WeightsError("weights=%s: %s" % (path, error)) from None
    # safe_open lists the names sorted; keep the file's order, as it was written.
    return {name: tensors[name] for name in header if name in tensors}


def _header(path):
    """The JSON header of a safetensors file, {name: {"dtype", "shape", "data_offsets"}}, without metadata.

    Checked only as far as reading it needs (its length, that it is a JSON object): the library checks the
    rest (offsets, dtypes and shapes, coverage of the data) before any tensor is read.
    """
    try:
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            size = path.stat().st_size
            if len(prefix) < 8:
                raise WeightsError("weights=%s is not a safetensors file (%d bytes)" % (path, len(prefix)))
            if layout_of(prefix) is not None:  # a magic number (an .npy's, an HDF5 file's) is no header's length
                raise WeightsError("weights=%s is not a safetensors file: it is %s" % (path, layout_of(prefix)[0]))
            (length,) = struct.unpack("<Q", prefix)
            if length > _HEADER_LIMIT:
                raise WeightsError("weights=%s is not a safetensors file (its first 8 bytes give a header of %d "
                                   "bytes)" % (path, length))
            if length > size - 8:
                raise WeightsError("weights=%s is truncated, or not a safetensors file (a header of %d bytes in a "
                                   "file of %d)" % (path, length, size))
            header = json.loads(handle.read(length))
    except OSError as error:
        raise WeightsError("weights=%s: %s" % (path, error.strerror or error)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise WeightsError("weights=%s is not a safetensors file (its header is not JSON: %s)"
                           % (path, error)) from None
    if not isinstance(header, dict):
        raise WeightsError("weights=%s is not a safetensors file (its header is a JSON %s, not an object)"
                           % (path, type(header).__name__))
    header.pop("__metadata__", None)
    for name, entry in header.items():
        if not isinstance(entry, dict) or "dtype" not in entry:
            raise WeightsError("weights=%s has a bad header: tensor %r has no dtype" % (path, name))
    return header


def tensor_shapes(path):
    """{tensor name: shape (a tuple)} of the safetensors file at `path`, from its header alone; None when it is
    not a safetensors file or cannot be read."""
    try:
        return {name: tuple(entry.get("shape", ())) for name, entry in _header(Path(path)).items()}
    except WeightsError:
        return None


def _bfloat16(path, header, name):
    """A BF16 tensor as float32, read from its offsets (which the library has checked)."""
    begin, end = header[name]["data_offsets"]
    with open(path, "rb") as handle:
        handle.seek(8 + struct.unpack("<Q", handle.read(8))[0] + begin)
        raw = np.frombuffer(handle.read(end - begin), dtype="<u2")
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(header[name]["shape"])


def read_metadata(path):
    """The file's `__metadata__` ({str: str}; {} if it has none), e.g. {"format": "pt"}.

    Raises:
      WeightsError: as `read_tensors`.
    """
    from safetensors import SafetensorError, safe_open

    _header(Path(path))
    try:
        with safe_open(str(path), framework="numpy") as file:
            return dict(file.metadata() or {})
    except SafetensorError as error:
        raise WeightsError("weights=%s is not a valid safetensors file (%s)" % (path, error)) from None


def write_tensors(path, tensors, metadata=None):
    """Writes `tensors` as a safetensors file, durably: a temporary file beside `path`, synced, renamed over
    it, the folder synced; on any error nothing is left but what was there before.

    Args:
      path: the file to write (str or Path).
      tensors: {name: np.ndarray}; written in their dtypes (float32 stays F32) and shapes (a scalar's is []),
        in the library's order (by dtype, then name).
      metadata: {str: str} for the header's `__metadata__` (Hugging Face writes {"format": "pt"}), or None.
    """
    from safetensors.numpy import save_file

    path = Path(path)
    # Not ascontiguousarray, which makes a scalar [1]: CLIP's logit_scale is [] in the published files, and
    # transformers refuses a checkpoint where it is not.
    arrays = {name: np.asarray(array, order="C") for name, array in tensors.items()}
    with temporary_then_rename(path) as temporary:
        save_file(arrays, str(temporary), metadata=metadata)
    fsync(path.parent)  # the rename is durable only once the folder is
