"""The keys and index entries of images found in files read as streams: tars, Parquet files, TFRecord files.

    member_key("a/0001.jpg", "s3://b/shards/000007.tar") -> "tar://a/0001.jpg::s3://b/shards/000007.tar"
    split_key(key) -> (member, file)      is_member(key) -> bool      Entry(key, offset, size, kept)

Each image's key names its file and where in it the image is: fsspec's chained form for a tar's member
(tar://<member>::<tar>), and the same form for a Parquet file's row (parquet://<id>::<file>) and a
TFRecord file's record (tfrecord://<id>::<file>). A key is split at its LAST "::", so a member's
name may hold "::" and a file's path may not (such a file is refused when the job starts).

The standard library only: the readers of each kind (parallel.inputs.tar_stream, parquet_stream,
tfrecord_stream) and the index (parallel.inputs.tars) import it, and it imports none of them.
"""

import dataclasses

KEY_PREFIX = "tar://"  # every member's key starts so (`member_key`)
PARQUET_PREFIX = "parquet://"  # a row of a Parquet file: parallel.inputs.parquet_stream
TFRECORD_PREFIX = "tfrecord://"  # a record of a TFRecord file: parallel.inputs.tfrecord_stream
KEY_PREFIXES = (KEY_PREFIX, PARQUET_PREFIX, TFRECORD_PREFIX)
KEPT_PREFIX = "kept:"  # an index's column of the values kept beside its members (`--keep`)
_SEPARATOR = "::"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One line of a shard's index: where an image is in its file (a tar's member, a row, a record).

    Attributes:
      key: the member's key (`member_key`), or the file's path or URL for a failure of the file.
      offset: where the member's data starts in the tar (for a damaged tar, where the damage is); a
        Parquet row's number in its file; where a TFRecord's record starts (parallel.inputs.streamed).
      size: the member's size in bytes; -1 for a failure of the file.
      kept: the values kept beside it (`--keep`: a sibling member's text, a column's or a feature's
        value), a str or None each, in the order of the names kept; () when nothing is kept.
    """

    key: str
    offset: int
    size: int
    kept: tuple = ()


def member_key(member, tar):
    """The key of `member` (its name in the tar) of the tar at `tar` (an absolute path or a URL)."""
    return "%s%s%s%s" % (KEY_PREFIX, member, _SEPARATOR, tar)


def is_member(key):
    """Whether `key` names an image of a file read as a stream (a tar's member tar://<member>::<tar>, a
    Parquet file's row parquet://<id>::<file>, a TFRecord's record tfrecord://<id>::<file>), not a file
    that could not be read."""
    return key.startswith(KEY_PREFIXES) and _SEPARATOR in key


def split_key(key):
    """(member, file) of a member's key (the part between the prefix and the last "::", and the tar's or
    file's path or URL); ValueError when `key` is not one."""
    prefix = next((prefix for prefix in KEY_PREFIXES if key.startswith(prefix)), None)
    if prefix is None or _SEPARATOR not in key:
        raise ValueError("%r is not the key of a tar member (tar://<member>::<tar>) nor of a row "
                         "(parquet://<id>::<file>, tfrecord://<id>::<file>)" % (key,))
    member, tar = key[len(prefix):].rsplit(_SEPARATOR, 1)
    return member, tar


PIECE_MARK = "::rows="  # a manifest's piece of a file: <file>::rows=<start>-<stop> (a file's path never holds "::")


def piece_path(path, start, stop):
    """The manifest's name of the rows [start, stop) of the file at `path`: a shard of a large Parquet file."""
    return "%s%s%d-%d" % (path, PIECE_MARK, start, stop)


def split_piece(name):
    """(the file's path, start, stop) of a piece's name (`piece_path`); (name, None, None) for a whole file."""
    path, mark, rows = name.rpartition(PIECE_MARK)
    if not mark:
        return name, None, None
    start, _, stop = rows.partition("-")
    return path, int(start), int(stop)
