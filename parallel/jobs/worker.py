"""The shard runner: a process's graph and Session, built once, then shard after shard computed and committed.

    ShardWorker(config, job).process(i)   computes shard i in an attempt (resumed where a process that died
                                          left one) and commits it (parallel.jobs.shards); a committed shard
                                          with failed images has them computed again (`retry`)

Every front-end (this process alone, a static rank, a Ray actor) computes its shards through it.
"""

import dataclasses
import itertools
import logging
import shutil

from parallel.devices.selection import set_float32_precision
from parallel.devices.staging import open_runner
from parallel.engine import RunError, extract_into, extract_rows, extract_stream, member_decoder, run_errors
from parallel.inputs.remote import ObjectChanged
from parallel.inputs.streamed import stream_images
from parallel.inputs.tar_stream import LaterCopies
from parallel.inputs.tars import MEMBERS_FILE, index_keys, is_member, read_index, write_index
from parallel.jobs.commits import PartChanged
from parallel.jobs.identity import geometry_change
from parallel.jobs.shard_record import (SHARD_ERRORS, content_problem, error_rows, insert_rows, keep_last_copies,
                                        shard_keys)
from parallel.jobs.shards import SHARD_FEATURES
from parallel.jobs.text_pass import TextPass, image_rows
from parallel.locations import is_url
from parallel.loop import Summary
from parallel.output import ErrorLog, OutputError, open_writer, read_record
from parallel.output.durable import fsync, temporary_then_rename
from parallel.output.text_rows import TEXT_FILE, read_rows, write_rows

log = logging.getLogger("parallel")


class ShardWorker:
    """Computes shards of one job: the graph and the Session are built once, then shard after shard.

    A context manager; `close()` releases the Session.
    """

    def __init__(self, config, job, devices=None, weights=None, alone=False):
        """Args: config (Config), job (a frozen ShardedJob), devices (Devices; None: config.devices),
        weights (the model's, loaded already; None: loaded here), alone (the job's only process, whose
        other step geometry was warned about: `identity.freeze_sharded`)."""
        self.config = config
        self.job = job
        self.devices = devices or config.devices
        set_float32_precision(config.model.settings.get("precision"))  # process-global: before the Session
        self.runner = open_runner(config.model, self.devices, config.per_device_batch, weights=weights)
        change = geometry_change(job.recorded_job(), {"per_device_batch": str(config.per_device_batch),
                                                                 "devices": str(len(self.devices.names))})
        if change and not alone:  # a Ray actor that sees other devices than the job's
            self.runner.close()
            raise ValueError("%s is computed with another step geometry than this worker's (%s): its rows would "
                             "differ in float rounding" % (config.output, change))
        self.settings = config.settings
        try:  # the captions' and labels' tower, on the same devices (parallel.jobs.text_pass)
            self.text = TextPass(config, self.devices) if config.text_column is not None or config.labels else None
        except BaseException:
            self.runner.close()
            raise

    def process(self, index, stop=None, progress=None):
        """Computes shard `index` and commits it, unless it is committed already.

        Returns:
          Summary of the shard: discovered (its images), written, failed, already_done (all of
          them when another process had committed it), skipped and interrupted. An interrupted
          attempt is kept, its committed rows counted as written: the next run given the shard resumes it
          (a tar's stream is read again, its members with a row skipped, not decoded or computed).
        """
        images = self.job.shard_images(index)
        if self.job.is_committed(index):
            try:
                if self.job.failed_count(index):  # every run retries failed images, in every mode
                    return self.retry(index, images, stop=stop, progress=progress)
                return committed_summary(self.job, index, images)
            except PartChanged as error:  # read back (a store's), a part is not what its record lists
                self.job.set_aside(index, str(error))  # computed again, as any shard that does not check out
                if self.job.is_committed(index):  # its rows are in the output already
                    return committed_summary(self.job, index, images)
        with self.job.attempt(index, resume=self.job.resumes_attempts()) as attempt:
            if self.job.streamed and self._indexed(attempt):  # done by a process killed after (in its captions, say)
                entries, summary = read_index(attempt / MEMBERS_FILE), committed_summary(self.job, index,
                                                                                        folder=attempt)
            else:
                entries, summary = self._images(index, images, attempt, stop, progress)
                if summary.interrupted:  # the rows its writer committed stay, for the next run to resume
                    return summary
            if self.text is not None and not self._text(attempt, entries, images.paths, stop):
                return dataclasses.replace(summary, interrupted=True)  # its embeddings committed stay, to resume
            if self.job.is_finished():  # a process given the same shard wrote the output meanwhile
                return self.process(index)
            with run_errors():
                if not self.job.commit(index, attempt, ErrorLog.path_for(attempt / SHARD_FEATURES)):
                    log.info("shard %d was committed by another process first; this copy is dropped", index)
        return dataclasses.replace(summary, discovered=len(entries if self.job.streamed else images))

    def _images(self, index, images, attempt, stop, progress):
        """The images of shard `index` (its Manifest) computed in `attempt`, resumed after its last committed batch:
        (a tar shard's entries, written as its index of members beside its rows, or None; the Summary)."""
        with run_errors():
            writer = self._open_attempt(index, attempt)
        with writer:
            if not self.job.streamed:
                summary = self._compute(index, images, writer, stop, progress)
                if summary.interrupted:
                    writer.abort()
                return None, summary
            entries = []  # its files, each read once; the index (where each image is) beside the rows
            copies = LaterCopies(entries)
            versions = images.etags or [""] * len(images)
            kind, column, keep = self.config.source.kind, self.config.image_column, self.config.keep
            members = copies.wrap(itertools.chain.from_iterable(
                stream_images(kind, path, entries, version, column, keep)
                for path, version in zip(images.paths, versions)))
            try:
                summary = extract_stream(self.config, self.runner, writer, members, stop=stop,
                                         progress=progress, remote=any(map(is_url, images.paths)))
            except ObjectChanged as error:  # no row of either version: the attempt goes
                writer.abort()
                shutil.rmtree(attempt, ignore_errors=True)
                raise RunError("shard %d: %s; nothing of the shard was kept: rerun the same command to read "
                               "it as it is now" % (index, error)) from None
            if summary.interrupted:  # the rows its writer committed stay: the next run skips their members
                writer.abort()
                return None, summary
        return self._index_members(attempt, copies, summary)

    def _open_attempt(self, index, attempt):
        """The writer of shard `index`'s rows in `attempt` (a folder): the rows a process that died committed there
        are kept; an attempt whose files are not what its record says (damaged, cut) is computed again."""
        options = dict(format="parquet", column_prefix=self.config.model.output_name,
                       feature_size=self.runner.feature_size, settings=dict(self.settings, shard=str(index)),
                       record_digests=not self.job.streamed)  # on resume (a stream's is rewritten: keep_last_copies)
        try:
            if self.job.streamed and (read_record(attempt / SHARD_FEATURES) or {}).get("state") == "complete":
                # Closed by a process killed before its commit, and maybe rewritten (keep_last_copies) since.
                raise OutputError("closed, not committed")
            return open_writer(attempt / SHARD_FEATURES, **options)
        except OutputError as error:  # damaged, or its record changed (its _attempt.json proved it this job's)
            log.warning("shard %d: the attempt %s cannot be resumed (%s): it is computed again", index, attempt.name,
                        str(error).split(": pass --overwrite")[0])
            return open_writer(attempt / SHARD_FEATURES, overwrite=True, **options)

    def _compute(self, index, images, writer, stop, progress):
        """The images of shard `index` (its Manifest) that `writer` (its attempt's, maybe resumed) has no row
        of, each at its place in the job, so that the rows are those of one uninterrupted run: Summary."""
        first = index * self.job.shard_size  # the shard's place in the job: steps as one process's
        todo = [position for position, path in enumerate(images.paths) if path not in writer.completed]
        if progress is not None and len(todo) < len(images):
            progress.update(len(images) - len(todo), 0)
        summary = extract_into(self.config, self.runner, writer, [images.paths[i] for i in todo],
                               [first + i for i in todo], stop=stop, progress=progress, total=self.job.images,
                               versions=images.etags and [images.etags[i] for i in todo])
        return dataclasses.replace(summary, discovered=len(images), already_done=len(images) - len(todo))

    def _index_members(self, attempt, copies, summary):
        """A tar shard's index of members beside its rows (the last copy of a name counting: `LaterCopies`).

        Returns:
          (its entries, the shard's Summary counting the last copies only).
        """
        entries, kept, renames = copies.resolve()
        with run_errors():
            if copies.placeholders:
                errors = ErrorLog.path_for(attempt / SHARD_FEATURES)
                keep_last_copies(attempt / SHARD_FEATURES, errors, entries, kept, renames)
                failed = len(error_rows(errors)) if errors.exists() else 0
                log.info("%d members of the shard's tars are earlier copies of a name a later one has: the last copy "
                         "counts", len(copies.entries) - len(entries))
                summary = dataclasses.replace(summary, written=len(entries) - failed - summary.already_done,
                                              failed=failed)
                for done in (attempt / SHARD_FEATURES, errors):  # durable before the index says they are done
                    if done.exists():
                        fsync(done)
            with temporary_then_rename(attempt / MEMBERS_FILE) as temporary:  # there: the shard's images are done
                write_index(temporary, entries, self.config.keep)
            fsync(attempt)
        return entries, summary

    def _indexed(self, attempt):
        """Whether a tar shard's `attempt` holds its rows closed and its index of members, written last, and its rows
        and failures are exactly the index's images: its images are done. One that does not check out is computed
        again."""
        try:
            if not (attempt / MEMBERS_FILE).is_file() or (read_record(attempt / SHARD_FEATURES) or {}).get(
                    "state") != "complete":
                return False
            problem = content_problem(attempt / SHARD_FEATURES, ErrorLog.path_for(attempt / SHARD_FEATURES),
                                      index_keys(attempt / MEMBERS_FILE))
        except (OSError, ValueError) as error:  # OutputError among them: a record that does not read
            problem = str(error)
        if problem:
            log.warning("the attempt %s cannot be resumed after its images (%s): they are computed again", attempt.name,
                        problem)
        return not problem

    def _text(self, attempt, entries, paths, stop):
        """The shard's text file (its captions and labels: `TextPass.shard`) in `attempt`, of its `entries` (a tar
        shard's) or images `paths`; False when stopped."""
        if entries is None:  # a folder's images: labels only
            keys, captions = paths, None
        else:
            keys = [entry.key for entry in entries]
            column = self.config.keep.index(self.config.text_column) if self.config.text_column else None
            captions = None if column is None else [entry.kept[column] if entry.kept else None for entry in entries]
        with run_errors():
            return self.text.shard(attempt, keys, captions, attempt / SHARD_FEATURES, stop)

    def retry(self, index, images, stop=None, progress=None):
        """Computes again the failed images of committed shard `index`; commits the shard anew if any now reads.

        Each is computed at its place in its step, the step computed whole (`extract_rows`), so the
        rows are those of a run in which it never failed. A tar that could not be read at all is
        read again whole (its members, unknown until then, are the shard's images). The committed
        shard is replaced by one attempt holding its rows and the new ones, in order; a finished
        output is reopened first, and written afresh from the shards by `finish`.

        Args:
          index: a committed shard with failed images.
          images: its Manifest (a tar shard's: its tars).
          stop, progress: as for `process`.

        Returns:
          Summary of the shard: already_done its rows kept, written the rows new, failed the
          images that still fail.
        """
        folder = self.job.committed_folder(index, features=True)
        keys = shard_keys(self.job, index)
        failures = error_rows(folder / SHARD_ERRORS)
        if self.job.streamed and any(not is_member(path) for path, _, _ in failures):
            self.job.reopen()
            self.job.set_aside(index, "a tar of it could not be read: it is read again whole")
            return self.process(index, stop=stop, progress=progress)
        failed = {path for path, _, _ in failures}
        positions = [position for position, key in enumerate(keys) if key in failed]
        first, total = (0, len(keys)) if self.job.streamed else (index * self.job.shard_size, self.job.images)
        decode = member_decoder(keys, folder / MEMBERS_FILE, self.config.image_column) if self.job.streamed else None
        etags = None if self.job.streamed else images.etags
        paths, features, still = extract_rows(self.config, self.runner, [keys[i] for i in positions],
                                              [first + i for i in positions], total, decode=decode,
                                              versions=etags and [etags[i] for i in positions])
        summary = Summary(discovered=len(keys), written=len(paths), failed=len(still),
                          already_done=len(keys) - len(failures))
        if progress is not None:
            progress.update(len(failures), len(still))
        if not paths:  # nothing reads yet: the shard stays as it is, its errors those of this try
            return summary
        self.job.reopen()
        with self.job.attempt(index) as attempt:
            with run_errors():
                insert_rows(folder / SHARD_FEATURES, attempt / SHARD_FEATURES, keys, paths, features,
                            self.config.model.output_name)
                errors = ErrorLog(attempt / SHARD_FEATURES)
                for row in still:
                    errors.add(*row)
                errors.close()
                if self.job.streamed:
                    shutil.copyfile(folder / MEMBERS_FILE, attempt / MEMBERS_FILE)
                if self.text is not None:  # its rows that read now scored, the others' as they were
                    rows = read_rows(folder / TEXT_FILE)
                    write_rows(attempt / TEXT_FILE, self.text.rescored(rows, image_rows(
                        attempt / SHARD_FEATURES, rows.keys, self.config.model.output_name)))
                self.job.commit(index, attempt, ErrorLog.path_for(attempt / SHARD_FEATURES), replacing=True)
        log.info("shard %d: %d of its %d failed images computed now", index, len(paths), len(failures))
        return summary

    def close(self):
        self.runner.close()
        if self.text is not None:
            self.text.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def committed_summary(job, index, images=None, folder=None):
    """Summary of shard `index`, committed already: its images are done or failed.

    Args:
      job: a frozen ShardedJob.
      index: a committed shard.
      images: its Manifest, if read already.
      folder: a tar shard's attempt whose images are all computed and indexed, not committed yet (`_indexed`).
    """
    keys = shard_keys(job, index, folder) if job.streamed else (images or job.shard_images(index)).paths
    if folder is None:
        failed = job.failed_in(index, keys)
    else:  # the attempt's errors file, absent when none failed
        errors = ErrorLog.path_for(folder / SHARD_FEATURES)
        failed = len(error_rows(errors)) if errors.exists() else 0
    return Summary(discovered=len(keys), already_done=len(keys) - failed, failed=failed)


def add(total, part):
    """`total` with the counts and times of `part` added (Summary)."""
    fields = ("discovered", "written", "failed", "already_done", "skipped", "seconds", "device_seconds",
              "reader_wait_seconds", "writer_wait_seconds")
    return dataclasses.replace(total, interrupted=total.interrupted or part.interrupted,
                               **{name: getattr(total, name) + getattr(part, name) for name in fields})
