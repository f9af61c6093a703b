"""FeatureWriter: the lifecycle every format shares (open or resume, commit, finalise, abort).

The base class owns the commit record and the checks; each format is a subclass that
overrides the hooks at the bottom of the class (`_data_is_gone`, `_resume`, `_reopen`,
`_append`, `_undo_partial_write`, `_finish`, `_after_complete`, `_release`) and never asks
which format it is.
"""

import errno
import heapq

import numpy as np

from parallel.output.csv_rows import encode_name
from parallel.output.durable import DamagedOutput, OutputError, is_disk_full
from parallel.output.record import new_record, save_record


def path_order(path):
    """The order of an engine's output: its rows in path order."""
    return path


def sorted_runs(paths, key=path_order):
    """(start, stop) of the maximal stretches of `paths` that are in increasing order of `key(path)`."""
    runs, start = [], 0
    for index in range(1, len(paths)):
        if key(paths[index]) < key(paths[index - 1]):
            runs.append((start, index))
            start = index
    runs.append((start, len(paths)))
    return runs


def merged_order(paths, runs, key=path_order):
    """Row indices in the order of `key(path)`: a streaming merge of the sorted runs (memory: one cursor per run)."""
    return heapq.merge(*(range(start, stop) for start, stop in runs), key=lambda row: key(paths[row]))


class FeatureWriter:
    """Commits (paths, features) batches to one output; see `parallel.output` for the files.

    Attributes:
      output: Path of the output file.
      format: one of FORMATS (a class attribute of each format's subclass).
      feature_size: D, floats per row.
      completed: frozenset of the paths committed by earlier runs of this output (as of
        open; rows written through this writer are not added).
      rows_committed: rows in the output, earlier runs included.

    Use `open_writer` to make one. A context manager too: close() on success, abort() on an
    exception.
    """

    format = None

    def __init__(self, output, column_prefix, feature_size, settings, record):
        self.output = output
        self.column_prefix = column_prefix
        self.feature_size = feature_size
        self._settings = settings
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
            except OutputError as error:  # its files are not what its record says
                raise DamagedOutput(str(error)) from None
            if len(paths) != self._record["rows"]:
                raise DamagedOutput("%s holds %d committed rows but its sidecar records %d: pass --overwrite to "
                                    "start afresh" % (output, len(paths), self._record["rows"]))
            self.completed = frozenset(paths)
            if len(self.completed) != len(paths):
                raise DamagedOutput("%s holds a path twice: pass --overwrite to start afresh" % output)
        except BaseException:
            self._release()
            raise
        self._written = set()  # by this writer: with `completed`, what a new row must not repeat
        self._order = paths  # every committed path, in the order of the rows; write() appends
        self.order = None  # a key of a row's path, its place in the finished output (None: as written)
        self.record_digests = False

    def has_row(self, path):
        """Whether `path` has a row in the output: committed by an earlier run, or written by this writer."""
        return path in self.completed or path in self._written

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
        record = new_record(self._settings)
        try:
            save_record(self.output, record)
        except OSError as error:
            raise OutputError(self._describe_os_error(error, "cannot write in folder %s" % folder)) from error
        self._record = record

    def _commit(self, **changes):
        record = dict(self._record, **changes)
        save_record(self.output, record)
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
                self._finish(sorted_runs(self._order, self.order) if self.order else [(0, len(self._order))])
                self._commit(state="complete", parts=0, **self._completion())  # the parts are deleted next
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
                encode_name(path)
            except UnicodeEncodeError:
                raise ValueError("path %r is not a file name (a surrogate that os.fsdecode does not make)"
                                 % (path,)) from None
        return paths, np.ascontiguousarray(features, dtype=np.float32)

    def _describe_os_error(self, error, what):
        rows = self._record["rows"] if self._record else 0
        if is_disk_full(error):
            return "disk full while writing %s: %d rows committed, rerun to resume" % (self.output, rows)
        if isinstance(error, PermissionError) or error.errno == errno.EROFS:
            return "%s: %s: choose another --output" % (what, error.strerror or error)
        suffix = ": %d rows committed, rerun to resume" % rows if rows else ""
        return "%s: %s%s" % (what, error.strerror or error, suffix)

    # -- the hooks each format overrides -----------------------------------------------

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
        """Writes and commits one batch: paths, list of str; features, float32 [len(paths), D]."""
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

    def _completion(self):
        """What the commit record holds of the finished output besides its state ({key: value}): where
        `record_digests`, the size and SHA-256 of its files, which a resume checks."""
        return {}

    def _after_complete(self):
        """Cleans up once the output is marked complete."""

    def _release(self):
        """Closes open files."""
