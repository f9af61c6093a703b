"""One job spread over processes: this process alone, or one static rank, over the shard runner.

    distributed.run(config)        this process alone (rank 0 of 1, holding the output's lock), or
                                   --distributed static: rank r of W (from the flags or the scheduler's
                                   environment, parallel.jobs.ranks), running shards r, r + W, r + 2W, ...
                                   (--distributed ray: parallel.jobs.ray_job)
    finish(...)                    the output written from the shards once every one is committed

The shards are computed by a ShardWorker (parallel.jobs.worker); whoever commits the last shard writes
the output; rerunning any rank finishes it too; a finished output's failed images are computed again
into it (parallel.jobs.retry).
"""

import contextlib
import dataclasses
import logging
import os
import re
import time
from pathlib import Path

from parallel.engine import RunError, run_errors
from parallel.inputs.manifest import manifest_path
from parallel.inputs.sources import files_name
from parallel.jobs import locks
from parallel.jobs.identity import is_inside, freeze_sharded, refuse_output_among_images
from parallel.jobs.proof import owns_output
from parallel.jobs.ranks import resolve_rank
from parallel.jobs.retry import retry_failed, retry_in_output
from parallel.jobs.shards import ShardedJob
from parallel.jobs.worker import ShardWorker, add
from parallel.locations import is_url
from parallel.loop import Summary, log_stage_times
from parallel.messages import Progress, counted, first_line, listed, which_shards
from parallel.output import OutputError, read_record, sidecar_path
from parallel.output.record import SIDECAR_SUFFIX
from parallel.signals import StopRequest

log = logging.getLogger("parallel")


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
                                keep_shards=config.distribution.keep_shards, assembly=assembly,
                                feature_size=worker and worker.runner.feature_size)

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
                 "is" if len(missing) == 1 else "are", listed(missing))
    return dataclasses.replace(summary, output=config.output_location, errors_file=config.errors_location,
                               pending_shards=tuple(missing),
                               failure_cause=None if missing else job.failures_cause(summary.failed))


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
    if one_host and job.streamed:
        log.info("%s in %s; devices: %s", counted(len(config.source.files), files_name(config.source.kind)),
                 counted(job.shard_count, "shard"),
                 config.devices.describe(config.per_device_batch))
    elif one_host:
        log.info("%s under %s; devices: %s", counted(job.images, "image"), config.image_root,
                 config.devices.describe(config.per_device_batch))
    else:
        log.info("rank %d of %d (from %s): %s of %d; devices: %s", rank.rank, rank.world_size, rank.source,
                 which_shards(mine), job.shard_count, config.devices.describe(config.per_device_batch))
    summary = Summary()
    started = time.perf_counter()
    images = sum(_shard_length(job, index) for index in mine)
    with ShardWorker(config, job, weights=weights, alone=one_host) as worker, run_errors(), \
            Progress(config.progress, total=None if job.streamed else images, initial=0) as progress, \
            contextlib.ExitStack() as stack:
        if one_host:
            log.info("ready in %.1f s (weights to devices, graph, session)", time.perf_counter() - started)
        assembly = _prove(config, job, one_host, worker.runner.feature_size)
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
                _, paths, _ = retry_failed(config, job, worker, only=earlier)
            summary = dataclasses.replace(summary, written=summary.written + len(paths),
                                          failed=summary.failed - len(paths))
        return summary


def _prove(config, job, one_host, feature_size):
    """What the job's ledger claims of its output, checked against it before anything trusts it (`Assembly.prove`):
    by the job's only process, or by a rank that finds no other writing the output.

    Returns:
      the Assembly that proved it, through which the output grows shard by shard (its only process, where
      the shards go as their rows are in it), or None.
    """
    assembly = job.assembly(config.output_format, config.model.output_name, config.settings,
                            config.distribution.keep_shards, feature_size=feature_size)
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
                which_shards(list(error.rejected_shards)))
    for index in error.rejected_shards:
        worker.process(index)


def _check_output(config, overwrite=False, one_host=False):
    """Refuses, before anything is written, an output the job's last process could never write.

    A file that this program did not write (its record says whose it is, or, the record lost or
    damaged, the job's ledger: `proof.owns_output`) is replaced only with `overwrite` (the job's only
    process), and never when it is one of the job's images, or any file under its folder of images.

    Returns:
      the job's ShardedJob (not frozen yet); for a store, reached and checked (bucket, credentials).
    """
    output = config.output
    job = ShardedJob(output)
    if is_url(output):
        # An output with the job's manifest beside it and no record yet is this program's, cut short
        # between its upload and its record's (killed, or the record's upload failed): the job finishes it.
        if not overwrite and job.commits.sizes([""]) and job.commits.read(SIDECAR_SUFFIX) is None \
                and not job.manifest.exists():
            job.close()
            raise OutputError("%s exists and was not written by this program (no %s): choose another "
                              "output" % (output, sidecar_path(job.output).name))
        return job
    output = Path(output)
    if output.is_dir():
        raise OutputError("output=%s is a folder; give a file name" % output)
    if os.path.lexists(output) and not owns_output(job):  # its record, or else its ledger, says whose it is
        listed = not config.source.streamed and not is_url(config.image_root)  # a tar is never it: protocol
        if listed and is_inside(output, config.image_root):
            raise OutputError("--output %s is a file under --images %s, not an output of this program: choose "
                              "another --output" % (output, config.image_root))
        if listed:
            refuse_output_among_images(output, config.image_root, config.scan())
        if not overwrite:
            read_record(output)  # a damaged record says so
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
    if job.streamed:  # a tar's members are known once it is read: the job's images are those of its shards
        images = summary.discovered
    summary = dataclasses.replace(summary, seconds=time.perf_counter() - started, discovered=images,
                                  skipped=images - summary.written - summary.failed - summary.already_done)
    log_stage_times(summary)
    if summary.interrupted:
        return dataclasses.replace(summary, output=config.output_location)
    return finish(config, job, summary, worker, one_host, assembly)


def _shard_length(job, index):
    return min(job.shard_size, job.images - index * job.shard_size)

