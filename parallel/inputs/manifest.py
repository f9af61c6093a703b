"""A job's input: the images under a folder, found once and frozen beside the output.

    root --scan_images--> [(path, size, mtime_ns), ...] sorted by path
         --Manifest--> <output>.manifest.parquet (written by the job's first run)
    rerun: Manifest.scan(root) compared with the frozen one --changes--> added / removed / changed

An output belongs to one job: its source (the resolved `--images` folder, recorded in the
output's settings) and the images that were there when it started. A rerun compares the
folder with the frozen manifest (`Changes`):

- an image added since the job started is refused: its row would land out of sorted order;
- an image removed, or changed (size or modification time), after its row was committed is
  refused: its row would be stale;
- an image removed or changed that has no row yet (it failed, or was not reached) is simply
  processed: a removed one fails as `missing`, a changed (e.g. repaired) one is decoded anew,
  and the manifest records its new size and time.

The paths list of a manifest never changes for the job; the many-hosts work cuts it into
fixed shards. Discovery (which files are images) is `parallel.inputs.discovery`.

A manifest can be checked: its metadata records, beside the job, a digest of each shard's rows
(path bytes, size, time) and a checksum of the whole record; every load verifies what it reads,
so a damaged file is refused (DamagedManifest) instead of losing or inventing an image.
"""

import array
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import sys
from pathlib import Path

from parallel.inputs.changes import Changes, describe_changes, other_source_message
from parallel.inputs.discovery import IMAGE_EXTENSIONS, discover_images, has_image_extension, walk
from parallel.messages import error_line
from parallel.output.durable import fsync, temporary_then_rename

__all__ = ["IMAGE_EXTENSIONS", "Changes", "DamagedManifest", "Manifest", "describe_changes", "discover_images",
           "has_image_extension", "manifest_path", "other_source_message", "read_job", "scan_images"]

log = logging.getLogger("parallel")

MANIFEST_SUFFIX = ".manifest.parquet"
DEFAULT_SHARD_SIZE = 10_000
_JOB_KEY = b"parallel.job"  # the manifest's Parquet metadata: the job it belongs to (JSON)


def scan_images(root, exclude=()):
    """Every image file under `root`, recursively, with its size and modification time.

    Args:
      root: folder, str or Path.
      exclude: paths relative to `root` ("a/b.jpg", "/" separators) never to list, and
        folders ("out.csv.parts") never to descend.

    Returns:
      list of (path, size, mtime_ns), sorted by path with `sorted()` so that the order never
      depends on the file system. `path` is relative to `root` with "/" separators; bytes of
      names that are not valid UTF-8 are kept as os.fsdecode's surrogates. A file that cannot
      be stat'ed (a broken link) has size and mtime_ns -1.

    Raises:
      ValueError: `root` is not a folder.
    """
    manifest = Manifest.scan(root, exclude)
    return list(zip(manifest.paths, manifest.sizes, manifest.mtimes))


def manifest_path(output):
    """`<output>.manifest.parquet`: the frozen input of the job writing `output` (str or Path)."""
    output = os.fspath(output)
    return output + MANIFEST_SUFFIX


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The images of a job: sorted relative paths with the size and time each had.

    Attributes:
      paths: list of str, sorted, relative to the images folder (or prefix); URLs; or, for a
        job of tars, the tars.
      sizes: int64 array.array, bytes (-1: could not be stat'ed).
      mtimes: int64 array.array, modification times in nanoseconds (-1 likewise).
      etags: None for files; for objects of a store, each one's ETag or generation (str, ""
        when the store gives none): part of what a change is, of the digest and of the file
        (column "etag"), only when present, so a folder's manifest is what it always was.
    """

    paths: list
    sizes: array.array
    mtimes: array.array
    etags: list = None

    def __post_init__(self):
        for name in ("sizes", "mtimes"):  # 8 bytes an image, where a list of ints takes 36
            if not isinstance(getattr(self, name), array.array):
                object.__setattr__(self, name, array.array("q", getattr(self, name)))

    @classmethod
    def scan(cls, root, exclude=()):
        """The manifest of the images under `root` now (see `scan_images`), sorted by path."""
        return cls._sorted(*walk(root, exclude))

    @classmethod
    def _sorted(cls, paths, sizes, mtimes):
        order = sorted(range(len(paths)), key=paths.__getitem__)
        return cls([paths[index] for index in order], array.array("q", (sizes[index] for index in order)),
                   array.array("q", (mtimes[index] for index in order)))

    def __len__(self):
        return len(self.paths)

    def changes(self, current):
        """What differs in `current` (the folder now) from this frozen manifest.

        Args:
          current: Manifest of the folder as it is now.

        Returns:
          Changes: paths only in `current` (added), only in this one (removed), and in both
          with another size or modification time (changed).
        """
        frozen = dict(zip(self.paths, self._states()))
        added, changed = [], []
        seen = set()
        for path, state in zip(current.paths, current._states()):
            seen.add(path)
            before = frozen.get(path)
            if before is None:
                added.append(path)
            elif before != state:
                changed.append(path)
        removed = [path for path in self.paths if path not in seen]
        return Changes(added=added, removed=removed, changed=changed)

    def _states(self):
        """(size, mtime, etag) of each image, in order (etag "" for files)."""
        return zip(self.sizes, self.mtimes, self.etags if self.etags is not None else [""] * len(self.paths))

    def updated(self, current, paths):
        """This manifest with the size, time (and etag) of `paths` taken from `current` (same path list)."""
        paths = set(paths)
        now = {path: state for path, state in zip(current.paths, current._states()) if path in paths}
        sizes, mtimes = list(self.sizes), list(self.mtimes)
        etags = list(self.etags) if self.etags is not None else None
        for index, path in enumerate(self.paths):
            if path in now:
                sizes[index], mtimes[index], etag = now[path]
                if etags is not None:
                    etags[index] = etag
        return Manifest(list(self.paths), sizes, mtimes, etags)

    def save(self, path, shard_size=DEFAULT_SHARD_SIZE, job=None):
        """Writes the manifest to `path` atomically (Parquet: path, path_bytes, size, mtime_ns).

        `path` is the readable name (bytes that are not UTF-8 as backslash escapes) and
        `path_bytes` the exact bytes of the name, as in the Parquet output. Each row group is
        one shard of `shard_size` images, so a worker reads its shard without the rest.

        Args:
          path: str or Path of the file.
          shard_size: images per shard (>= 1).
          job: {str: str}, what the job is (settings, source), kept in the file's metadata.
        """
        check_shard_size(shard_size)
        chunks = [self.rows(start, start + shard_size) for start in range(0, len(self), shard_size)]
        write_manifest(path, chunks, chunks, len(self), shard_size, job, self.etags is not None)

    def rows(self, start, stop):
        """The Manifest of rows `start` .. `stop` - 1."""
        return Manifest(self.paths[start:stop], self.sizes[start:stop], self.mtimes[start:stop],
                        self.etags[start:stop] if self.etags is not None else None)

    def without(self, paths):
        """This manifest without the images `paths` (a set): e.g. a shard's images that have a row."""
        keep = [index for index, path in enumerate(self.paths) if path not in paths]
        return Manifest([self.paths[index] for index in keep], [self.sizes[index] for index in keep],
                        [self.mtimes[index] for index in keep],
                        [self.etags[index] for index in keep] if self.etags is not None else None)

    def digest(self, start=0, stop=None):
        """A digest of rows `start` .. `stop` - 1 (their path bytes, sizes and times): 32 hex digits.

        The manifest records one per shard, and a committed shard the one of its images: equal
        digests are the same images, in the same order, as they were when the job was frozen.
        """
        raws = [path.encode("utf-8", "surrogateescape") for path in self.paths[start:stop]]
        digest = hashlib.sha256(_little_endian(map(len, raws)))
        digest.update(b"".join(raws))
        digest.update(_little_endian(self.sizes[start:stop]))
        digest.update(_little_endian(self.mtimes[start:stop]))
        if self.etags is not None:  # objects of a store: their versions too (files have none)
            tags = [tag.encode("utf-8", "surrogateescape") for tag in self.etags[start:stop]]
            digest.update(_little_endian(map(len, tags)))
            digest.update(b"".join(tags))
        return digest.hexdigest()[:32]

    @classmethod
    def load(cls, path):
        """The manifest saved at `path`, or None when there is none.

        Raises:
          DamagedManifest (a ValueError): the file exists but is not a manifest written by
            `save`, or its content does not match its checksum.
        """
        import pyarrow.parquet as pq
        if not os.path.exists(path):
            return None
        with _damaged(path), pq.ParquetFile(path) as file:
            record = _record(path, file.schema_arrow.metadata)
            manifest = cls._from_table(file.read(columns=_columns(file)))
        if "checksum" in record:  # a manifest of an earlier version has none: it is taken as it is
            size = record["shard_size"]
            if len(manifest) != record["images"] or [manifest.digest(start, start + size) for start in
                                                     range(0, len(manifest), size)] != record["shards"]:
                raise DamagedManifest(path, "checksum")
        return manifest

    @classmethod
    def load_shard(cls, path, index):
        """Shard `index` of the manifest at `path`: only its images are read (and checked).

        Raises:
          ValueError: no such shard.
          DamagedManifest (a ValueError): the file is not a manifest, or the shard does not
            match its checksum.
        """
        import pyarrow.parquet as pq
        with _damaged(path), pq.ParquetFile(path) as file:
            record = _record(path, file.schema_arrow.metadata)
            if not 0 <= index < file.num_row_groups:
                raise ValueError("shard %r does not exist: the job has %d" % (index, file.num_row_groups))
            shard = cls._from_table(file.read_row_group(index, columns=_columns(file)))
        if "checksum" in record and (file.num_row_groups != len(record["shards"])
                                     or shard.digest() != record["shards"][index]):
            raise DamagedManifest(path, "checksum")
        return shard

    @classmethod
    def _from_table(cls, table):
        paths = [raw.decode("utf-8", "surrogateescape") for raw in table.column("path_bytes").to_pylist()]
        return cls(paths, array.array("q", table.column("size").to_numpy().astype("int64").tobytes()),
                   array.array("q", table.column("mtime_ns").to_numpy().astype("int64").tobytes()),
                   table.column("etag").to_pylist() if "etag" in table.column_names else None)


def _columns(file):
    """The columns of a manifest to read: an etag column only where the images are objects of a store."""
    return ["path_bytes", "size", "mtime_ns"] + (["etag"] if "etag" in file.schema_arrow.names else [])


def read_job(path):
    """What the manifest at `path` records, without its images, or None when there is none.

    Returns:
      {"shard_size", "images", "job", "shards": [digest of each shard], "checksum"} (the last
      two absent from a manifest of an earlier version).

    Raises:
      DamagedManifest (a ValueError): the file exists but is not a manifest written by
        `Manifest.save`, or its record does not match its checksum.
    """
    import pyarrow.parquet as pq
    if not os.path.exists(path):
        return None
    with _damaged(path):
        return _record(path, pq.read_schema(path).metadata)


class DamagedManifest(ValueError):
    """A manifest that cannot be read, or whose content does not match its checksum.

    Attributes:
      path: the manifest.
      reason: what is wrong ("checksum", or the reader's error).
    """

    def __init__(self, path, reason, way_out="pass --overwrite to start afresh"):
        super().__init__("%s is damaged (%s): %s" % (path, reason, way_out))
        self.path, self.reason = path, reason

    def with_way_out(self, way_out):
        """The same error, advising `way_out` (a job over several processes has another)."""
        return DamagedManifest(self.path, self.reason, way_out)


def check_shard_size(shard_size):
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError("shard_size must be at least 1; got %r" % (shard_size,))


def write_manifest(path, first_pass, second_pass, images, shard_size, job, etags):
    """Writes a manifest file atomically from its shards, each a Manifest of `shard_size` rows (the last
    may have fewer): `first_pass` and `second_pass` are two iterations of the same shards, the first
    for their digests (the record heads the file), the second for their rows, so that the shards
    need not be in memory together (`parallel.inputs.sorting`). Each shard is one row group.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    record = {"shard_size": shard_size, "images": images, "job": dict(job or {}),
              "shards": [chunk.digest() for chunk in first_pass]}
    record["checksum"] = _checksum(record)
    fields = [("path", pa.string()), ("path_bytes", pa.binary()), ("size", pa.int64()), ("mtime_ns", pa.int64())]
    schema = pa.schema(fields + ([("etag", pa.string())] if etags else []),
                       metadata={_JOB_KEY: json.dumps(record, sort_keys=True).encode()})
    # An OSFile of our own: given a path, pyarrow leaves the file open after a failed write (a full disk).
    with temporary_then_rename(Path(path)) as temporary, pa.OSFile(str(temporary), "wb") as sink, \
            pq.ParquetWriter(sink, schema) as writer:
        for chunk in second_pass:
            try:  # every name valid UTF-8 (the rule): the bytes column shares the text column's buffers
                readable = pa.array(chunk.paths, pa.string())
                raw = readable.cast(pa.binary())
            except UnicodeEncodeError:  # some names are not: their bytes, and a readable text with escapes
                raw = pa.array([name.encode("utf-8", "surrogateescape") for name in chunk.paths], pa.binary())
                readable = pa.array([name.decode("utf-8", "backslashreplace") for name in raw.to_pylist()],
                                    pa.string())
            columns = [readable, raw, pa.array(np.frombuffer(chunk.sizes, np.int64)),
                       pa.array(np.frombuffer(chunk.mtimes, np.int64))]
            if etags:
                columns.append(pa.array(chunk.etags, pa.string()))
            writer.write_table(pa.Table.from_arrays(columns, schema=schema), row_group_size=shard_size)
    fsync(Path(path).parent)


def _record(path, metadata):
    """The record in a manifest's metadata, its checksum verified (when it has one)."""
    record = json.loads((metadata or {})[_JOB_KEY])
    if "checksum" in record and _checksum(record) != record["checksum"]:
        raise DamagedManifest(path, "checksum")
    return record


def _checksum(record):
    """A checksum of a manifest's record (every key but "checksum"): 32 hex digits."""
    content = {key: value for key, value in record.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:32]


def _little_endian(numbers):
    """int64 `numbers` as bytes, the same on every host of a job."""
    values = array.array("q", numbers)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


@contextlib.contextmanager
def _damaged(path):
    """Turns pyarrow's and json's errors on a file that is not a manifest into one DamagedManifest."""
    try:
        yield
    except DamagedManifest:
        raise
    except (ValueError, OSError, KeyError, TypeError) as error:  # pyarrow raises several kinds for a damaged file
        if isinstance(error, ValueError) and str(error).startswith("shard "):
            raise
        raise DamagedManifest(path, error_line(error)) from None
