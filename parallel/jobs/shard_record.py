"""What a committed shard says about itself, and the checks that it is the manifest's shard.

    O.shards/shard-000007/_shard.json   {"job": the job's identity, "shard": 7, "images": the
                                         manifest's digest of shard 7, "rows": 9996, "failed": 4}

The record (with the size and SHA-256 of each of the shard's files) is written in the attempt,
and committed with its files as one group (parallel.jobs.commits), so a committed shard always has
one. Three checks read it:

- `record_problem` (each time a shard is counted as committed): the record is there, of this
  job, this shard and the manifest's images, and lists the sizes its files have (a stat each, or
  one listing of a store);
- `quick_problem` (before the output is written from it, its files fetched): that, and its counts
  are the files' (rows from features.parquet's footer, failed from _errors.csv);
- `content_problem` (before a shard is committed, and before the output is written from it):
  the rows' paths and the errors' paths are exactly the manifest's images of the shard, the
  rows in their order.

A shard that fails either is set aside (`set_aside`: renamed to _rejected-shard-000007.<n>, which
readers of the Parquet folder skip) and computed again: the output is never written from a shard
that is not, image for image, the manifest's.
"""

import csv
import errno
import hashlib
import itertools
import json
import os
import re

from parallel.inputs.tars import MEMBERS_FILE, index_keys
from parallel.messages import error_line
from parallel.output.durable import file_digest

SHARD_FEATURES = "features.parquet"
SHARD_ERRORS = "_errors.csv"  # "_": readers of the Parquet folder skip it
SHARD_RECORD = "_shard.json"
REJECTED_PREFIX = "_rejected-"  # "_": readers of the Parquet folder skip it
SUPERSEDED_PREFIX = "_superseded-"  # a committed shard a retry replaces, removed once it is replaced


def job_identity(recorded):
    """The identity of a job whose shards are interchangeable: 32 hex digits.

    Args:
      recorded: what the manifest records (`parallel.inputs.manifest.read_job`): its job and shard
        size make the identity; its images do not, so that a manifest made anew keeps the
        shards whose images did not change.
    """
    content = json.dumps({"job": recorded["job"], "shard_size": recorded["shard_size"]}, sort_keys=True)
    return hashlib.sha256(content.encode()).hexdigest()[:32]


def write_record(folder, identity, index, images_digest, rows, failed, parts=()):
    """Writes `folder`/_shard.json (the caller makes it durable with the folder), with the size and SHA-256 of
    each of its `parts` (file names in `folder`): what is verified before a committed shard is used."""
    record = {"job": identity, "shard": index, "images": images_digest, "rows": rows, "failed": failed,
              "files": {name: dict(zip(("size", "sha256"), file_digest(folder / name))) for name in parts}}
    (folder / SHARD_RECORD).write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")


def files_problem(folder, verify=False):
    """What differs between a committed shard's files and the sizes (and, with `verify`, the SHA-256) its
    record lists; None if nothing (a record of an earlier version lists none: nothing to compare).

    The sizes are a stat each, checked whenever a shard is counted; the digests read every byte,
    checked once, before the output is written from the shard.
    """
    try:
        listed = json.loads((folder / SHARD_RECORD).read_text(encoding="utf-8")).get("files") or {}
        for name, expected in sorted(listed.items()):
            if os.path.getsize(folder / name) != expected["size"]:
                return "its %s is not the size its %s records: it was changed" % (name, SHARD_RECORD)
            if verify and file_digest(folder / name)[1] != expected["sha256"]:
                return "its %s does not match the SHA-256 its %s records: it was changed" % (name, SHARD_RECORD)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return "its files cannot be checked (%s)" % error_line(error)
    return None


def shard_keys(job, index, folder=None):
    """The keys of a shard's images, in order: the manifest's; a tar's from its index of members.

    Args:
      job: the frozen ShardedJob.
      index: the shard.
      folder: where a tar shard's index (MEMBERS_FILE) is, an attempt; None: the committed
        shard's, or the output's O.members.parquet once the shards are gone.

    Returns:
      list of str; None when a tar's index cannot be read (or a store's is not what its record lists).
    """
    if not job.streamed:
        return job.shard_images(index).paths
    try:
        folder = job.committed_folder(index) if folder is None else folder  # a store's: fetched, verified
        members = None if (folder / MEMBERS_FILE).exists() else job.members_index()
        if members is not None:  # O is written, the shards gone
            return index_keys(members, tars=set(job.shard_images(index).paths))
        return index_keys(folder / MEMBERS_FILE)
    except (OSError, ValueError):
        return None


def record_problem(record, sizes, identity, index, images_digest):
    """What is wrong with a committed group of shard `index`, from its record and the sizes of its files (a stat
    each, or one listing of a store); None if nothing. Checked whenever a shard is counted as committed.

    Args:
      record: its _shard.json (a dict), or None when it has none or it does not read.
      sizes: {file name: size in bytes} of the group's files.
      identity, index, images_digest: the job's `job_identity`, the shard, the manifest's digest of its images.

    Returns:
      str, one clause for a message ("its _shard.json is missing"), or None.
    """
    if SHARD_RECORD not in sizes:
        return "it has no %s (written by an earlier version, or damaged)" % SHARD_RECORD
    if isinstance(record, dict) and "job" in record and record["job"] != identity:
        return "it was computed for another job (another setting or shard size)"
    try:
        job, shard, images = record["job"], record["shard"], record["images"]
        int(record["rows"]), int(record["failed"])
        listed = record.get("files") or {}
        expected = {name: int(listed[name]["size"]) for name in sorted(listed)}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        return "its %s cannot be read (%s)" % (SHARD_RECORD, type(error).__name__)
    if job != identity:
        return "it was computed for another job (another setting or shard size)"
    if shard != index:
        return "its %s says shard %r" % (SHARD_RECORD, shard)
    if images != images_digest:
        return "its images are not the manifest's (the manifest was made anew since)"
    for name, size in expected.items():
        if sizes.get(name) != size:
            return "its %s is %s" % (name, "missing" if name not in sizes else
                                     "not the size its %s records: it was changed" % SHARD_RECORD)
    return None


def quick_problem(folder, identity, index, images_digest):
    """What is wrong with the committed shard in `folder`, from its record and counts; None if nothing.

    Args:
      folder: Path of the shard.
      identity: the job's `job_identity`.
      index: the shard's index.
      images_digest: the manifest's digest of the shard's images (`Manifest.digest`).

    Returns:
      str, one clause for a message ("its _shard.json is missing"), or None.
    """
    try:
        record = json.loads((folder / SHARD_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = None
    try:
        sizes = {path.name: path.stat().st_size for path in folder.iterdir()}
    except OSError:
        sizes = {}
    problem = record_problem(record, sizes, identity, index, images_digest)
    if problem:
        return problem
    try:
        counted = count_rows(folder / SHARD_FEATURES)
        errors = error_paths(folder / SHARD_ERRORS)
    except (OSError, ValueError, KeyError) as error:
        return "it cannot be read (%s)" % error_line(error)
    if counted != int(record["rows"]):
        return "%s holds %d rows, not the %d committed" % (SHARD_FEATURES, counted, int(record["rows"]))
    if len(errors) != int(record["failed"]):
        return "%s lists %d failed images, not the %d committed" % (SHARD_ERRORS, len(errors), int(record["failed"]))
    return None


def content_problem(features, errors, paths):
    """What differs between a shard's files and its images in the manifest; None if nothing.

    Args:
      features: Path of its features.parquet (rows: path_bytes, in order).
      errors: Path of its errors file (absent: no image failed).
      paths: list of str, the shard's images in the manifest, in order (a tar's: in its index of
        members); None when that index cannot be read.

    Returns:
      str, one clause for a message, or None when rows + errors are exactly `paths`, the rows
      in the manifest's order.
    """
    if paths is None:
        return "its index of tar members (_members.parquet) cannot be read"
    try:
        rows = row_paths(features)
        failed = error_paths(errors) if errors.exists() else []
    except (OSError, ValueError, KeyError) as error:
        return "it cannot be read (%s)" % error_line(error)
    failed_set, row_set, images = set(failed), set(rows), set(paths)
    if len(failed_set) != len(failed):
        return "%s lists an image twice" % SHARD_ERRORS
    if len(row_set) != len(rows):
        return "%s holds a row twice" % SHARD_FEATURES
    for listed, name in ((failed_set, SHARD_ERRORS), (row_set, SHARD_FEATURES)):
        strangers = listed - images
        if strangers:
            return "%s holds %s, not an image of this shard" % (name, min(strangers))
    both = row_set & failed_set
    if both:
        return "%s is both a row and a failure" % min(both)
    lost = [path for path in paths if path not in row_set and path not in failed_set]
    if lost:
        return "%d of its images are in neither %s nor %s (%s first)" % (len(lost), SHARD_FEATURES, SHARD_ERRORS,
                                                                         lost[0])
    for position, (row, wanted) in enumerate(zip(rows, (path for path in paths if path in row_set))):
        if row != wanted:
            return "row %d of %s is %s, not %s: not in the manifest's order" % (position, SHARD_FEATURES, row, wanted)
    return None


def insert_rows(features, target, keys, paths, values, column_prefix):
    """Writes `target`: the rows of the shard file `features` and the new rows (`paths`, `values`), in
    the order of `keys` (the shard's images), with the schema of `features`.

    Args:
      features: Path of a committed shard's features.parquet.
      target: Path to write.
      keys: the shard's images, in order.
      paths: the new rows' images (none of them a row of `features`).
      values: float32 [len(paths), D].
      column_prefix: the features column.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    old = pq.read_table(features)
    raw = [path.encode("utf-8", "surrogateescape") for path in paths]
    size = values.shape[1]
    columns = {"path": pa.array([value.decode("utf-8", "backslashreplace") for value in raw], pa.string()),
               "path_bytes": pa.array(raw, pa.binary()),
               column_prefix: pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), pa.float32()), size)}
    new = pa.table({name: columns[name] for name in old.schema.names}).cast(old.schema)
    table = pa.concat_tables([old, new])
    order = {key: position for position, key in enumerate(keys)}
    rows = [order[raw.decode("utf-8", "surrogateescape")] for raw in table.column("path_bytes").to_pylist()]
    pq.write_table(table.take(sorted(range(len(rows)), key=rows.__getitem__)), target)


def keep_last_copies(features, errors, entries, kept, renames):
    """Rewrites a tar shard's attempt after a member name came twice (`parallel.inputs.tar_stream.LaterCopies`): the
    rows and failures of the last copies only, under their members' keys, in the order of `entries`.

    Args:
      features: Path of the attempt's features.parquet.
      errors: Path of its errors file (absent when nothing failed).
      entries, kept, renames: `LaterCopies.resolve()`.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from parallel.output import ErrorLog
    order = {entry.key: position for position, entry in enumerate(entries)}
    table = pq.read_table(features)
    streamed = [raw.decode("utf-8", "surrogateescape") for raw in table.column("path_bytes").to_pylist()]
    rows = sorted((order[renames.get(key, key)], row) for row, key in enumerate(streamed) if key in kept)
    raw = [renames.get(streamed[row], streamed[row]).encode("utf-8", "surrogateescape") for _, row in rows]
    table = table.take([row for _, row in rows])
    table = table.set_column(table.schema.get_field_index("path"), "path",
                             pa.array([value.decode("utf-8", "backslashreplace") for value in raw], pa.string()))
    table = table.set_column(table.schema.get_field_index("path_bytes"), "path_bytes", pa.array(raw, pa.binary()))
    pq.write_table(table, features)
    if errors.exists():
        failed = sorted(((renames.get(path, path), kind, message) for path, kind, message in error_rows(errors)
                         if path in kept), key=lambda row: order[row[0]])
        log = ErrorLog(features)  # written anew: the failures of the last copies
        for row in failed:
            log.add(*row)
        log.close()


def count_rows(features):
    """Rows of a Parquet file, from its footer."""
    import pyarrow.parquet as pq
    with pq.ParquetFile(features) as file:
        return file.metadata.num_rows


def row_paths(features):
    """The paths of a shard's rows, in order (from path_bytes: the exact names)."""
    import pyarrow.parquet as pq
    column = pq.read_table(features, columns=["path_bytes"]).column("path_bytes")
    return [raw.decode("utf-8", "surrogateescape") for raw in column.to_pylist()]


def error_rows(errors):
    """The rows (path, kind, message) an errors file lists, in its order (an empty file lists none)."""
    with open(errors, newline="", encoding="utf-8", errors="surrogateescape") as file:
        return [(row["path"], row["kind"], row["message"]) for row in csv.DictReader(file)]


def error_paths(errors):
    """The paths an errors file lists, in its order (an empty file lists none)."""
    return [path for path, _, _ in error_rows(errors)]


def set_aside(folder, prefix=REJECTED_PREFIX):
    """Renames a committed shard's `folder` to _rejected-<its name>.<n> beside it, so it is computed again.

    Args:
      folder: Path of the shard (O.shards/shard-000007).
      prefix: of the new name (SUPERSEDED_PREFIX: a retry replaces it).

    Returns:
      Path it was renamed to, or None when it was gone already (another process set it aside,
      or the output was written and the shards removed).
    """
    for number in itertools.count(1):
        target = folder.with_name("%s%s.%d" % (prefix, folder.name, number))
        if os.path.lexists(target):
            continue
        try:
            os.rename(folder, target)
        except FileNotFoundError:
            return None
        except OSError as error:
            if error.errno in (errno.EEXIST, errno.ENOTEMPTY):  # another process took that name first
                continue
            raise
        return target


def rejection(output, rejected, written=False):
    """The RunError of shards set aside before the output was written.

    Args:
      output: the output, for the message.
      rejected: list of str, "shard 3 (what was wrong), now <where it was set aside>".
      written: the rows of earlier shards are in the output already (they stay).
    """
    from parallel.engine import RunError  # imports TensorFlow: not when shards are only read
    one = len(rejected) == 1
    error = RunError("%s %s: %d shard%s did not match the manifest and %s set aside: %s. "
                     "Rerun to recompute %s (static ranks: the rank of each shard, or any rank with "
                     "--world-size 1); the output is then written"
                     % ("the earlier shards' rows are in" if written else "nothing was written to", output,
                        len(rejected), "" if one else "s", "was" if one else "were",
                        "; ".join(rejected), "it" if one else "them"))
    error.rejected_shards = tuple(int(re.match(r"shard (\d+)", text).group(1)) for text in rejected)
    return error
