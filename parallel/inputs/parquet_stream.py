"""A Parquet file of images read front to back once: its rows' image bytes, as they come, with the index entry of each.

    stream_rows(path, index, version=None, max_bytes=None, image_column=None, keep=())
                          -> (key, bytes or ImageError), ... of its rows, in file order; the index (tars.Entry
                             of each: key, row number, image's byte count, the values kept) grows as they are read
    check_file(path, version=None, image_column=None, keep=())   -> None, or a one-line ValueError
    read_row(key, entry, image_column=None)   -> the image of one row, read back later
    row_key("000000017", "s3://b/part-0.parquet") -> "parquet://000000017::s3://b/part-0.parquet"

The files are those the tools that publish image datasets write: the Hugging Face hub's (datasets'
`Image` feature: a column "image" of struct<bytes: binary, path: string>) and img2dataset's
`parquet` output (the JPEG in a binary column "jpg", beside "key", "caption", "url", "width", ...).
The image column is found by those names (IMAGE_COLUMNS) unless `image_column` names it: a struct
column must have a "bytes" field, a binary column is taken as is.

Keys: parquet://<id>::<path> (tars.member_key's form, split at the LAST "::"), where <path> is the
file's absolute path or URL and <id> the row's own key, the value of its column "key" (KEY_COLUMN,
img2dataset writes one), else "#<n>", n the row's number in the file (0-based). A row whose own key
is null, empty, starts with "#", holds "::" or was already seen in this file gets "#<n>": a key is
unique within its file and the same at every read of the same file.

What cannot be read is accounted for, each a failure of the errors file:

    a row whose image is null                its key, kind "missing" ("row N has no image bytes")
    an image of more than max_bytes bytes    its key, kind "too_large"
    a file that is not Parquet               the file's path or URL, kind "corrupt"
    a damaged page or row group              the file's, kind "corrupt": its rows from there on
    no image column, a kept column absent    the file's, kind "unreadable" (check_file: a ValueError)
    a file that cannot be opened or fetched  the file's, kind "missing", "unreadable" or "unreachable"

A failure of the file (or of the rest of it) is its Entry(path, row, -1) in the index and one item
(path, ImageError), after which the stream ends, as parallel.inputs.tar_stream does for a tar.

Streaming: the file is opened by parallel.inputs.locations.open_stream (a store's object read by
ranged GETs of large blocks; a local file, once opened so, by pyarrow's own file: reading through a
Python file object takes the GIL at every read, from the decoding threads) and read by pyarrow's
buffered page reader (BUFFER_BYTES at a time per
column chunk, never a whole column chunk at once), ROWS_AT_A_TIME rows a batch, only the columns
needed (the image, "key", those kept): a row group's image column is not held whole, only the
batch's rows and the page they come from. A page is the least that can be read (it is one
compressed unit), and pyarrow's writer closes a page only every `write_batch_size` (1024) rows:
files written with its defaults (img2dataset's) hold a row group's images in one page of up to
1024 rows, and that page is held while its rows are read. Page checksums are verified where the
writer wrote them.

Versions: a file in a store is read as one version of its object (every ranged GET asks for
`version`, the ETag the job recorded, or the one it had when opened): when it is replaced,
remote.ObjectChanged is raised (after the rows already yielded, all of the old version), and the
caller drops what it took of the file. remote.StoreUnavailable stops the run, as for tars.

A large file is cut into pieces of whole row groups (`pieces`: read from its footer when the job is frozen),
each a shard of its own: stream_rows given a piece's name (<file>::rows=<start>-<stop>, parallel.inputs.members)
reads its row groups only, its rows numbered and keyed as in the file read whole; a failure of the file is
then keyed by the piece's name (its shard's). A file with its own keys is not cut (a key is unique in its file).

A row read back (`read_row`): a Parquet value cannot be read alone, as a tar member's byte range
can: pyarrow reads the file's footer and that row's row group's image column chunk (one range),
and the row is taken from it.
"""

import json

from parallel.inputs import decode
from parallel.inputs.decode import ImageError
from parallel.inputs.locations import open_stream, read_items
from parallel.inputs.members import PARQUET_PREFIX, Entry, piece_path, split_key, split_piece
from parallel.inputs.remote import ObjectChanged, StoreUnavailable
from parallel.locations import is_url
from parallel.messages import error_line

IMAGE_COLUMNS = ("image", "jpg", "jpeg", "png", "webp")  # found by name, in this order (datasets', img2dataset's)
IMAGE_STRUCT_FIELD = "bytes"  # the field of datasets' Image struct that holds the bytes (beside "path")
IMAGE_PATH_FIELD = "path"
KEY_COLUMN = "key"  # the dataset's own key of a row (img2dataset writes one)
ROWS_AT_A_TIME = 32  # rows of one batch read from the file: the rows in flight of the reader
BUFFER_BYTES = 1 << 20  # bytes read at a time from a column chunk (pyarrow's buffered stream)
PIECE_BYTES = 256 << 20  # a larger file is shards of about so many bytes of whole row groups (`pieces`)
_SEPARATOR = "::"  # of a key's id and file, as tars.member_key's (split at the last)


def row_key(row_id, path):
    """The key of the row `row_id` (its own key, or "#<n>") of the Parquet file at `path` (absolute path or URL)."""
    return "%s%s%s%s" % (PARQUET_PREFIX, row_id, _SEPARATOR, path)


def stream_rows(path, index, version=None, max_bytes=None, image_column=None, keep=()):
    """The images of the rows of the Parquet file at `path`, read front to back once.

    Args:
      path: absolute path or URL of the file.
      index: a list; an Entry is appended for every item yielded, before it is yielded: Entry(key,
        row number, the image's byte count (0 for a null image), kept values), or Entry(path, row, -1)
        for a failure of the file from that row on (row -1: it could not be opened).
      version: for a file in a store, the ETag the job recorded for it: every read asks for that
        version. None or "": the version it has when it is opened.
      max_bytes: an image of more bytes fails as "too_large"; None: parallel.inputs.decode.MAX_BYTES.
      image_column: the column holding the images; None: found by name (IMAGE_COLUMNS).
      keep: names of columns whose values are kept beside each row (Entry.kept: a str or None each,
        see `kept_text`).

    Yields:
      (key, data): data is the row's image bytes, or an ImageError when it (or the rest of the file)
      cannot be had (see the module docstring for the keys and kinds).

    Raises:
      parallel.inputs.remote.ObjectChanged: the file's object is not `version` (when opened), or was
        replaced while it was read: what was yielded of it must be dropped.
      parallel.inputs.remote.StoreUnavailable: the store cannot be connected to.
    """
    max_bytes = decode.MAX_BYTES if max_bytes is None else max_bytes
    name = path  # the manifest's: a file, or a piece of one (its failures are keyed so: its shard's)
    path, start, stop = split_piece(name)
    return read_items(path, version, index, "Parquet file", lambda stream: _rows(
        stream, path, name, (start, stop), index, max_bytes, image_column, tuple(keep)), key=name)


def _rows(stream, path, name, rows, index, max_bytes, image_column, keep):
    try:  # a local file is read by pyarrow's own file (the Python file object takes the GIL at every read)
        parquet = _open(stream if is_url(path) else path, path)
        image, is_struct, key = _columns(parquet.schema_arrow, path, image_column, keep)
        row, groups = _row_groups(parquet.metadata, path, *rows)
    except ImageError as error:
        index.append(Entry(name, -1, -1))
        yield name, error
        return
    except ValueError as error:
        index.append(Entry(name, -1, -1))
        yield name, ImageError("unreadable", str(error))
        return
    wanted = list(dict.fromkeys([image] + ([key] if key else []) + list(keep)))
    seen = set()
    batches = parquet.iter_batches(batch_size=ROWS_AT_A_TIME, row_groups=groups, columns=wanted, use_threads=False)
    while True:
        try:
            batch = next(batches, None)
        except (ObjectChanged, StoreUnavailable):
            raise
        except ImageError as error:
            index.append(Entry(name, row, -1))
            yield name, ImageError(error.kind, "the Parquet file broke off at row %d: %s" % (row, error.message))
            return
        except Exception as error:  # pyarrow's: a damaged page, a bad checksum, a file cut short
            index.append(Entry(name, row, -1))
            yield name, ImageError("corrupt", "damaged Parquet file: its rows from %d on cannot be read: %s"
                                   % (row, error_line(error)))
            return
        if batch is None:
            return
        images = batch.column(image).to_pylist()
        ids = batch.column(key).to_pylist() if key else [None] * len(images)
        kept = list(zip(*(batch.column(name).to_pylist() for name in keep))) if keep else [()] * len(images)
        for data, own, values in zip(images, ids, kept):
            own = kept_text(own)
            if own and not own.startswith("#") and _SEPARATOR not in own and own not in seen:
                seen.add(own)
            else:
                own = "#%d" % row
            image_key = row_key(own, path)
            failure, data = _failure(data, is_struct, row, max_bytes)
            index.append(Entry(image_key, row, len(data) if data is not None else 0, tuple(map(kept_text, values))))
            yield image_key, failure or data
            row += 1


def _row_groups(metadata, path, start, stop):
    """(the first row's number, the row groups to read) of the rows [start, stop) of a file (None: all of it);
    ValueError when the range is not whole row groups of the file (it changed since it was cut in pieces)."""
    if start is None:
        return 0, list(range(metadata.num_row_groups))
    groups, first = [], 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        if start <= first and first + rows <= stop:
            groups.append(group)
        first += rows
    if sum(metadata.row_group(group).num_rows for group in groups) != stop - start:
        raise ValueError("%s has no row groups holding rows %d to %d: it changed since the job cut it in pieces"
                         % (path, start, stop))
    return start, groups


def pieces(path, version=None, piece_bytes=None):
    """The manifest's names of a large Parquet file: pieces of whole row groups holding about `piece_bytes`
    compressed bytes each (`members.piece_path`), read from its footer; [path] for a file that is not cut: one
    without a row group to spare, or with its own keys (its "key" column: a key is unique in its file, which
    only a reader of the whole file can see), or that cannot be read (its shard says why).

    Args:
      path: absolute path or URL. version: the ETag the job recorded (a store's object).
      piece_bytes: about how much a piece holds; None: PIECE_BYTES.
    """
    piece_bytes = PIECE_BYTES if piece_bytes is None else piece_bytes
    try:
        with open_stream(path, version) as stream:
            parquet = _open(stream if is_url(path) else path, path)
            metadata = parquet.metadata
            if metadata.num_row_groups < 2 or KEY_COLUMN in parquet.schema_arrow.names:
                return [path]
    except (ImageError, ObjectChanged):
        return [path]
    names, start, rows, held = [], 0, 0, 0
    for group in range(metadata.num_row_groups):
        size = sum(metadata.row_group(group).column(column).total_compressed_size
                   for column in range(metadata.num_columns))
        if rows and held + size > piece_bytes:
            names.append(piece_path(path, start, start + rows))
            start, rows, held = start + rows, 0, 0
        rows += metadata.row_group(group).num_rows
        held += size
    names.append(piece_path(path, start, start + rows))
    return names if len(names) > 1 else [path]


def _failure(value, is_struct, row, max_bytes):
    """(an ImageError or None, the image's bytes or None) of a row's image column `value`."""
    where = ""
    if is_struct and value is not None:
        where = value.get(IMAGE_PATH_FIELD)
        where = (" (its path: %s; datasets' to_parquet of local files keeps their paths only: embed the bytes, "
                 "as push_to_hub does, or give the images' folder)" % where) if where else ""
        value = value.get(IMAGE_STRUCT_FIELD)
    if value is None:
        return ImageError("missing", "row %d has no image bytes%s" % (row, where)), None
    if len(value) > max_bytes:
        return ImageError("too_large", "row %d holds an image of %d bytes, more than the %d an image may take"
                          % (row, len(value), max_bytes)), value
    return None, value


def check_file(path, version=None, image_column=None, keep=()):
    """Checks, by its footer only, that the file at `path` is Parquet and has the columns a job needs.

    The job calls it on its first file before it starts, so that a mistake is one line (exit 2).

    Args:
      path, version, image_column, keep: as `stream_rows`.

    Raises:
      ValueError: one line naming the file: it cannot be opened, is not a Parquet file, has no image
        column (found by name, or `image_column`), or lacks a column of `keep`.
      parallel.inputs.remote.ObjectChanged, StoreUnavailable: as `stream_rows`.
    """
    try:
        with open_stream(path, version) as stream:
            _columns(_open(stream, path).schema_arrow, path, image_column, tuple(keep))
    except ImageError as error:
        raise ValueError(error.message if path in error.message else "%s: %s" % (path, error.message)) from None


def read_row(key, entry, image_column=None):
    """The image of one row of a Parquet file, read back after the file was streamed (search, a retry).

    A Parquet value cannot be read alone (a tar member is one byte range): pyarrow reads the file's
    footer and the image column chunk of the row's row group (one range), and takes the row from it.

    Args:
      key: the row's key (parquet://<id>::<file>), as stream_rows gave it.
      entry: its tars.Entry from the index: offset = the row's number in the file, size = its
        image's byte count.
      image_column: as `stream_rows` (the same as when the file was streamed).

    Returns:
      bytes.

    Raises:
      ValueError: `key` is not a Parquet row's key, or `entry` is not that of a readable row.
      ImageError: the file cannot be read ("missing", "unreadable", "unreachable"), is damaged
        ("corrupt"), the row's image is null ("missing"), or its size is not the entry's ("changed":
        the file was replaced since it was streamed).
    """
    if not key.startswith(PARQUET_PREFIX):
        raise ValueError("%r is not the key of a Parquet file's row (parquet://<id>::<file>)" % (key,))
    _, path = split_key(key)
    if entry.size < 0 or entry.offset < 0:
        raise ValueError("%s is not a readable row: its entry is a failure of the file (%r)" % (key, entry))
    with open_stream(path) as stream:
        # The unbuffered file under the stream: the footer and the column chunk are read as one range each.
        parquet = _open(getattr(stream, "raw", stream), path)
        image, is_struct, _ = _columns(parquet.schema_arrow, path, image_column, ())
        metadata, start = parquet.metadata, 0
        for group in range(metadata.num_row_groups):
            rows = metadata.row_group(group).num_rows
            if entry.offset < start + rows:
                break
            start += rows
        else:
            raise ValueError("%s: %s has %d rows, none numbered %d" % (key, path, metadata.num_rows, entry.offset))
        column = image + "." + IMAGE_STRUCT_FIELD if is_struct else image
        try:
            table = parquet.read_row_group(group, columns=[column], use_threads=False)
        except (ObjectChanged, StoreUnavailable, ImageError):
            raise
        except Exception as error:
            raise ImageError("corrupt", "damaged Parquet file %s: row group %d cannot be read: %s"
                             % (path, group, error_line(error))) from None
    value = table.column(0)[entry.offset - start].as_py()
    failure, data = _failure(value, is_struct, entry.offset, float("inf"))
    if failure:
        raise failure
    if len(data) != entry.size:
        raise ImageError("changed", "row %d of %s holds %d bytes, %d when it was read: the file was replaced"
                         % (entry.offset, path, len(data), entry.size))
    return data


def kept_text(value):
    """A value kept beside a row (`keep`), as the index holds it: a str, or None when null.

    Numbers are str(value); bytes are decoded as UTF-8 (errors replaced); a list of one value is that
    value, any other list (or a struct) its JSON text.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return kept_text(value[0])
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=_json_value, ensure_ascii=False)
    return str(value)


def _json_value(value):
    return bytes(value).decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)


def _open(stream, path):
    """pyarrow's ParquetFile over `stream` (its footer read); ImageError "corrupt" when it is not Parquet."""
    import pyarrow.parquet as pq
    try:
        return pq.ParquetFile(stream, buffer_size=BUFFER_BYTES, pre_buffer=False, page_checksum_verification=True)
    except (ObjectChanged, StoreUnavailable, ImageError):
        raise
    except Exception as error:
        raise ImageError("corrupt", "%s is not a Parquet file: %s" % (path, error_line(error))) from None


def _columns(schema, path, image_column, keep):
    """(the image column's name, whether it is a struct, the key column's name or None) of a file's
    arrow `schema`; ValueError (one line, naming the file) when there is no image column or a kept one
    is absent."""
    import pyarrow as pa
    names = schema.names

    def binary(kind):
        return pa.types.is_binary(kind) or pa.types.is_large_binary(kind)

    def struct(kind):
        return (pa.types.is_struct(kind) and kind.get_field_index(IMAGE_STRUCT_FIELD) >= 0
                and binary(kind.field(IMAGE_STRUCT_FIELD).type))

    if image_column is None:
        image = next((name for name in IMAGE_COLUMNS if name in names and (
            binary(schema.field(name).type) or struct(schema.field(name).type))), None)
        if image is None:
            raise ValueError("%s has no image column (a binary column %s, or %r as datasets' Image feature writes "
                             "it); its columns: %s: pass --image-column NAME"
                             % (path, ", ".join(IMAGE_COLUMNS[1:]), IMAGE_COLUMNS[0], ", ".join(names)))
    else:
        image = image_column
        if image not in names:
            raise ValueError("%s has no column %r (--image-column); its columns: %s" % (path, image, ", ".join(names)))
        kind = schema.field(image).type
        if not (binary(kind) or struct(kind)):
            raise ValueError("%s: the column %r is neither binary nor a struct with a binary %r field (its type: %s)"
                             % (path, image, IMAGE_STRUCT_FIELD, kind))
    absent = [name for name in keep if name not in names]
    if absent:
        raise ValueError("%s has no column %s to keep; its columns: %s"
                         % (path, ", ".join(map(repr, absent)), ", ".join(names)))
    return image, pa.types.is_struct(schema.field(image).type), KEY_COLUMN if KEY_COLUMN in names else None

