"""An indexed image read back for the service (`/api/image?row=N`), only when it is the image its row was
computed from.

    images = IndexedImages(index, members)                # the output's manifest read once, on first need
    data, content_type = images.read(key, max_bytes)      # or Changed (409), TooLarge (413), ValueError (404)

A row names its image as the engine read it: a file under the output's images folder, a member of a tar or a
row of a Parquet or TFRecord file (read back by its entry in the output's members index `members`), an object
of a store. Whoever can write in the images folder must not make the service read anything else (a link put in
an image's place, to /etc/passwd or to another image), so each is proven first:

* an image file is read only when its real path (links followed) lies inside the real path of the images
  folder (of its own folder, for a path of an --images-from list outside it), and it is a regular file. The
  file is opened by that real path without following a last link and without waiting (a FIFO put there never
  blocks), and must be the file the real path named when it was checked (its device and inode): a link
  swapped between the check and the open is refused, never followed;
* the file read (the image file, or the tar, Parquet or TFRecord file holding it) has the size and
  modification time (ns) the output's manifest (`<output>.manifest.parquet`) records for it (a Parquet file
  cut in pieces: its time), and an object, or a tar in a store, is read at the version (ETag) it records:
  else the image changed since it was indexed (`Changed`). What the manifest does not record (an output
  without one) cannot be proven, and is not read. A tar member is read from the file checked; a Parquet
  or TFRecord row by its reader, the file checked again once read;
* what is read is an image of a format the engine reads (`parallel.inputs.decode.IMAGE_FORMATS`), by its
  header: a file that is not one is refused, never sent as bytes.

Imports parallel.inputs (the manifest, the members index and its readers, decode's formats) and Pillow: no
TensorFlow, no engine.
"""

import bisect
import io
import os
import threading

from PIL import Image

from parallel.locations import is_url
from search.server import inside, open_inside, same_file


class Changed(Exception):
    """The image's file or object is not what the output's manifest records: it changed since it was indexed."""


class TooLarge(Exception):
    """The image has more bytes than may be served."""


class IndexedImages:
    """The images of an index's rows, read back only when proven to be those indexed (see the module docstring).

    Args:
      index: a loaded `search.index.Index`.
      members: the path of the output's members index (`search.queries.members_index`).
    """

    def __init__(self, index, members):
        self._index, self._members = index, members
        self._manifest, self._lock = None, threading.Lock()

    def member_entries(self, keys):
        """{key: Entry} of the `keys` that are members in the output's members index (read once for them all):
        what `read_image` is given to read many members without reading the index again for each."""
        from parallel.inputs.members import is_member
        from parallel.inputs.tars import read_index
        wanted = [key for key in keys if is_member(key)]
        if not wanted or not os.path.isfile(self._members):
            return {}
        return {entry.key: entry for entry in read_index(self._members, wanted)}

    def read(self, key, max_bytes):
        """(bytes, content type) of the indexed image `key` (a row's key).

        Raises:
          Changed: its file or object is not what the manifest records.
          TooLarge: it has more than `max_bytes` bytes.
          ValueError, OSError: it cannot be read, or proven the image indexed, or is no image (one line each).
        """
        data = self.read_image(key, max_bytes)
        return data, image_type(data)

    def read_image(self, key, max_bytes, entries=None):
        """The bytes of the indexed image `key`, proven as `read` proves it; `entries`: the members index's
        entries already read (`member_entries`), or None to read the key's.

        Raises: as `read`.
        """
        from parallel.inputs.decode import ImageError
        from parallel.inputs.members import is_member
        from parallel.inputs.remote import ObjectChanged
        root = self._index.settings.get("images")
        try:
            if is_member(key):
                data = self._member(key, max_bytes, entries)
            elif is_url(key) or (isinstance(root, str) and is_url(root)):
                data = self._object(key, root, max_bytes)
            else:
                data = self._file(key, root, max_bytes)
        except ObjectChanged as error:
            raise Changed(str(error)) from None
        except ImageError as error:  # a file or object that is missing, unreadable, damaged, or replaced
            raise (Changed if error.kind == "changed" else ValueError)(str(error)) from None
        return data

    def _file(self, key, root, max_bytes):
        if not isinstance(root, str) or not root:
            raise ValueError("the output records no images folder")
        path = os.path.join(root, key)  # an absolute key (an --images-from list's) is itself
        in_root = inside(os.path.abspath(path), os.path.abspath(root))
        descriptor, opened = open_inside(path, root if in_root else os.path.dirname(path))
        with os.fdopen(descriptor, "rb") as file:
            self._check(key, opened)
            if opened.st_size > max_bytes:
                raise TooLarge()
            return file.read(opened.st_size)

    def _object(self, key, root, max_bytes):
        from parallel.inputs.locations import locate
        from parallel.inputs.remote import fetch
        size, _, etag = self._record(key)
        if size > max_bytes:
            raise TooLarge()
        data = fetch(locate(root or "", key), version=etag or None)
        if len(data) != size:  # a store that takes no version (gs://): the bytes say it changed
            raise Changed("it has %d bytes, not the %d the output's manifest records" % (len(data), size))
        return data

    def _member(self, key, max_bytes, entries=None):
        from parallel.inputs.members import KEY_PREFIX, split_key
        from parallel.inputs.remote import fetch
        from parallel.inputs.tars import read_index, read_member
        _, file = split_key(key)
        size, _, etag = self._record(file)
        if entries is None:
            entries = {entry.key: entry for entry in read_index(self._members, [key])} if os.path.isfile(
                self._members) else {}
        entry = entries.get(key)
        if entry is None or entry.size < 0:
            raise ValueError("%s is not a member in the output's members index" % key)
        if entry.size > max_bytes:
            raise TooLarge()
        column = self._index.settings.get("image_column")
        if is_url(file):  # an object: no link to swap; a tar's range is read at its recorded version
            return fetch(file, entry.offset, entry.offset + entry.size, version=etag or None) if key.startswith(
                KEY_PREFIX) else read_member(key, entries, column)
        descriptor, opened = open_inside(file, None)
        with os.fdopen(descriptor, "rb") as opened_file:
            self._check(file, opened)
            if key.startswith(KEY_PREFIX):  # one range of the file checked
                data = os.pread(opened_file.fileno(), entry.size, entry.offset)
                if len(data) != entry.size:
                    raise ValueError("%s ends before its member %s" % (file, key))
                return data
            data = read_member(key, entries, column)  # its reader opens the file by its path: checked again
            if not same_file(os.stat(os.path.realpath(file)), opened):
                raise Changed("%s was replaced while it was read" % file)
            return data

    def _check(self, path, opened):
        """Changed unless the file `opened` (its fstat) has the size and time the manifest records for `path`."""
        size, mtime, _ = self._record(path)
        if mtime != opened.st_mtime_ns or size not in (None, opened.st_size):
            raise Changed("its size or modification time is not the one the output's manifest records")

    def _record(self, path):
        """(size or None, mtime_ns, etag) the output's manifest records for `path` (a file, an object, or a
        Parquet file cut in pieces: its time and version, no size: a piece records a share of it).

        Raises:
          ValueError: the manifest records no such path, or there is no manifest.
        """
        from parallel.inputs.members import PIECE_MARK
        manifest = self._loaded()
        paths = manifest.paths if manifest is not None else []
        # Sorted by path (a Parquet file's pieces side by side, after its name and its mark): found by halving.
        at = bisect.bisect_left(paths, path)
        piece = at < len(paths) and paths[at] != path and paths[at].startswith(path + PIECE_MARK)
        if at == len(paths) or (paths[at] != path and not piece):
            raise ValueError("the output's manifest does not record %s: it cannot be proven the image indexed%s"
                             % (path, "" if manifest is not None else " (the output has no manifest)"))
        etag = manifest.etags[at] if manifest.etags is not None else ""
        return (None if piece else manifest.sizes[at]), manifest.mtimes[at], etag

    def _loaded(self):
        with self._lock:  # the service's threads: read once
            if self._manifest is None:
                from search.image_rows import read_manifest
                self._manifest = (read_manifest(self._index),)
            return self._manifest[0]


def image_type(data):
    """The content type of `data` when it is an image of a format the engine reads; ValueError when not."""
    from parallel.inputs.decode import IMAGE_FORMAT_NAMES, IMAGE_FORMATS, bomb_warnings_silenced
    try:
        with bomb_warnings_silenced(), Image.open(io.BytesIO(data), formats=IMAGE_FORMATS) as image:
            return Image.MIME.get(image.format, "application/octet-stream")
    except Exception:  # noqa: BLE001 -- whatever Pillow raises on bytes it cannot open
        raise ValueError("it is not an image (%s)" % IMAGE_FORMAT_NAMES) from None
