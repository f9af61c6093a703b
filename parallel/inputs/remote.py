"""Objects of a store (s3://, https://, and what else fsspec reads): listed, described, fetched, retried.

    describe(url)                            -> (size, mtime_ns, etag) of one object; -1, -1, "" when gone
    list_images(prefix)                      -> [(key relative to prefix, size, mtime_ns, etag)], sorted
    fetch(url, start=None, stop=None, version=None)
                                             -> bytes, retried; ImageError(kind) when it cannot be had;
                                                ObjectChanged when it is no longer `version`
    decode_url_row(url, images, row, ...)    -> decode.decode_row's contract, for an object's bytes
    check_scheme(url)                        -> ValueError unless url's scheme is one of SCHEMES

Everything goes through fsspec (s3fs for s3://, its HTTPFileSystem for http(s)://); gs:// works
the same way but is untested here. Other schemes (ftp://, sftp://, ...) are refused with one line
(`check_scheme`): they are not object stores, and their failures do not fit the kinds below.
Credentials and endpoints are the store's own conventions, never flags or files of ours: for S3
the AWS environment variables and profiles, and `AWS_ENDPOINT_URL_S3` (or `AWS_ENDPOINT_URL`) for
an S3-compatible store such as MinIO, read here in one place (`store_options`) whatever the s3fs
version.

Failures of the store: a missing object is `missing` and a refused one `unreadable`, at once;
anything else (a timeout, a 5xx, throttling, a dropped connection) is tried again, TRIES times in
all with a doubling wait from BACKOFF_SECONDS, then recorded as that image's failure, kind
`unreachable`, naming the last error; but a store that cannot be connected to at all (refused,
no such host) is no image's fault: StoreUnavailable stops the run (exit status 1), committed rows
are kept, and the same command resumes once the store is back. fsspec, s3fs and their stores are imported on first use:
a folder job never imports them.

Bounded waits: ours are the only retries. s3fs's own (5 tries) and botocore's (5 attempts) are
turned off (`filesystem`: one attempt each), and every request has a connect timeout of
CONNECT_TIMEOUT_SECONDS and a read timeout of READ_TIMEOUT_SECONDS, so a read that never answers
is given up after at most TRIES * (CONNECT_TIMEOUT_SECONDS + READ_TIMEOUT_SECONDS) plus the waits
between tries (0.25 + 0.5 + 1 s): 81.75 s; a store that answers 5xx at once, after about 2 s (it
was about 175 s with the stores' own retries inside each of ours).

Pinned versions: a job records each object's version (its ETag: `describe`) when it lists or
freezes it, and every read of the object asks for that version (`fetch(..., version=)`): S3's
If-Match, HTTP's If-Match (or If-Unmodified-Since when the server gave only a Last-Modified
time). An object replaced since is not read: the store answers 412 and ObjectChanged is raised,
never tried again (the object is there; it is another one). So no image is decoded from, and no
tar is read across, a version other than the one the job recorded: a tar whose object is replaced
while it is read stops there (`parallel.inputs.locations.open_stream` pins every ranged read to the
version it opened, or to the one given). gs:// and other stores are read unpinned; a weak HTTP ETag
(W/"...") cannot be asked for, and its object is read unpinned too.

Where a job's image is, and a tar opened as one stream, a path or a URL alike: parallel.inputs.locations.
"""

import logging
import os
import re
import time

from parallel.inputs.decode import ImageError, decode_bytes_row

log = logging.getLogger("parallel")

TRIES = 4
BACKOFF_SECONDS = 0.25
CONNECT_TIMEOUT_SECONDS = 5  # s3fs's defaults, now the whole of a try: the stores' own retries are off
READ_TIMEOUT_SECONDS = 15
SCHEMES = ("s3", "s3a", "gs", "gcs", "http", "https")  # the object stores read here
_PINNED = ("s3", "s3a", "http", "https")  # those whose reads ask for the recorded version
_HTTP_DATE = re.compile(r"^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$")  # a Last-Modified
_EXTRAS = {"s3": ("s3fs", "cloud"), "s3a": ("s3fs", "cloud"), "gs": ("gcsfs", "gcsfs"), "gcs": ("gcsfs", "gcsfs"),
           "http": ("aiohttp", "cloud"), "https": ("aiohttp", "cloud")}


class StoreUnavailable(OSError):
    """The store cannot be connected to (after TRIES tries): the run stops; no image is failed for it."""


class ObjectChanged(Exception):
    """An object of a store is no longer the version the job recorded: it was replaced (or removed).

    Not an image's failure of the usual kinds and never tried again: for one image the reader
    records it as kind "changed" (`decode_url_row`); for a tar, reading it stops and this is raised
    to the caller (`parallel.inputs.tar_stream.stream_members`), which must drop what it read of the tar.

    Attributes:
      url: the object.
      recorded: the version (ETag) the job recorded and the read asked for.
      now: its version now; "" when it is gone.
    """

    def __init__(self, url, recorded, now):
        super().__init__("%s changed since the job listed it (ETag %s, now %s)"
                         % (url, recorded, now or "none: it was removed"))
        self.url, self.recorded, self.now = url, recorded, now

    def __reduce__(self):  # crosses processes (Ray) as itself
        return type(self), (self.url, self.recorded, self.now)


def scheme(url):
    return url.split("://", 1)[0].lower()


def check_scheme(url):
    """Raises ValueError (one line naming `url` and the schemes read here) unless `url`'s scheme is in SCHEMES."""
    if scheme(url) not in SCHEMES:
        names = [name + "://" for name in SCHEMES]
        raise ValueError("%s: %s:// is not a store this program reads; images may be local paths or in %s or %s"
                         % (url, scheme(url), ", ".join(names[:-1]), names[-1]))


def store_options(url):
    """The fsspec options of `url`'s store: for S3, the endpoint of AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL."""
    if scheme(url) in ("s3", "s3a"):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            return {"endpoint_url": endpoint}
    return {}


def _bounded(url):
    """The fsspec options that leave retrying to us (`_retried`) and bound each try (see the module docstring)."""
    kind = scheme(url)
    if kind in ("s3", "s3a"):  # botocore: one attempt, and its timeouts (s3fs's own tries: `filesystem`)
        return {"config_kwargs": {"retries": {"mode": "standard", "total_max_attempts": 1},
                                  "connect_timeout": CONNECT_TIMEOUT_SECONDS, "read_timeout": READ_TIMEOUT_SECONDS}}
    if kind in ("http", "https"):  # aiohttp's session; fsspec's HTTP does not retry
        import aiohttp
        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT_SECONDS, sock_read=READ_TIMEOUT_SECONDS)}}
    return {}


def filesystem(url):
    """(fsspec filesystem, path in it) of `url`, its own retries off and its waits bounded (`_bounded`).

    Raises:
      ValueError: `url`'s scheme is not one of SCHEMES, fsspec or the store's package is not
        installed (naming the extra to install), or fsspec knows no such scheme.
    """
    check_scheme(url)
    try:
        import fsspec
        fs, path = fsspec.core.url_to_fs(url, **store_options(url), **_bounded(url))
        if hasattr(fs, "retries"):  # s3fs tries 5 times inside each of our tries: once is ours to repeat
            fs.retries = 1
        return fs, path
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


def fetch(url, start=None, stop=None, version=None):
    """The bytes of the object at `url` (or of its bytes start .. stop - 1), tried again on store failures.

    Args:
      url: the object.
      start, stop: a byte range, or None for the whole object.
      version: the object's ETag as the job recorded it (`describe`), or None / "": any version.
        Given, the read asks the store for that version only (see the module docstring).

    Raises:
      ImageError: kind "missing" (no such object), "unreadable" (access refused), or
        "unreachable" (the store failed TRIES times; the message names its last error).
      ObjectChanged: the object is no longer `version` (at once, never tried again).
    """
    fs, path = filesystem(url)
    if start is not None and stop is not None and start >= stop:
        return b""
    read, pinned = _reader(fs, path, url, version)
    return _retried(url, lambda: read(start, stop), version if pinned else None)


def _reader(fs, path, url, version):
    """(callable(start, stop) -> bytes of the object at `path` of `fs`, whether it asks for `version`).

    One request a call: S3's get_object with its If-Match (s3fs's cat_file would ask for the size
    first, and takes no condition); HTTP's GET with If-Match (If-Unmodified-Since for a
    Last-Modified time); other stores' cat_file, unpinned.
    """
    kind = scheme(url)
    pinned = bool(version) and kind in _PINNED and not version.startswith("W/")
    if kind in ("s3", "s3a"):
        from fsspec.asyn import sync
        return (lambda start, stop: sync(fs.loop, _s3_get, fs, path, version if pinned else None, start, stop)), \
            pinned
    options = {}
    if pinned:
        options["headers"] = {"If-Unmodified-Since": version} if _HTTP_DATE.match(version) else \
            {"If-Match": '"%s"' % version}
    return (lambda start, stop: fs.cat_file(path, start=start, end=stop, **options)), pinned


async def _s3_get(fs, path, version, start, stop):
    """The bytes of the S3 object at `path` (start .. stop - 1 of them, when start is given), by one
    get_object of s3fs `fs`; only if its ETag is `version`, when given (else the store answers 412)."""
    bucket, key, _ = fs.split_path(path)
    extra = {} if start is None else {"Range": "bytes=%d-%s" % (start, "" if stop is None else stop - 1)}
    if version:
        extra["IfMatch"] = '"%s"' % version
    response = await fs._call_s3("get_object", Bucket=bucket, Key=key, **extra)
    try:
        return await response["Body"].read()
    finally:
        response["Body"].close()


def decode_url_row(url, images, row, size, resize, max_pixels, version=None):
    """`decode.decode_row` for an object of a store: fetched (retried, pinned to `version` when given:
    see `fetch`), then decoded from its bytes. An object that is no longer `version` fails as kind
    "changed"."""
    try:
        data = fetch(url, version=version)
    except ImageError as error:
        data = error
    except ObjectChanged as error:
        data = ImageError("changed", "changed since the job listed it (ETag %s, now %s): not read"
                          % (error.recorded, error.now or "none: removed"))
    return decode_bytes_row(data, images, row, size, resize, max_pixels)


def _retried(url, operation, version=None):
    """operation(), tried up to TRIES times while the store fails; ImageError once it will not answer;
    ObjectChanged at once when the store says the object is no longer `version` (a 412)."""
    wait = BACKOFF_SECONDS
    for attempt in range(1, TRIES + 1):
        try:
            return operation()
        except FileNotFoundError:
            raise ImageError("missing", "no such object: %s" % url) from None
        except PermissionError as error:
            raise ImageError("unreadable", "access refused by the store: %s" % _words(error)) from None
        except Exception as error:  # a timeout, a 5xx, throttling, a dropped connection: the store's, for now
            if version and _precondition_failed(error):  # the object is there, and another: asking again won't help
                raise ObjectChanged(url, version, describe(url)[2]) from None
            if attempt == TRIES and _cannot_connect(error):
                raise StoreUnavailable("cannot connect to the store of %s after %d tries: %s"
                                       % (url, TRIES, _words(error))) from None
            if attempt == TRIES:
                raise ImageError("unreachable", "the store did not answer after %d tries: %s"
                                 % (TRIES, _words(error))) from None
            log.debug("%s: %s; trying again in %.2f s", url, _words(error), wait)
            time.sleep(wait)
            wait *= 2


def _causes(error):
    """`error` and what caused it, in turn (its __cause__ or __context__ chain)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _cannot_connect(error):
    """Whether `error` (or what caused it) says that no connection could be made: the store is down."""
    import socket
    return any(isinstance(cause, (ConnectionRefusedError, socket.gaierror)) or
               type(cause).__name__ in ("EndpointConnectionError", "ClientConnectorError") for cause in _causes(error))


def _precondition_failed(error):
    """Whether `error` (or what caused it) is the store's 412: the object is not the version asked for."""
    for cause in _causes(error):
        response = getattr(cause, "response", None)  # botocore's ClientError (under s3fs's OSError)
        if isinstance(response, dict) and (response.get("Error", {}).get("Code") == "PreconditionFailed" or
                                           response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 412):
            return True
        if getattr(cause, "status", None) == 412:  # aiohttp's ClientResponseError (fsspec's HTTP)
            return True
    return False


def _words(error):
    text = " ".join(str(error).split())[:200]
    return "%s: %s" % (type(error).__name__, text) if text else type(error).__name__
