"""A job's images in path order without holding them all: an external sort, spilled to disk in runs.

    entries = folder_entries(root, exclude)     # or list_entries(list_file, root): a SortedEntries
    entries.save(manifest_path, shard_size, job)  # the manifest, a shard at a time (two merges)
    entries.manifest()                          # or all of it in memory, as Manifest.scan gives it

Entries (path, size, mtime_ns[, etag]) come in any order (a folder's walk, a list file's lines)
and are cut into runs of RUN_ENTRIES, each sorted by path with `sorted()`'s order and pickled to
a temporary file in chunks; `heapq.merge` reads the runs back a chunk at a time. Memory: one run
while collecting, then a chunk of each run and one shard while merging, whatever the number of
images. A job under RUN_ENTRIES images is one run that never leaves memory. The manifest written
is the same file, byte for byte, as `Manifest.save` of the same images (tested).
"""

import array
import csv
import heapq
import itertools
import operator
import os
import pickle
import tempfile

from parallel.inputs.discovery import iter_images, size_and_time
from parallel.inputs.manifest import Manifest, check_shard_size, write_manifest
from parallel.inputs.locations import describe_all, locate
from parallel.inputs.remote import check_scheme
from parallel.locations import is_url
from parallel.messages import error_line

RUN_ENTRIES = 262_144   # entries sorted in memory at a time (about 50 MB of tuples)
CHUNK_ENTRIES = 2_048   # entries pickled, and read back, at a time from a run
_PATH = operator.itemgetter(0)


class SortedEntries:
    """The entries of a job's images, sorted by path (see the module docstring). Iterable many times.

    Args:
      entries: iterable of tuples whose first item is the path (str).
      run_entries: entries sorted in memory at a time.
    """

    def __init__(self, entries, run_entries=RUN_ENTRIES):
        self._runs, self._memory, self.count = [], None, 0
        run = []
        for entry in entries:
            run.append(entry)
            if len(run) >= run_entries:
                self._spill(run)
                run = []
        run.sort(key=_PATH)
        if self._runs:
            self._spill(run)
        else:
            self._memory, self.count = run, len(run)

    def _spill(self, run):
        run.sort(key=_PATH)
        file = tempfile.TemporaryFile(prefix="parallel-manifest-")
        for start in range(0, len(run), CHUNK_ENTRIES):
            pickle.dump(run[start:start + CHUNK_ENTRIES], file, protocol=pickle.HIGHEST_PROTOCOL)
        self._runs.append(file)
        self.count += len(run)
        run.clear()

    def __len__(self):
        return self.count

    def __iter__(self):
        if self._memory is not None:
            return iter(self._memory)
        return heapq.merge(*(_read(file) for file in self._runs), key=_PATH)

    def close(self):
        for file in self._runs:
            file.close()
        self._runs, self._memory = [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def shards(self, shard_size):
        """Yields a Manifest of each `shard_size` consecutive entries (the last may have fewer)."""
        entries = iter(self)
        while True:
            chunk = list(itertools.islice(entries, shard_size))
            if not chunk:
                return
            yield _manifest(chunk)

    def manifest(self):
        """The Manifest of every entry, in memory."""
        return _manifest(list(self))

    def save(self, path, shard_size, job=None):
        """Writes the manifest at `path` as `Manifest.save` would, a shard in memory at a time."""
        check_shard_size(shard_size)
        etags = bool(self.count) and len(next(iter(self))) == 4
        write_manifest(path, self.shards(shard_size), self.shards(shard_size), self.count, shard_size, job, etags)


def _read(file):
    file.seek(0)
    while True:
        try:
            chunk = pickle.load(file)
        except EOFError:
            return
        yield from chunk


def _manifest(entries):
    etags = [entry[3] for entry in entries] if entries and len(entries[0]) == 4 else None
    return Manifest([entry[0] for entry in entries], array.array("q", (entry[1] for entry in entries)),
                    array.array("q", (entry[2] for entry in entries)), etags)


def folder_entries(root, exclude=(), run_entries=RUN_ENTRIES):
    """SortedEntries (path, size, mtime_ns) of the image files under `root` (see
    `parallel.inputs.manifest.scan_images`). Raises: ValueError: `root` is not a folder."""
    return SortedEntries(iter_images(root, exclude), run_entries)


def read_list(list_file, root):
    """The Manifest of the images a list file names (--images-from), in memory (see `list_entries`)."""
    with list_entries(list_file, root) as entries:
        return entries.manifest()


def list_entries(list_file, root, run_entries=RUN_ENTRIES):
    """The images a list file names (--images-from), sorted, each with its size and time.

    Args:
      list_file: a text file of one path (or URL: s3://b/k.jpg, https://h/p.jpg) per line (blank
        lines and lines starting with # are skipped), or a .parquet or .csv file with a column `path`.
      root: the folder (or prefix URL) relative paths are relative to.
      run_entries: as SortedEntries's.

    Returns:
      SortedEntries: (path, size, mtime_ns) for files (-1 when one cannot be stat'ed: it then
      fails when read, and is listed in the errors file); (path, size, mtime_ns, etag) when the
      root or a path is a URL (described concurrently).

    Raises:
      ValueError: the file cannot be read, has no `path` column, lists no image, lists a
        path twice, or lists a URL of a scheme not read here (parallel.inputs.remote.SCHEMES).
    """
    list_file = os.fspath(list_file)
    try:
        paths = SortedEntries(((path,) for path in _listed(list_file)), run_entries)
    except (OSError, ValueError, KeyError) as error:
        raise ValueError("--images-from %s cannot be read: %s"
                         % (list_file, error_line(error))) from None
    with paths:
        if not len(paths):
            raise ValueError("--images-from %s lists no images" % list_file)
        twice, count, last, urls = [], 0, None, is_url(root)
        for (first,), (second,) in itertools.pairwise(paths):
            if first == second and first != last:  # sorted: a path's copies are side by side
                count, last = count + 1, first
                if len(twice) < 3:
                    twice.append(first)
        if count:
            raise ValueError("--images-from %s lists %d paths twice (%s)" % (list_file, count, ", ".join(twice)))
        for (path,) in (path for path in paths if is_url(path[0])):
            urls = True
            try:
                check_scheme(path)
            except ValueError as error:
                raise ValueError("--images-from %s lists %s" % (list_file, error)) from None
        root = root if is_url(root) else os.fspath(root)
        if not urls:  # files: as they always were (no etags)
            return SortedEntries(((path,) + size_and_time(os.path.join(root, path), None) for (path,) in paths),
                                 run_entries)
        return SortedEntries(_described(paths, root), run_entries)


def _described(paths, root, batch=4096):
    """(path, size, mtime_ns, etag) of each path (URLs or keys under a prefix), described a batch at once."""
    names = iter(name for (name,) in paths)
    while True:
        chunk = list(itertools.islice(names, batch))
        if not chunk:
            return
        for name, described in zip(chunk, describe_all([locate(root, name) for name in chunk])):
            yield (name,) + tuple(described)


def _listed(list_file):
    """The paths a list file names, in its order (a generator: the file is read a part at a time)."""
    if list_file.lower().endswith(".parquet"):
        import pyarrow.parquet as pq
        with pq.ParquetFile(list_file) as file:
            if "path" not in file.schema_arrow.names:
                raise KeyError("path")
            for batch in file.iter_batches(columns=["path"], batch_size=65_536):
                yield from (str(path) for path in batch.column("path").to_pylist())
    elif list_file.lower().endswith(".csv"):
        with open(list_file, newline="", encoding="utf-8", errors="surrogateescape") as file:
            reader = csv.DictReader(file)
            if "path" not in (reader.fieldnames or ()):
                raise ValueError("it has no column 'path' (columns: %s)" % ", ".join(reader.fieldnames or ()))
            yield from (row["path"] for row in reader)
    else:
        with open(list_file, encoding="utf-8", errors="surrogateescape") as file:
            for line in file:
                path = line.rstrip("\r\n")
                if path.strip() and not path.startswith("#"):
                    yield path
