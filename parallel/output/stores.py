"""Where durable objects live: a local folder, or an object store reached through fsspec.

    store, name = open_store("s3://bucket/runs/feats.parquet")   # ObjectStore of s3://bucket/runs, "feats.parquet"
    store.write(name + ".run.json", data)                       # all of it or nothing, for every reader
    store.create(name + ".manifest.parquet", local_file)        # False: another process created it first
    store.list(name + ".shards/")                               # {name: size} of the objects under a prefix

One small interface, two implementations:

    LocalStore    a folder: temp-then-rename (parallel.output.durable), creation by a hard link
                  (it fails when the name exists, as O_EXCL does)
    ObjectStore   an fsspec filesystem (s3://, gs://, ...): a single PUT, or a completed multipart
                  upload, is atomic (a reader never sees part of an object); creation is a
                  conditional PUT (If-None-Match: *), which S3 and its compatible servers honour

Object stores have no rename, no append and no locks, so a protocol built on this interface uses
none: each writer writes objects of its own under unique names and a small record last, and
readers choose among the finished ones (see parallel.jobs.commits).

Credentials and endpoints are the store's own conventions (for S3: the AWS environment variables
and profiles, AWS_ENDPOINT_URL_S3 for an S3-compatible server such as MinIO), never flags of ours.
fsspec and s3fs are the optional extra `.[cloud]`, imported only for a URL.
"""

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from parallel.locations import is_url
from parallel.output.durable import OutputError, fsync, new_file_mode, replace_atomically, temporary_then_rename

_URL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]+)://")
# Which package brings which filesystem, for the message of a plain install.
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs"}
_S3 = ("s3", "s3a")  # s3fs's schemes: ObjectStore asks S3 itself where s3fs would ask more than needed


class StoreError(OSError):
    """A store operation failed (unreachable, refused, throttled); the message is one line."""


def open_store(location):
    """The store holding `location`, and the name of `location` in it: (Store, str).

    Args:
      location: a local path, or a URL (s3://bucket/prefix/name).

    Raises:
      OutputError: the URL's filesystem is not installed (the message names the extra).
    """
    if not is_url(location):
        path = Path(location)
        return LocalStore(path.parent), path.name
    url = str(location)
    scheme = _URL.match(url).group(1).lower()
    try:
        import fsspec
        filesystem, path = fsspec.core.url_to_fs(url)
    except ImportError as error:
        package = _PACKAGES.get(scheme, "the fsspec filesystem of %s://" % scheme)
        raise OutputError("--output %s needs %s, which is not installed: pip install -e '.[cloud]' (%s)"
                          % (url, package, error.name or error)) from None
    except ValueError as error:  # fsspec knows no such protocol
        raise OutputError("--output %s: %s" % (url, error)) from None
    folder, _, name = path.rpartition("/")
    if not folder or not name:
        raise OutputError("--output %s names no object: give bucket/name, e.g. %s://bucket/feats.parquet"
                          % (url, scheme))
    return ObjectStore(filesystem, scheme, folder), name


class Store:
    """Objects named relative to one folder (a local folder, or a bucket and prefix).

    Every write is all or nothing for every reader; nothing is renamed, appended to or locked.
    """

    def url(self, name):
        """The full address of `name`, for messages."""
        raise NotImplementedError

    def read(self, name):
        """The bytes of `name`, or None when it does not exist."""
        raise NotImplementedError

    def download(self, name, local):
        """Copies `name` to the local file `local` (Path); False when `name` does not exist."""
        raise NotImplementedError

    def write(self, name, data):
        """Makes `name` hold `data` (bytes), replacing it: readers see the old or the new, whole."""
        raise NotImplementedError

    def upload(self, name, local):
        """Makes `name` hold the local file `local` (Path), replacing it, all or nothing."""
        raise NotImplementedError

    def create(self, name, local):
        """Makes `name` hold the local file `local` unless it exists: True, or False when it did."""
        raise NotImplementedError

    def exists(self, name):
        """Whether the object `name` exists."""
        raise NotImplementedError

    def list(self, folder):
        """{name: size in bytes} of the objects under `folder` (a name ending in "/"), at any depth.

        Only that folder is listed, never the one holding it: an output at the top of a bucket of
        millions of images lists its own objects.
        """
        raise NotImplementedError

    def remove(self, names):
        """Removes the objects `names` (missing ones are no error)."""
        raise NotImplementedError

    def sizes(self, names):
        """{name: size in bytes} of those of the objects `names` that exist."""
        raise NotImplementedError

    def check(self, name):
        """Raises OutputError (one line) when `name` could not be written: no bucket, no access, no store."""


class LocalStore(Store):
    """A local folder: today's temp-then-rename, synced."""

    def __init__(self, folder):
        self.folder = Path(folder)

    def url(self, name):
        return str(self.folder / name)

    def read(self, name):
        try:
            return (self.folder / name).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def download(self, name, local):
        try:
            shutil.copyfile(self.folder / name, local)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def write(self, name, data):
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, data)

    def upload(self, name, local):
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with temporary_then_rename(path, unique=True) as temporary:
            shutil.copyfile(local, temporary)
        fsync(path.parent)

    def create(self, name, local):
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        os.close(descriptor)
        try:
            shutil.copyfile(local, temporary)
            os.chmod(temporary, new_file_mode())  # mkstemp's 0o600: the object is shared as a new file is
            fsync(temporary)
            try:
                os.link(temporary, path)  # fails when `path` exists, as O_EXCL: the first creator wins
            except FileExistsError:
                return False
            fsync(path.parent)
            return True
        finally:
            os.unlink(temporary)

    def exists(self, name):
        return (self.folder / name).is_file()

    def list(self, folder):
        _check_folder(folder)
        found = {}
        for root, _, files in os.walk(self.folder / folder):
            for file in files:
                if not file.endswith(".tmp"):
                    found[Path(root, file).relative_to(self.folder).as_posix()] = Path(root, file).stat().st_size
        return found

    def remove(self, names):
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.folder / name)

    def sizes(self, names):
        found = {}
        for name in names:
            with contextlib.suppress(OSError):
                found[name] = (self.folder / name).stat().st_size
        return found


class ObjectStore(Store):
    """An fsspec filesystem (S3 through s3fs is the one tested here; others through fsspec, untested).

    For S3, each operation is the one request it needs: s3fs's cat_file, info and find ask more (the size before a
    GET; a listing after a HEAD or a listing that found nothing, to tell a folder), needless here.
    """

    def __init__(self, filesystem, scheme, folder):
        self.filesystem = filesystem
        self.scheme = scheme
        self.folder = folder.rstrip("/")

    def _path(self, name):
        return self.folder + "/" + name

    def url(self, name):
        return "%s://%s" % (self.scheme, self._path(name))

    @contextlib.contextmanager
    def _errors(self, what, name=""):
        """Any failure of the store as a StoreError of one line naming the object."""
        try:
            yield
        except StoreError:
            raise
        except Exception as error:  # botocore, aiohttp and fsspec raise many kinds; all mean the same here
            raise StoreError("cannot %s %s: %s" % (what, self.url(name), _describe(error))) from error

    def read(self, name):
        with self._errors("read", name):
            try:
                if self.scheme in _S3:
                    return _s3_get(self.filesystem, self._path(name))
                return self.filesystem.cat_file(self._path(name))
            except FileNotFoundError:
                return None

    def download(self, name, local):
        with self._errors("read", name):
            try:
                self.filesystem.get_file(self._path(name), str(local))
            except FileNotFoundError:
                return False
        return True

    def write(self, name, data):
        with self._errors("write", name):
            self.filesystem.pipe_file(self._path(name), data)

    def upload(self, name, local):
        with self._errors("write", name):
            self.filesystem.put_file(str(local), self._path(name))

    def create(self, name, local):
        with self._errors("write", name):
            try:
                self.filesystem.put_file(str(local), self._path(name), mode="create")  # If-None-Match: *
            except FileExistsError:
                return False
            except TypeError:  # a filesystem without conditional writes: best effort (untested here)
                if self.filesystem.exists(self._path(name)):
                    return False
                self.filesystem.put_file(str(local), self._path(name))
        return True

    def exists(self, name):
        with self._errors("read", name):
            self.filesystem.invalidate_cache()
            if self.scheme in _S3:
                try:  # as isfile: any failure is "no", without its listing of a folder (no object)
                    return _s3_size(self.filesystem, self._path(name)) >= 0
                except Exception:
                    return False
            return self.filesystem.isfile(self._path(name))

    def list(self, folder):
        _check_folder(folder)
        with self._errors("list", folder):
            self.filesystem.invalidate_cache()  # other processes write here: never a cached listing
            try:
                if self.scheme in _S3:  # one listing: s3fs asks twice more of a folder it finds empty
                    found = self.filesystem.find(self.folder, prefix=folder, detail=True)
                else:
                    found = self.filesystem.find(self._path(folder), detail=True)
            except FileNotFoundError:
                return {}
            start = len(self.folder) + 1
            return {path[start:]: int(info.get("size") or 0) for path, info in found.items()
                    if info.get("type") != "directory"}

    def remove(self, names):
        names = list(names)
        if names:
            with self._errors("remove", names[0]):
                with contextlib.suppress(FileNotFoundError):
                    self.filesystem.rm([self._path(name) for name in names])

    def sizes(self, names):
        found = {}
        self.filesystem.invalidate_cache()
        for name in names:
            with self._errors("read", name):
                try:
                    if self.scheme in _S3:
                        found[name] = _s3_size(self.filesystem, self._path(name))
                    else:
                        found[name] = int(self.filesystem.info(self._path(name))["size"])
                except FileNotFoundError:
                    pass
        return found

    def check(self, name):
        """One GET of a listing under the bucket: it names what is wrong before anything is written."""
        bucket = self.folder.split("/", 1)[0]
        try:
            self.filesystem.invalidate_cache()
            self.filesystem.ls(bucket, detail=False)
        except FileNotFoundError:
            raise OutputError("--output %s: the bucket %s does not exist (or this account may not see it): "
                              "create it, or choose another --output" % (self.url(name), bucket)) from None
        except PermissionError as error:
            raise OutputError("--output %s: access denied (%s): check the store's credentials"
                              % (self.url(name), _describe(error))) from None
        except Exception as error:
            raise OutputError("--output %s: %s" % (self.url(name), _describe(error))) from None


def _s3_get(filesystem, path):
    """The bytes of the S3 object at `path` of s3fs `filesystem`, in one GET: s3fs's cat_file asks for the size
    first (a HEAD, and a listing when there is no such object) to choose a concurrent read, needless for the
    records read here. FileNotFoundError when there is none."""
    from fsspec.asyn import sync

    async def get():
        bucket, key, _ = filesystem.split_path(path)
        response = await filesystem._call_s3("get_object", Bucket=bucket, Key=key)
        try:
            return await response["Body"].read()
        finally:
            response["Body"].close()
    return sync(filesystem.loop, get)


def _s3_size(filesystem, path):
    """The size of the S3 object at `path` of s3fs `filesystem`, in one HEAD: s3fs's info lists the prefix too
    when there is no such object (to call it a folder), and a folder is no object. FileNotFoundError when there
    is none."""
    bucket, key, _ = filesystem.split_path(path)
    return int(filesystem.call_s3("head_object", Bucket=bucket, Key=key)["ContentLength"])


def _check_folder(folder):
    if not folder.endswith("/"):
        raise ValueError("a store lists folders (a name ending in /); got %r" % (folder,))


def _describe(error):
    """One line for a store's exception: no credentials, an endpoint not reachable, or its own message."""
    kind = type(error).__name__
    text = str(error).splitlines()[0] if str(error) else kind
    if kind == "NoCredentialsError" or "Unable to locate credentials" in text:
        return ("no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE "
                "(the store's own conventions)")
    if kind in ("EndpointConnectionError", "ClientConnectorError", "ConnectTimeoutError", "ConnectionError") \
            or "Could not connect" in text or "Cannot connect" in text:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        return "the store is not reachable (%s%s)" % (text, "; AWS_ENDPOINT_URL_S3=%s" % endpoint if endpoint else "")
    return text if isinstance(error, OSError) or kind in text else "%s: %s" % (kind, text)


def read_json(store, name):
    """The JSON object stored as `name`, or None when there is none (or it is not JSON)."""
    data = store.read(name)
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
