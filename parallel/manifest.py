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

import dataclasses
import logging
import os
import stat
from pathlib import Path

from parallel.output.durable import fsync, temporary_then_rename

log = logging.getLogger("parallel")

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp",
                              ".ppm", ".pgm", ".pbm", ".pnm"})
MANIFEST_SUFFIX = ".manifest.parquet"
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
    top = os.fspath(root)
    if not os.path.isdir(top):
        raise ValueError("%s is not a folder" % (root,))
    exclude = frozenset(exclude)

    def skip(error):
        log.warning("cannot list %s under %s (%s); skipping the images in it",
                    error.filename, top, error.strerror or error)

    found = []
    for folder, folders, names, descriptor in os.fwalk(top, onerror=skip):
        relative = os.path.relpath(folder, top)
        prefix = "" if relative == os.curdir else relative.replace(os.sep, "/") + "/"
        folders[:] = [name for name in folders if prefix + name not in exclude]
        for name in names:
            path = prefix + name
            if has_image_extension(name) and path not in exclude:
                found.append((path,) + _size_and_time(name, descriptor))
    found.sort()
    return found


def _size_and_time(name, folder_descriptor):
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
    return [path for path, _, _ in scan_images(root, exclude)]


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
      sizes: list of int, bytes (-1: could not be stat'ed).
      mtimes: list of int, modification times in nanoseconds (-1 likewise).
    """

    paths: list
    sizes: list
    mtimes: list

    @classmethod
    def scan(cls, root, exclude=()):
        """The manifest of the images under `root` now (see `scan_images`)."""
        found = scan_images(root, exclude)
        return cls([row[0] for row in found], [row[1] for row in found], [row[2] for row in found])

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

    def save(self, path):
        """Writes the manifest to `path` atomically (Parquet: path, path_bytes, size, mtime_ns).

        `path` is the readable name (bytes that are not UTF-8 as backslash escapes) and
        `path_bytes` the exact bytes of the name, as in the Parquet output.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq
        raw = [name.encode("utf-8", "surrogateescape") for name in self.paths]
        table = pa.table({"path": pa.array([name.decode("utf-8", "backslashreplace") for name in raw], pa.string()),
                          "path_bytes": pa.array(raw, pa.binary()),
                          "size": pa.array(self.sizes, pa.int64()),
                          "mtime_ns": pa.array(self.mtimes, pa.int64())})
        with temporary_then_rename(Path(path)) as temporary:
            pq.write_table(table, temporary)
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
        try:
            table = pq.read_table(path, columns=["path_bytes", "size", "mtime_ns"])
            paths = [raw.decode("utf-8", "surrogateescape") for raw in table.column("path_bytes").to_pylist()]
            return cls(paths, table.column("size").to_pylist(), table.column("mtime_ns").to_pylist())
        except Exception as error:  # pyarrow raises several kinds for a damaged file
            raise ValueError("%s is damaged (%s): pass --overwrite to start afresh"
                             % (path, str(error).splitlines()[0] if str(error) else type(error).__name__)) from None


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
