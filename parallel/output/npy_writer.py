"""NpyWriter, and the .npy files it reads and writes.

`O` is float32 [N, D] (np.load(O, mmap_mode="r")), `O.paths.csv` the paths of its rows (one
column `path`, see `parallel.output.csv_rows`).
"""

import contextlib
import io
import os

import numpy as np

from parallel.output.csv_rows import read_paths_csv, write_paths_csv
from parallel.output.durable import OutputError, temporary_then_rename, write_all
from parallel.output.parts_writer import PartsWriter
from parallel.output.record import PATHS_SUFFIX

# close() copies the npy parts into the output in blocks of this many bytes: bounded memory.
_COPY_BYTES = 16 << 20


class NpyWriter(PartsWriter):
    """npy: parts `part-<index>.npy` + `part-<index>.paths.csv` per write(); close() writes
    `O` and `O.paths.csv` from them."""

    format = "npy"
    FINAL_SUFFIXES = ("", PATHS_SUFFIX)
    PART_EXTENSIONS = ("npy", "paths.csv")

    def _write_part(self, index, paths, features):
        with temporary_then_rename(self._part(index, "npy")) as temporary:
            _write_npy(temporary, len(features), self.feature_size, [features])
        write_paths_csv(self._part(index, "paths.csv"), paths)

    def _read_part_paths(self, index):
        return read_paths_csv(self._part(index, "paths.csv"))

    def _read_output_paths(self):
        return read_paths_csv(self._finals[1])

    def _part_features(self, index):
        # Read through a map: only stores through one fault on a full disk; a short file is refused here.
        path = self._part(index, "npy")
        try:
            features = np.load(path, mmap_mode="r")
        except ValueError:
            raise OutputError("%s is damaged: pass --overwrite to start afresh" % path) from None
        if features.dtype != np.float32 or features.shape[1:] != (self.feature_size,):
            raise OutputError("%s is damaged: pass --overwrite to start afresh" % path)
        yield from features

    def _merge_parts(self, part_count):
        # closing(): on a failed write the part being read is closed now, not when the traceback goes.
        with temporary_then_rename(self.output) as temporary, \
                contextlib.closing(self._part_blocks(part_count)) as blocks:
            _write_npy(temporary, self._record["rows"], self.feature_size, blocks)
        write_paths_csv(self._finals[1], (path for index in range(part_count)
                                          for path in self._read_part_paths(index)))

    def _merge_sorted(self, runs, part_count):
        with self._merging_in_path_order(runs, part_count) as (temporary, chunks):
            _write_npy(temporary, self._record["rows"], self.feature_size, (features for _, features in chunks))
        write_paths_csv(self._finals[1], sorted(self._order))

    def _part_blocks(self, part_count):
        """The features of parts 0 .. part_count - 1 in order, as bytes blocks of at most _COPY_BYTES."""
        rows = 0
        for index in range(part_count):
            rows += yield from _npy_blocks(self._part(index, "npy"), self.feature_size)
        if rows != self._record["rows"]:
            raise OutputError("%s holds %d rows but its sidecar records %d: pass --overwrite to start afresh"
                              % (self._parts, rows, self._record["rows"]))


def _npy_header(rows, feature_size):
    """The header of an .npy file of float32 [rows, feature_size]: the bytes np.save and
    np.lib.format.open_memmap write (they choose format 1.0, the oldest that holds the
    header, which for a 2-D shape it always does)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)),
                                                  "fortran_order": False, "shape": (int(rows), int(feature_size))})
    return header.getvalue()


def _write_npy(path, rows, feature_size, blocks):
    """Writes `path` (created or truncated): an .npy file of float32 [rows, feature_size].

    Plain writes, not a memory map: on a full disk a write fails with ENOSPC (an OSError),
    where a store through a map (np.lib.format.open_memmap) kills the process with SIGBUS.

    Args:
      path: Path of the file.
      rows: N, the rows recorded in the header.
      feature_size: D, the floats per row recorded in the header.
      blocks: iterable of the data in order, float32 C-contiguous arrays or bytes: N * D
        float32 values in all, in native byte order (as np.save writes them).
    """
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(descriptor, _npy_header(rows, feature_size))
        for block in blocks:
            write_all(descriptor, block)
    finally:
        os.close(descriptor)


def _npy_blocks(path, feature_size):
    """Yields the data of the .npy file `path` (float32 [N, feature_size]) as bytes blocks of at
    most _COPY_BYTES, read rather than mapped: bounded memory, whatever the file's size.

    Returns:
      N, the rows read (the value of `yield from`).

    Raises:
      OutputError: `path` is not such a file, or is shorter than its header says.
    """
    damaged = "%s is damaged: pass --overwrite to start afresh" % path
    with open(path, "rb") as file:
        try:
            if np.lib.format.read_magic(file) != (1, 0):
                raise ValueError("not format 1.0")
            shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(file)
        except ValueError:
            raise OutputError(damaged) from None
        if dtype != np.float32 or fortran_order or len(shape) != 2 or shape[1] != feature_size:
            raise OutputError(damaged)
        remaining = shape[0] * feature_size * dtype.itemsize
        while remaining:
            block = file.read(min(remaining, _COPY_BYTES))
            if not block:
                raise OutputError(damaged)
            remaining -= len(block)
            yield block
    return shape[0]
