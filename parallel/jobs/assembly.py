"""The output written from a sharded job's committed shards, in shard order, through its ordinary writer.

    Assembly(job, ...).prove()      what the job's ledger claims of O, checked against O before
                                    anything trusts it: a shard whose rows are not all in O is
                                    forgotten, to be computed again
    Assembly.catch_up()             appends every committed shard that comes next, in order, each
                                    checked first (its record, every byte, its rows and errors against
                                    the manifest): a shard that does not check out is set aside
    Assembly.finish()               once every shard is in: O's errors file, O closed (its final
                                    merge), recorded in the ledger; the shards' folder removed

A job's only process (`distributed`, one host) catches up after each shard it commits, in a thread
(`in_background`), so that the output grows shard by shard while the devices compute the next; ranks
do it all at the end, in the process that commits the last shard. Either way under O.lock, through one
writer kept open.

Each shard appended is recorded in the job's ledger (O.ledger.jsonl, `parallel.jobs.ledger`): its
failed images, and O's rows after it. Where O is committed as it is written (a local output) and
its failures are retried in O itself, each shard goes once it is recorded
(`ShardedJob.assembles_as_it_goes`), so that the job never holds much more than one copy of its
rows; a process killed at any moment leaves a state the next one completes:

    rows of shard k appended  (a kill: shard k is still there, and its rows in O are not written twice)
    the ledger records k      (one line, synced; a line cut by a kill fails its check: never written)
    shard k removed           (a kill before: the next process removes it)

Elsewhere (an output in a store, written whole then published; a tar job, whose tar that cannot
be read keeps every shard; --keep-shards) the shards stay until O is written.
"""

import hashlib
import json
import logging
import os
import threading

import numpy as np

from parallel.jobs.ledger import LEDGER_SUFFIX
from parallel.jobs.shard_record import SHARD_ERRORS, SHARD_FEATURES, error_rows, rejection, shard_keys
from parallel.inputs.tars import MEMBERS_SUFFIX
from parallel.output import (DamagedOutput, ErrorLog, OtherSettings, open_writer, read_record,
                             remove_output)
from parallel.output.durable import beside
from parallel.messages import which_shards
from parallel.output.record import ERRORS_SUFFIX, PATHS_SUFFIX, sidecar_path

log = logging.getLogger("parallel")

# The files written with O, whose sizes the ledger records when O is closed (those that exist).
OUTPUT_FILES = ("", PATHS_SUFFIX, ERRORS_SUFFIX, MEMBERS_SUFFIX)
_BATCH_ROWS = 1024


def ledger_path(output):
    """`O.ledger.jsonl` of the output `output` (a Path)."""
    return beside(output, LEDGER_SUFFIX)


def output_files(output):
    """{suffix: size in bytes} of the files written with `output` (a Path) that exist."""
    sizes = {}
    for suffix in OUTPUT_FILES:
        try:
            sizes[suffix] = os.path.getsize(beside(output, suffix))
        except OSError:
            pass
    return sizes


def closed_state(output):
    """What the ledger records of `output` (a Path) when it is closed, and a rerun compares before it takes it as
    finished: {"files": `output_files`, "record": the SHA-256 of its commit record's bytes}."""
    try:
        record = hashlib.sha256(sidecar_path(output).read_bytes()).hexdigest()
    except OSError:
        record = None
    return {"files": output_files(output), "record": record}


def is_proven_finished(ledger, shard_count, record, sizes):
    """Whether an output is finished as its `ledger` (Ledger) records it: every one of its `shard_count` shards in
    it, closed, with the rows and the files of the sizes recorded when it was closed (a file removed, cut or
    grown since is not).

    Args:
      ledger: the output's Ledger.
      shard_count: the job's shards.
      record: the bytes of its commit record (O.run.json) as committed, or None.
      sizes: {suffix: size in bytes} of its files (OUTPUT_FILES) as committed.
    """
    complete = ledger.complete()
    if complete is None or record is None or sorted(ledger.shards()) != list(range(shard_count)):
        return False
    try:
        parsed = json.loads(record)
    except ValueError:
        return False
    return (isinstance(parsed, dict) and parsed.get("state") == "complete" and parsed.get("rows") == complete["rows"]
            and {"files": sizes, "record": hashlib.sha256(record).hexdigest()}
            == {key: complete.get(key) for key in ("files", "record")})


class Assembly:
    """O written from the committed shards of `job`, in order (see the module docstring).

    A context manager: leaving it without `finish()` aborts the writer (its committed rows stay,
    for the next process to go on from).
    """

    def __init__(self, job, output_format, column_prefix, settings, remove_shards=False, afresh=False,
                 feature_size=None):
        """Args:
          job: the frozen ShardedJob (the caller holds its output's lock).
          output_format, column_prefix, settings: as for `open_writer`.
          feature_size: the model's, where the caller knows it (None: read from a shard, or O's record).
          remove_shards: remove each shard once its rows are in O (see the module docstring).
          afresh: O was reopened (a shard of it was retried): it is written anew from every shard.
        """
        self.job = job
        self.output_format, self.column_prefix, self.settings = output_format, column_prefix, settings
        self.remove_shards = remove_shards and not afresh  # written anew: every shard stays until it is written
        self.afresh = afresh
        self.feature_size = feature_size
        self._writer = None
        self._thread = self._error = None  # the catch-up in the background, and what it raised

    # -- what is in O already -----------------------------------------------------------------

    def prove(self):
        """Checks what the job's ledger claims of O against O, before anything trusts it.

        A finished O is proven by the ledger's entries (every shard, then O closed), its record and
        the sizes of its files (a bit flipped inside its data is the disk's to catch); otherwise O's
        writer is opened (it checks its own files: a part that changed is set aside) and each shard
        the ledger records as in O must have all its rows there. A shard that does not is forgotten,
        so that it is computed again (its rows still in O are not written twice); O that cannot be
        resumed at all is started afresh. Lines of the ledger that fail their check are dropped the
        same way.

        Returns:
          list of the shards forgotten.
        """
        ledger = self.job.ledger().repaired()
        if self.afresh:  # O is written anew from every shard: nothing of it counts
            ledger.forget(everything=True)
            return []
        if self.job.finished_in(ledger):
            return []
        claims = ledger.shards()
        if not claims:
            if ledger.entries:
                ledger.forget(everything=True)
            return []
        record = read_record(self.job.output)
        if record is not None and self._feature_size(record) is None:  # no writer wrote it: nothing of O holds
            log.warning("%s cannot be resumed (its %s records no feature size): it is written afresh",
                        self.job.location, sidecar_path(self.job.output).name)
            remove_output(self.job.output)
            record = None
        if record is None:  # O and its record are gone: none of its rows is left
            lost = sorted(claims)
        else:
            changed = _changed_since_closed(self.job.output, record, ledger.complete())
            if changed:
                log.warning("%s is not the output closed (%s): it is written afresh", self.job.location, changed)
            writer = self._open(self._first_features(), overwrite=bool(changed))
            lost = [index for index in sorted(claims) if not self._rows_in(index, claims[index], writer)]
        if lost and self.job.streamed and self._writer is not None:  # its rows are in stream order: O starts afresh
            self._writer.abort()
            self._writer = None
            self._open(self._first_features(), overwrite=True)
            lost = sorted(claims)
        if lost:
            log.warning("%s does not hold the rows its ledger records of %s: %s computed again", self.job.location,
                        which_shards(lost), "it is" if len(lost) == 1 else "they are")
            ledger.forget(lost)
        return lost

    def _rows_in(self, index, failed, writer):
        """Whether every image of shard `index` but its `failed` ones has a row in O (`writer`'s)."""
        keys = shard_keys(self.job, index)
        if keys is None:
            return False
        failed = {row[0] for row in failed}
        return all(writer.has_row(key) for key in keys if key not in failed)

    @staticmethod
    def _feature_size(record):
        """The feature size `record` (an output's commit record) holds, or None where it holds none."""
        try:
            size = int(record["settings"]["feature_size"])
        except (KeyError, TypeError, ValueError):
            return None
        return size if size > 0 else None

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
        in_output = self.job.ledger().shards()
        for index in range(self.job.shard_count):
            if index in in_output:
                continue
            if not self.job.is_committed(index):
                break
            self._append(index)
        return len(self.job.ledger().shards())

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
        problem = self.job.shard_problem(index)
        if problem:
            target = self.job.set_aside(index, problem)
            raise rejection(self.job.location, ["shard %d (%s)%s" % (index, problem, ", now %s" % target
                                                                     if target else "")],
                            written=bool(self.job.ledger().shards()) or self._writer is not None)
        folder = self.job.committed_folder(index, features=True)
        writer = self._open(folder / SHARD_FEATURES)
        _copy_rows(folder / SHARD_FEATURES, writer, self.column_prefix)
        self.job.ledger().add_shard(index, error_rows(folder / SHARD_ERRORS), writer.rows_committed)
        if self.remove_shards:
            self.job.remove_shard(index)

    def _open(self, features, feature_size=None, overwrite=False):
        """O's writer, opened once (its feature size `feature_size`, else read from a shard's `features` schema,
        or from O's record once no shard is left). O that cannot be resumed (cut, or damaged past what its
        writer repairs) is started afresh, with a warning: what the ledger claims of it is then proven not to
        hold."""
        if self._writer is None:
            feature_size = feature_size or self.feature_size  # the model's: a record that says otherwise is damaged
            if feature_size is None and features is not None:
                import pyarrow.parquet as pq
                feature_size = pq.read_schema(features).field(self.column_prefix).type.list_size
            elif feature_size is None:
                feature_size = self._feature_size(read_record(self.job.output))
            options = dict(format=self.output_format, column_prefix=self.column_prefix, feature_size=feature_size,
                           settings=self.settings, sort_paths=not self.job.streamed)
            if overwrite or self.afresh:  # written anew: nothing the ledger says of it holds (first, for a kill)
                self.job.ledger().forget(everything=True)
            try:
                self._writer = open_writer(self.job.output, overwrite=overwrite or self.afresh, **options)
            except (DamagedOutput, OtherSettings) as error:  # the job's manifest holds its settings: not O's own
                log.warning("%s cannot be resumed (%s): it is written afresh", self.job.location,
                            str(error).split(": pass --overwrite")[0])
                self.job.ledger().forget(everything=True)
                self._writer = open_writer(self.job.output, overwrite=True, **options)
        return self._writer

    # -- the end --------------------------------------------------------------------------------

    def finish(self):
        """O complete: its errors file (every shard's failed images, in order; none when none failed),
        then its writer closed (the final merge) and recorded in the ledger; the shards' folder removed where
        they go as they are in.

        Call once `catch_up()` returned the job's shard count.
        """
        self.wait()
        writer = self._open(self._first_features())
        errors = ErrorLog(self.job.output)  # removes the file of an earlier try
        try:
            for row in self.job.ledger().failures():
                if not writer.has_row(row[0]):  # retried into O by a run killed before its ledger said so
                    errors.add(*row)
        finally:
            errors.close()
        writer.close()
        self._writer = None
        self.job.ledger().add_complete(writer.rows_committed, closed_state(self.job.output))
        if self.remove_shards:
            self.job.commits.remove_shards()

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


def _changed_since_closed(output, record, complete):
    """What differs in the files of `output`, whose commit `record` says it is closed, from the sizes its ledger
    recorded (`complete`, the ledger's closing entry) when it was closed; None if nothing does (the errors file
    aside: it is written anew from the ledger)."""
    if complete is None or record["state"] != "complete":
        return None
    now, then = output_files(output), complete["files"]
    for suffix in OUTPUT_FILES:
        if suffix != ERRORS_SUFFIX and now.get(suffix) != then.get(suffix):
            return "%s%s is %s, not %s" % (output.name, suffix, "%d bytes" % now[suffix] if suffix in now else "gone",
                                           "%d bytes" % then[suffix] if suffix in then else "absent")
    return None


def _copy_rows(features, writer, column_prefix):
    """The rows of a shard's `features` file that `writer` has not committed, appended to it in their order."""
    import pyarrow.parquet as pq
    feature_size = writer.feature_size
    with pq.ParquetFile(features) as part:
        for batch in part.iter_batches(batch_size=_BATCH_ROWS):
            paths = [raw.decode("utf-8", "surrogateescape") for raw in batch.column("path_bytes").to_pylist()]
            keep = [row for row, path in enumerate(paths) if not writer.has_row(path)]
            if keep:
                values = batch.column(column_prefix).flatten().to_numpy(zero_copy_only=False)
                values = values.reshape(-1, feature_size)[keep]
                writer.write([paths[row] for row in keep], np.ascontiguousarray(values))
