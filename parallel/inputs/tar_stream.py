"""A tar read front to back once: its image members, as they come, with the index entry of each.

    stream_members(tar, index, version=None)
                                 -> (key, bytes or ImageError), ... of its image members, in tar order;
                                    the index (key, offset, size of each: tars.Entry) grows as they are read;
                                    remote.ObjectChanged when the tar's object is replaced
    LaterCopies(entries)         a member name that comes twice: the last copy counts

A tar is read with our own header parser (ustar, GNU long names, pax `path` and `size`), once,
from its first byte to its end marker, on a stream of large blocks (parallel.inputs.locations): no
listing read before, so a tar in a store costs one pass of ranged GETs. A member of more than
decode.MAX_BYTES bytes is not read: it fails as "too_large", and its bytes are passed by with a
seek (no GET of them in a store; none held in memory).

A tar in a store is read as one version of its object: every ranged GET asks for the ETag it had
when the stream opened, or for `version` (the ETag the job recorded when it froze the tar). When
the object is replaced, before or while it is read, stream_members raises
parallel.inputs.remote.ObjectChanged (after the members already yielded, all of the old
version): the caller must drop what it took from this tar (a shard attempt), so that no output
holds members of two versions of a tar, nor a member of both.

Only members with an image extension (parallel.inputs.discovery) are images; others (.json,
.txt, .cls of a WebDataset sample), folders and links are skipped, as a folder's other files are.
What cannot be read is accounted for, each a failure of the errors file:

    a member whose data is cut short        its key, kind "corrupt" ("truncated ...")
    a damaged header (bad checksum)         the tar's path or URL, kind "corrupt": its members from
                                            there on cannot be found, the earlier ones have rows
    a tar that cannot be opened or fetched  the tar's path or URL, kind "missing", "unreadable"
                                            or "unreachable" (parallel.inputs.remote)

so a damaged tar costs only its own images. A store that cannot be connected to at all is no
tar's fault: remote.StoreUnavailable stops the run, and the tar is read again by the rerun.
The index records those too (offset of the damage, size -1), so that a shard's rows and errors
are exactly its index's keys.

The keys, the index's entries and a member read back by one byte range: parallel.inputs.tars.
"""

import dataclasses
import os

from parallel.inputs import decode
from parallel.inputs.decode import ImageError
from parallel.inputs.discovery import has_image_extension
from parallel.inputs.locations import read_items, skip
from parallel.inputs.remote import ObjectChanged, StoreUnavailable
from parallel.inputs.members import Entry, is_member, member_key

_BLOCK = 512
_FILE_TYPES = (b"0", b"\0", b"7")
KEPT_MAX_BYTES = 1 << 20  # a sibling member kept beside its sample's images holds at most this much text


def stream_members(tar, index, version=None, max_bytes=None, keep=()):
    """The image members of the tar at `tar`, read front to back once.

    Args:
      tar: absolute path or URL of the tar.
      index: a list; an Entry is appended for every item yielded, before it is yielded.
      version: for a tar in a store, the ETag the job recorded for it (its manifest's etag):
        every read asks for that version. None or "": the version it has when it is opened.
      max_bytes: a member of more bytes is not read but fails as "too_large"; None:
        parallel.inputs.decode.MAX_BYTES.
      keep: extensions of sibling members kept beside each image of their sample ("txt", "json",
        "cls"): a WebDataset sample is the members whose names agree up to the first "." of their
        last part ("a/0001.jpg", "a/0001.txt"); each Entry's `kept` holds their text (UTF-8, a
        member of more than KEPT_MAX_BYTES is not kept: None), in the order of `keep`, whether they
        come before the image or after it (the entry is completed as they are read).

    Yields:
      (key, data): data is the member's bytes, or an ImageError when it (or the rest of the tar)
      cannot be read (see the module docstring for the keys and kinds).

    Raises:
      parallel.inputs.remote.ObjectChanged: the tar's object is not `version` (when opened), or
        was replaced while it was read: what was yielded of it must be dropped.
      parallel.inputs.remote.StoreUnavailable: the store cannot be connected to.
    """
    max_bytes = decode.MAX_BYTES if max_bytes is None else max_bytes
    return read_items(tar, version, index, "tar",
                      lambda stream: _members(stream, tar, index, max_bytes, _Siblings(index, keep)))


class _Siblings:
    """The values of a sample's sibling members kept (`stream_members`'s keep) and its images' entries."""

    def __init__(self, index, keep):
        self.index, self.keep = index, tuple(keep)
        self.sample, self.values, self.images = None, {}, []  # images: positions in index

    def _enter(self, name):
        sample, _, extension = _sample_of(name)
        if sample != self.sample:
            self.sample, self.values, self.images = sample, {}, []
        return extension

    def wants(self, name):
        """Whether the member `name` (not an image) is a sibling whose text is kept."""
        return bool(self.keep) and self._enter(name) in self.keep

    def take(self, name, data):
        """Keeps the text `data` (bytes, or None: too large) of the sibling `name`; completes its sample's entries."""
        self.values[self._enter(name)] = None if data is None else data.decode("utf-8", "replace")
        for position in self.images:
            self.index[position] = dataclasses.replace(self.index[position], kept=self.kept())

    def entry(self, key, offset, size, name):
        """The Entry of the image `name`, holding what its sample kept so far (completed by later siblings)."""
        if not self.keep:
            return Entry(key, offset, size)
        self._enter(name)
        self.images.append(len(self.index))
        return Entry(key, offset, size, self.kept())

    def kept(self):
        return tuple(self.values.get(name) for name in self.keep)


def _sample_of(name):
    """(sample, ".", extension) of a member's name: WebDataset's split at the first "." of its last part."""
    folder, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    return (folder + "/" if folder else "") + stem, dot, extension


def _members(stream, tar, index, max_bytes, siblings):
    offset, names = 0, {}  # names: what a GNU long-name or pax header says of the next member
    end = _size(stream)
    while True:
        try:
            header = _read(stream, _BLOCK)
        except ImageError as error:
            index.append(Entry(tar, offset, -1))
            yield tar, ImageError(error.kind, "the tar broke off at byte %d: %s" % (offset, error.message))
            return
        if len(header) < _BLOCK or not header.strip(b"\0"):
            return  # the end marker (or a tar that ends at a member's boundary)
        problem = _header_problem(header)
        if problem:
            index.append(Entry(tar, offset, -1))
            yield tar, ImageError("corrupt", "damaged tar: the header at byte %d %s; its members from there on "
                                             "cannot be read" % (offset, problem))
            return
        kind = header[156:157]
        size = int(names.pop("size", None) or _number(header[124:136]))
        name = names.pop("path", None) or _name(header)
        data_offset = offset + _BLOCK
        padded = -(-size // _BLOCK) * _BLOCK
        wanted = kind in _FILE_TYPES and has_image_extension(name)
        too_large = wanted and size > max_bytes
        sibling = kind in _FILE_TYPES and not wanted and siblings.wants(name)
        data = b""
        try:
            if kind in (b"L", b"x") or (wanted and not too_large) or (sibling and size <= KEPT_MAX_BYTES):
                data = _read(stream, padded)
                got = len(data)
                data = data[:size]
            else:  # not an image, or one too large to hold: its bytes pass by unkept
                got = skip(stream, padded, end, _read)
        except ImageError as error:
            data, got = error, -1
        offset = data_offset + padded
        if got < size:
            key = member_key(name, tar) if wanted else tar
            index.append(Entry(key, data_offset, size if wanted else -1))
            why = data.message if isinstance(data, ImageError) else "the tar ends %d bytes into it" % got
            yield key, ImageError(getattr(data, "kind", "corrupt"), "truncated: %s of %d bytes at byte %d: %s"
                                  % (name, size, data_offset, why))
            return
        if kind == b"L":
            names["path"] = data.rstrip(b"\0").decode("utf-8", "surrogateescape")
        elif kind == b"x":
            names.update(_pax(data))
        elif sibling:
            siblings.take(name, data if size <= KEPT_MAX_BYTES else None)
        elif wanted:
            key = member_key(name, tar)
            index.append(siblings.entry(key, data_offset, size, name))
            yield key, ImageError("too_large", "a member of %d bytes, more than the %d an image may take; not read"
                                  % (size, max_bytes)) if too_large else data


def _read(stream, count):
    """Up to `count` bytes of `stream` (fewer only at its end); a store's failure as ImageError."""
    chunks, left = [], count
    while left:
        try:
            chunk = stream.read(left)
        except (ImageError, StoreUnavailable, ObjectChanged):
            raise
        except OSError as error:
            raise ImageError("unreadable", "cannot read it: %s" % (error.strerror or error)) from None
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _size(stream):
    """The size in bytes of the file or object `stream` reads (open_stream's), or None when unknown."""
    size = getattr(getattr(stream, "raw", None), "size", None)  # an object's stream (locations._ResumingStream)
    if size is not None:
        return size
    try:
        return os.fstat(stream.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        return None


def _header_problem(header):
    """Why a 512-byte block is not a tar header, or None."""
    try:
        recorded = _number(header[148:156])
    except ValueError:
        return "has no checksum"
    computed = sum(header[:148]) + 8 * 32 + sum(header[156:])
    if recorded != computed:
        return "has a wrong checksum"
    try:
        _number(header[124:136])
    except ValueError:
        return "has no size"
    return None


def _number(field):
    """A tar header's number: octal text, or base-256 when its first bit is set (GNU, for large sizes)."""
    if field[:1] and field[0] & 0x80:
        return int.from_bytes(bytes([field[0] & 0x7F]) + field[1:], "big")
    text = field.replace(b"\0", b" ").strip()
    return int(text, 8) if text else 0


def _name(header):
    name = header[:100].split(b"\0", 1)[0]
    if header[257:262] == b"ustar":
        prefix = header[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    return name.decode("utf-8", "surrogateescape")


def _pax(data):
    """The `path` and `size` a pax extended header gives the next member."""
    values, position = {}, 0
    while position < len(data) and data[position:position + 1] != b"\0":
        length_text, _, _ = data[position:].partition(b" ")
        try:
            length = int(length_text)
        except ValueError:
            break
        record = data[position + len(length_text) + 1:position + length - 1]
        key, _, value = record.partition(b"=")
        if key in (b"path", b"size"):
            values[key.decode()] = value.decode("utf-8", "surrogateescape")
        position += length
    return values


class LaterCopies:
    """A tar holding a member name twice (as `tar -rf` leaves it after appending a newer copy): tar's own
    rule, the last copy counts, and a key is one row.

        copies = LaterCopies(entries)            # the list stream_members appends to
        for key, data in copies.wrap(members):   # a later copy under a key of its own ("later-copy-1:...")
            ...                                  # both copies computed, as they come
        entries, kept, renames = copies.resolve()  # the last copies: their entries, streamed keys, renames

    Streaming, a copy is known to be an earlier one only once the later one arrives: so each copy
    is computed, and the rows of the earlier ones are dropped afterwards (`shard_record.keep_last_copies`).
    """

    def __init__(self, entries):
        self.entries = entries
        self.seen = set()
        self.placeholders = {}  # placeholder -> the member's key

    def wrap(self, members):
        for key, data in members:
            if is_member(key) and key in self.seen:
                placeholder = "later-copy-%d:%s" % (len(self.placeholders) + 1, key)  # never a key or a tar
                entry = self.entries[-1]  # appended for this item, before it was yielded
                self.entries[-1] = dataclasses.replace(entry, key=placeholder)  # what it kept, kept
                self.placeholders[placeholder] = key
                key = placeholder
            else:
                self.seen.add(key)
            yield key, data

    def resolve(self):
        """(the entries of the last copies, in order, under their members' keys; the keys as streamed of the
        copies kept, a set; {placeholder: member's key} of the later copies kept)."""
        last = {}
        for entry in self.entries:
            last[self.placeholders.get(entry.key, entry.key)] = entry.key
        kept = set(last.values())
        entries = [dataclasses.replace(entry, key=self.placeholders.get(entry.key, entry.key))
                   for entry in self.entries if entry.key in kept]
        return entries, kept, {placeholder: key for placeholder, key in self.placeholders.items()
                               if placeholder in kept}
