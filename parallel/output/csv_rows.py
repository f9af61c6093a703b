"""CSV rows: encoding names and floats into lines, and reading the names back.

Header `path,<prefix>_0,...,<prefix>_{D-1}`, "\\n" line ends, UTF-8. `path` is quoted when it
holds a comma, a double quote, "\\r" or "\\n" (the csv module's QUOTE_MINIMAL with its default
"\\r\\n" line ends; with "\\n" line ends the csv module would leave a lone "\\r" unquoted, and its
reader would then split the name). A leading = + - @ is kept as is: the name is data, not a
formula. Bytes of a file name that are not valid UTF-8 arrive as lone surrogates (os.fsdecode)
and are written back as the raw original bytes (surrogateescape), so the CSV holds exactly the
file system's name. Floats are the shortest decimal that parses back to the identical float32
(polars, ryu); NaN is written as `NaN` (NaN payloads and sign are not kept), infinities as
`inf` and `-inf`. To read it back:

    pd.read_csv(O, index_col="path", keep_default_na=False,
                dtype={"path": object}, encoding_errors="surrogateescape")

`keep_default_na=False` stops pandas turning an image named "NA", "null" or "nan" into a
missing value; it also stops pandas parsing a feature written as `NaN` (real features are
finite; if yours are not, add `na_values={column: ["NaN"] for column in feature columns}`).
`dtype={"path": object}` is needed for names that are not UTF-8 only: pandas 3's default
string type (Arrow) cannot hold them. polars reads the file too, except such names.
With the csv module: `open(O, newline="", encoding="utf-8", errors="surrogateescape")`.
"""

import csv
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl

from parallel.output.durable import OutputError, temporary_then_rename

NEEDS_QUOTES = re.compile('[,"\r\n]')


def encode_name(path):
    """The exact bytes of a file name given as os.fsdecode'd text (surrogateescape)."""
    return path.encode("utf-8", "surrogateescape")


def decode_name(raw):
    """A file name's bytes as text, undecodable bytes as lone surrogates (as os.fsdecode gives)."""
    return raw.decode("utf-8", "surrogateescape")


def csv_field(text):
    """`text` as a CSV field: quoted when it holds a comma, a quote, "\\r" or "\\n"."""
    if NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_line(fields):
    """One CSV line of the str `fields`, quoted as needed, ending in "\\n"."""
    return ",".join(csv_field(field) for field in fields) + "\n"


def _available_cores():
    """The cores this process may run on (its CPU affinity, which taskset and cpusets narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


# One thread a core: polars formats a chunk without the GIL, so more threads than cores only
# wait. No fixed cap: a 4-GPU host makes more rows a second than 4 threads format.
_FORMAT_THREADS = max(1, _available_cores())
_format_pool_instance = None
_format_pool_lock = threading.Lock()


def _format_pool():
    """Threads that format CSV rows, started on first use and shared by all writers."""
    global _format_pool_instance
    with _format_pool_lock:
        if _format_pool_instance is None:
            _format_pool_instance = ThreadPoolExecutor(_FORMAT_THREADS, thread_name_prefix="csv-format")
        return _format_pool_instance


def _format_floats(features):
    """float32 [N, D] -> N bytes, b"f_0,...,f_{D-1}": polars (ryu) writes each float as the
    shortest text that parses back to the same float32; it never holds a quote or a newline."""
    text = pl.Series(features.reshape(-1)).cast(pl.String).reshape((-1, features.shape[1])).arr.join(",")
    return text.cast(pl.Binary).to_list()


def format_rows(paths, features):
    """The CSV lines of a batch, without header.

    Args:
      paths: list of str, one per row; undecodable bytes as lone surrogates.
      features: float32 [len(paths), D].

    Returns:
      bytes: one line per row, `path,f_0,...,f_{D-1}\\n`, each float the shortest text that
      parses back to the same float32.
    """
    count = len(features)
    # Chunks of rows are formatted on threads (polars releases the GIL): measured 1.7x
    # faster on 2 cores than one call, and faster than polars.collect_all of lazy frames.
    chunks = min(_FORMAT_THREADS, max(1, count // 8))
    if chunks == 1:
        rows = _format_floats(features)
    else:
        bounds = np.linspace(0, count, chunks + 1).astype(int)
        rows = []
        for chunk in _format_pool().map(_format_floats, [features[start:stop]
                                                         for start, stop in zip(bounds[:-1], bounds[1:])]):
            rows.extend(chunk)
    if len(rows) != count:
        raise RuntimeError("formatted %d lines for %d rows" % (len(rows), count))
    # Joined as bytes: measured faster than joining the 40 kB str rows and encoding once.
    pieces = []
    for path, row in zip(paths, rows):
        pieces += (encode_name(csv_field(path)), b",", row, b"\n")
    return b"".join(pieces)


def csv_header(column_prefix, feature_size):
    """b"path,<prefix>_0,...,<prefix>_{D-1}\\n"."""
    columns = ["path"] + ["%s_%d" % (column_prefix, index) for index in range(feature_size)]
    return (",".join(columns) + "\n").encode("utf-8")


def read_csv_paths(data, start=0, line_starts=None):
    """The `path` field of every line of CSV `data` from byte `start` on.

    Args:
      data: bytes or mmap of a CSV written by this module (paths possibly quoted, holding
        newlines or undecodable bytes; the rest of each line holds no quote or newline).
      start: offset of the first data line (after the header).
      line_starts: a list to which the offset of each line is appended, then the end of
        the last line (so line i is data[line_starts[i]:line_starts[i + 1]]); None: not kept.

    Returns:
      list of str, in file order; undecodable bytes as lone surrogates.

    Raises:
      OutputError: a line is not in that form.
    """
    paths = []
    position, end = start, len(data)
    while position < end:
        if data[position:position + 1] == b'"':
            cursor = position + 1
            while True:
                quote = data.find(b'"', cursor, end)
                if quote < 0:
                    raise OutputError("unterminated quoted path at byte %d" % position)
                if data[quote + 1:quote + 2] != b'"':
                    break
                cursor = quote + 2
            raw = bytes(data[position + 1:quote]).replace(b'""', b'"')
            after = quote + 1
        else:
            after = data.find(b",", position, end)
            newline = data.find(b"\n", position, end)
            if after < 0 or (0 <= newline < after):
                raise OutputError("line at byte %d has no path field" % position)
            raw = bytes(data[position:after])
        if data[after:after + 1] != b",":
            raise OutputError("line at byte %d: path not followed by a comma" % position)
        newline = data.find(b"\n", after, end)
        if newline < 0:
            raise OutputError("line at byte %d has no end" % position)
        paths.append(decode_name(raw))
        if line_starts is not None:
            line_starts.append(position)
        position = newline + 1
    if line_starts is not None:
        line_starts.append(position)
    return paths


def write_paths_csv(path, paths):
    """Writes `path` (a Path), atomically: a CSV of one column `path`, header included.

    Args:
      path: Path of the file.
      paths: iterable of str, one line each, in order.
    """
    with temporary_then_rename(path) as temporary:
        with open(temporary, "w", newline="", encoding="utf-8", errors="surrogateescape") as file:
            file.write(csv_line(["path"]))
            file.writelines(csv_line([name]) for name in paths)


def read_paths_csv(path):
    """The names of a file written by `write_paths_csv`, in order.

    Raises:
      OutputError: `path` is not such a file.
    """
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as file:
        rows = list(csv.reader(file))
    if not rows or rows[0] != ["path"] or any(len(row) != 1 for row in rows[1:]):
        raise OutputError("%s is damaged: pass --overwrite to start afresh" % path)
    return [row[0] for row in rows[1:]]
