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
fixed shards.

Discovery: every file whose extension is one of IMAGE_EXTENSIONS (any case), walked with
`os.fwalk`, which opens each folder relative to its parent: a path longer than the system's
limit (PATH_MAX, 4096 bytes on Linux) is still found, and then fails as `unreadable` when it is
read, instead of vanishing. A symlinked folder is not descended (no loops, no duplicates); a
symlink to a file is an image, read through the link; a broken link or a link loop is found
too (size and time -1) and fails when read. `exclude` keeps the program's own files (an output
inside the images folder, its sidecars) from ever being taken for images.
"""

import array
import contextlib
import csv
import dataclasses
import json
import logging
import os
import stat
from pathlib import Path

from parallel.messages import first_line
from parallel.output.durable import fsync, temporary_then_rename

log = logging.getLogger("parallel")

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp",
                              ".ppm", ".pgm", ".pbm", ".pnm"})
MANIFEST_SUFFIX = ".manifest.parquet"
DEFAULT_SHARD_SIZE = 10_000
_JOB_KEY = b"parallel.job"  # the manifest's Parquet metadata: the job it belongs to (JSON)
_NAMES_SHOWN = 3  # names quoted per kind of change in an error


def has_image_extension(name):
    """Whether the file name `name` ends with one of IMAGE_EXTENSIONS, in any case."""
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


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


def _walk(root, exclude):
    """(paths, sizes, mtimes) of the image files under `root`, in the order found (see scan_images)."""
    top = os.fspath(root)
    if not os.path.isdir(top):
        raise ValueError("%s is not a folder" % (root,))
    exclude = frozenset(exclude)

    def skip(error):
        log.warning("cannot list %s under %s (%s); skipping the images in it",
                    error.filename, top, error.strerror or error)

    # Three compact columns, not a tuple per image: a million images fit in a few hundred MB.
    paths, sizes, mtimes = [], array.array("q"), array.array("q")
    for folder, folders, names, descriptor in os.fwalk(top, onerror=skip):
        relative = os.path.relpath(folder, top)
        prefix = "" if relative == os.curdir else relative.replace(os.sep, "/") + "/"
        folders[:] = [name for name in folders if prefix + name not in exclude]
        for name in names:
            path = prefix + name
            if has_image_extension(name) and path not in exclude:
                size, mtime = _size_and_time(name, descriptor)
                paths.append(path)
                sizes.append(size)
                mtimes.append(mtime)
    return paths, sizes, mtimes


def _size_and_time(name, folder_descriptor):
    """(size, mtime_ns) of `name` (relative to the folder `folder_descriptor`, or a path when None)."""
    try:
        status = os.stat(name, dir_fd=folder_descriptor)  # through a link: the image is its target
    except OSError:
        return -1, -1  # a broken link or a loop: reading it reports the failure
    if not stat.S_ISREG(status.st_mode):
        return -1, -1  # a FIFO, a device: never opened, fails as not_a_file
    return status.st_size, status.st_mtime_ns


def discover_images(root, exclude=()):
    """Every image file under `root`, recursively, as sorted relative paths (see `scan_images`).

    Returns:
      list of str: paths relative to `root` with "/" separators, sorted.

    Raises:
      ValueError: `root` is not a folder.
    """
    return sorted(_walk(root, exclude)[0])


def manifest_path(output):
    """`<output>.manifest.parquet`: the frozen input of the job writing `output` (str or Path)."""
    output = os.fspath(output)
    return output + MANIFEST_SUFFIX


@dataclasses.dataclass(frozen=True)
class Changes:
    """How a folder differs from a job's frozen manifest (each a sorted list of paths)."""

    added: list
    removed: list
    changed: list

    def __bool__(self):
        return bool(self.added or self.removed or self.changed)


@dataclasses.dataclass(frozen=True)
class Manifest:
    """The images of a job: sorted relative paths with the size and time each had.

    Attributes:
      paths: list of str, sorted, relative to the images folder.
      sizes: int64 array.array, bytes (-1: could not be stat'ed).
      mtimes: int64 array.array, modification times in nanoseconds (-1 likewise).
    """

    paths: list
    sizes: array.array
    mtimes: array.array

    def __post_init__(self):
        for name in ("sizes", "mtimes"):  # 8 bytes an image, where a list of ints takes 36
            if not isinstance(getattr(self, name), array.array):
                object.__setattr__(self, name, array.array("q", getattr(self, name)))

    @classmethod
    def scan(cls, root, exclude=()):
        """The manifest of the images under `root` now (see `scan_images`), sorted by path."""
        return cls._sorted(*_walk(root, exclude))

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
        frozen = {path: (size, mtime) for path, size, mtime in zip(self.paths, self.sizes, self.mtimes)}
        added, changed = [], []
        seen = set()
        for path, size, mtime in zip(current.paths, current.sizes, current.mtimes):
            seen.add(path)
            before = frozen.get(path)
            if before is None:
                added.append(path)
            elif before != (size, mtime):
                changed.append(path)
        removed = [path for path in self.paths if path not in seen]
        return Changes(added=added, removed=removed, changed=changed)

    def updated(self, current, paths):
        """This manifest with the size and time of `paths` taken from `current` (same path list)."""
        paths = set(paths)
        now = {path: (size, mtime) for path, size, mtime in zip(current.paths, current.sizes, current.mtimes)
               if path in paths}
        sizes, mtimes = list(self.sizes), list(self.mtimes)
        for index, path in enumerate(self.paths):
            if path in now:
                sizes[index], mtimes[index] = now[path]
        return Manifest(list(self.paths), sizes, mtimes)

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
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq
        if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
            raise ValueError("shard_size must be at least 1; got %r" % (shard_size,))
        try:  # every name valid UTF-8 (the rule): the bytes column shares the text column's buffers
            readable = pa.array(self.paths, pa.string())
            raw = readable.cast(pa.binary())
        except UnicodeEncodeError:  # some names are not: their bytes, and a readable text with escapes
            raw = pa.array([name.encode("utf-8", "surrogateescape") for name in self.paths], pa.binary())
            readable = pa.array([name.decode("utf-8", "backslashreplace") for name in raw.to_pylist()], pa.string())
        table = pa.table({"path": readable, "path_bytes": raw,
                          "size": pa.array(np.frombuffer(self.sizes, np.int64)),
                          "mtime_ns": pa.array(np.frombuffer(self.mtimes, np.int64))})
        record = {"shard_size": shard_size, "images": len(self.paths), "job": dict(job or {})}
        table = table.replace_schema_metadata({_JOB_KEY: json.dumps(record, sort_keys=True).encode()})
        with temporary_then_rename(Path(path)) as temporary:
            pq.write_table(table, temporary, row_group_size=shard_size)
        fsync(Path(path).parent)

    @classmethod
    def load(cls, path):
        """The manifest saved at `path`, or None when there is none.

        Raises:
          ValueError: the file exists but is not a manifest written by `save`.
        """
        import pyarrow.parquet as pq
        if not os.path.exists(path):
            return None
        with _damaged(path):
            return cls._from_table(pq.read_table(path, columns=["path_bytes", "size", "mtime_ns"]))

    @classmethod
    def load_shard(cls, path, index):
        """Shard `index` of the manifest at `path`: only its images are read.

        Raises:
          ValueError: no such shard, or the file is not a manifest.
        """
        import pyarrow.parquet as pq
        with _damaged(path), pq.ParquetFile(path) as file:
            if not 0 <= index < file.num_row_groups:
                raise ValueError("shard %r does not exist: the job has %d" % (index, file.num_row_groups))
            return cls._from_table(file.read_row_group(index, columns=["path_bytes", "size", "mtime_ns"]))

    @classmethod
    def _from_table(cls, table):
        paths = [raw.decode("utf-8", "surrogateescape") for raw in table.column("path_bytes").to_pylist()]
        return cls(paths, array.array("q", table.column("size").to_numpy().astype("int64").tobytes()),
                   array.array("q", table.column("mtime_ns").to_numpy().astype("int64").tobytes()))


def read_job(path):
    """What the manifest at `path` records, without its images: {"shard_size", "images", "job"}, or None.

    Raises:
      ValueError: the file exists but is not a manifest written by `Manifest.save`.
    """
    import pyarrow.parquet as pq
    if not os.path.exists(path):
        return None
    with _damaged(path):
        metadata = pq.read_schema(path).metadata or {}
        return json.loads(metadata[_JOB_KEY])


@contextlib.contextmanager
def _damaged(path):
    """Turns pyarrow's and json's errors on a file that is not a manifest into one ValueError."""
    try:
        yield
    except ValueError as error:
        if str(error).startswith("shard "):
            raise
        raise ValueError("%s is damaged (%s): pass --overwrite to start afresh"
                         % (path, first_line(error) or type(error).__name__)) from None
    except (OSError, KeyError, TypeError) as error:  # pyarrow raises several kinds for a damaged file
        raise ValueError("%s is damaged (%s): pass --overwrite to start afresh"
                         % (path, first_line(error) or type(error).__name__)) from None


def read_list(list_file, root):
    """The Manifest of the images a list file names (--images-from).

    Args:
      list_file: a text file of one path per line (blank lines and lines starting with # are
        skipped), or a .parquet or .csv file with a column `path`.
      root: the folder relative paths are relative to.

    Returns:
      Manifest of the listed paths, sorted, each with its size and time (-1 when it cannot
      be stat'ed: it then fails when read, and is listed in the errors file).

    Raises:
      ValueError: the file cannot be read, has no `path` column, lists no image, or lists a
        path twice.
    """
    list_file = os.fspath(list_file)
    try:
        if list_file.lower().endswith(".parquet"):
            import pyarrow.parquet as pq
            paths = [str(path) for path in pq.read_table(list_file, columns=["path"]).column("path").to_pylist()]
        elif list_file.lower().endswith(".csv"):
            with open(list_file, newline="", encoding="utf-8", errors="surrogateescape") as file:
                reader = csv.DictReader(file)
                if "path" not in (reader.fieldnames or ()):
                    raise ValueError("it has no column 'path' (columns: %s)" % ", ".join(reader.fieldnames or ()))
                paths = [row["path"] for row in reader]
        else:
            with open(list_file, encoding="utf-8", errors="surrogateescape") as file:
                paths = [line.rstrip("\r\n") for line in file]
                paths = [path for path in paths if path.strip() and not path.startswith("#")]
    except (OSError, ValueError, KeyError) as error:
        raise ValueError("--images-from %s cannot be read: %s"
                         % (list_file, first_line(error) or type(error).__name__)) from None
    if not paths:
        raise ValueError("--images-from %s lists no images" % list_file)
    paths.sort()
    twice = sorted({first for first, second in zip(paths, paths[1:]) if first == second})
    if twice:
        raise ValueError("--images-from %s lists %d paths twice (%s)" % (list_file, len(twice), ", ".join(twice[:3])))
    sizes, mtimes = array.array("q"), array.array("q")
    for path in paths:
        size, mtime = _size_and_time(os.path.join(os.fspath(root), path), None)
        sizes.append(size)
        mtimes.append(mtime)
    return Manifest(paths, sizes, mtimes)


def describe_changes(changes, images, output, committed=None):
    """The one-line refusal of a rerun whose folder changed, or None when it may go on.

    Args:
      changes: Changes of the folder against the job's manifest.
      images: the images folder, for the message.
      output: the output, for the message.
      committed: set of paths with a committed row; None: not known yet (only added images
        are judged then).

    Returns:
      str or None.
    """
    problems = []
    if changes.added:
        problems.append(_count_and_names(changes.added, "added"))
    if committed is not None:
        stale = [path for path in changes.removed if path in committed]
        if stale:
            problems.append(_count_and_names(stale, "removed after its row was written"))
        stale = [path for path in changes.changed if path in committed]
        if stale:
            problems.append(_count_and_names(stale, "changed after its row was written"))
    if not problems:
        return None
    return ("%s changed since the job writing %s started: %s. Pass --overwrite to start afresh, or choose "
            "another --output" % (images, output, "; ".join(problems)))


def _count_and_names(paths, what):
    shown = ", ".join(paths[:_NAMES_SHOWN]) + (", ..." if len(paths) > _NAMES_SHOWN else "")
    return "%d image%s %s (%s)" % (len(paths), "" if len(paths) == 1 else "s", what, shown)


def other_source_message(output, recorded, given):
    """The one-line refusal of an output that belongs to the images of another folder."""
    return ("%s holds the features of the images in %s, not %s: pass --overwrite to replace it, or choose "
            "another --output" % (output, recorded, given))
