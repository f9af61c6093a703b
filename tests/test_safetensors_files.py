"""safetensors files: every float dtype read as float32 (BF16 by hand), damaged files refused in one line, the
durable write."""

import json
import os
import struct

import numpy as np
import pytest

from models import safetensors_files
from models.files import WeightsError


def _raw_file(path, entries, data):
    """A safetensors file written byte by byte: {name: (dtype, shape, begin, end)} and the data."""
    header = json.dumps({name: {"dtype": dtype, "shape": list(shape), "data_offsets": [begin, end]}
                         for name, (dtype, shape, begin, end) in entries.items()}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def test_f32_f16_and_other_dtypes_round_trip_floats_as_float32(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {"b.weight": rng.standard_normal((3, 4)).astype(np.float32),
               "a.half": rng.standard_normal((5,)).astype(np.float16),
               "ids": np.arange(7, dtype=np.int64).reshape(1, 7)}
    path = tmp_path / "model.safetensors"
    safetensors_files.write_tensors(path, tensors, {"format": "pt"})
    read = safetensors_files.read_tensors(path)
    assert sorted(read) == sorted(tensors)
    np.testing.assert_array_equal(read["b.weight"], tensors["b.weight"])
    assert read["a.half"].dtype == np.float32 and np.array_equal(read["a.half"], tensors["a.half"].astype(np.float32))
    assert read["ids"].dtype == np.int64 and np.array_equal(read["ids"], tensors["ids"])
    assert safetensors_files.read_metadata(path) == {"format": "pt"}
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]  # no temporary file left


def test_bf16_is_widened_exactly_by_hand(tmp_path):
    values = np.array([[1.5, -2.25, 3.0e-3], [65280.0, -0.0, 1.0 / 3.0]], np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2")  # truncated to bfloat16
    expected = (bits.astype(np.uint32) << 16).view(np.float32)
    floats = np.arange(3, dtype="<f4")
    data = bits.tobytes() + floats.tobytes()
    path = _raw_file(tmp_path / "bf16.safetensors", {"w": ("BF16", (2, 3), 0, 12), "f": ("F32", (3,), 12, 24)}, data)
    read = safetensors_files.read_tensors(path)
    assert list(read) == ["w", "f"]  # the file's order
    assert read["w"].dtype == np.float32 and read["w"].shape == (2, 3)
    np.testing.assert_array_equal(read["w"], expected)
    assert np.abs(read["w"] - values).max() > 0  # it was really rounded: 1/3 is not a bfloat16
    np.testing.assert_array_equal(read["f"], floats)


@pytest.mark.parametrize("content, message", [
    (b"abc", r"is not a safetensors file \(3 bytes\)"),
    (b"\xff" * 8 + b"\0" * 100, "is not a safetensors file .its first 8 bytes give a header of"),
    # What a file is, when its first bytes say so: VGG16's .npy spoke of a header of 379,676,406,402,707 bytes.
    (b"\x93NUMPY\x01\x00v\x00{'descr'", r"is not a safetensors file: it is a NumPy .npy file$"),
    (b"\x89HDF\r\n\x1a\n" + b"\0" * 100, r"is not a safetensors file: it is an HDF5 file$"),
    (b"PK\x03\x04" + b"\0" * 100, r"not a safetensors file: it is a zip archive \(as PyTorch's .pt and .bin "
                                 r"checkpoints are\)$"),
    (b"\x80\x02}q\x00(X\x05\x00\x00", r"not a safetensors file: it is a Python pickle \(as PyTorch's older .bin "
                                       r"checkpoints are\)$"),
    (b"\x10\0\0\0\0\0\0\0{}", r"is truncated, or not a safetensors file \(a header of 16 bytes in a file of 10\)"),
    (struct.pack("<Q", 2) + b"{x", "its header is not JSON"),
    (struct.pack("<Q", 2) + b"[]", "a JSON list, not an object"),
    (struct.pack("<Q", 13) + b'{"w": {"a":1}}'[:13], "not JSON"),
])
def test_a_file_that_is_not_safetensors_is_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(WeightsError, match=message) as error:
        safetensors_files.read_tensors(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_truncated_file_and_bad_offsets_are_refused(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors_files.write_tensors(path, {"w": np.ones((100,), np.float32)})
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(path.read_bytes()[:-8])
    with pytest.raises(WeightsError, match="truncated.safetensors is truncated or damaged"):
        safetensors_files.read_tensors(truncated)
    overlapping = _raw_file(tmp_path / "offsets.safetensors",
                            {"a": ("F32", (2,), 0, 8), "b": ("F32", (2,), 4, 12)}, bytes(12))
    with pytest.raises(WeightsError, match="offsets.safetensors is not a valid safetensors file"):
        safetensors_files.read_tensors(overlapping)
    with pytest.raises(WeightsError, match="nowhere.safetensors: No such file"):
        safetensors_files.read_tensors(tmp_path / "nowhere.safetensors")


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors_files.write_tensors(path, {"w": np.ones(2, np.float32)})
    before = path.read_bytes()
    with pytest.raises(Exception):
        safetensors_files.write_tensors(path, {"w": np.ones(2, np.float32)}, metadata={"format": 3})
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["model.safetensors"]
