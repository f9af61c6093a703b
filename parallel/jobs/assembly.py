"""The output written from a sharded job's committed shards, in shard order, through its ordinary writer.

    Assembly(job, ...).catch_up()   appends every committed shard that comes next, in order, each
                                    checked first (its record, every byte, its rows and errors against
                                    the manifest): a shard that does not check out is set aside
    Assembly.finish()               once every shard is in: O's errors file, O closed (its final
                                    merge), the shards' folder removed

A job's only process (`distributed`, one host) catches up after each shard it commits, in a thread
(`in_background`), so that the output grows shard by shard while the devices compute the next; ranks
do it all at the end, in the process that commits the last shard. Either way under O.lock, through one
writer kept open.

Where the job's failures are retried in the output itself (`ShardedJob.retries_in_output`, and no
Ray actor retries in shards), each shard goes once its rows are committed in O, so that the job
never holds much more than one copy of its rows: O.shards/_assembled.json records how many
shards are in O and the length of O.shards/_assembled_errors.csv, which holds their failed images,
so that a process killed at any moment leaves a state the next one completes:

    rows of shard k appended  (a kill: shard k is still there, and its rows in O are not written twice)
    its errors appended       (the file is cut back to its recorded length first)
    the record says k + 1     (one rename)
    shard k removed           (a kill before: the next process removes it)

Elsewhere (a tar job, a Ray job, --keep-shards) the shards stay until O is written, as the
failures may be retried in them.
"""

import csv
import io
import json
import os
import shutil
import threading

import numpy as np

from parallel.jobs.shard_record import SHARD_ERRORS, SHARD_FEATURES, error_rows, rejection
from parallel.output import ErrorLog, open_writer, read_record
from parallel.output.csv_rows import csv_line
from parallel.output.durable import fsync, replace_atomically

ASSEMBLED = "_assembled.json"  # in O.shards: {"shards": k, "errors_bytes": n}
ASSEMBLED_ERRORS = "_assembled_errors.csv"  # in O.shards: the failed images of the shards in O, in order
_BATCH_ROWS = 1024


class Assembly:
    """O written from the committed shards of `job`, in order (see the module docstring).

    A context manager: leaving it without `finish()` aborts the writer (its committed rows stay,
    for the next process to go on from).
    """

    def __init__(self, job, output_format, column_prefix, settings, remove_shards=False, afresh=False):
        """Args:
          job: the frozen ShardedJob (a local one; the caller holds O.lock).
          output_format, column_prefix, settings: as for `open_writer`.
          remove_shards: remove each shard once its rows are in O (see the module docstring).
          afresh: O was reopened (a shard of it was retried): it is written anew from every shard.
        """
        self.job = job
        self.output_format, self.column_prefix, self.settings = output_format, column_prefix, settings
        self.remove_shards = remove_shards and not afresh  # written anew: every shard stays until it is written
        self.afresh = afresh
        self._writer = None
        self._thread = self._error = None  # the catch-up in the background, and what it raised

    # -- what is in O already -----------------------------------------------------------------

    def catch_up(self):
        """Appends the committed shards that come next, in order, up to the first not committed.

        Returns:
          int: how many shards are in O now.

        Raises:
          RunError: the next shard did not check out; it is set aside (its `rejected_shards`):
            compute it again, then catch up.
        """
        if threading.current_thread() is not self._thread:
            self.wait()
        done, _ = assembled(self.job)
        while done < self.job.shard_count and self.job.is_committed(done):
            self._append(done)
            done += 1
        return done

    def in_background(self):
        """`catch_up()` in a thread of its own, once the one before it has ended (`wait`): the caller goes on
        computing the next shard meanwhile. Shards are committed by a rename, so the thread sees each whole
        or not at all."""
        self.wait()
        self._thread = threading.Thread(target=self._catch_up_in_background, name="assembly", daemon=True)
        self._thread.start()

    def _catch_up_in_background(self):
        try:
            self.catch_up()
        except BaseException as error:  # noqa: B036 -- raised in the caller's thread by `wait`
            self._error = error

    def wait(self):
        """Waits for the background catch-up (`in_background`), and raises what it raised."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _append(self, index):
        folder = self.job.shard_folder(index)
        if not folder.is_dir():  # recorded as in O, then killed before it was removed: nothing to do
            return
        problem = self.job.shard_problem(index)
        if problem:
            target = self.job.set_aside(index, problem)
            raise rejection(self.job.location, ["shard %d (%s)%s" % (index, problem, ", now %s" % target
                                                                     if target else "")],
                            written=assembled(self.job)[0] > 0 or self._writer is not None)
        writer = self._open(folder / SHARD_FEATURES)
        _copy_rows(folder / SHARD_FEATURES, writer, self.column_prefix)
        if not self.remove_shards:
            return
        _, length = assembled(self.job)
        length = _append_errors(self.job.shards / ASSEMBLED_ERRORS, length, error_rows(folder / SHARD_ERRORS))
        replace_atomically(self.job.shards / ASSEMBLED,
                           (json.dumps({"shards": index + 1, "errors_bytes": length}) + "\n").encode("ascii"))
        shutil.rmtree(folder)

    def _open(self, features):
        """O's writer, opened once (its feature size read from a shard's `features` schema, or from O's record
        once no shard is left)."""
        if self._writer is None:
            import pyarrow.parquet as pq
            feature_size = int(read_record(self.job.output)["settings"]["feature_size"]) if features is None \
                else pq.read_schema(features).field(self.column_prefix).type.list_size
            self._writer = open_writer(self.job.output, format=self.output_format, column_prefix=self.column_prefix,
                                       feature_size=feature_size, settings=self.settings, overwrite=self.afresh)
        return self._writer

    # -- the end --------------------------------------------------------------------------------

    def finish(self):
        """O complete: its errors file (every shard's failed images, in order; none when none failed),
        then its writer closed (the final merge); the shards' folder removed where they go as they are in.

        Call once `catch_up()` returned the job's shard count.
        """
        self.wait()
        writer = self._open(self._first_features())
        errors = ErrorLog(self.job.output)  # removes the file of an earlier try
        try:
            for row in assembled_errors(self.job):
                errors.add(*row)
            for index in range(assembled(self.job)[0], self.job.shard_count):  # shards kept where they are
                for row in error_rows(self.job.shard_folder(index) / SHARD_ERRORS):
                    errors.add(*row)
        finally:
            errors.close()
        writer.close()
        self._writer = None
        if self.remove_shards and self.job.shards.exists():
            shutil.rmtree(self.job.shards)

    def _first_features(self):
        """A shard's features file to read the feature size from, if O's writer is not open yet."""
        if self._writer is not None:
            return None
        for index in range(self.job.shard_count):
            path = self.job.shard_folder(index) / SHARD_FEATURES
            if path.exists():
                return path
        return None  # every shard is in O: its record knows

    def abort(self):
        """Leaves the output as its committed rows (the next process goes on from them), once the background
        catch-up has ended."""
        if self._thread is not None:
            self._thread.join()
            self._thread = self._error = None
        if self._writer is not None:
            self._writer.abort()
            self._writer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.abort()


def assembled(job):
    """(how many shards of `job` are in O and removed, the length of their errors file): (0, 0) before any."""
    try:
        recorded = json.loads((job.shards / ASSEMBLED).read_text(encoding="utf-8"))
        return int(recorded["shards"]), int(recorded["errors_bytes"])
    except FileNotFoundError:
        return 0, 0
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError("%s is damaged (%s): pass --overwrite to start afresh" % (job.shards / ASSEMBLED,
                                                                                  error)) from None


def assembled_errors(job):
    """The failed images of the shards in O and removed, in order: [(path, kind, message)]."""
    _, length = assembled(job)
    if not length:
        return []
    with open(job.shards / ASSEMBLED_ERRORS, "rb") as file:
        text = file.read(length).decode("utf-8", "surrogateescape")
    return [(row["path"], row["kind"], row["message"]) for row in csv.DictReader(io.StringIO(text, newline=""))]


def _append_errors(path, length, rows):
    """`path` cut back to `length` bytes (a longer tail is a killed process's), then `rows` appended: its new length."""
    if not rows:
        return length
    with open(path, "ab") as file:
        file.truncate(length)
        if not length:
            file.write(csv_line(ErrorLog.HEADER).encode("utf-8", "surrogateescape"))
        for row in rows:
            file.write(csv_line([str(value) for value in row]).encode("utf-8", "surrogateescape"))
        file.flush()
        os.fsync(file.fileno())
        length = file.tell()
    fsync(path.parent)
    return length


def _copy_rows(features, writer, column_prefix):
    """The rows of a shard's `features` file that `writer` has not committed, appended to it in their order."""
    import pyarrow.parquet as pq
    feature_size = writer.feature_size
    with pq.ParquetFile(features) as part:
        for batch in part.iter_batches(batch_size=_BATCH_ROWS):
            paths = [raw.decode("utf-8", "surrogateescape") for raw in batch.column("path_bytes").to_pylist()]
            keep = [row for row, path in enumerate(paths) if path not in writer.completed]
            if keep:
                values = batch.column(column_prefix).flatten().to_numpy(zero_copy_only=False)
                values = values.reshape(-1, feature_size)[keep]
                writer.write([paths[row] for row in keep], np.ascontiguousarray(values))
