"""A TFRecord file of tf.train.Example records read front to back once: its images, with the index entry of each.

    stream_records(path, index, version=None, max_bytes=None, image_column=None, keep=())
        -> (key, bytes or ImageError), ... a record each, in file order; `index` gets each one's tars.Entry
    check_file(path, version=None, image_column=None, keep=())  -> None, or a one-line ValueError
    read_record(key, entry, image_column=None)                   -> the image of one record, read back
    record_key("n0144_26.JPEG", "s3://b/train-00000")          -> "tfrecord://n0144_26.JPEG::s3://b/train-00000"

A record is framed as TensorFlow writes it: uint64 length (little-endian), uint32 masked CRC-32C of
the length, the data (a serialized tf.train.Example), uint32 masked CRC-32C of the data; both CRCs
are checked (google_crc32c). A file whose first two bytes are 1f 8b is GZIP (TFRecordOptions("GZIP"),
whatever its name), read through gzip.GzipFile: offsets are those of the uncompressed stream.
The image is the first value of the bytes_list feature `image_column`, or of the first of
IMAGE_FEATURES in the file's first Example: "image/encoded" (ImageNet as TensorFlow's scripts
write it), jpg (img2dataset's tfrecord output), jpeg, png, webp, image.

Keys, stable and unique within the file: tfrecord://<id>::<path> (tars.member_key's form, split at
the LAST "::"), <path> the absolute path or URL of the file. <id> is the record's own key, its
feature "key" (img2dataset) or else "image/filename" (ImageNet), when that is one value, not empty,
not starting with "#", without "::" and not seen before in this file; else "#<n>", n the record's
number in the file (0-based), as for a record that is too large, damaged or not an Example.

What cannot be read is accounted for, each a failure of the errors file:

    no image bytes (its feature absent, or an empty list)     the record's key, kind "missing"
    more than max_bytes bytes (passed by unread)              "#<n>", "too_large"; reading goes on
    its data has a wrong CRC, or is not an Example            "#<n>", "corrupt"; reading goes on
    a length's wrong CRC, a file cut mid-record, bad GZIP     the file's path, "corrupt": the rest of it
    no image feature in the first Example                     the file's path, "unreadable"
    a file that cannot be opened or fetched                   the file's path, "missing", "unreadable", ...

A failure of the file is one item (path, ImageError) and one Entry(path, offset of the damage, -1),
after the records read before it, as parallel.inputs.tar_stream does for a damaged tar. A GZIP file's own
check (its trailer's CRC-32 and length) that fails after its last record, once a record's data had a wrong
CRC, is no second failure: it is that record's damage, counted once (12 records are 12 images).
remote.ObjectChanged and remote.StoreUnavailable propagate, as there.

Streaming: the file is read through open_stream's large blocks (parallel.inputs.locations); only the
record in flight is held; a too large one is passed by with a seek (uncompressed: no GET of its bytes
in a store) or read through in blocks (GZIP). A file in a store is read as one version of its object,
`version` (the ETag the job recorded), as tars are. Entry.offset is where the record (its 8-byte
length) starts in the uncompressed stream, Entry.size the length of its Example: `read_record`.
"""

import gzip
import io
import os
import struct
import zlib

import google_crc32c

from parallel.inputs import decode
from parallel.inputs.decode import ImageError
from parallel.inputs.locations import open_stream, read_items, skip
from parallel.inputs.members import TFRECORD_PREFIX, Entry, split_key
from parallel.inputs.remote import ObjectChanged, StoreUnavailable, fetch
from parallel.inputs.tf_example import (  # noqa: F401 (IMAGE_FEATURES, KEY_FEATURES: named here too)
    IMAGE_FEATURES, KEY_FEATURES, feature_text, image_bytes, image_feature, own_key, parse)
from parallel.locations import is_url

GZIP_MAGIC = b"\x1f\x8b"
_HEADER = struct.Struct("<QI")  # length, masked CRC of the length
_FOOTER = 4  # masked CRC of the data
_MASK_DELTA = 0xA282EAD8
_TRAILER_CHECKS = ("CRC check failed", "Incorrect length of data produced")  # gzip.BadGzipFile's, of a trailer


class _Damaged(Exception):
    """The file cannot be read from args[0] (its offset) on: args[1:], the ImageError's kind and message."""


class _GzipCheck(_Damaged):
    """The GZIP data's own check (the CRC-32 or the length its trailer records) failed where a record would
    start: every record before was read whole, each checked by its own CRCs."""


def record_key(record_id, path):
    """The key of the record `record_id` (its own key, or "#<n>") of the TFRecord file at `path`."""
    return "%s%s::%s" % (TFRECORD_PREFIX, record_id, path)


def stream_records(path, index, version=None, max_bytes=None, image_column=None, keep=()):
    """The images of the records of the TFRecord file at `path`, read front to back once.

    Args:
      path: absolute path or URL of the file (uncompressed or GZIP).
      index: a list; an Entry is appended for every item yielded, before it is yielded.
      version: for a file in a store, the ETag the job recorded for it: every read asks for that version.
      max_bytes: a record of more bytes is not read but fails as "too_large"; None: decode.MAX_BYTES.
      image_column: the bytes_list feature holding the image; None: the first of IMAGE_FEATURES.
      keep: names of features whose values are kept beside each record (Entry.kept, in this order):
        str or None each (see `feature_text`).

    Yields:
      (key, data): data is the image's bytes, or an ImageError when it (or the rest of the file)
      cannot be read (see the module docstring for the keys and kinds).

    Raises:
      parallel.inputs.remote.ObjectChanged: the file's object is not `version`, or was replaced while read.
      parallel.inputs.remote.StoreUnavailable: the store cannot be connected to.
    """
    max_bytes = decode.MAX_BYTES if max_bytes is None else max_bytes
    return read_items(path, version, index, "TFRecord file",
                      lambda stream: _rows(stream, path, index, max_bytes, image_column, tuple(keep)))


def _rows(stream, path, index, max_bytes, image_column, keep):
    seen, unkept, image, corrupt = set(), (None,) * len(keep), None, False
    try:
        source, end = _opened(stream)
        for number, (offset, length, data) in enumerate(_framed(source, max_bytes, end)):
            failure, example = None, None
            if data is None:
                failure = ImageError("too_large", "record %d: %d bytes, more than the %d an image may take; not read"
                                     % (number, length, max_bytes))
            elif isinstance(data, ImageError):
                failure, corrupt = data, True
            else:
                example = parse(data)
                if example is None:
                    failure = ImageError("corrupt", "record %d at byte %d is not a tf.train.Example" % (number, offset))
            if failure is not None:
                key = record_key("#%d" % number, path)
                index.append(Entry(key, offset, length, unkept))
                yield key, failure
                continue
            features = example.features.feature
            if image is None:  # the file's image feature, found in its first Example
                try:
                    image = image_feature(features, image_column, path)
                except ValueError as error:
                    raise _Damaged(offset, "unreadable", str(error)) from None
            own = own_key(features)
            usable = own and not own.startswith("#") and "::" not in own and own not in seen
            record_id = own if usable else "#%d" % number
            seen.add(own)
            key = record_key(record_id, path)
            index.append(Entry(key, offset, length, tuple(feature_text(features.get(name)) for name in keep)))
            yield key, image_bytes(features, image, "record %d" % number)
    except _GzipCheck as damage:
        if corrupt:  # the data a record's CRC found wrong fails the GZIP check too: that record is its failure
            return
        index.append(Entry(path, damage.args[0], -1))
        yield path, ImageError(*damage.args[1:])
    except _Damaged as damage:
        index.append(Entry(path, damage.args[0], -1))
        yield path, ImageError(*damage.args[1:])


def _opened(stream):
    """(the records' stream: `stream`, or its GZIP decompression; its size when a seek can pass bytes by, else None)."""
    compressed = _read(stream, 2, 0) == GZIP_MAGIC
    stream.seek(0)  # within open_stream's buffer
    if compressed:
        return gzip.GzipFile(fileobj=stream, mode="rb"), None
    raw = stream.raw  # an object's (its size known), or a file's
    return stream, raw.size if hasattr(raw, "size") else os.fstat(raw.fileno()).st_size


def _framed(stream, max_bytes, end, offset=0):
    """(offset, length, data) of each record of `stream` (from `offset` of the file): data its bytes, None when
    it is too large (passed by unread), or ImageError("corrupt") when its data has a wrong CRC; _Damaged when
    the file cannot be read on."""
    while True:
        header = _read(stream, _HEADER.size, offset, between_records=True)
        if not header:
            return
        if len(header) < _HEADER.size:
            raise _Damaged(offset, "corrupt", "damaged TFRecord: the file ends %d bytes into the header of the record "
                                              "at byte %d" % (len(header), offset))
        length, length_crc = _HEADER.unpack(header)
        if masked_crc(header[:8]) != length_crc:
            raise _Damaged(offset, "corrupt", "damaged TFRecord: the length of the record at byte %d has a wrong CRC "
                                              "(not a TFRecord file, or damaged); the records from there on cannot "
                                              "be read" % offset)
        if length > max_bytes:
            yield offset, length, None  # passed by after, unread (check_file asks for the first record only)
            data, got = None, skip(stream, length + _FOOTER, end, lambda part, count: _read(part, count, offset))
        else:
            data = _read(stream, length, offset)
            footer = _read(stream, _FOOTER, offset) if len(data) == length else b""
            got = len(data) + len(footer)
        if got < length + _FOOTER:
            raise _Damaged(offset, "corrupt", "damaged TFRecord: the file ends %d bytes into the record of %d bytes "
                                              "at byte %d" % (_HEADER.size + got, length, offset))
        if data is not None:
            if masked_crc(data) != int.from_bytes(footer, "little"):
                data = ImageError("corrupt", "damaged TFRecord: the data of the record at byte %d has a wrong CRC"
                                  % offset)
            yield offset, length, data
        offset += _HEADER.size + length + _FOOTER


def masked_crc(data):
    """The masked CRC-32C of `data` that TFRecord frames carry."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _read(stream, count, offset, between_records=False):
    """Up to `count` bytes of `stream` (fewer only at its end); its failures as _Damaged at `offset` (a
    store's or a file's, damaged GZIP data): _GzipCheck for a GZIP trailer's check that fails `between_records`."""
    try:
        return stream.read(count)  # a BufferedReader's (open_stream's, GzipFile's): fewer only at the end
    except (ObjectChanged, StoreUnavailable):
        raise
    except ImageError as error:
        raise _Damaged(offset, error.kind, "the TFRecord file broke off at byte %d: %s" % (offset, error.message))
    except (EOFError, zlib.error, gzip.BadGzipFile) as error:
        # GzipFile checks a member's CRC-32 and length once its data is read, as the next read begins.
        trailer = isinstance(error, gzip.BadGzipFile) and str(error).startswith(_TRAILER_CHECKS)
        raise (_GzipCheck if trailer and between_records else _Damaged)(
            offset, "corrupt", "damaged GZIP data at or after byte %d of the records: %s" % (offset, error)) from None
    except OSError as error:
        raise _Damaged(offset, "unreadable", "the TFRecord file broke off at byte %d: %s"
                       % (offset, error.strerror or error)) from None


def check_file(path, version=None, image_column=None, keep=()):
    """Checks that `path` is a TFRecord file of Examples with an image feature and the features `keep`,
    from its first record only (a file of no records passes).

    Raises:
      ValueError: one line naming the file: it cannot be read, is not a TFRecord file of
        tf.train.Example, has no image feature (or not `image_column`), or lacks a feature of `keep`.
      parallel.inputs.remote.ObjectChanged, StoreUnavailable: as stream_records.
    """
    try:
        stream = open_stream(path, version)
    except ImageError as error:
        raise ValueError("%s cannot be read: %s" % (path, error.message)) from None
    with stream:
        try:
            source, _ = _opened(stream)
            first = next(_framed(source, decode.MAX_BYTES, None), None)
        except _Damaged as damage:
            raise ValueError("%s is not a TFRecord file: %s" % (path, damage.args[2])) from None
    if first is None or first[2] is None or isinstance(first[2], ImageError):
        return  # no records; a first record too large to read for a check; or damaged (framed: a TFRecord file)
    example = parse(first[2])
    if example is None:
        raise ValueError("%s is not a TFRecord file of tf.train.Example: its first record is not one" % path)
    features = example.features.feature
    image_feature(features, image_column, path)
    absent = [name for name in keep if name not in features]
    if absent:
        raise ValueError("%s has no feature %s to keep; its features: %s" % (
            path, ", ".join(map(repr, absent)), ", ".join(sorted(features)) or "none"))


def read_record(key, entry, image_column=None):
    """The image (bytes) of the record `key` (tfrecord://<id>::<path>), read back by its index entry (tars.Entry).

    An uncompressed file: ONE range read of the record (offset .. offset + 16 + size), its CRCs checked.
    A GZIP file: decompressed from its start up to the record (a GZIP stream cannot be entered midway).
    `image_column`: as stream_records'.

    Raises:
      ValueError: `key` is not a record's key, or `entry` is no record's (size -1: a failure of the file).
      ImageError: the file cannot be read ("missing", "unreadable", "unreachable"), the record is damaged or
        not an Example ("corrupt"), has no image ("missing"), or is another record than `key` ("changed").
    """
    if not key.startswith(TFRECORD_PREFIX):
        raise ValueError("%r is not the key of a TFRecord's record (tfrecord://<id>::<file>)" % (key,))
    record_id, path = split_key(key)
    if entry.size < 0 or entry.offset < 0:
        raise ValueError("%s is not a readable record: its entry is (offset %d, size %d)"
                         % (key, entry.offset, entry.size))
    try:
        data = _record_at(io.BytesIO(_range(path, entry.offset, _HEADER.size + entry.size + _FOOTER)), entry, path)
    except ImageError as error:  # past a GZIP file's end, say: its failure, if any, comes again from its start
        data = error
    if isinstance(data, ImageError) and _range(path, 0, 2) == GZIP_MAGIC:
        with open_stream(path) as stream, gzip.GzipFile(fileobj=stream, mode="rb") as source:
            try:
                skip(source, entry.offset, None, lambda part, count: _read(part, count, 0))
            except _Damaged as damage:
                raise ImageError(damage.args[1], "%s: %s" % (path, damage.args[2])) from None
            data = _record_at(source, entry, path)
    if isinstance(data, ImageError):
        raise data
    example = parse(data)
    if example is None:
        raise ImageError("corrupt", "the record at byte %d of %s is not a tf.train.Example" % (entry.offset, path))
    features = example.features.feature
    if not record_id.startswith("#") and own_key(features) != record_id:
        raise ImageError("changed", "the record at byte %d of %s is no longer %r (its key now: %r)"
                         % (entry.offset, path, record_id, own_key(features)))
    image = image_bytes(features, image_feature(features, image_column, path), "the record at byte %d of %s"
                   % (entry.offset, path))
    if isinstance(image, ImageError):
        raise image
    return image


def _range(path, offset, count):
    """`count` bytes of the file or object at `path` from `offset` (fewer at its end), by one read."""
    if is_url(path):
        return fetch(path, offset, offset + count)
    try:
        with open(path, "rb") as file:
            file.seek(offset)
            return file.read(count)
    except FileNotFoundError:
        raise ImageError("missing", "no such file: %s" % path) from None
    except OSError as error:
        raise ImageError("unreadable", "cannot read %s: %s" % (path, error.strerror or error)) from None


def _record_at(source, entry, path):
    """The data of the record `source` starts with, the one `entry` says is at its offset in the file at `path`:
    bytes, or ImageError("corrupt") (not a record of that size there, or its CRCs wrong)."""
    try:
        record = next(_framed(source, entry.size, None, entry.offset), None)
    except _Damaged as damage:
        return ImageError(damage.args[1], "%s: %s" % (path, damage.args[2]))
    if record is None or record[1] != entry.size:
        return ImageError("corrupt", "%s has no record of %d bytes at byte %d" % (path, entry.size, entry.offset))
    data = record[2]
    return ImageError(data.kind, "%s: %s" % (path, data.message)) if isinstance(data, ImageError) else data
