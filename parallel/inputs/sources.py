"""Where a job's images are: what `--images` names, and the manifest of what is there now.

    parse_images(values)   -> Source: a folder, an object-store prefix, or files: tar shards, Parquet or TFRecord files
    source.scan(exclude)   -> Manifest of its images (a folder, a prefix) or of its files, sorted

What --images takes (one value, or several files):

    photos/                        a folder: every image under it; keys relative to it (as always)
    img2dataset-output/            a folder holding no image but files of one kind below (00000.parquet,
                                   00000_stats.json, ...): those files, as 'img2dataset-output/**/*.parquet'
    s3://bucket/photos/            a prefix of a store: every object with an image extension under
                                   it, in sorted order; keys relative to the prefix, like a folder's
                                   ("a/b.jpg"), so a folder uploaded to a prefix gives the same rows
    shards/000000.tar              one tar, a path or a URL (s3://b/shards/000000.tar)
    'shards/{000000..000099}.tar'  a brace pattern: numeric ranges {000..099} (zero-padded as
                                   written) and lists {a,b}; names that do not exist fail as missing
    'shards/*.tar'                 a glob (local, or in a store: s3://b/shards/*.tar)
    shards/000000.tar shards/...   several tars: what the shell passes when it expands an unquoted
                                   pattern; the same job as the quoted pattern (the same tars)
    shards/index.json              a webdataset (wids) shard index, a path or a URL: the tars its
                                   "shardlist" names ("url", relative to the index's folder or
                                   absolute), without listing the store; the same job as those tars
    data/train-*.parquet           Parquet files whose rows hold images (datasets' Image column, img2dataset's
                                   jpg): one, a brace pattern, a glob, several, as tars (parallel.inputs.parquet_stream)
    'data/{0..9}.tfrecord'         TFRecord files of tf.train.Example (.tfrecord, .tfrecords, .tfrec, maybe .gz;
                                   plain or GZIP), likewise (parallel.inputs.tfrecord_stream)
    'imagenet/train-*'             files of none of those endings (TensorFlow's ImageNet: train-00000-of-01024):
                                   a file or a pattern is taken by the first bytes of its first file (`sniff`)

Files of one kind are one job's: tars and Parquet files together are refused (one line), named
by values or by a pattern ('data/*' over a Parquet file and a tar), or in a folder of no image.

Several values are taken only when each is a tar (or a pattern of tars): a folder among them is
refused with one line saying so, and so are two folders (a row's key is its path in its folder).
Tars are the job's inputs in sorted order (absolute paths, or URLs), grouped into shards by the job
layer (parallel.inputs.tars gives their members and keys). What a job records as its images
(`Source.description`) is the folder or prefix, or, for tars, their count, first, last and a digest
of the whole list: the quoted pattern and its expansion by the shell (and --images given twice) are
one job.

Usage errors, each one line (ValueError) before anything is written: a URL of a scheme that is not
a store read here (ftp://: parallel.inputs.remote.SCHEMES); a glob that matches no tar (each glob
must match one at least); tars of which none exists (a mistyped tar, a pattern whose every name
is missing: `scan`); a prefix under which no object has an image extension (`scan`), as an empty
folder is. A pattern some of whose names exist keeps the others as `missing` images (a gap in a
numbered series is a fact about the data, not a typo).
"""

import dataclasses
import hashlib
import os
from pathlib import Path

from parallel.inputs import remote
from parallel.inputs.discovery import has_image_extension
from parallel.inputs.file_kinds import (  # noqa: F401 (STREAMED, file_kind, is_tar, files_name: named here too)
    _NAMES, PARQUET, STREAMED, TARS, TFRECORD, file_kind, files_instead_of_images, files_name, is_tar, no_image_at,
    sniff)
from parallel.inputs.locations import describe_all
from parallel.inputs.manifest import Manifest
from parallel.inputs.patterns import expand, names_files
from parallel.locations import is_url
from parallel.messages import counted


FOLDER, PREFIX = "folder", "prefix"


@dataclasses.dataclass(frozen=True)
class Source:
    """What --images names.

    Attributes:
      kind: FOLDER, PREFIX, or one of STREAMED: TARS, PARQUET, TFRECORD.
      root: the folder (resolved), or the prefix (a URL ending in "/"); for files read as streams, "".
      files: for STREAMED kinds, the files' absolute paths or URLs, sorted; else ().
    """

    kind: str
    root: str
    files: tuple = ()

    @property
    def streamed(self):
        """Whether its images are those of files read front to back (tars, Parquet, TFRecord files)."""
        return self.kind in STREAMED

    @property
    def description(self):
        """What the job's settings record as its images (see the module docstring)."""
        if not self.streamed:
            return self.root
        digest = hashlib.sha256("\n".join(self.files).encode("utf-8", "surrogateescape")).hexdigest()[:16]
        if len(self.files) == 1:
            return self.files[0]
        return "%d %ss %s .. %s (list %s)" % (len(self.files), _NAMES[self.kind], self.files[0], self.files[-1],
                                             digest)

    def scan(self, exclude=()):
        """The Manifest of the images (a folder, a prefix) or of the tars (TARS) as they are now.

        For objects of a store and tars in one, each one's ETag is recorded (`Manifest.etags`):
        the version a read asks for when it is handed it (ImageReader's `versions`,
        stream_members's `version`: parallel.inputs.remote).

        Raises:
          ValueError: a prefix holds no image object (the line names the pattern of the tars, Parquet or
            TFRecord files it holds instead), or none of the tars exists (or can be
            described: the line says why of the first).
        """
        if self.kind == FOLDER:
            return Manifest.scan(self.root, exclude)
        if self.kind == PREFIX:
            listed = remote.list_objects(self.root, lambda name: has_image_extension(name) or file_kind(name))
            entries = [entry for entry in listed if has_image_extension(entry[0])]
            if not entries:  # of tars, Parquet or TFRecord files instead, the pattern that takes them
                raise ValueError(no_image_at(self.root, [entry[0] for entry in listed]))
        else:
            entries = [(tar,) + tuple(described) for tar, described in zip(self.files, describe_all(self.files))]
            if all(size < 0 for _, size, _, _ in entries):
                raise ValueError("images=%s names no %s that exists: %s" % (self.description, _NAMES[self.kind],
                                                                           _why_not(self.files[0])))
            if self.kind == PARQUET:  # a large file: pieces of its row groups, shards of their own
                entries = [piece for entry in entries for piece in _pieces(*entry)]
        return Manifest([entry[0] for entry in entries], [entry[1] for entry in entries],
                        [entry[2] for entry in entries], [entry[3] for entry in entries])


def _pieces(path, size, mtime, etag):
    """The manifest's entries of the Parquet file at `path`: itself, or when it holds more than PIECE_BYTES,
    its pieces of whole row groups (`parquet_stream.pieces`), each with its file's time and version."""
    from parallel.inputs import parquet_stream
    if size <= parquet_stream.PIECE_BYTES:
        return [(path, size, mtime, etag)]
    names = parquet_stream.pieces(path, etag or None)
    share = -(-size // len(names))  # a piece's share of the file, for the shards' grouping by size
    return [(name, share if len(names) > 1 else size, mtime, etag) for name in names]


def _why_not(tar):
    """Why the tar at `tar` (a path or a URL) cannot be described: one line."""
    if not is_url(tar):
        return "%s: %s" % (tar, "no such file" if not os.path.lexists(tar) else "not a readable file")
    try:
        remote.details(tar)
    except remote.ImageError as error:
        return "%s: %s" % (tar, error.message)
    return "%s: gone while it was described" % tar


def parse_images(values, folder_of_files=True, own=None):
    """The Source that --images `values` names (see the module docstring).

    Args:
      values: str or Path, or a list of them (several tars).
      folder_of_files: a local folder holding no image but files of one kind of STREAMED, anywhere under
        it (img2dataset's output folder: 00000.parquet, 00000_stats.json, ...), names those files, as the
        pattern 'folder/**/*.parquet' would; False: it is a folder (with images_from=, the folder the
        list's paths start from).
      own: the job's output (an absolute path), whose files are never those of a folder.

    Raises:
      ValueError: no value, several values that are not all tars, a tar path holding "::", a
        pattern or glob that names no tar, files of two kinds (by their endings, or first bytes), a
        URL of a scheme not read here, a folder that does not exist, a folder holding no image but
        files of several kinds, or a file (the message points to images_from=, which lists images).
    """
    if isinstance(values, (str, os.PathLike)):
        values = [values]
    values = [os.fspath(value) for value in values]
    if not values:
        raise ValueError("images= names nothing; give a folder, a prefix (s3://bucket/photos/) or tars")
    for value in values:
        _check_url(value)
    if len(values) == 1 and values[0].lower().endswith(".json"):
        values = wids_tars(values[0])
    if len(values) == 1 and file_kind(values[0]) is None and not names_files(values[0]):
        value = values[0]
        if is_url(value):
            return Source(PREFIX, value if value.endswith("/") else value + "/")
        folder = str(Path(image_folder(value)).resolve())
        found = files_instead_of_images(folder, value, own) if folder_of_files else None
        return Source(FOLDER, folder) if found is None else _files_source(*found)
    expanded = {}  # a value of no known ending: the files it names, listed once (a store's glob is a listing)
    named = {value: file_kind(value) or _sniffed(value, expanded) for value in values}
    others = [value for value, kind in named.items() if kind is None]
    if len(values) == 1 and others and os.path.isfile(values[0]):
        raise ValueError("images=%s is a file, not a folder: to compute some images, list their paths in a "
                         "text file, one a line, and give it as images_from=" % values[0])
    if others and all(not is_url(value) and os.path.isdir(value) for value in others) and len(others) > 1:
        raise ValueError("images= takes one folder; got %s: %s (a row's key is its path in the folder): give the "
                         "folder that holds them, or list their images' paths in a text file, one a line, and give "
                         "it as images_from=" % (counted(len(others), "folder"), ", ".join(others)))
    if others:
        raise ValueError("images= takes one folder or prefix, or files (tars, Parquet, TFRecord); got %s, of "
                         "which %s is not a .tar, .parquet or .tfrecord, nor a file of one by its first bytes: "
                         "quote a pattern (--images 'shards/{000..099}.tar') and give one folder"
                         % (counted(len(values), "value"), others[0]))
    _one_kind("images=", {kind: value for value, kind in reversed(named.items())})
    kind = next(iter(named.values()))
    files = {name for value in values for name in expanded.get(value) or expand(value, _NAMES[kind])}
    if not files:
        raise ValueError("images=%s names no %s" % (" ".join(values), _NAMES[kind]))
    return _files_source(kind, files)


def _files_source(kind, files):
    """The Source of `files` (paths or URLs) of `kind`, sorted.

    Raises:
      ValueError: a file's path holds "::" (a key could not be split).
    """
    files = sorted(files)
    odd = [name for name in files if "::" in name]
    if odd:
        raise ValueError("images=%s: a %s whose path holds '::' cannot be keyed (<kind>://<member>::<file>); "
                         "rename it" % (odd[0], _NAMES[kind]))
    return Source(kind, "", tuple(files))


def _one_kind(what, kinds):
    """ValueError unless `kinds` ({kind: a value or file of it}) holds one kind at most; `what` begins the line."""
    if len(kinds) > 1:
        (first, one), (second, other) = sorted(kinds.items())[:2]
        raise ValueError("%s takes files of one kind; got %ss and %ss (%s, %s)" % (
            what, _NAMES[first], _NAMES[second], one, other))


def _sniffed(value, expanded):
    """The kind of the files `value` (of no known ending) names: by their endings, and those of none by the
    first bytes of the first that exists (TensorFlow's ImageNet files are named train-00000-of-01024); None
    when they are none of STREAMED. The files it names are put in `expanded` ({value: [file]}), not to be
    listed again.

    Raises:
      ValueError: they are files of two kinds ('data/*' over a Parquet file and a tar).
    """
    if not names_files(value):
        return None
    expanded[value] = sorted(expand(value))
    kinds, unknown = {}, None  # kind: its first file; the first file of no known ending that exists
    for name in expanded[value]:
        kind = file_kind(name)
        if kind is not None:
            kinds.setdefault(kind, name)
        elif unknown is None and (is_url(name) or os.path.isfile(name)):
            unknown = name
    kind = sniff(unknown) if unknown is not None else None
    if kind is not None:
        kinds.setdefault(kind, unknown)
    _one_kind("images=%s" % value, kinds)
    return next(iter(kinds), None)


def wids_tars(index):
    """The tars of the webdataset (wids) shard index at `index` (a path or a URL), as --images values.

    A wids index is JSON: {"__kind__": "wids-shard-index-v1", "shardlist": [{"url": ..., "nsamples": ...},
    ...]}; a relative "url" is relative to the index's folder, as wids resolves it.

    Raises:
      ValueError: the index cannot be read, is not such JSON, or names something other than tars.
    """
    import json
    try:
        data = remote.fetch(index) if is_url(index) else Path(index).read_bytes()
        shards = json.loads(data)["shardlist"]
        urls = [shard["url"] for shard in shards]
    except (OSError, ValueError, KeyError, TypeError, remote.ImageError) as error:
        raise ValueError("images=%s is not a readable wids shard index (JSON with a \"shardlist\" of "
                         "{\"url\": ...}): %s" % (index, error)) from None
    base = index.rsplit("/", 1)[0] if is_url(index) else os.path.dirname(os.path.abspath(index))
    tars = [url if is_url(url) or os.path.isabs(url) else base + "/" + url for url in urls]
    for tar in tars:
        _check_url(tar)
    others = [tar for tar in tars if not is_tar(tar)]
    if not tars or others:
        raise ValueError("images=%s: a wids index of tars is taken; it names %s" % (
            index, "no shard" if not tars else others[0]))
    return tars


def image_folder(value):
    """`value` (a str or a PathLike), once it is known to name a folder.

    Raises:
      ValueError: it does not: "images=VALUE is not a folder", VALUE as given (a trailing / kept),
        which the command line prints as "--images VALUE is not a folder".
    """
    if not os.path.isdir(value):
        raise ValueError("images=%s is not a folder" % os.fspath(value))
    return value


def _check_url(value):
    """ValueError (one line, naming `value`) when `value` is a URL of a scheme not read here."""
    if is_url(value):
        try:
            remote.check_scheme(value)
        except ValueError as error:
            raise ValueError("images=%s" % error) from None
