"""Objects of a store (s3://, https://, and what else fsspec reads): listed, described, fetched, retried.

    is_url("s3://b/a.jpg")                   -> True ("scheme://", a scheme of two letters or more)
    describe(url)                            -> (size, mtime_ns, etag) of one object; -1, -1, "" when gone
    list_images(prefix)                      -> [(key relative to prefix, size, mtime_ns, etag)], sorted
    fetch(url, start=None, stop=None)        -> bytes, retried; ImageError(kind) when it cannot be had
    open_stream(location)                    -> a binary file read front to back, reopened where it broke
    decode_url_row(url, images, row, ...)    -> decode.decode_row's contract, for an object's bytes
    locate(root, key)                        -> where a job's image is: a path under a folder, or a URL
    describe_all(locations)                  -> describe() of each path or URL, URLs concurrently

Everything goes through fsspec (s3fs for s3://, its HTTPFileSystem for http(s)://); gs:// and the
others fsspec knows work the same way but are untested here. Credentials and endpoints are the
store's own conventions, never flags or files of ours: for S3 the AWS environment variables and
profiles, and `AWS_ENDPOINT_URL_S3` (or `AWS_ENDPOINT_URL`) for an S3-compatible store such as
MinIO, read here in one place (`store_options`) whatever the s3fs version.

Failures of the store: a missing object is `missing` and a refused one `unreadable`, at once;
anything else (a timeout, a 5xx, throttling, a dropped connection) is tried again, TRIES times in
all with a doubling wait from BACKOFF_SECONDS, then recorded as that image's failure, kind
`unreachable`, naming the last error; but a store that cannot be connected to at all (refused,
no such host) is no image's fault: StoreUnavailable stops the run (exit status 1), committed rows
are kept, and the same command resumes once the store is back. fsspec, s3fs and their stores are imported on first use:
a folder job never imports them.
"""

import io
import logging
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

from parallel.inputs.decode import ImageError, decode_bytes_row
from parallel.locations import is_url
from parallel.inputs.discovery import size_and_time

log = logging.getLogger("parallel")

TRIES = 4
BACKOFF_SECONDS = 0.25
DESCRIBE_THREADS = 16  # objects described at once (HEAD requests)
STREAM_BLOCK = 8 << 20  # bytes read at a time from a stream (a tar): few requests, bounded memory
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_EXTRAS = {"s3": ("s3fs", "cloud"), "s3a": ("s3fs", "cloud"), "gs": ("gcsfs", "gcsfs"), "gcs": ("gcsfs", "gcsfs"),
           "http": ("aiohttp", "cloud"), "https": ("aiohttp", "cloud")}


class StoreUnavailable(OSError):
    """The store cannot be connected to (after TRIES tries): the run stops; no image is failed for it."""


def scheme(url):
    return url.split("://", 1)[0].lower()


def store_options(url):
    """The fsspec options of `url`'s store: for S3, the endpoint of AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL."""
    if scheme(url) in ("s3", "s3a"):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            return {"endpoint_url": endpoint}
    return {}


def filesystem(url):
    """(fsspec filesystem, path in it) of `url`.

    Raises:
      ValueError: fsspec or the store's package is not installed (naming the extra to install),
        or fsspec knows no such scheme.
    """
    try:
        import fsspec
        return fsspec.core.url_to_fs(url, **store_options(url))
    except ImportError as error:
        package, extra = _EXTRAS.get(scheme(url), (getattr(error, "name", None) or "fsspec", "cloud"))
        raise ValueError("reading %s needs %s, which is not installed: pip install -e '.[%s]' (or pip install %s)"
                         % (url, package, extra, package)) from None
    except ValueError as error:  # "Protocol not known"
        raise ValueError("%s: %s" % (url, error)) from None


def describe(url):
    """(size, mtime_ns, etag) of the object at `url`; (-1, -1, "") when there is none.

    The etag is the store's version of the object: S3's ETag, GCS's generation, an HTTP ETag
    (or its Last-Modified when it sends no ETag); "" when the store gives none.
    """
    try:
        return details(url)
    except ImageError:
        return -1, -1, ""


def details(url):
    """(size, mtime_ns, etag) of the object at `url` (see `describe`); ImageError (kind as `fetch`) when gone."""
    fs, path = filesystem(url)
    fs.invalidate_cache(path)  # the object now, not what an earlier listing of this process saw
    return _size_time_tag(_retried(url, lambda: fs.info(path)))


def _size_time_tag(info):
    """(size, mtime_ns, etag) from what an fsspec filesystem's info() or find(detail=True) says of an object."""
    size = info.get("size")
    size = -1 if size is None else int(size)
    mtime = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("created")
    etag = info.get("ETag") or info.get("etag") or info.get("generation") or info.get("Last-Modified") or ""
    return size, _nanoseconds(mtime), str(etag).strip('"')


def _nanoseconds(when):
    """A store's modification time (datetime, ISO text or seconds) in integer nanoseconds; -1 when unknown."""
    import datetime
    if when is None:
        return -1
    if isinstance(when, str):
        try:
            when = datetime.datetime.fromisoformat(when.replace("Z", "+00:00"))
        except ValueError:
            return -1
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        delta = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return (delta.days * 86400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000
    return int(float(when) * 1e9)


def list_objects(prefix, keep):
    """[(name relative to `prefix`, size, mtime_ns, etag)] of every object under `prefix` whose name `keep`s.

    Args:
      prefix: a URL ending in "/" (a folder of the store).
      keep: callable(name) -> bool.

    Returns:
      list sorted by name ("a/b.jpg", "/" separators).
    """
    fs, path = filesystem(prefix)
    path = path.rstrip("/")
    fs.invalidate_cache(path)  # the objects now, not an earlier listing of this process
    try:
        found = _retried(prefix, lambda: fs.find(path, detail=True))
    except ImageError as error:
        raise ValueError("--images %s cannot be listed: %s" % (prefix, error)) from None
    entries = []
    for name, info in found.items():
        relative = name[len(path):].lstrip("/") if name.startswith(path) else name
        if info.get("type", "file") == "file" and keep(relative):
            entries.append((relative,) + _size_time_tag(info))
    entries.sort()
    return entries


def fetch(url, start=None, stop=None):
    """The bytes of the object at `url` (or of its bytes start .. stop - 1), tried again on store failures.

    Raises:
      ImageError: kind "missing" (no such object), "unreadable" (access refused), or
        "unreachable" (the store failed TRIES times; the message names its last error).
    """
    fs, path = filesystem(url)
    if start is None:
        return _retried(url, lambda: fs.cat_file(path))
    return _retried(url, lambda: fs.cat_file(path, start=start, end=stop))


def decode_url_row(url, images, row, size, resize, max_pixels):
    """`decode.decode_row` for an object of a store: fetched (retried), then decoded from its bytes."""
    try:
        data = fetch(url)
    except ImageError as error:
        data = error
    return decode_bytes_row(data, images, row, size, resize, max_pixels)


def _retried(url, operation):
    """operation(), tried up to TRIES times while the store fails; ImageError once it will not answer."""
    wait = BACKOFF_SECONDS
    for attempt in range(1, TRIES + 1):
        try:
            return operation()
        except FileNotFoundError:
            raise ImageError("missing", "no such object: %s" % url) from None
        except PermissionError as error:
            raise ImageError("unreadable", "access refused by the store: %s" % _words(error)) from None
        except Exception as error:  # a timeout, a 5xx, throttling, a dropped connection: the store's, for now
            if attempt == TRIES and _cannot_connect(error):
                raise StoreUnavailable("cannot connect to the store of %s after %d tries: %s"
                                       % (url, TRIES, _words(error))) from None
            if attempt == TRIES:
                raise ImageError("unreachable", "the store did not answer after %d tries: %s"
                                 % (TRIES, _words(error))) from None
            log.debug("%s: %s; trying again in %.2f s", url, _words(error), wait)
            time.sleep(wait)
            wait *= 2


def _cannot_connect(error):
    """Whether `error` (or what caused it) says that no connection could be made: the store is down."""
    import socket
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (ConnectionRefusedError, socket.gaierror)) or \
                type(error).__name__ in ("EndpointConnectionError", "ClientConnectorError"):
            return True
        error = error.__cause__ or error.__context__
    return False


def _words(error):
    text = " ".join(str(error).split())[:200]
    return "%s: %s" % (type(error).__name__, text) if text else type(error).__name__


def open_stream(location):
    """`location` (a local path or a URL) opened for reading front to back, in large blocks.

    A URL's stream is reopened where it broke when the store fails mid-way (up to TRIES times at
    one place); a local file is an ordinary open file.

    Raises:
      ImageError: the file or object cannot be opened (its kind as for `fetch`).
    """
    if not is_url(location):
        try:
            return open(location, "rb", buffering=STREAM_BLOCK)
        except FileNotFoundError:
            raise ImageError("missing", "no such file: %s" % location) from None
        except OSError as error:
            raise ImageError("unreadable", "cannot read %s: %s" % (location, error.strerror or error)) from None
    return io.BufferedReader(_ResumingStream(location), buffer_size=STREAM_BLOCK)


class _ResumingStream(io.RawIOBase):
    """An object read front to back by ranged requests, each retried: a raw stream for BufferedReader."""

    def __init__(self, url):
        super().__init__()
        self.url = url
        self.position = 0
        self.size = details(url)[0]

    def readable(self):
        return True

    def readinto(self, buffer):
        if self.position >= self.size:
            return 0
        stop = min(self.size, self.position + len(buffer))
        data = fetch(self.url, self.position, stop)
        if not data:
            return 0
        buffer[:len(data)] = data
        self.position += len(data)
        return len(data)


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
            return describe(location)
        return size_and_time(location, None) + ("",)

    if not any(is_url(location) for location in locations):
        return [one(location) for location in locations]
    with ThreadPoolExecutor(DESCRIBE_THREADS, thread_name_prefix="describe") as pool:
        return list(pool.map(one, locations))
