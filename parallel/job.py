"""Job identity: an output belongs to one job, its settings and the images of one folder.

    check_job(images, output, settings)      before anything is loaded or written: refuses an
        -> (record, current, frozen)          output of other settings or of another folder, and
                                              images added since the job started
    freeze_job(frozen, current, writer, ...)  once the writer is open: refuses images changed or
        -> Manifest                           removed after their row was written, records the
                                              folder for a new job (see parallel.manifest)
"""

import os
from pathlib import Path

from parallel.manifest import IMAGE_EXTENSIONS, Manifest, describe_changes, manifest_path, other_source_message
from parallel.output import PARTS_SUFFIX, OutputError, check_settings, read_record, sidecar_path


def check_job(images_root, output, settings, scan, overwrite=False):
    """Refuses, before anything is loaded or written, an output that this job must not touch.

    Args:
      images_root: Path of the images folder.
      output: Path of the output.
      settings: {str: str}, the settings the output records, with "images" (the resolved
        folder), "format" and "column_prefix"; "feature_size" may be missing (not known yet).
      scan: callable returning the Manifest of the job's images now.
      overwrite: the run starts afresh (the output of another job may be replaced).

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
    current = scan()
    if not len(current):
        raise ValueError("--images %s contains no images (looked for %s, recursively)"
                         % (images_root, " ".join(sorted(IMAGE_EXTENSIONS))))
    frozen = None
    if record is not None and record["rows"]:  # the job's input is frozen once a row is committed
        frozen = Manifest.load(manifest_path(output))
        if frozen is not None:  # stale rows are judged by freeze_job, once the rows are known
            refusal = describe_changes(frozen.changes(current), images_root, output)
            if refusal:
                raise ValueError(refusal)
    return record, current, frozen


def freeze_job(frozen, current, writer, images_root, output):
    """The job's manifest: frozen by its first run, and checked against the rows committed since.

    Args:
      frozen: the saved Manifest from `check_job`, or None.
      current: Manifest of the folder now.
      writer: the open FeatureWriter (its `completed` rows decide what is stale).
      images_root, output: for the messages.

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
        current.save(path)
        return current
    changes = frozen.changes(current)
    refusal = describe_changes(changes, images_root, output, committed=writer.completed)
    if refusal:
        raise ValueError(refusal)
    if changes.changed:  # images without a row that were repaired: record their new size and time
        frozen = frozen.updated(current, changes.changed)
        frozen.save(path)
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
