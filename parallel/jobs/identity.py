"""What a job is, and how its images are frozen, whatever the number of its processes.

A job is one set of settings and one list of images, into one output. Its first process freezes
the images in the manifest (parallel.inputs.manifest) with the job's record (`job_record`); every
later process, and every rerun, checks that record and the images now against it, with the same
change rules (`describe_changes`), before anything is loaded or written.

    job_record(config)                         what every process of a job must agree on
    freeze_sharded(config, check_folder, ...)  the first process writes the manifest, the others
        -> ShardedJob                          wait and check it records their job; a change is
                                               refused saying what to do about it
    refuse_output_among_images(output, ...)    the output is none of the job's images, however
                                               the job names them
"""

import logging
import os
from pathlib import Path

from parallel.inputs.manifest import DEFAULT_SHARD_SIZE, IMAGE_EXTENSIONS, Manifest, describe_changes, manifest_path
from parallel.jobs.commits import PartChanged
from parallel.jobs.shard_record import error_paths
from parallel.locations import is_url
from parallel.output import PARTS_SUFFIX, OutputError, check_settings

log = logging.getLogger("parallel")

TAR_SHARD_BYTES = 256 << 20  # a shard of small tars holds about this much

# The step geometry (jobs.config.Config.step_geometry): the job's record keys, and the flags that set them.
GEOMETRY_FLAGS = {"per_device_batch": "--batch-size", "devices": "--gpus/--devices (--gpus-per-worker under Ray)"}


def job_record(config):
    """What a job's manifest records and every process of it must agree on: {str: str}.

    The output's settings, and the step geometry (images per device per step, devices): two
    processes computing with other geometries would give rows that differ in float rounding.

    Args:
      config: the engine's Config.
    """
    return dict(config.settings, format=config.output_format, column_prefix=config.model.output_name,
                **config.step_geometry)


def is_inside(path, folder):
    """Whether `path` (resolved) lies in `folder` (resolved), at any depth."""
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
    except ValueError:
        return False
    return True


def own_files(images_root, output):
    """Paths relative to `images_root` of this output's files that lie inside it: never images."""
    if not is_inside(output, images_root):
        return ()
    relative = Path(output).resolve().relative_to(images_root.resolve()).as_posix()
    # The sidecars end in .json, .csv, .parquet or .tmp, never an image extension: only the
    # output itself and its parts folder could be taken for images.
    return (relative, relative + PARTS_SUFFIX)


def geometry_change(recorded_job, geometry):
    """How this process's step geometry differs from the one the job recorded, or None.

    Args:
      recorded_job: the "job" a manifest records (`read_job(...)["job"]`); a job of an earlier
        version records no geometry, and then nothing differs.
      geometry: this process's `Config.step_geometry`.

    Returns:
      str, e.g. "per_device_batch=12, this process 8 (--batch-size)", or None.
    """
    differences = ["%s=%s, this process %s (%s)" % (key, recorded_job[key], value, GEOMETRY_FLAGS[key])
                   for key, value in geometry.items() if key in recorded_job and recorded_job[key] != value]
    return "; ".join(differences) or None


def refuse_output_among_images(output, images_root, manifest):
    """OutputError when `output` is one of the job's images, however the job names them.

    An image listed by an absolute path outside --images (--images-from), through `..`, a
    symbolic link or a hard link: the output is compared by name and, when it exists, by
    identity (device and inode) with every image of its size.

    Args:
      output: Path of the output.
      images_root: the folder relative image paths start from.
      manifest: Manifest of the job's images, or their SortedEntries (parallel.inputs.sorting).
    """
    root = os.path.abspath(images_root)
    names = {os.path.basename(os.path.abspath(output)), os.path.basename(os.path.realpath(output))}
    targets = {os.path.abspath(output), os.path.realpath(output)}
    try:
        status = os.stat(output)
    except OSError:
        status = None
    entries = zip(manifest.paths, manifest.sizes) if isinstance(manifest, Manifest) else \
        ((entry[0], entry[1]) for entry in manifest)
    for path, size in entries:
        same = False
        if os.path.basename(path) in names:
            full = os.path.join(root, path)
            same = os.path.abspath(full) in targets or os.path.realpath(full) in targets
        if not same and status is not None and size == status.st_size:
            try:
                image = os.stat(os.path.join(root, path))
                same = (image.st_dev, image.st_ino) == (status.st_dev, status.st_ino)
            except OSError:
                pass
        if same:
            raise OutputError("--output %s is one of the job's images (%s): choose another --output"
                              % (output, path))


def freeze_sharded(config, check_folder, job=None, alone=False):
    """The job's manifest, written by the first process to come (the others wait for it).

    Args:
      config: Config with a distribution.
      check_folder: compare the images now with the frozen manifest (one process does it: it
        holds the whole list while it does).
      job: the job's ShardedJob, not frozen yet (None: `ShardedJob(config.output)`,
        a local job or one in an object store).
      alone: this process is the job's only one, holding the output's lock (`ShardedJob.output_lock`):
        a job of which no row is committed is frozen anew, as the images are now; a step geometry
        other than the recorded one is warned about, not refused (the job's recorded one stays);
        a refusal advises --overwrite.

    Returns:
      ShardedJob, with its shard size and count known.

    Raises:
      ValueError: another job, another shard size, a folder that changed in a way that would
        make rows stale or out of order (an image added, or one with a committed row changed or
        removed), committed rows without their manifest, a damaged manifest, or no manifest in time.
    """
    if job is None:
        from parallel.jobs.shards import ShardedJob
        job = ShardedJob(config.output)
    if alone and job.manifest.exists() and not is_url(config.output) and not job.holds_rows():
        job.remove_everything()  # nothing committed can be stale or out of order: the job starts as the images are now
    existed = job.manifest.exists()
    if not existed and job.output_rows():  # a damaged manifest removed, say
        settings = job.output_settings()
        if settings is not None:  # another job's output is refused as ever, before anything is written
            check_settings(config.output, settings, dict(config.settings, format=config.output_format,
                                                         column_prefix=config.model.output_name),
                           ignore=("feature_size",))
        log.warning("%s is missing: it is made anew from the images as they are now; the rows of %s computed from "
                    "them are kept (its ledger proves which), the others computed again", manifest_path(config.output),
                    config.output)
    tars = config.source.streamed
    record = job_record(config)
    if existed:  # before the generic comparison: a rank started with other flags is told which
        recorded = job.recorded_job()
        change = geometry_change(recorded, config.step_geometry)
        if change and alone:  # warned about once the job is known to be this one (`job.freeze` checks it)
            record.update((key, recorded[key]) for key in config.step_geometry if key in recorded)
        elif change:
            raise ValueError("%s is computed with another step geometry than this process's (%s): its rows would "
                             "differ in float rounding; start every process with the same flags"
                             % (config.output, change))
    # Shards that start where a single process's steps start give the rows a single process computes,
    # bit for bit: a model's arithmetic may depend on how many images share a step (oneDNN, cuDNN).
    host_batch = int(config.step_geometry["per_device_batch"]) * int(config.step_geometry["devices"])
    job.freeze(record, lambda: _scan(config, spilled=True), config.distribution.shard_size,
               config.distribution.wait_seconds, default_shard_size=tars_per_shard if tars else
               max(host_batch, DEFAULT_SHARD_SIZE // host_batch * host_batch))
    if existed and change and alone:
        log.warning("%s was started with another step geometry (%s): the rows computed from now on may differ "
                    "in float rounding from those of one uninterrupted run", config.output, change)
    if job.shard_size % host_batch and not tars:
        log.warning("shards of %d images are not a multiple of the %d images of a step: a step that two shards "
                    "share is computed whole in each (the rows are a single process's; the devices do more work: "
                    "choose a --shard-size that is)", job.shard_size, host_batch)
    if existed and check_folder:
        with job.named():
            _check_folder(config, job, alone)
    return job


def tars_per_shard(manifest):
    """How many consecutive tars (or Parquet or TFRecord files) make a shard of a job over `manifest`'s
    files: as many as hold about TAR_SHARD_BYTES at their median size, at least 1 (fixed when the job is
    frozen, so the same on any number of processes). Files of more than half of it are a shard each;
    small ones share one, so that a shard is worth its commit and 100,000 tiny tars are not 100,000 shards."""
    sizes = sorted(size for size in manifest.sizes if size > 0)
    return max(1, min(len(manifest), TAR_SHARD_BYTES // sizes[len(sizes) // 2])) if sizes else 1


def _check_folder(config, job, alone=False):
    """Refuses a folder changed in a way that would make committed rows stale (see `freeze_sharded`).

    Images (or tars) changed that have no row (they failed, or their shard is not committed) are
    taken as they are now: the manifest records their new size, time and version, so that their
    reads are pinned to it and a later run finds nothing changed. A committed shard of them names
    the manifest's images anew (`ShardedJob.renew_record`): its rows are kept and its failed images
    computed again (`ShardWorker.retry`); where that cannot be done (a store's records are written
    once) the shard is computed again whole.
    """
    manifest = job.load_manifest()
    current = _scan(config)
    changes = manifest.changes(current)
    if changes:
        rows = committed_rows(job)  # the rows only: a failed image of a committed shard has none
        refusal = describe_changes(changes, config.source.description, config.output, committed=rows,
                                   **({} if alone else {"way_out": _way_out(job, changes, rows)}))
        if refusal:
            raise ValueError(refusal)
        log.warning("%d images changed or were removed since the job started; none has a row yet: they are "
                    "computed as they are now", len(changes.removed) + len(changes.changed))
        if changes.changed:
            if not job.retried_in_output():  # else its rows are appended to it, and its shards are gone
                job.reopen()  # a finished output is written afresh once the shards are computed again
            places = {path: position for position, path in enumerate(manifest.paths)}
            shards = sorted({places[path] // job.shard_size for path in changes.changed})
            before = {index: job.shard_digest(index) for index in shards}
            job.save_manifest(manifest.updated(current, changes.changed))
            for index in shards:  # a committed shard of them keeps its rows: its failed images alone are retried
                job.renew_record(index, before[index])


def _scan(config, spilled=False):
    """The job's images now (`Config.scan`; `spilled`: sorted on disk, `Config.entries`), of which the
    output is never one.

    Raises:
      ValueError: the job has no image.
    """
    current = config.entries() if spilled else config.scan()
    if not len(current):
        raise ValueError("--images %s contains no images (looked for %s, recursively)"
                         % (config.source.description, " ".join(sorted(IMAGE_EXTENSIONS))))
    if not is_url(config.output):  # an object in a store is never one of the local images
        refuse_output_among_images(Path(config.output), config.image_root, current)
    return current


def committed_rows(job):
    """The images of `job` (a frozen ShardedJob) that have a row: {path: its shard, None once in the output}.

    A shard's rows are its images less those its errors file lists; those of a shard in the output,
    its images less the failures its ledger records.
    """
    if job.is_finished():
        failed = job.assembled_failures()
        return {path: None for path in job.load_manifest().paths if path not in failed}
    rows, in_output = {}, job.ledger().shards()
    for index in range(job.shard_count):
        try:
            errors = job.shard_errors(index)
        except PartChanged as error:  # a store's part is not what its record lists: the shard is computed again
            job.set_aside(index, str(error))
            errors = None
        if errors is None and index in in_output:  # its rows are in the output, its failures in the ledger
            failed = {path for path, _, _ in in_output[index]}
            rows.update((path, None) for path in job.shard_images(index).paths if path not in failed)
        elif errors is not None and job.is_committed(index):
            failed = set(error_paths(errors))
            rows.update((path, index) for path in job.shard_images(index).paths if path not in failed)
    return rows


def _way_out(job, changes, rows):
    """What a job over several processes can do about a folder that changed (it has no --overwrite).

    Args:
      job: the frozen ShardedJob.
      changes: Changes of its folder.
      rows: `committed_rows(job)`.
    """
    ways = []
    stale = {rows[path] for path in changes.removed + changes.changed if path in rows}
    if None in stale:  # the output is written: its rows are no longer in shards
        ways.append("run once without --distributed and with --overwrite to compute %s afresh" % job.output)
    elif stale:
        shards = sorted(stale)
        folders = ", ".join(str(job.shard_folder(index)) for index in shards[:3]) + (", ..." if len(shards) > 3 else "")
        ways.append("remove %s and rerun to recompute %s" % (folders, "it" if len(shards) == 1 else "them"))
    if changes.added:
        ways.append("move the added images away, or remove %s and rerun to start over the images as they are now "
                    "(the shards whose images did not change are kept)" % job.manifest)
    return "; ".join(ways) + "; or choose another --output"
