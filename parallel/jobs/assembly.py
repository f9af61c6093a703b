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

import logging
import threading

import numpy as np

from parallel.inputs.tars import index_keys
from parallel.jobs.ledger import LEDGER_SUFFIX
from parallel.jobs.proof import changed_since_closed, closed_state, rebuilt_record, rows_digest
from parallel.jobs.shard_record import SHARD_ERRORS, SHARD_FEATURES, error_rows, rejection, shard_keys
from parallel.output import (DamagedOutput, ErrorLog, OtherSettings, open_writer, read_record, recorded_settings,
                             remove_output)
from parallel.messages import which_shards
from parallel.output.record import SIDECAR_SUFFIX, save_record, sidecar_path

log = logging.getLogger("parallel")

_BATCH_ROWS = 1024


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
        """Checks what the job's ledger claims of O against O, before anything trusts it (`parallel.jobs.proof`).

        A finished O is proven by the ledger's entries (every shard, then O closed), its record, the
        sizes of its files and the SHA-256 of the side files a rerun trusts (a bit flipped inside its
        data is the disk's to catch); otherwise O's writer is opened (it checks its own files: a part
        that changed is set aside) and each shard the ledger records as in O must have all its rows
        there. A shard that does not is forgotten, so that it is computed again (its rows still in O
        are not written twice); O that cannot be resumed or proven at all (its record lost past
        rebuilding, its images not those of its rows, a tar job's index of members changed with its
        shards gone) is started afresh. Lines of the ledger that fail their check are dropped the same
        way. A record lost or damaged is written again from the ledger where it can be.

        Returns:
          list of the shards forgotten.
        """
        ledger = self.job.ledger()
        rewrites = ledger.rewrites
        lost = self._prove(ledger.repaired())
        if ledger.rewrites != rewrites and not self.job.commits.in_place:  # a store's: what it no longer claims,
            self.job.commits.publish(LEDGER_SUFFIX)  # committed (the next process reads the store's anew)
        return lost

    def _prove(self, ledger):
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
        if not self.job.commits.in_place:  # a store's O, as committed, is proven here, and written again here
            self.job.pull_output()
        why = self._unproven(ledger, claims)
        record = None if why else read_record(self.job.output)  # proven to read, or rebuilt, where O is there
        if why:
            log.warning("%s is written afresh: %s", self.job.location, why)
            remove_output(self.job.output)  # the job's own (`proof.owns_output`): nothing of it holds
            lost = sorted(claims)
        elif record is None:  # O and its record are gone: none of its rows is left
            lost = sorted(claims)
        else:
            changed = changed_since_closed(self.job, record, ledger.complete())
            if changed:
                log.warning("%s is not the output closed (%s): it is written afresh", self.job.location, changed)
            writer = self._open(self._first_features(), overwrite=bool(changed))
            lost = [index for index in sorted(claims) if not self._rows_in(index, claims[index], writer)]
            retried = [path for path, _, _ in ledger.failures() if writer.has_row(path)]
            if retried and not lost:  # retried into O by a run killed before its ledger said so
                ledger.add_retry(retried, [])
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

    def _unproven(self, ledger, claims):
        """Why nothing the ledger claims of O can be proven, so that O is written afresh; None where it can be (O's
        record lost or damaged is written again from the ledger, where the bytes rebuilt are those it records)."""
        stale = self.job.stale_shards(ledger)
        if stale:
            return "the images of %s are not those its rows were computed from (its manifest was made anew)" \
                % which_shards(stale)
        name = sidecar_path(self.job.output).name
        try:
            record = read_record(self.job.output)
        except DamagedOutput:
            record = False
        if record is None and not self.job.output.exists():
            return None  # O and its record are gone: nothing to prove
        if not record:
            rebuilt = self._rebuilt_record(ledger)
            if rebuilt is None:
                return "its %s is %s and cannot be written again from its ledger" % (
                    name, "gone" if record is None else "damaged")
            save_record(self.job.output, rebuilt)
            self.job.commits.publish(SIDECAR_SUFFIX)  # a store's: the record committed is the one recorded
            record = rebuilt
            log.warning("%s: its %s was lost or damaged: written again from its ledger", self.job.location, name)
        if self._feature_size(record) is None:  # no writer wrote it: nothing of O holds
            return "its %s records no feature size" % name
        for merged, proven, what in ((self.job.streamed, self.job.members_proven, "index of members"),
                                     (self.job.has_text, self.job.text_proven, "text file")):
            if merged and not proven(ledger) and any(self.job.chosen(index) is None for index in claims):
                return "its %s is not the one it was closed with, and the shards it was merged from are gone" % what
        return None

    def _model_feature_size(self, features=None):
        """The model's feature size: this process's, else a shard's `features` schema's (None: neither is known)."""
        if self.feature_size is None and features is not None:
            import pyarrow.parquet as pq
            return pq.read_schema(features).field(self.column_prefix).type.list_size
        return self.feature_size

    def _rebuilt_record(self, ledger):
        """O's commit record as O was closed with it (`proof.rebuilt_record`), or None."""
        feature_size = self._model_feature_size(self._first_features())
        if feature_size is None:
            return None
        settings = recorded_settings(self.settings, self.output_format, self.column_prefix, feature_size)
        return rebuilt_record(self.job, ledger, settings, self.output_format)

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
        failed = error_rows(folder / SHARD_ERRORS)
        images = rows_digest(self.job, self.job.shard_images(index), {row[0] for row in failed})
        self.job.ledger().add_shard(index, failed, writer.rows_committed, images=images)
        if self.remove_shards:
            self.job.remove_shard(index)

    def _open(self, features, feature_size=None, overwrite=False):
        """O's writer, opened once (its feature size `feature_size`, else read from a shard's `features` schema,
        or from O's record once no shard is left). O that cannot be resumed (cut, or damaged past what its
        writer repairs) is started afresh, with a warning: what the ledger claims of it is then proven not to
        hold."""
        if self._writer is None:
            # The model's (this process's, or a shard's), else O's record's: a record that says otherwise is damaged.
            feature_size = feature_size or self._model_feature_size(features)
            if feature_size is None:
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
        if self.job.streamed and self.job.ledger().closed():
            # O was closed before: the rows a retry appended to it, killed before it closed O, go to their places in
            # the members' order (a first close finds every row in that order already).
            places = {key: place for place, key in enumerate(index_keys(self.job.members_index()))}
            writer.order = lambda key: places.get(key, len(places))
        errors = ErrorLog(self.job.output)  # removes the file of an earlier try
        try:
            for row in self.job.ledger().failures():
                if not writer.has_row(row[0]):  # retried into O by a run killed before its ledger said so
                    errors.add(*row)
        finally:
            errors.close()
        writer.close()
        self._writer = None
        self.job.ledger().add_complete(writer.rows_committed, closed_state(self.job))
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
