"""What a job is, and how its images are frozen: on one process, and sharded over many.

A job is one set of settings and one list of images, into one output. Both ways of running it
check the job against what its files record, then freeze its images in the manifest
(parallel.inputs.manifest), with the same record (`job_record`) and the same change rules
(`describe_changes`); they differ only in where committed rows live (the output itself, or
committed shards) and so in what a change may touch.

    job_record(config)                       what every process of a job must agree on
    check_job(images, output, settings)      one process, before anything is loaded or written:
        -> (record, current, frozen)          refuses an output of other settings or of another
                                              folder, and images added since the job started
    freeze_job(frozen, current, writer, ...)  one process, once the writer is open: refuses images
        -> Manifest                           changed or removed after their row was written,
                                              records the folder for a new job
    freeze_sharded(config, check_folder)     many processes: the first writes the manifest, the
        -> ShardedJob                         others wait and check it records their job; a change
                                              is refused naming the shards to recompute
"""

import logging
import os
from pathlib import Path

from parallel.inputs.manifest import (DEFAULT_SHARD_SIZE, IMAGE_EXTENSIONS, Manifest, describe_changes, manifest_path,
                                      other_source_message, read_job)
from parallel.inputs.sources import TARS
from parallel.jobs.shard_record import error_paths
from parallel.locations import is_url
from parallel.output import PARTS_SUFFIX, OutputError, check_settings, read_record, sidecar_path

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


def check_job(images_root, output, settings, scan, overwrite=False, geometry=None):
    """Refuses, before anything is loaded or written, an output that this job must not touch.

    Args:
      images_root: Path of the images folder.
      output: Path of the output.
      settings: {str: str}, the settings the output records, with "images" (the resolved
        folder), "format" and "column_prefix"; "feature_size" may be missing (not known yet).
      scan: callable returning the Manifest of the job's images now.
      overwrite: the run starts afresh (the output of another job may be replaced).
      geometry: this run's step geometry (`Config.step_geometry`); a resumed job recorded with
        another is warned about: its rows from now on may differ in float rounding.

    Returns:
      (record, current, frozen): the output's commit record or None (a new output, or
      overwrite); the Manifest of the folder now; the job's frozen Manifest, or None when
      the job has no committed row yet (then it is frozen anew).

    Raises:
      ValueError: the folder has no image, or an image was added since the job started.
      OutputError (a ValueError): the output is an input image, a folder, a file this program
        did not write, or an output of other settings or another folder.
    """
    if output.is_dir():
        raise OutputError("--output %s is a folder; give a file name" % output)
    if os.path.lexists(output) and _is_inside(output, images_root) and read_record(output) is None:
        raise OutputError("--output %s is a file under --images %s, not an output of this program: choose "
                          "another --output" % (output, images_root))
    current = scan()
    if not len(current):
        raise ValueError("--images %s contains no images (looked for %s, recursively)"
                         % (images_root, " ".join(sorted(IMAGE_EXTENSIONS))))
    refuse_output_among_images(output, images_root, current)
    record = None if overwrite else read_record(output)
    if record is None and not overwrite and os.path.lexists(output):
        raise OutputError("%s exists and was not written by this program (no %s): pass --overwrite to "
                          "replace it or choose another --output" % (output, sidecar_path(output).name))
    if record is not None:
        recorded = record["settings"]
        if "images" in recorded and recorded["images"] != settings["images"]:
            raise OutputError(other_source_message(output, recorded["images"], settings["images"]))
        check_settings(output, recorded, settings, ignore=("feature_size",))
    sharded = Path(str(output) + ".shards")
    finished = record is not None and record["state"] == "complete"
    if not overwrite and not finished and (sharded.exists() or Path(str(output) + ".attempts").exists()):
        raise OutputError("%s is being written by a job spread over several processes (%s exists): rerun it with "
                          "the same --distributed, or pass --overwrite" % (output, sharded.name))
    frozen = None
    if record is not None and record["rows"]:  # the job's input is frozen once a row is committed
        frozen = Manifest.load(manifest_path(output))
        if frozen is not None:  # stale rows are judged by freeze_job, once the rows are known
            refusal = describe_changes(frozen.changes(current), images_root, output)
            if refusal:
                raise ValueError(refusal)
            change = geometry and geometry_change(read_job(manifest_path(output))["job"], geometry)
            if change:
                log.warning("%s was started with another step geometry (%s): the rows computed from now on may "
                            "differ in float rounding from those of one uninterrupted run", output, change)
    return record, current, frozen


def freeze_job(frozen, current, writer, images_root, output, job=None):
    """The job's manifest: frozen by its first run, and checked against the rows committed since.

    Args:
      frozen: the saved Manifest from `check_job`, or None.
      current: Manifest of the folder now.
      writer: the open FeatureWriter (its `completed` rows decide what is stale).
      images_root, output: for the messages.
      job: {str: str}, what a new job's manifest records (`job_record`).

    Returns:
      Manifest: the job's images (the frozen list; repaired images with their new size and time).

    Raises:
      ValueError: an image was changed or removed after its row was written.
      OutputError: rows are committed but the manifest is missing.
    """
    path = manifest_path(output)
    if frozen is None:
        if writer.rows_committed:
            raise OutputError("%s is missing, so the images of %s cannot be checked: pass --overwrite to "
                              "start afresh" % (path, output))
        current.save(path, job=job)
        return current
    changes = frozen.changes(current)
    refusal = describe_changes(changes, images_root, output, committed=writer.completed)
    if refusal:
        raise ValueError(refusal)
    if changes.changed:  # images without a row that were repaired: record their new size and time
        frozen = frozen.updated(current, changes.changed)
        recorded = read_job(path)  # kept as they are: the shard size and the job of a sharded job too
        frozen.save(path, recorded["shard_size"], job=recorded["job"])
    return frozen


def _is_inside(path, folder):
    """Whether `path` (resolved) lies in `folder` (resolved), at any depth."""
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
    except ValueError:
        return False
    return True


def own_files(images_root, output):
    """Paths relative to `images_root` of this output's files that lie inside it: never images."""
    if not _is_inside(output, images_root):
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


def freeze_sharded(config, check_folder, job=None):
    """The job's manifest, written by the first process to come (the others wait for it).

    Args:
      config: Config with a distribution.
      check_folder: compare the images now with the frozen manifest (one process does it: it
        holds the whole list while it does).
      job: the job's ShardedJob, not frozen yet (None: `store_shards.open_job(config.output)`,
        a local job or one in an object store).

    Returns:
      ShardedJob, with its shard size and count known.

    Raises:
      ValueError: another job, another shard size, a folder that changed in a way that would
        make rows stale or out of order (an image added, or one with a committed row changed or
        removed: the message names the shards to recompute), a damaged manifest, or no manifest
        in time.
    """
    if job is None:
        from parallel.jobs.store_shards import open_job  # the store's modules only when a job needs them
        job = open_job(config.output)
    existed = job.manifest.exists()
    tars = config.source.kind == TARS
    if existed:  # before the generic comparison: a rank started with other flags is told which
        change = geometry_change(read_job(job.manifest)["job"], config.step_geometry)
        if change:
            raise ValueError("%s is computed with another step geometry than this process's (%s): its rows would "
                             "differ in float rounding; start every process with the same flags"
                             % (config.output, change))
    # Shards that start where a single process's steps start give the rows a single process computes,
    # bit for bit: a model's arithmetic may depend on how many images share a step (oneDNN, cuDNN).
    host_batch = int(config.step_geometry["per_device_batch"]) * int(config.step_geometry["devices"])
    job.freeze(job_record(config), lambda: _scan(config, spilled=True), config.distribution.shard_size,
               config.distribution.wait_seconds, default_shard_size=tars_per_shard if tars else
               max(host_batch, DEFAULT_SHARD_SIZE // host_batch * host_batch))
    if job.shard_size % host_batch and not tars:
        log.warning("shards of %d images are not a multiple of the %d images of a step: a step that two shards "
                    "share is computed whole in each (the rows are a single process's; the devices do more work: "
                    "choose a --shard-size that is)", job.shard_size, host_batch)
    if existed and check_folder:
        with job.named():
            _check_folder(config, job)
    return job


def tars_per_shard(manifest):
    """How many consecutive tars make a shard of a job over `manifest`'s tars: as many as hold about
    TAR_SHARD_BYTES at their median size, at least 1 (fixed when the job is frozen, so the same on
    any number of processes). Tars of more than half of it are a shard each; small ones
    share one, so that a shard is worth its commit and 100,000 tiny tars are not 100,000 shards."""
    sizes = sorted(size for size in manifest.sizes if size > 0)
    return max(1, min(len(manifest), TAR_SHARD_BYTES // sizes[len(sizes) // 2])) if sizes else 1


def _check_folder(config, job):
    """Refuses a folder changed in a way that would make committed rows stale (see `freeze_sharded`).

    Images (or tars) changed that have no row (they failed, or their shard is not committed) are
    taken as they are now, as one process takes them: the manifest records their new size, time
    and version, so that their reads are pinned to it and a later run finds nothing changed. A
    committed shard of them names the manifest's images anew (`ShardedJob.renew_record`): its rows
    are kept and its failed images computed again (`ShardWorker.retry`); where that cannot be done
    (a store's markers are written once) the shard is computed again whole.
    """
    manifest = job.load_manifest()
    current = _scan(config)
    changes = manifest.changes(current)
    if changes:
        rows = committed_rows(job)  # the rows only: a failed image of a committed shard has none
        refusal = describe_changes(changes, config.source.description, config.output, committed=rows,
                                   way_out=_way_out(job, changes, rows))
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
    output is never one."""
    current = config.entries() if spilled else config.scan()
    if not is_url(config.output):  # an object in a store is never one of the local images
        refuse_output_among_images(Path(config.output), config.image_root, current)
    return current


def committed_rows(job):
    """The images of `job` (a frozen ShardedJob) that have a row: {path: its shard, None once O is written}.

    A shard's rows are its images less those its errors file lists; the output's are the
    manifest's images less those of its errors file.
    """
    if job.is_finished():
        errors = job.output_errors()
        failed = set(error_paths(errors)) if errors.exists() else set()
        return {path: None for path in job.load_manifest().paths if path not in failed}
    rows = {}
    for index in range(job.shard_count):
        if job.is_committed(index):
            errors = job.shard_errors(index)
            if errors is None:  # the output was written meanwhile: its rows are all there is
                if job.is_finished():
                    return committed_rows(job)
                raise FileNotFoundError("shard %d of %s has no errors file" % (index, job.location))
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
