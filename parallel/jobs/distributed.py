"""One job spread over processes: front-ends (static ranks, Ray) over one shard runner.

    distributed.run(config)        --distributed static: this process is rank r of W (from the flags
                                   or the scheduler's environment, parallel.jobs.ranks) and runs
                                   shards r, r + W, r + 2W, ...; --distributed ray: parallel.jobs.ray_job
    ShardWorker(config).process(i) builds the graph once, then computes shard i as a single-host
                                   job and commits it (parallel.jobs.shards)

Whoever commits the last shard writes the output; rerunning any rank finishes it too.
"""

import contextlib
import dataclasses
import itertools
import logging
import os
import re
import shutil
import time
from pathlib import Path

from parallel.devices.selection import set_float32_precision
from parallel.devices.staging import open_runner
from parallel.engine import RunError, extract_into, extract_rows, extract_stream, member_decoder, run_errors
from parallel.inputs.manifest import manifest_path, read_job
from parallel.inputs.remote import ObjectChanged
from parallel.inputs.tar_stream import LaterCopies, stream_members
from parallel.inputs.tars import MEMBERS_FILE, is_member, write_index
from parallel.inputs.sources import TARS
from parallel.jobs.identity import is_inside, freeze_sharded, geometry_change, refuse_output_among_images
from parallel.jobs.ranks import resolve_rank
from parallel.jobs import locks
from parallel.jobs.assembly import closed_state
from parallel.jobs.shard_record import (SHARD_ERRORS, error_rows, insert_rows, keep_last_copies,
                                        shard_keys)
from parallel.jobs.shards import SHARD_FEATURES
from parallel.locations import is_url
from parallel.loop import Summary, log_stage_times
from parallel.messages import Progress, counted, first_line
from parallel.output import ErrorLog, OutputError, open_writer, read_record, sidecar_path
from parallel.signals import StopRequest
from parallel.jobs.store_shards import open_job
from parallel.output.record import ERRORS_SUFFIX, SIDECAR_SUFFIX

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
        change = geometry_change(read_job(job.manifest)["job"], {"per_device_batch": str(config.per_device_batch),
                                                                 "devices": str(len(self.devices.names))})
        if change and not alone:  # a Ray actor that sees other devices than the job's
            self.runner.close()
            raise ValueError("%s is computed with another step geometry than this worker's (%s): its rows would "
                             "differ in float rounding" % (config.output, change))
        self.settings = config.settings

    def process(self, index, stop=None, progress=None):
        """Computes shard `index` and commits it, unless it is committed already.

        Returns:
          Summary of the shard: discovered (its images), written, failed, already_done (all of
          them when another process had committed it), skipped and interrupted. An interrupted
          attempt is discarded: nothing of it counts as written or failed, all of it as skipped.
        """
        images = self.job.shard_images(index)
        if self.job.is_committed(index):
            if self.job.failed_count(index):  # every run retries failed images, in every mode
                return self.retry(index, images, stop=stop, progress=progress)
            return committed_summary(self.job, index, images)
        with self.job.attempt(index, resume=self.job.resumes_attempts()) as attempt:
            with run_errors():
                writer = self._open_attempt(index, attempt)
            with writer:
                if self.job.tars:  # its tars, each read once; the index (every member's offset) beside the rows
                    entries = []
                    copies = LaterCopies(entries)
                    versions = images.etags or [""] * len(images)
                    members = copies.wrap(itertools.chain.from_iterable(
                        stream_members(tar, entries, version=version) for tar, version in zip(images.paths, versions)))
                    try:
                        summary = extract_stream(self.config, self.runner, writer, members, stop=stop,
                                                 progress=progress, remote=any(map(is_url, images.paths)))
                    except ObjectChanged as error:  # no row of either version: the attempt goes
                        writer.abort()
                        raise RunError("shard %d: %s; nothing of the shard was kept: rerun the same command to read "
                                       "it as it is now" % (index, error)) from None
                    if summary.interrupted:  # its rows are dropped with the attempt: a rerun computes them
                        writer.abort()
                        shutil.rmtree(attempt, ignore_errors=True)
                        return dataclasses.replace(summary, discovered=len(entries), written=0, failed=0,
                                                   skipped=len(entries))
                else:
                    summary = self._compute(index, images, writer, stop, progress)
                    if summary.interrupted:  # the rows its writer committed stay, for the next run to resume
                        writer.abort()
                        return summary
            if self.job.tars:
                images, summary = self._index_members(attempt, copies, summary)
            if self.job.is_finished():  # a process given the same shard wrote the output meanwhile
                return self.process(index)
            with run_errors():
                if not self.job.commit(index, attempt, ErrorLog.path_for(attempt / SHARD_FEATURES)):
                    log.info("shard %d was committed by another process first; this copy is dropped", index)
        return dataclasses.replace(summary, discovered=len(images))

    def _open_attempt(self, index, attempt):
        """The writer of shard `index`'s rows in `attempt` (a folder): the rows a process that died committed there
        are kept; an attempt whose files are not what its record says (damaged, cut) is computed again."""
        options = dict(format="parquet", column_prefix=self.config.model.output_name,
                       feature_size=self.runner.feature_size, settings=dict(self.settings, shard=str(index)),
                       record_digests=not self.job.tars)  # checked on resume (a tar's is rewritten: keep_last_copies)
        try:
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
                summary = dataclasses.replace(summary, written=len(entries) - failed, failed=failed)
            write_index(attempt / MEMBERS_FILE, entries)
        return entries, summary

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
        if self.job.tars and any(not is_member(path) for path, _, _ in failures):
            self.job.reopen()
            self.job.set_aside(index, "a tar of it could not be read: it is read again whole")
            return self.process(index, stop=stop, progress=progress)
        failed = {path for path, _, _ in failures}
        positions = [position for position, key in enumerate(keys) if key in failed]
        first, total = (0, len(keys)) if self.job.tars else (index * self.job.shard_size, self.job.images)
        decode = member_decoder(keys, folder / MEMBERS_FILE) if self.job.tars else None
        etags = None if self.job.tars else images.etags
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
                if self.job.tars:
                    shutil.copyfile(folder / MEMBERS_FILE, attempt / MEMBERS_FILE)
                self.job.commit(index, attempt, ErrorLog.path_for(attempt / SHARD_FEATURES), replacing=True)
        log.info("shard %d: %d of its %d failed images computed now", index, len(paths), len(failures))
        return summary

    def close(self):
        self.runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def committed_summary(job, index, images=None):
    """Summary of shard `index`, committed already: its images are done or failed.

    Args:
      job: a frozen ShardedJob.
      index: a committed shard.
      images: its Manifest, if read already.
    """
    keys = shard_keys(job, index) if job.tars else (images or job.shard_images(index)).paths
    failed = job.failed_in(index, keys)
    return Summary(discovered=len(keys), already_done=len(keys) - failed, failed=failed)


def add(total, part):
    """`total` with the counts and times of `part` added (Summary)."""
    fields = ("discovered", "written", "failed", "already_done", "skipped", "seconds", "device_seconds",
              "reader_wait_seconds", "writer_wait_seconds")
    return dataclasses.replace(total, interrupted=total.interrupted or part.interrupted,
                               **{name: getattr(total, name) + getattr(part, name) for name in fields})


def finish(config, job, summary, worker=None, one_host=False, assembly=None):
    """Writes the output if every shard is committed; the summary says what is missing if not.

    A shard found changed before the output is written from it is set aside; with a `worker`
    (ShardWorker), this process computes it again at once and writes the output. `assembly`: the
    Assembly this process has been writing the output with, shard by shard (its only process).
    """
    missing = job.missing()
    if not missing:
        def assemble():
            return job.assemble(config.output_format, config.model.output_name, config.settings,
                                keep_shards=config.distribution.keep_shards,
                                keep_failed=config.distribution.kind == "ray",  # its actors retry in shards
                                assembly=assembly)

        with run_errors():
            try:
                written = assemble()
            except RunError as error:
                if worker is None:
                    raise
                _compute_rejected_again(error, worker)
                written = assemble()
        if not one_host:
            log.info("%s committed: %s %s", "the only shard is" if job.shard_count == 1
                     else "all %d shards are" % job.shard_count, config.output,
                     "is written" if written else "is being written by another process")
    else:
        log.info("%d of %s %s not committed yet (%s): the output is written by the process that commits the "
                 "last one, or by rerunning any rank", len(missing), counted(job.shard_count, "shard"),
                 "is" if len(missing) == 1 else "are", _some(missing))
    return dataclasses.replace(summary, output=_output(config), errors_file=_errors_file(config),
                               pending_shards=tuple(missing))


def _output(config):
    """The output as the summary names it: a Path, or the store's URL."""
    return config.output if is_url(config.output) else Path(config.output)


def _errors_file(config):
    return "%s%s" % (config.output, ERRORS_SUFFIX) if is_url(config.output) else ErrorLog.path_for(config.output)


def _which_shards(indexes):
    """"no shard", "shard 3", "shards 0, 4, 8"."""
    if not indexes:
        return "no shard"
    return "shard%s %s" % ("" if len(indexes) == 1 else "s", _some(indexes))


def _some(indexes, shown=10):
    return ", ".join(str(index) for index in indexes[:shown]) + (", ..." if len(indexes) > shown else "")


def run(config, weights=None, one_host=False, overwrite=False):
    """This process's part of a job over static ranks (see the module docstring).

    Args:
      config: Config with a static distribution.
      weights: the model's weights, loaded by the caller's checks (None: loaded here).
      one_host: the job runs on this process alone: it holds the output's lock for the whole run
        (one run per output), and the log speaks of the job, not of ranks (`_run_static`).
      overwrite: (one_host only) the job's files are removed once every check has passed and the
        lock is held, and the job starts afresh.

    Raises:
      ValueError: a usage error (the rank, the weights, another job's manifest, ...), found
        before this process wrote anything.
      RunError: the part could not be finished (a full disk, a device error); the same
        command resumes it.
    """
    if one_host:  # --overwrite is this process's way out: its advice stands
        return _run_static(config, weights, one_host, overwrite)
    with advised(config.output):
        return _run_static(config, weights, one_host)


@contextlib.contextmanager
def advised(output):
    """A ValueError or RunError of a distributed job says what works instead of --overwrite."""
    try:
        yield
    except (ValueError, RunError) as error:
        error.args = (distributed_advice(str(error), output),) + error.args[1:]
        raise


def distributed_advice(message, output):
    """`message` with its advice to pass --overwrite, which a distributed job refuses, turned into what works.

    The shared layers (the manifest, the output writers) advise --overwrite, the way out on one
    host; a job over several processes starts afresh once its files are removed by hand (no
    process may erase the others' shards while they run).
    """
    files = "%s and every %s.* beside it" % (output, Path(output).name)
    message = re.sub(r"(pass|Pass) (?:--overwrite|overwrite=True)( to replace it)?",
                     lambda match: ("remove " if match.group(1) == "pass" else "Remove ") + files
                     + (" to start afresh" if match.group(2) else ""), message)
    # A phrasing the pattern above does not know still never advises what is refused.
    return re.sub(r"--overwrite|overwrite=True", "removing %s" % files, message)


def _run_static(config, weights=None, one_host=False, overwrite=False):
    """--distributed static: this process is one rank, or the job's only process (see `run`).

    What can be wrong with the flags or the inputs (the rank, the output, the weights, another
    job's manifest) is found before this process writes anything: a refused run leaves nothing
    that would make its corrected rerun "another job". Once the shards run, every failure is a
    RunError: something was written, and the same command resumes.
    """
    rank = resolve_rank(config.distribution.rank, config.distribution.world_size)
    with _check_output(config, overwrite, one_host) as job:
        if one_host:
            job.hold_lock()
        if overwrite:
            job.remove_everything()
        return _run_ranks_shards(config, job, rank, weights, one_host)


def _run_ranks_shards(config, job, rank, weights, one_host):
    """`_run_static` once the output is checked: `job` is its ShardedJob, not frozen yet."""
    if weights is None and not job.manifest.exists():  # checks first: freezing writes the manifest
        weights = config.model.load_weights()  # a bad weights= fails here, before anything is written
    try:
        job = freeze_sharded(config, check_folder=rank.rank == 0, job=job, alone=one_host)
    except PermissionError as error:  # nothing written: the output's folder is the wrong one
        raise ValueError("cannot write the manifest %s: %s: choose another output"
                         % (manifest_path(config.output), error.strerror or first_line(error))) from None
    except OSError as error:  # a full disk: it struck while the manifest was written
        raise RunError("cannot write the manifest %s: %s; rerun the same command once that is fixed"
                       % (manifest_path(config.output), error.strerror or first_line(error))) from error
    mine = list(rank.shards(job.shard_count))
    if one_host and job.tars:
        log.info("%d tars in %s; devices: %s", job.images, counted(job.shard_count, "shard"),
                 config.devices.describe(config.per_device_batch))
    elif one_host:
        log.info("%s under %s; devices: %s", counted(job.images, "image"), config.image_root,
                 config.devices.describe(config.per_device_batch))
    else:
        log.info("rank %d of %d (from %s): %s of %d; devices: %s", rank.rank, rank.world_size, rank.source,
                 _which_shards(mine), job.shard_count, config.devices.describe(config.per_device_batch))
    summary = Summary()
    started = time.perf_counter()
    images = sum(_shard_length(job, index) for index in mine)
    with ShardWorker(config, job, weights=weights, alone=one_host) as worker, run_errors(), \
            Progress(config.progress, total=None if job.tars else images, initial=0) as progress, \
            contextlib.ExitStack() as stack:
        if one_host:
            log.info("ready in %.1f s (weights to devices, graph, session)", time.perf_counter() - started)
        assembly = None if is_url(config.output) else _prove(config, job, one_host)
        if assembly is not None:
            stack.enter_context(assembly)
        if job.retried_in_output():
            return retry_in_output(config, job, worker, started)
        # Failures of an earlier run whose shards are in O: retried in O once it is written.
        earlier = job.assembled_failures() if assembly is not None else set()
        # The stop request covers the shards only: a signal during start-up or the output's final merge stops at once.
        with StopRequest() as stop:
            for index in mine:
                summary = add(summary, worker.process(index, stop=stop, progress=progress))
                if summary.interrupted:
                    break
                if assembly is not None:
                    _catch_up(assembly, worker)
        if stop.signal_name and not summary.interrupted:  # it came after the loop's last look (the last commit)
            summary = dataclasses.replace(summary, interrupted=True)
        summary = conclude(config, job, summary, images, started, worker, one_host, assembly)
        if earlier and job.is_finished():
            with job.output_lock():
                _, paths, _ = _retry_failed(config, job, worker, only=earlier)
            summary = dataclasses.replace(summary, written=summary.written + len(paths),
                                          failed=summary.failed - len(paths))
        return summary


def _prove(config, job, one_host):
    """What the job's ledger claims of its output, checked against it before anything trusts it (`Assembly.prove`):
    by the job's only process, or by a rank that finds no other writing the output.

    Returns:
      the Assembly that proved it, through which the output grows shard by shard (its only process, where
      the shards go as their rows are in it), or None.
    """
    assembly = job.assembly(config.output_format, config.model.output_name, config.settings,
                            config.distribution.keep_shards)
    try:
        with job.output_lock():
            assembly.prove()
            if one_host and job.assembles_as_it_goes(config.distribution.keep_shards) and not job.is_finished() \
                    and not job.is_reopened():
                return assembly
            assembly.abort()  # under the lock: the next process to take it opens the output's writer anew
            return None
    except locks.Busy:  # another process is writing the output: it proves it as it does
        assembly.abort()
        return None
    except BaseException:
        assembly.abort()
        raise


def _catch_up(assembly, worker):
    """The committed shards that come next appended to the output in the background, once the catch-up
    before has ended; a shard that did not check out then is computed again at once (`Assembly`)."""
    try:
        assembly.wait()
    except RunError as error:
        _compute_rejected_again(error, worker)
    assembly.in_background()


def _compute_rejected_again(error, worker):
    """The shards that `error` (a RunError) set aside before the output was written from them, computed again
    now by `worker`; any other error is raised again."""
    if not getattr(error, "rejected_shards", ()):
        raise error
    log.warning("%s; computing %s again now", first_line(error).split(": ", 1)[0],
                _which_shards(list(error.rejected_shards)))
    for index in error.rejected_shards:
        worker.process(index)


def retry_in_output(config, job, worker, started):
    """The failed images of a finished output whose shards are gone, computed again into it (every run retries).

    As one process retries: each image at its place in its step (`extract_rows`), its row appended to the
    output and merged into path order when it is closed, the errors file then the images that still fail.
    One process does it, holding the output's lock; another that comes meanwhile leaves it to that one.

    Args:
      config, job: the Config and its frozen ShardedJob (`job.retried_in_output()`).
      worker: this process's ShardWorker (its runner computes).
      started: `time.perf_counter()` when the run began.

    Returns:
      Summary of the job: already_done its rows, written the rows new, failed the images still failing.
    """
    try:
        with job.output_lock():
            todo, paths, still = _retry_failed(config, job, worker)
    except locks.Busy:
        log.info("another process is writing %s: it retries the failed images", config.output)
        todo, paths, still = [], [], []
    if todo:
        log.info("%d of the %d failed images computed now", len(paths), len(todo))
    summary = Summary(discovered=job.images, written=len(paths), failed=len(still),
                      already_done=job.images - len(todo), seconds=time.perf_counter() - started)
    return dataclasses.replace(summary, output=_output(config), errors_file=_errors_file(config))


def _retry_failed(config, job, worker, only=None):
    """`retry_in_output`'s work, under the output's lock: (the failed images without a row [(position, path)],
    the paths computed now, the failures [(path, kind, message)] of those that still fail).

    `only`: a set of paths, the failed images to retry (None: every one the ledger records); the ledger
    records which have a row now, and the errors file is written anew from it: the images computed now
    are not in it, the others' lines are as they were.
    """
    ledger = job.ledger()
    failed = {path for path, _, _ in ledger.failures() if only is None or path in only}
    if not failed:  # nothing to retry: the output is not opened (its writer reads every committed path)
        return [], [], []
    manifest = job.load_manifest()
    with run_errors():
        writer = open_writer(job.output, format=config.output_format, column_prefix=config.model.output_name,
                             feature_size=worker.runner.feature_size, settings=config.settings, sort_paths=True)
    with writer:
        todo = [(position, path) for position, path in enumerate(manifest.paths)
                if path in failed and path not in writer.completed]  # a row of a run killed before its errors
        versions = manifest.etags and [manifest.etags[position] for position, _ in todo]
        paths, features, still = extract_rows(config, worker.runner, [path for _, path in todo],
                                              [position for position, _ in todo], job.images, versions=versions)
        for start in range(0, len(paths), 1024):
            writer.write(paths[start:start + 1024], features[start:start + 1024])
    ledger.add_retry(sorted(path for path in failed if writer.has_row(path)), still)  # those of a killed run too
    with ErrorLog(job.output) as log_file:  # the images that still have no row
        for row in ledger.failures():
            log_file.add(*row)
    ledger.add_complete(writer.rows_committed, closed_state(job.output))
    return todo, paths, still


def _check_output(config, overwrite=False, one_host=False):
    """Refuses, before anything is written, an output the job's last process could never write.

    A file that this program did not write is replaced only with `overwrite` (the job's only
    process), and never when it is one of the job's images, or any file under its folder of images.

    Returns:
      the job's ShardedJob (not frozen yet); for a store, reached and checked (bucket, credentials).
    """
    output = config.output
    job = open_job(output)
    if is_url(output):
        # An output with the job's manifest beside it and no record yet is this program's, cut short
        # between its upload and its record's (killed, or the record's upload failed): the job finishes it.
        if not overwrite and job.output_exists() and job.store.read(job.name + SIDECAR_SUFFIX) is None \
                and not job.manifest.exists():
            job.close()
            raise OutputError("%s exists and was not written by this program (no %s.run.json): choose another "
                              "output" % (output, job.name))
        return job
    output = Path(output)
    if output.is_dir():
        raise OutputError("output=%s is a folder; give a file name" % output)
    if os.path.lexists(output) and read_record(output) is None:
        listed = config.source.kind != TARS and not is_url(config.image_root)  # a tar is never it: protocol
        if listed and is_inside(output, config.image_root):
            raise OutputError("--output %s is a file under --images %s, not an output of this program: choose "
                              "another --output" % (output, config.image_root))
        if listed:
            refuse_output_among_images(output, config.image_root, config.scan())
        if not overwrite:
            raise OutputError("%s exists and was not written by this program (no %s): %schoose another output"
                              % (output, sidecar_path(output).name, "pass --overwrite to replace it or "
                                 if one_host else ""))
    return job


def conclude(config, job, summary, images, started, worker=None, one_host=False, assembly=None):
    """The Summary of this process's part of the job, and the output written if it is the last part.

    Args:
      config, job: the Config and its frozen ShardedJob.
      summary: Summary of the part's shards.
      images: how many images the part holds (those not reached are skipped).
      started: `time.perf_counter()` when the part began.
      worker: this process's ShardWorker, if it may compute shards found changed (`finish`).
      one_host: the job's only process (its log speaks of the job, not of shards).
      assembly: the Assembly it has been writing the output with (`finish`).
    """
    if job.tars:  # a tar's members are known once it is read: the job's images are those of its shards
        images = summary.discovered
    summary = dataclasses.replace(summary, seconds=time.perf_counter() - started, discovered=images,
                                  skipped=images - summary.written - summary.failed - summary.already_done)
    log_stage_times(summary)
    if summary.interrupted:
        return dataclasses.replace(summary, output=_output(config))
    return finish(config, job, summary, worker, one_host, assembly)


def _shard_length(job, index):
    return min(job.shard_size, job.images - index * job.shard_size)

