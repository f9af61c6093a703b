"""Files read front to back as streams of images, behind one call: tars, Parquet files, TFRecord files.

    stream_images(kind, path, index, version=None, image_column=None, keep=())
                                 -> (key, bytes or ImageError), ... of one file, in its order; index grows
    check_first(kind, paths, versions=(), sizes=(), image_column=None, keep=())
                                 ValueError (one line) when the first file that exists is not of `kind`,
                                 has no image column, or lacks a kept column (a mistake, before any work)
    member_reader(keys, index=None, image_column=None)
                                 -> callable(key) -> bytes or ImageError, for `parallel.extract`

A job over such files (`parallel.inputs.sources.STREAMED`) reads each file once, in shards of whole
files; each image's key names the file and the image in it, and its index entry (parallel.inputs.tars.Entry)
says where it is, so that it is read back later (`parallel.inputs.tars.read_member`) without the
file being read again:

    kind      key                          read back                           module
    tars      tar://<member>::<tar>        one byte range                      parallel.inputs.tar_stream
    parquet   parquet://<id>::<file>       its row group's image column        parallel.inputs.parquet_stream
    tfrecord  tfrecord://<id>::<file>      one byte range (GZIP: a read from   parallel.inputs.tfrecord_stream
                                           the start to it)

<id> is the dataset's own key (Parquet's "key" column, a TFRecord's "key" or "image/filename"
feature) or "#<n>", the row's or record's number in its file: see each module.
"""

from parallel.inputs.decode import ImageError
from parallel.inputs.members import KEY_PREFIX, PARQUET_PREFIX, TFRECORD_PREFIX, is_member, split_key, split_piece
from parallel.inputs.remote import ObjectChanged
from parallel.inputs.sources import PARQUET, TARS, TFRECORD
from parallel.inputs.tars import read_index, read_member

_KINDS = {KEY_PREFIX: TARS, PARQUET_PREFIX: PARQUET, TFRECORD_PREFIX: TFRECORD}


def stream_images(kind, path, index, version=None, image_column=None, keep=()):
    """The images of the file at `path` (an absolute path or a URL) of `kind` (TARS, PARQUET, TFRECORD).

    Args:
      kind: the Source's kind.
      path, index, version: as `parallel.inputs.tar_stream.stream_members`.
      image_column: Parquet's column or TFRecord's feature of the images (None: found by name; tars: None).
      keep: names of the values kept in each Entry (a tar sample's sibling members by extension, columns,
        features).

    Yields:
      (key, data): data bytes, or an ImageError (the image's, or the file's under the file's path).
    """
    if kind == TARS:
        from parallel.inputs.tar_stream import stream_members
        return stream_members(path, index, version=version, keep=keep)
    if kind == PARQUET:
        from parallel.inputs.parquet_stream import stream_rows
        return stream_rows(path, index, version=version, image_column=image_column, keep=keep)
    if kind == TFRECORD:
        from parallel.inputs.tfrecord_stream import stream_records
        return stream_records(path, index, version=version, image_column=image_column, keep=keep)
    raise ValueError("kind must be one of %s, %s, %s; got %r" % (TARS, PARQUET, TFRECORD, kind))


def check_first(kind, paths, versions=(), sizes=(), image_column=None, keep=()):
    """Refuses, before any work, files that a job over them would fail whole: the first one that exists
    (`sizes` >= 0; all when not given) is opened and looked at (a footer, the first record).

    Raises:
      ValueError: one line naming the file: not a Parquet or TFRecord file, no image column (the
        columns it has), a column of `keep` it lacks.
    """
    existing = [position for position, size in enumerate(sizes) if size >= 0] if sizes else range(len(paths))
    position = next(iter(existing), None)
    if kind == TARS or position is None:
        return
    version = versions[position] if versions else None
    if kind == PARQUET:
        from parallel.inputs.parquet_stream import check_file
    else:
        from parallel.inputs.tfrecord_stream import check_file
    try:
        check_file(split_piece(paths[position])[0], version=version or None, image_column=image_column, keep=keep)
    except ObjectChanged:  # replaced since it was listed: its shard's read says so, and drops what it read
        return


def key_kind(key):
    """The kind of file (TARS, PARQUET, TFRECORD) the member key `key` names an image of."""
    return next(kind for prefix, kind in _KINDS.items() if key.startswith(prefix))


def member_reader(keys, index=None, image_column=None):
    """Reads the images `keys` name, for `parallel.extract`: callable(key) -> bytes, or an ImageError.

    Args:
      keys: member keys (tar://<member>::<tar>, parquet://<id>::<file>, tfrecord://<id>::<file>); other
        items are ignored.
      index: as `read_member` (an output's `<output>.members.parquet`): each is read back by its entry.
        None: each file named is streamed once now, and the images asked for are kept in memory (an
        in-memory call's images), the others passed by.
      image_column: the Parquet column or TFRecord feature of the images (None: found by name).
    """
    wanted = {key for key in keys if isinstance(key, str) and is_member(key)}
    if index is not None:  # only the entries asked for: an output's index may hold millions
        entries = index if isinstance(index, dict) else {entry.key: entry for entry in read_index(index, wanted)}

        def read(key):
            try:
                return read_member(key, entries, image_column=image_column)
            except ValueError as error:  # not in the index: this image fails, not the call
                return ImageError("unreadable", str(error))
        return read
    found = {}
    for kind, path in sorted({(key_kind(key), split_key(key)[1]) for key in wanted}):
        for key, data in stream_images(kind, path, [], image_column=image_column):
            if key in wanted or key == path:  # key == path: the file itself cannot be read
                found[key] = data
    return lambda key: found.get(key, found.get(split_key(key)[1],
                                                ImageError("missing", "%s is not an image of its file" % key)))
