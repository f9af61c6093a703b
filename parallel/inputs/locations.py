"""A job's image or tar wherever it is, a local path or an object of a store (a URL), read alike.

    locate(root, key)                        -> where a job's image is: a path under a folder, or a URL
    describe_all(locations)                  -> (size, mtime_ns, etag) of each path or URL, URLs concurrently
    open_stream(location, version=None)      -> a binary file read front to back, in large blocks; an
                                                object's reopened where it broke, every read of the same
                                                version of the object

An object is described and fetched by parallel.inputs.remote (retried, each read pinned to the
version the job recorded: ObjectChanged when it is no longer that one); a path is the file system's.
"""

import io
import os
from concurrent.futures import ThreadPoolExecutor

from parallel.inputs import remote
from parallel.inputs.decode import ImageError
from parallel.inputs.discovery import size_and_time
from parallel.inputs.members import Entry
from parallel.locations import is_url

DESCRIBE_THREADS = 16  # objects described at once (HEAD requests)
STREAM_BLOCK = 8 << 20  # bytes read at a time from a stream (a tar): few requests, bounded memory


def locate(root, key):
    """Where the image `key` of a job whose --images is `root` is: a URL, or a path.

    A key that is a URL (an --images-from entry) is itself; one relative to a prefix (a URL
    root) is the prefix's object; else a path under the folder `root`.
    """
    if is_url(key):
        return key
    if is_url(root):
        return root.rstrip("/") + "/" + key
    return os.path.join(root, key)


def describe_all(locations):
    """(size, mtime_ns, etag) of each of `locations` (paths or URLs), URLs described concurrently.

    A path has etag ""; what cannot be found has size and time -1 (it fails when read).
    """
    def one(location):
        if is_url(location):
            return remote.describe(location)
        return size_and_time(location, None) + ("",)

    if not any(is_url(location) for location in locations):
        return [one(location) for location in locations]
    with ThreadPoolExecutor(DESCRIBE_THREADS, thread_name_prefix="describe") as pool:
        return list(pool.map(one, locations))


def open_stream(location, version=None):
    """`location` (a local path or a URL) opened for reading front to back, in large blocks.

    A URL's stream is reopened where it broke when the store fails mid-way (up to TRIES times at
    one place); every one of its ranged reads asks for one version of the object: `version` when
    given (the ETag the job recorded), else the one it had when the stream was opened. A local
    file is an ordinary open file. Both can seek (a tar's member too large to read is passed by).

    Raises:
      ImageError: the file or object cannot be opened (its kind as for `parallel.inputs.remote.fetch`).
      ObjectChanged: the object is no longer `version` (when opened, or at any read after).
    """
    if not is_url(location):
        try:
            return open(location, "rb", buffering=STREAM_BLOCK)
        except FileNotFoundError:
            raise ImageError("missing", "no such file: %s" % location) from None
        except OSError as error:
            raise ImageError("unreadable", "cannot read %s: %s" % (location, error.strerror or error)) from None
    return io.BufferedReader(_ResumingStream(location, version), buffer_size=STREAM_BLOCK)


def read_items(location, version, index, what, items, key=None):
    """The items `items(stream)` yields of `location` opened by open_stream(location, version), closed after; or,
    when it cannot be opened, the file's failure: Entry(key, -1, -1) put in `index` and one (key, ImageError)
    item, as every reader of a file of images (a tar, a Parquet or TFRecord file) gives it.

    Args:
      what: the file as a message names it ("tar", "Parquet file").
      key: what the failure is keyed by (a piece's name, parallel.inputs.members); None: `location`.
    """
    key = location if key is None else key
    try:
        stream = open_stream(location, version)
    except ImageError as error:
        index.append(Entry(key, -1, -1))
        yield key, ImageError(error.kind, "the %s cannot be read: %s" % (what, error.message))
        return
    with stream:
        yield from items(stream)


SEEK_BYTES = 1 << 20  # bytes to pass by from which a seek beats reading through (in a store: no GET of them)


def skip(stream, count, end, read):
    """Passes by `count` bytes of `stream` (open_stream's, or a decompressing one; its size `end`, or None
    when it cannot seek): how many there were (fewer only at its end). Many are passed by with a seek:
    none read, none held; else they are read through `read(stream, count)` (the reader's, which turns a
    failure into its own error) in blocks of SEEK_BYTES."""
    if end is not None and count >= SEEK_BYTES:
        here = stream.tell()
        target = min(here + count, end)
        stream.seek(target)
        return target - here
    skipped = 0
    while skipped < count:
        chunk = read(stream, min(count - skipped, SEEK_BYTES))
        if not chunk:
            break
        skipped += len(chunk)
    return skipped


class _ResumingStream(io.RawIOBase):
    """An object read by ranged requests, each retried and pinned to one version: a raw stream for BufferedReader."""

    def __init__(self, url, version=None):
        super().__init__()
        self.url = url
        self.position = 0
        self.size, _, now = remote.details(url)
        if version and now != version:
            raise remote.ObjectChanged(url, version, now)
        self.version = version or now

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.position

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer):
        if self.position >= self.size:
            return 0
        stop = min(self.size, self.position + len(buffer))
        data = remote.fetch(self.url, self.position, stop, version=self.version)
        if not data:
            return 0
        buffer[:len(data)] = data
        self.position += len(data)
        return len(data)
