"""Tar shards (WebDataset, img2dataset): their members' keys, the index of a shard, a member read back by range.

The index and the read back serve the rows of Parquet and TFRecord files too (parallel.inputs.streamed): their
keys and entries are parallel.inputs.members', as a tar member's are.

    member_key("a/0001.jpg", "s3://b/shards/000007.tar") -> "tar://a/0001.jpg::s3://b/shards/000007.tar"
    write_index(path, entries) / read_index(path)          the index of a shard: MEMBERS_FILE
    read_member(key, index)      -> the member's bytes, by one byte range (no tar read again)

A tar is read once, front to back, by parallel.inputs.tar_stream, which gives each image member its
key and its index entry (an Entry: where its bytes are in the tar); the index is written beside the
shard's rows, so that any member is read back later by one byte range, the tar not read again.

The key of a member names the tar and the member: fsspec's chained form
`tar://<member>::<tar>`, where <tar> is the absolute path or the URL of the tar. It is split at
its LAST "::", so a member's name may hold "::" and a tar's path may not (such a tar is refused
when the job starts). fsspec opens the key as it is (`fsspec.open(key)`; it reads the tar's
headers to find the member); `read_member` reads it by one byte range from the index.
"""

import itertools
import os

from parallel.inputs.members import (  # noqa: F401 (the keys' names, as they always were imported from here)
    KEPT_PREFIX, KEY_PREFIX, KEY_PREFIXES, PARQUET_PREFIX, TFRECORD_PREFIX, Entry, is_member, member_key, split_key,
    split_piece)
from parallel.inputs.remote import fetch
from parallel.locations import is_url

MEMBERS_FILE = "_members.parquet"  # "_": readers of a Parquet folder skip it
MEMBERS_SUFFIX = ".members.parquet"  # an output's index of every member: <output>.members.parquet
INDEX_ROW_GROUP = 65536  # rows of an index read at once when a few keys are looked up (`read_index`)


def write_index(path, entries, keep=()):
    """Writes a shard's index (Parquet: key, key_bytes, offset, size, then a string column KEPT_PREFIX + name
    for each of the names `keep`, from each Entry's `kept`; one row per Entry, in stream order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    raw = [entry.key.encode("utf-8", "surrogateescape") for entry in entries]
    columns = {"key": pa.array([value.decode("utf-8", "backslashreplace") for value in raw], pa.string()),
               "key_bytes": pa.array(raw, pa.binary()),
               "offset": pa.array([entry.offset for entry in entries], pa.int64()),
               "size": pa.array([entry.size for entry in entries], pa.int64())}
    for position, name in enumerate(keep):
        columns[KEPT_PREFIX + name] = pa.array([entry.kept[position] if entry.kept else None for entry in entries],
                                               pa.string())
    pq.write_table(pa.table(columns), path, row_group_size=INDEX_ROW_GROUP)


def kept_names(path):
    """The names kept (`--keep`) in the index at `path`, in order (its KEPT_PREFIX columns)."""
    import pyarrow.parquet as pq
    return tuple(name[len(KEPT_PREFIX):] for name in pq.read_schema(path).names if name.startswith(KEPT_PREFIX))


def read_index(path, keys=None):
    """The entries of the index at `path` (a shard's MEMBERS_FILE, or an output's O.members.parquet);
    only those of `keys` (an iterable of keys) when given, so a few are found without holding all: the
    keys are read a row group at a time (INDEX_ROW_GROUP rows), a group's other columns (offsets, values
    kept) only when it holds one of them."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    kept = [KEPT_PREFIX + name for name in kept_names(path)]
    columns = ["key_bytes", "offset", "size"] + kept
    if keys is None:
        return _entries(pq.read_table(path, columns=columns), kept)
    wanted = pa.array([key.encode("utf-8", "surrogateescape") for key in keys], pa.binary())
    entries = []
    with pq.ParquetFile(path) as file:
        for group in range(file.num_row_groups):
            found = pc.is_in(file.read_row_group(group, columns=["key_bytes"]).column(0), value_set=wanted)
            if pc.any(found).as_py():
                entries += _entries(file.read_row_group(group, columns=columns).filter(found), kept)
    return entries


def _entries(table, kept):
    """The Entry of each row of `table` (an index's columns key_bytes, offset, size and the `kept` ones)."""
    values = list(zip(*(table.column(name).to_pylist() for name in kept))) if kept else itertools.repeat(())
    return [Entry(raw.decode("utf-8", "surrogateescape"), offset, size, tuple(row))
            for raw, offset, size, row in zip(table.column("key_bytes").to_pylist(), table.column("offset").to_pylist(),
                                              table.column("size").to_pylist(), values)]


def index_keys(path, tars=None):
    """The keys of the index at `path`, in order; only those of the files `tars` (a set of a shard's manifest
    names: tars, files, or pieces of a file, `members.piece_path`, whose rows are those its range holds) when given."""
    import pyarrow.parquet as pq
    pieces = {}  # file -> [(start, stop)] of its pieces among `tars`
    for name in tars or ():
        file, start, stop = split_piece(name)
        if start is not None:
            pieces.setdefault(file, []).append((start, stop))
    table = pq.read_table(path, columns=["key_bytes"] + (["offset"] if pieces else []))  # a piece's: its rows
    keys = [raw.decode("utf-8", "surrogateescape") for raw in table.column("key_bytes").to_pylist()]
    if tars is None:
        return keys

    def ours(key, offset):
        if key in tars:
            return True
        if not is_member(key):
            return False
        file = split_key(key)[1]
        return file in tars or any(start <= offset < stop for start, stop in pieces.get(file, ()))
    offsets = table.column("offset").to_pylist() if pieces else [None] * len(keys)
    return [key for key, offset in zip(keys, offsets) if ours(key, offset)]


def merge_indexes(paths, target):
    """Writes the indexes at `paths`, one after the other, as one index at `target`, durably."""
    from parallel.output.durable import fsync
    entries = [entry for path in paths for entry in read_index(path)]
    temporary = target.with_name(target.name + ".tmp")
    write_index(temporary, entries, kept_names(paths[0]) if paths else ())
    fsync(temporary)
    os.replace(temporary, target)
    fsync(target.parent)


def read_member(key, index, image_column=None):
    """The bytes of one tar member, read by one byte range: the tar is not read again; or of one row of a
    Parquet or TFRecord file, read back by its index entry (parallel.inputs.streamed says how).

        from parallel.inputs.tars import read_member
        data = read_member("tar://a/0001.jpg::s3://b/shards/000007.tar", "feats.parquet.members.parquet")
        image = PIL.Image.open(io.BytesIO(data))

    Args:
      key: a member's key, as the output's rows name it.
      index: the path of an index (the output's `<output>.members.parquet`, or a kept shard's
        _members.parquet), or a {key: Entry} already read (`{e.key: e for e in read_index(path)}`).
      image_column: for a row of a Parquet or TFRecord file, the job's image column (None: found by name).

    Returns:
      bytes.

    Raises:
      ValueError: `key` is not in the index, or not a readable member.
      ImageError: the file cannot be read (kind as `parallel.inputs.remote.fetch`).
    """
    _, tar = split_key(key)
    entries = index if isinstance(index, dict) else {entry.key: entry for entry in read_index(index, [key])}
    entry = entries.get(key)
    if entry is None or entry.size < 0:
        raise ValueError("%s is not a member in the index %s" % (key, "given" if isinstance(index, dict) else index))
    if key.startswith(PARQUET_PREFIX):
        from parallel.inputs.parquet_stream import read_row
        return read_row(key, entry, image_column=image_column)
    if key.startswith(TFRECORD_PREFIX):
        from parallel.inputs.tfrecord_stream import read_record
        return read_record(key, entry, image_column=image_column)
    if is_url(tar):
        return fetch(tar, entry.offset, entry.offset + entry.size)
    with open(tar, "rb") as file:
        file.seek(entry.offset)
        return file.read(entry.size)
