"""Writes (paths, features) batches to CSV, Parquet or npy: streaming, crash-safe, resumable.

    writer = open_writer("results/features.csv", feature_size=4096, settings={"model": "vgg16"})
    todo = [path for path in paths if path not in writer.completed]   # resume
    for batch_paths, batch_features in batches(todo):
        writer.write(batch_paths, batch_features)   # committed once it returns
    writer.close()

Every `write()` is a commit: once it returns, its rows survive a crash or a SIGKILL.
Re-opening the same output with the same settings resumes it: `completed` holds the
paths committed by earlier runs, and writing the rest produces what one uninterrupted run
would have (every row once, in the order written, no partial line; for CSV the same bytes).

Files, for an output `O` (all beside it; nothing in an image name can change where a
file is written):

    O                  the output. csv: grows as rows commit. parquet, npy: written by close().
    O.run.json         the sidecar: the settings the output was written with and the commit
                       record (state "writing" or "complete", rows, csv bytes, parts). It is
                       kept after close(), so that a rerun can tell a finished output of the same
                       settings (nothing to do) from a different job (refused).
    O.parts/           parquet, npy: one committed part per write(), until close() merges them:
                       part-000000.parquet, or part-000000.npy + part-000000.paths.csv.
    O.paths.csv        npy: the paths, one column `path`, in the rows' order.
    O.errors.csv       `ErrorLog`: the images that failed in the last run.
    *.tmp              transient: written, fsync'ed, then renamed over the real name.

Only regular files are ever replaced or removed (O.parts/ only when it is a real folder):
something else under one of these names (a device, a FIFO, a socket, a folder, a symbolic
link) is refused with an OutputError, and nothing is removed.

Commit protocol: data first (appended or written to a part, flushed, fsync'ed), then the
sidecar is atomically replaced (temp file, fsync, os.replace, fsync of the folder). On
open the sidecar is the truth: a CSV is truncated to its committed length (dropping a
partial line left by a kill), parts beyond the committed count are deleted.

CSV: header `path,<prefix>_0,...,<prefix>_{D-1}`, "\\n" line ends, UTF-8. `path` is quoted
when it holds a comma, a double quote, "\\r" or "\\n" (the csv module's QUOTE_MINIMAL with its
default "\\r\\n" line ends; with "\\n" line ends the csv module would leave a lone "\\r"
unquoted, and its reader would then split the name). A leading = + - @ is kept as is: the
name is data, not a formula. Bytes of a file name that are not valid UTF-8 arrive as lone
surrogates (os.fsdecode) and are written back as the raw original bytes (surrogateescape),
so the CSV holds exactly the file system's name. Floats are the shortest decimal that
parses back to the identical float32 (polars, ryu); NaN is written as `NaN` (NaN payloads
and sign are not kept), infinities as `inf` and `-inf`. To read it back:

    pd.read_csv(O, index_col="path", keep_default_na=False,
                dtype={"path": object}, encoding_errors="surrogateescape")

`keep_default_na=False` stops pandas turning an image named "NA", "null" or "nan" into a
missing value; it also stops pandas parsing a feature written as `NaN` (real features are
finite; if yours are not, add `na_values={column: ["NaN"] for column in feature columns}`).
`dtype={"path": object}` is needed for names that are not UTF-8 only: pandas 3's default
string type (Arrow) cannot hold them. polars reads the file too, except such names.
With the csv module: `open(O, newline="", encoding="utf-8", errors="surrogateescape")`.

Parquet: columns `path` (string: the name, with bytes that are not UTF-8 shown as
backslash escapes such as `\\xff`, because Arrow strings must be valid UTF-8), `path_bytes`
(binary: the exact bytes of the name, `os.fsencode(path)`), and the features as ONE column
named `<prefix>` of type fixed_size_list<float32>[D]: 4096 separate columns make Parquet
slow to write and read, while a list column is compact, polars reads it as an Array column
(`.to_numpy()` gives float32 [N, D]) and pandas as arrays (`np.stack(frame[prefix])`).

npy: `O` is float32 [N, D] (np.load(O, mmap_mode="r")), `O.paths.csv` the paths of its rows.
"""

import bisect
import contextlib
import csv
import errno
import heapq
import io
import itertools
import json
import mmap
import os
import re
import shutil
import stat
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl

FORMATS = ("csv", "parquet", "npy")

SIDECAR_SUFFIX = ".run.json"
PARTS_SUFFIX = ".parts"
PATHS_SUFFIX = ".paths.csv"
ERRORS_SUFFIX = ".errors.csv"
_TEMPORARY_SUFFIX = ".tmp"
_SIDECAR_VERSION = 1
# Parquet row groups of about this many bytes of features when close() merges the parts.
_ROW_GROUP_BYTES = 64 << 20
# close() copies the npy parts into the output in blocks of this many bytes: bounded memory.
_COPY_BYTES = 16 << 20
_PART_PATTERN = re.compile(r"part-(\d{6})\.(parquet|npy|paths\.csv)(\.tmp)?")
_NEEDS_QUOTES = re.compile('[,"\r\n]')


class OutputError(ValueError):
    """The output cannot be written or resumed; the message is one line saying what to do."""


def sidecar_path(output):
    """`<output>.run.json`: settings and commit record of `output` (str or Path)."""
    return _beside(Path(output), SIDECAR_SUFFIX)


def _beside(output, suffix):
    return output.with_name(output.name + suffix)


def _encode_name(path):
    """The exact bytes of a file name given as os.fsdecode'd text (surrogateescape)."""
    return path.encode("utf-8", "surrogateescape")


def _decode_name(raw):
    return raw.decode("utf-8", "surrogateescape")


def _csv_field(text):
    """`text` as a CSV field: quoted when it holds a comma, a quote, "\\r" or "\\n"."""
    if _NEEDS_QUOTES.search(text):
        return '"' + text.replace('"', '""') + '"'
    return text


def _csv_line(fields):
    return ",".join(_csv_field(field) for field in fields) + "\n"


def _fsync(path):
    """Makes a file's data, or a folder's entries, durable: a rename or a new file is durable
    only once the folder holding it is synced."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_all(descriptor, data):
    """Writes all of `data` (bytes, or a C-contiguous array as its raw bytes): a full disk is an OSError."""
    view = memoryview(data).cast("B")  # byte offsets, also for a 2-D array
    while view:
        written = os.write(descriptor, view)
        view = view[written:]


def _replace_atomically(path, data):
    """Replaces the file `path` by `data` (bytes): all of the old content or all of the new."""
    temporary = _beside(path, _TEMPORARY_SUFFIX)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    _fsync(path.parent)


def _sorted_runs(paths):
    """(start, stop) of the maximal stretches of `paths` that are in increasing order."""
    runs, start = [], 0
    for index in range(1, len(paths)):
        if paths[index] < paths[index - 1]:
            runs.append((start, index))
            start = index
    runs.append((start, len(paths)))
    return runs


def _merged_order(paths, runs):
    """Row indices in path order: a streaming merge of the sorted runs (memory: one cursor per run)."""
    return heapq.merge(*(range(start, stop) for start, stop in runs), key=paths.__getitem__)


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _is_disk_full(error):
    return getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT)


_REGULAR_FILE = "a regular file"
_FILE_KINDS = ((stat.S_ISREG, _REGULAR_FILE), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISSOCK, "a socket"))


def _refuse_unless(path, allowed, advice):
    """Raises OutputError unless `path` is missing or is `allowed` (_REGULAR_FILE or "a folder").

    A symbolic link is never followed: replacing or removing it, or what it points to, could
    destroy a file that is not this program's (an input image, a device node).

    Returns:
      `allowed`, or None when nothing is at `path`.
    """
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise OutputError("cannot inspect %s: %s: %s" % (path, error.strerror, advice)) from error
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    if kind != allowed:
        raise OutputError("%s is %s; not replacing it: %s" % (path, kind, advice))
    return kind


_FORMAT_THREADS = max(1, min(4, os.cpu_count() or 1))
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
        pieces += (_encode_name(_csv_field(path)), b",", row, b"\n")
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
        paths.append(_decode_name(raw))
        if line_starts is not None:
            line_starts.append(position)
        position = newline + 1
    if line_starts is not None:
        line_starts.append(position)
    return paths


def _validate(output, output_format, column_prefix, feature_size, settings):
    if output_format not in FORMATS:
        raise ValueError("format=%r; expected one of %s" % (output_format, ", ".join(FORMATS)))
    if isinstance(feature_size, bool) or not isinstance(feature_size, (int, np.integer)) or feature_size < 1:
        raise ValueError("feature_size must be a positive integer; got %r" % (feature_size,))
    if not isinstance(column_prefix, str) or not column_prefix or _NEEDS_QUOTES.search(column_prefix):
        raise ValueError("column_prefix must be a non-empty name without comma, quote or newline; got %r"
                         % (column_prefix,))
    if not isinstance(settings, Mapping):
        raise ValueError("settings must be a dict of strings; got %r" % (settings,))
    for key, value in settings.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError("settings must map strings to strings; got %r: %r" % (key, value))
    # The writer's own entries: another format, column prefix or feature size is another output.
    own = {"format": output_format, "column_prefix": column_prefix, "feature_size": str(int(feature_size))}
    for key, value in own.items():
        if key in settings and settings[key] != value:
            raise ValueError("settings[%r]=%r contradicts %s=%r" % (key, settings[key], key, value))
    try:
        output = Path(output)
    except TypeError:
        raise ValueError("output must be a file path; got %r" % (output,)) from None
    if output.is_dir():
        raise OutputError("--output %s is a folder; give a file name" % output)
    return output, dict(settings, **own)


def open_writer(output, *, format="csv", column_prefix="fc7", feature_size, settings, overwrite=False,
                sort_paths=False):
    """Opens `output` for writing: a new output, or the resumption of an earlier one.

    Args:
      output: str or Path of the output file; missing parent folders are created.
      format: one of FORMATS.
      column_prefix: feature column names are `<prefix>_<i>` (csv) or the list column `<prefix>`.
      feature_size: D, floats per row.
      settings: flat dict of str -> str recorded in `<output>.run.json`: what determines the
        features (model, layer, weights identity, resize, ...). An existing output recorded
        with other settings is never appended to.
      overwrite: remove the output, its sidecar, parts and errors file first and start afresh.
      sort_paths: the finished output's rows are in path order, whatever order they were
        written in (the engine's outputs): rows of a rerun that sort before committed ones (an
        image repaired after it failed) are merged into place by close(). False: rows stay in
        the order written.

    Returns:
      FeatureWriter; its `completed` holds the paths committed by earlier runs.

    Raises:
      ValueError: a bad argument (the value is in the message).
      OutputError: the output exists with other settings, exists but was not written by this
        module, is damaged, or its folder cannot be written; or the output, or a file beside
        it that would be replaced, is not a regular file (a device, a FIFO, a link, ...).
    """
    output, recorded = _validate(output, format, column_prefix, feature_size, settings)
    for path in (output, sidecar_path(output)):
        # With or without --overwrite: it would not replace them either, so the way out is another output.
        _refuse_unless(path, _REGULAR_FILE, "choose another --output")
    writer_class = _CsvWriter if format == "csv" else _PartsWriter
    if overwrite:
        _remove_everything(output)
    record = _read_sidecar(output)
    if record is not None:
        _check_settings(output, record["settings"], recorded)
    elif output.exists():
        raise OutputError("%s exists and was not written by this program (no %s): pass --overwrite to replace "
                          "it or choose another --output" % (output, sidecar_path(output).name))
    writer = writer_class(output, format, column_prefix, int(feature_size), recorded, record)
    writer.sort_paths = bool(sort_paths)
    return writer


def _remove_everything(output):
    """--overwrite: the data before the sidecar, so that a kill part-way leaves no foreign-looking file.

    Everything is checked before anything is removed: a name held by something other than a
    regular file (the parts: a real folder) stops --overwrite with nothing removed.
    """
    data = (output, _beside(output, PATHS_SUFFIX), _beside(output, ERRORS_SUFFIX),
            _beside(output, _TEMPORARY_SUFFIX), _beside(output, PATHS_SUFFIX + _TEMPORARY_SUFFIX))
    records = (sidecar_path(output), _beside(sidecar_path(output), _TEMPORARY_SUFFIX))
    parts = _beside(output, PARTS_SUFFIX)
    advice = "move it away or choose another --output"
    for path in data + records:
        _refuse_unless(path, _REGULAR_FILE, advice)
    parts_exist = _refuse_unless(parts, "a folder", advice)
    try:
        for path in data:
            _remove(path)
        if parts_exist:
            shutil.rmtree(parts)
        for path in records:
            _remove(path)
    except OSError as error:
        raise OutputError("--overwrite: cannot remove the old %s: %s" % (output, error.strerror)) from error


def _read_sidecar(output):
    path = sidecar_path(output)
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None  # a folder that cannot be created is reported when it is created
    except OSError as error:
        raise OutputError("cannot read %s: %s" % (path, error.strerror)) from error
    try:
        record = json.loads(text)
        if record.get("version") != _SIDECAR_VERSION or not isinstance(record.get("settings"), dict):
            raise ValueError(record.get("version"))
        for key in ("state", "rows", "bytes", "parts"):
            record[key]  # noqa: B018 -- a missing key is a damaged sidecar
    except (ValueError, KeyError, AttributeError):
        raise OutputError("%s is damaged or from another version: pass --overwrite to start afresh or choose "
                          "another --output" % path) from None
    return record


def _check_settings(output, old, new):
    differences = ["%s=%r, not %r" % (key, old.get(key), new.get(key))
                   for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    if differences:
        raise OutputError("%s was written with other settings (%s): pass --overwrite to replace it or choose "
                          "another --output" % (output, "; ".join(differences)))


def read_record(output):
    """The commit record of `output` (its settings, "state", "rows"), or None for a new output.

    Read-only: a caller can refuse a job before anything is written.

    Raises:
      OutputError: the sidecar is damaged or from another version.
    """
    return _read_sidecar(Path(output))


def check_settings(output, recorded, expected, ignore=()):
    """Refuses an output recorded with other settings than `expected`.

    Args:
      output: the output, for the message.
      recorded: settings from `read_record(output)["settings"]`.
      expected: the settings of the new run.
      ignore: keys not known yet (e.g. "feature_size" before the graph is built).

    Raises:
      OutputError: a setting differs; the message names each difference.
    """
    _check_settings(output, {key: value for key, value in recorded.items() if key not in ignore},
                    {key: value for key, value in expected.items() if key not in ignore})


class FeatureWriter:
    """Commits (paths, features) batches to one output; see the module docstring for the files.

    Attributes:
      output: Path of the output file.
      format: one of FORMATS.
      feature_size: D, floats per row.
      completed: frozenset of the paths committed by earlier runs of this output (as of
        open; rows written through this writer are not added).
      rows_committed: rows in the output, earlier runs included.

    Use `open_writer` to make one. A context manager too: close() on success, abort() on an
    exception.
    """

    def __init__(self, output, output_format, column_prefix, feature_size, settings, record):
        self.output = output
        self.format = output_format
        self.column_prefix = column_prefix
        self.feature_size = feature_size
        self._settings = settings
        self._sidecar = sidecar_path(output)
        self._closed = False
        self._failed = None
        self._record = record
        try:
            if record is None or self._data_is_gone(record):
                self._start()
            try:
                paths = self._resume()
            except OSError as error:
                raise OutputError(self._describe_os_error(error, "cannot resume %s" % output)) from error
            if len(paths) != self._record["rows"]:
                raise OutputError("%s holds %d committed rows but its sidecar records %d: pass --overwrite to "
                                  "start afresh" % (output, len(paths), self._record["rows"]))
            self.completed = frozenset(paths)
            if len(self.completed) != len(paths):
                raise OutputError("%s holds a path twice: pass --overwrite to start afresh" % output)
        except BaseException:
            self._release()
            raise
        self._written = set()  # by this writer: with `completed`, what a new row must not repeat
        self._order = paths  # every committed path, in the order of the rows; write() appends
        self.sort_paths = False

    @property
    def rows_committed(self):
        return self._record["rows"]

    # -- the commit record ------------------------------------------------------------

    def _start(self):
        """A fresh output: the sidecar first, so that the data file is never without one."""
        self._record = None
        folder = self.output.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise OutputError(self._describe_os_error(error, "cannot create folder %s for --output %s"
                                                      % (folder, self.output))) from error
        record = {"version": _SIDECAR_VERSION, "settings": self._settings, "state": "writing",
                  "rows": 0, "bytes": 0, "parts": 0}
        try:
            self._save(record)
        except OSError as error:
            raise OutputError(self._describe_os_error(error, "cannot write in folder %s" % folder)) from error
        self._record = record

    def _save(self, record):
        data = (json.dumps(record, indent=1, ensure_ascii=True) + "\n").encode("ascii")
        _replace_atomically(self._sidecar, data)

    def _commit(self, **changes):
        record = dict(self._record, **changes)
        self._save(record)
        self._record = record

    # -- the public API ---------------------------------------------------------------

    def write(self, paths, features):
        """Appends one row per path and commits them (durable when this returns).

        Args:
          paths: list of str, relative image paths (as from os.fsdecode), none committed before.
          features: float [len(paths), feature_size], stored as float32.

        Raises:
          ValueError: bad arguments, or a path already committed (nothing is written).
          OutputError: the disk is full or the output cannot be written; rows committed
            before stay committed, and a rerun resumes after them.
        """
        self._check_open()
        paths, features = self._check_batch(paths, features)
        if not paths:
            return
        try:
            if self._record["state"] == "complete":
                self._reopen()
            self._append(paths, features)
        except OSError as error:
            self._failed = error
            self._undo_partial_write()
            raise OutputError(self._describe_os_error(error, "cannot write %s" % self.output)) from error
        self._written.update(paths)
        self._order.extend(paths)

    def close(self):
        """Finalises the output (parquet, npy: merges the parts into it) and marks it complete."""
        if self._closed:
            return
        if self._failed is not None:
            self.abort()
            raise OutputError("%s was not finalised after a failed write: %d rows committed, rerun to resume"
                              % (self.output, self.rows_committed))
        try:
            if self._record["state"] != "complete":
                self._finish(_sorted_runs(self._order) if self.sort_paths else [(0, len(self._order))])
                self._commit(state="complete", parts=0)  # the parts are deleted next
                self._after_complete()
        except OSError as error:
            self.abort()
            raise OutputError(self._describe_os_error(error, "cannot finalise %s" % self.output)) from error
        self._release()
        self._closed = True

    def abort(self):
        """Stops without finalising: committed rows stay committed, and a rerun resumes."""
        if not self._closed:
            self._closed = True
            self._release()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.close()
        else:
            self.abort()

    # -- shared checks ----------------------------------------------------------------

    def _check_open(self):
        if self._closed:
            raise ValueError("write() on a closed writer for %s" % self.output)
        if self._failed is not None:
            raise OutputError("%s: an earlier write failed (%s): %d rows committed, rerun to resume"
                              % (self.output, self._failed, self.rows_committed))

    def _check_batch(self, paths, features):
        if isinstance(paths, (str, bytes)):
            raise ValueError("paths must be a list of str; got %r" % (paths,))
        paths = list(paths)
        features = np.asarray(features)
        if features.ndim != 2 or features.shape != (len(paths), self.feature_size):
            raise ValueError("features must be [%d, %d] (one row per path); got shape %s"
                             % (len(paths), self.feature_size, features.shape))
        if not np.issubdtype(features.dtype, np.floating):
            raise ValueError("features must be floats; got dtype %s" % features.dtype)
        seen = set()
        for path in paths:
            if not isinstance(path, str) or not path:
                raise ValueError("each path must be a non-empty str; got %r" % (path,))
            if path in self.completed or path in self._written or path in seen:
                raise ValueError("path %r is already in %s" % (path, self.output))
            seen.add(path)
            try:
                _encode_name(path)
            except UnicodeEncodeError:
                raise ValueError("path %r is not a file name (a surrogate that os.fsdecode does not make)"
                                 % (path,)) from None
        return paths, np.ascontiguousarray(features, dtype=np.float32)

    def _describe_os_error(self, error, what):
        rows = self._record["rows"] if self._record else 0
        if _is_disk_full(error):
            return "disk full while writing %s: %d rows committed, rerun to resume" % (self.output, rows)
        if isinstance(error, PermissionError) or error.errno == errno.EROFS:
            return "%s: %s: choose another --output" % (what, error.strerror or error)
        suffix = ": %d rows committed, rerun to resume" % rows if rows else ""
        return "%s: %s%s" % (what, error.strerror or error, suffix)

    # -- per format -------------------------------------------------------------------

    def _data_is_gone(self, record):
        """Whether nothing of the recorded output is left (deleted by hand): then start afresh."""
        raise NotImplementedError

    def _resume(self):
        """Makes the files agree with the commit record; returns the committed paths in order.

        Raises OSError (turned into OutputError by the caller) or OutputError.
        """
        raise NotImplementedError

    def _reopen(self):
        """Makes a complete output writable again (new rows for a finished job)."""
        raise NotImplementedError

    def _append(self, paths, features):
        raise NotImplementedError

    def _undo_partial_write(self):
        """Best effort after a failed write; reopening would do the same."""

    def _finish(self, runs):
        """Writes the final output, its rows in path order, before it is marked complete.

        Args:
          runs: (start, stop) row ranges, each in path order, covering the rows as committed;
            more than one when a rerun computed images that sort before rows of an earlier
            run (an image that failed, then was repaired).
        """

    def _after_complete(self):
        """Cleans up once the output is marked complete."""

    def _release(self):
        """Closes open files."""


class _CsvWriter(FeatureWriter):
    """CSV: rows appended to the output itself; the commit record holds its length in bytes."""

    def _data_is_gone(self, record):
        return not self.output.exists()

    def _resume(self):
        record = self._record
        header = csv_header(self.column_prefix, self.feature_size)
        self._descriptor = os.open(self.output, os.O_RDWR | os.O_CREAT, 0o644)
        committed = record["bytes"]
        size = os.fstat(self._descriptor).st_size
        if size < committed:
            raise OutputError("%s is shorter (%d bytes) than its committed length (%d): it was changed by "
                              "something else; pass --overwrite to start afresh" % (self.output, size, committed))
        if size > committed:
            if record["state"] == "complete":
                raise OutputError("%s changed after it was completed (%d bytes, %d recorded): pass --overwrite "
                                  "to start afresh" % (self.output, size, committed))
            os.ftruncate(self._descriptor, committed)  # a partial line left by a kill
            os.fsync(self._descriptor)
        if committed == 0:  # killed before the header was committed
            _write_all(self._descriptor, header)
            os.fsync(self._descriptor)
            _fsync(self.output.parent)
            self._commit(bytes=len(header))
            return []
        os.lseek(self._descriptor, 0, os.SEEK_SET)
        if os.read(self._descriptor, len(header)) != header:
            raise OutputError("%s does not start with the expected header (path,%s_0,...,%s_%d): pass "
                              "--overwrite to start afresh" % (self.output, self.column_prefix,
                                                               self.column_prefix, self.feature_size - 1))
        os.lseek(self._descriptor, committed, os.SEEK_SET)
        if committed == len(header):
            return []
        with mmap.mmap(self._descriptor, committed, access=mmap.ACCESS_READ) as data:
            try:
                return read_csv_paths(data, len(header))
            except OutputError as error:
                raise OutputError("%s is damaged (%s): pass --overwrite to start afresh" % (self.output, error)
                                  ) from None

    def _reopen(self):
        self._commit(state="writing")

    def _finish(self, runs):
        if len(runs) == 1:
            return  # appended in order: the file is the output
        # Lines are copied in path order into a new file that replaces the old one: the same
        # bytes, rows and length, so the commit record holds for both, whenever a kill comes.
        committed = self._record["bytes"]
        header = len(csv_header(self.column_prefix, self.feature_size))
        with mmap.mmap(self._descriptor, committed, access=mmap.ACCESS_READ) as data:
            line_starts = []
            read_csv_paths(data, header, line_starts)
            with _temporary_then_rename(self.output) as temporary, open(temporary, "wb") as file:
                file.write(data[:header])
                for row in _merged_order(self._order, runs):
                    file.write(data[line_starts[row]:line_starts[row + 1]])
        _fsync(self.output.parent)

    def _append(self, paths, features):
        block = format_rows(paths, features)
        # The file offset is the committed length: set on open, and after a failed write.
        _write_all(self._descriptor, block)
        os.fsync(self._descriptor)
        self._commit(rows=self._record["rows"] + len(paths), bytes=self._record["bytes"] + len(block))

    def _undo_partial_write(self):
        try:
            os.ftruncate(self._descriptor, self._record["bytes"])
            os.lseek(self._descriptor, self._record["bytes"], os.SEEK_SET)
        except OSError:
            pass  # the next open truncates

    def _release(self):
        descriptor, self._descriptor = getattr(self, "_descriptor", None), None
        if descriptor is not None:
            os.close(descriptor)


class _PartsWriter(FeatureWriter):
    """Parquet and npy: one part file per write(); close() merges them into the output."""

    def __init__(self, *args):
        output = args[0]
        self._parts = _beside(output, PARTS_SUFFIX)
        self._finals = [output] + ([_beside(output, PATHS_SUFFIX)] if args[1] == "npy" else [])
        super().__init__(*args)

    def _part(self, index, extension):
        return self._parts / ("part-%06d.%s" % (index, extension))

    def _part_files(self, index):
        if self.format == "parquet":
            return [self._part(index, "parquet")]
        return [self._part(index, "npy"), self._part(index, "paths.csv")]

    def _data_is_gone(self, record):
        if record["state"] == "complete":
            return not all(path.exists() for path in self._finals)
        return record["parts"] > 0 and not self._parts.exists()

    def _resume(self):
        record = self._record
        for path in self._finals:
            _remove(_beside(path, _TEMPORARY_SUFFIX))
        if record["state"] == "complete":
            self._remove_parts()  # killed after the merge was committed
            if self.format == "parquet":
                return _parquet_paths(self.output)
            return _read_paths_csv(self._finals[1])
        for path in self._finals:  # a merge that was never committed
            _remove(path)
        if not self._parts.exists():
            self._parts.mkdir()
            _fsync(self.output.parent)
        for entry in os.listdir(self._parts):
            match = _PART_PATTERN.fullmatch(entry)
            if match is None:
                raise OutputError("%s holds %s, which this program did not write: move it away or pass "
                                  "--overwrite" % (self._parts, entry))
            if match.group(3) or int(match.group(1)) >= record["parts"]:
                _remove(self._parts / entry)  # never committed
        paths = []
        for index in range(record["parts"]):
            for path in self._part_files(index):
                if not path.exists():
                    raise OutputError("%s is missing: pass --overwrite to start afresh" % path)
            paths.extend(self._read_part_paths(index))
        return paths

    def _read_part_paths(self, index):
        if self.format == "parquet":
            return _parquet_paths(self._part(index, "parquet"))
        return _read_paths_csv(self._part(index, "paths.csv"))

    def _reopen(self):
        """The finished output becomes part 0 (hard links, so a kill leaves it intact)."""
        self._remove_parts()
        self._parts.mkdir()
        for final, part in zip(self._finals, self._part_files(0)):
            try:
                os.link(final, part)
            except OSError:
                shutil.copyfile(final, part)
                _fsync(part)
        _fsync(self._parts)
        self._commit(state="writing", parts=1)
        for final in self._finals:
            _remove(final)

    def _append(self, paths, features):
        index = self._record["parts"]
        for part in self._part_files(index):
            _remove(part)  # a leftover of a failed write
        if self.format == "parquet":
            _write_parquet(self._part(index, "parquet"), paths, features, self.column_prefix, compression="none")
        else:
            with _temporary_then_rename(self._part(index, "npy")) as temporary:
                _write_npy(temporary, len(features), self.feature_size, [features])
            _write_paths_csv(self._part(index, "paths.csv"), paths)
        _fsync(self._parts)
        self._commit(rows=self._record["rows"] + len(paths), parts=index + 1)

    def _finish(self, runs):
        part_count = self._record["parts"]
        try:
            if len(runs) > 1:  # rows of a rerun sort before earlier ones: merged back into path order
                self._merge_sorted(runs, part_count)
            elif self.format == "parquet":
                self._merge_parquet(part_count)
            else:
                self._merge_npy(part_count)
            _fsync(self.output.parent)
        except Exception:
            # The output may be in place already (npy: without its paths). Until the commit
            # nothing may look finished; the parts stay, and a rerun merges them again.
            for final in self._finals:
                try:
                    _remove(final)
                except OSError:
                    pass  # the next open removes it; the error that brought us here matters more
            raise

    def _merge_parquet(self, part_count):
        import pyarrow as pa
        import pyarrow.parquet as pq
        schema = _parquet_schema(self.column_prefix, self.feature_size)
        rows_per_group = max(1, _ROW_GROUP_BYTES // (4 * self.feature_size))
        with _temporary_then_rename(self.output) as temporary:
            with _parquet_writer(temporary, schema, _PARQUET_OPTIONS) as parquet:
                # Small parts are gathered into row groups of about _ROW_GROUP_BYTES; a big part
                # (a finished output that new rows were added to) is read a row group at a time.
                pending, pending_rows = [], 0
                for index in range(part_count):
                    # with: a failed write (disk full) closes the part now, not when its traceback goes.
                    with pq.ParquetFile(self._part(index, "parquet")) as part:
                        for batch in part.iter_batches(batch_size=rows_per_group):
                            pending.append(batch)
                            pending_rows += batch.num_rows
                            if pending_rows >= rows_per_group:
                                parquet.write_table(pa.Table.from_batches(pending, schema),
                                                    row_group_size=rows_per_group)
                                pending, pending_rows = [], 0
                if pending:
                    parquet.write_table(pa.Table.from_batches(pending, schema))

    def _merge_npy(self, part_count):
        # closing(): on a failed write the part being read is closed now, not when the traceback goes.
        with _temporary_then_rename(self.output) as temporary, \
                contextlib.closing(self._npy_part_blocks(part_count)) as blocks:
            _write_npy(temporary, self._record["rows"], self.feature_size, blocks)
        _write_paths_csv(self._finals[1], (path for index in range(part_count)
                                           for path in self._read_part_paths(index)))

    def _merge_sorted(self, runs, part_count):
        """The output from the parts, rows in path order: a streaming merge of the sorted runs,
        each read one part at a time (memory: a part per run, and a chunk of the output)."""
        starts = [0]
        for index in range(part_count):
            starts.append(starts[-1] + len(self._read_part_paths(index)))
        chunk_rows = max(1, _ROW_GROUP_BYTES // (4 * self.feature_size))
        # ExitStack: on a failure (disk full) every part being read is closed now, not when the traceback goes.
        with contextlib.ExitStack() as streams, _temporary_then_rename(self.output) as temporary:
            merged = heapq.merge(*(streams.enter_context(contextlib.closing(self._rows(start, stop, starts)))
                                   for start, stop in runs), key=lambda row: row[0])
            chunks = ((paths, np.stack(features)) for paths, features in
                      (zip(*chunk) for chunk in iter(lambda: list(itertools.islice(merged, chunk_rows)), [])))
            if self.format == "npy":
                _write_npy(temporary, self._record["rows"], self.feature_size,
                           (features for _, features in chunks))
            else:
                schema = _parquet_schema(self.column_prefix, self.feature_size)
                with _parquet_writer(temporary, schema, _PARQUET_OPTIONS) as parquet:
                    for paths, features in chunks:
                        parquet.write_table(_parquet_table(paths, features, self.column_prefix),
                                            row_group_size=chunk_rows)
        if self.format == "npy":
            _write_paths_csv(self._finals[1], sorted(self._order))

    def _rows(self, start, stop, starts):
        """(path, features float32 [D]) of rows start .. stop - 1, read part by part; `starts`
        holds the first row of each part."""
        index = bisect.bisect_right(starts, start) - 1
        row = starts[index]
        while row < stop:
            for features in self._part_features(index):
                if row >= stop:
                    return
                if row >= start:
                    yield self._order[row], features
                row += 1
            index += 1

    def _part_features(self, index):
        """The feature rows of part `index`, float32 [D] each, in order, a block at a time."""
        if self.format == "npy":
            # Read through a map: only stores through one fault on a full disk; a short file is refused here.
            path = self._part(index, "npy")
            try:
                features = np.load(path, mmap_mode="r")
            except ValueError:
                raise OutputError("%s is damaged: pass --overwrite to start afresh" % path) from None
            if features.dtype != np.float32 or features.shape[1:] != (self.feature_size,):
                raise OutputError("%s is damaged: pass --overwrite to start afresh" % path)
            yield from features
            return
        import pyarrow.parquet as pq
        with pq.ParquetFile(self._part(index, "parquet")) as part:
            for batch in part.iter_batches(columns=[self.column_prefix]):
                values = batch.column(0).flatten().to_numpy(zero_copy_only=False)
                yield from values.reshape(-1, self.feature_size)

    def _npy_part_blocks(self, part_count):
        """The features of parts 0 .. part_count - 1 in order, as bytes blocks of at most _COPY_BYTES."""
        rows = 0
        for index in range(part_count):
            rows += yield from _npy_blocks(self._part(index, "npy"), self.feature_size)
        if rows != self._record["rows"]:
            raise OutputError("%s holds %d rows but its sidecar records %d: pass --overwrite to start afresh"
                              % (self._parts, rows, self._record["rows"]))

    def _after_complete(self):
        self._remove_parts()

    def _remove_parts(self):
        if self._parts.exists():
            shutil.rmtree(self._parts)


class _temporary_then_rename:
    """`with _temporary_then_rename(path) as temporary:` write `temporary` (`<path>.tmp`); on
    success it is fsync'ed and renamed over `path` (atomic), on an exception removed."""

    def __init__(self, path):
        self._path = path
        self._temporary = _beside(path, _TEMPORARY_SUFFIX)

    def __enter__(self):
        _remove(self._temporary)
        return self._temporary

    def __exit__(self, kind, value, traceback):
        try:
            if kind is None:
                _fsync(self._temporary)
                os.replace(self._temporary, self._path)
                return
        except OSError:
            self._discard()
            raise
        self._discard()

    def _discard(self):
        try:
            _remove(self._temporary)
        except OSError:
            pass  # the error that brought us here matters more


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
        _write_all(descriptor, _npy_header(rows, feature_size))
        for block in blocks:
            _write_all(descriptor, block)
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


def _write_paths_csv(path, paths):
    """`path`: a CSV of one column `path` (header included), atomically."""
    with _temporary_then_rename(path) as temporary:
        with open(temporary, "w", newline="", encoding="utf-8", errors="surrogateescape") as file:
            file.write(_csv_line(["path"]))
            file.writelines(_csv_line([name]) for name in paths)


def _read_paths_csv(path):
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as file:
        rows = list(csv.reader(file))
    if not rows or rows[0] != ["path"] or any(len(row) != 1 for row in rows[1:]):
        raise OutputError("%s is damaged: pass --overwrite to start afresh" % path)
    return [row[0] for row in rows[1:]]


def _parquet_schema(column_prefix, feature_size):
    import pyarrow as pa
    return pa.schema([("path", pa.string()), ("path_bytes", pa.binary()),
                      (column_prefix, pa.list_(pa.float32(), feature_size))])


# Unique names and float features gain nothing from dictionaries; statistics only for names.
_PARQUET_OPTIONS = {"use_dictionary": False, "write_statistics": ["path"], "compression": "snappy"}


@contextlib.contextmanager
def _parquet_writer(path, schema, options):
    """A pq.ParquetWriter of `path` whose file is closed on every way out. Given a path,
    pyarrow leaves the file open after a failed write (disk full) until the traceback is
    gone, which keeps the space of the removed temporary file in use."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    with pa.OSFile(str(path), "wb") as sink, pq.ParquetWriter(sink, schema, **options) as parquet:
        yield parquet


def _parquet_table(paths, features, column_prefix):
    """The Parquet output's table of a batch: path, path_bytes, and features float32 [N, D] as one list column."""
    import pyarrow as pa
    raw = [_encode_name(name) for name in paths]
    readable = [name.decode("utf-8", "backslashreplace") for name in raw]
    values = pa.FixedSizeListArray.from_arrays(pa.array(features.reshape(-1)), features.shape[1])
    return pa.Table.from_arrays([pa.array(readable, pa.string()), pa.array(raw, pa.binary()), values],
                                schema=_parquet_schema(column_prefix, features.shape[1]))


def _write_parquet(path, paths, features, column_prefix, compression):
    table = _parquet_table(paths, features, column_prefix)
    with _temporary_then_rename(path) as temporary:
        with _parquet_writer(temporary, table.schema, dict(_PARQUET_OPTIONS, compression=compression)) as parquet:
            parquet.write_table(table)


def _parquet_paths(path):
    import pyarrow.parquet as pq
    column = pq.read_table(path, columns=["path_bytes"]).column("path_bytes")
    return [_decode_name(raw) for raw in column.to_pylist()]


class ErrorLog:
    """`<output>.errors.csv`: one row `path,kind,message` per image that failed in this run.

    Rule: failed images are never committed to the output, so every run retries them; the
    errors file of a run therefore lists exactly the images that failed in that run, and
    the file of the last (completing) run is the full list of images missing from the
    output. Opening an ErrorLog removes the file of the previous run; the file is created
    on the first failure (a run without failures leaves none) and flushed after every row,
    so a killed run keeps the failures it met. Same encoding rules as the CSV output
    (UTF-8, undecodable bytes of names written as the original bytes).
    """

    HEADER = ("path", "kind", "message")

    def __init__(self, output):
        self.path = self.path_for(output)
        self.count = 0
        self._file = None
        _refuse_unless(self.path, _REGULAR_FILE, "move it away or choose another --output")
        try:
            _remove(self.path)
        except OSError as error:
            raise OutputError("cannot remove the old %s: %s" % (self.path, error.strerror)) from error

    @staticmethod
    def path_for(output):
        """Path of the errors file of `output` (str or Path)."""
        return _beside(Path(output), ERRORS_SUFFIX)

    def add(self, path, kind, message):
        """Records one failed image.

        Args:
          path: str, the image path as given to the writer.
          kind: str, a short category (e.g. "decode", "missing").
          message: str, what went wrong (may hold commas, quotes, newlines).
        """
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", newline="", encoding="utf-8", errors="surrogateescape")
            self._file.write(_csv_line(self.HEADER))
        self._file.write(_csv_line([str(path), str(kind), str(message)]))
        self._file.flush()
        self.count += 1

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self.close()
