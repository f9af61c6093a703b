"""Where a job's images are: what `--images` names, and the manifest of what is there now.

    parse_images(values)   -> Source: a folder, an object-store prefix, or files: tar shards, Parquet or TFRecord files
    source.scan(exclude)   -> Manifest of its images (a folder, a prefix) or of its files, sorted

What --images takes (one value, or several files):

    photos/                        a folder: every image under it; keys relative to it (as always)
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

Files of one kind are one job's: tars and Parquet files together are refused (one line).

Several values are taken only when each is a tar (or a pattern of tars): a folder among them is
refused with one line saying so. Tars are the job's inputs in sorted order (absolute paths, or
URLs), grouped into shards by the job layer (parallel.inputs.tars gives their members and keys). What a
job records as its images (`Source.description`) is the folder or prefix, or, for tars, their
count, first, last and a digest of the whole list: the quoted pattern and its expansion by the
shell are one job.

Usage errors, each one line (ValueError) before anything is written: a URL of a scheme that is not
a store read here (ftp://: parallel.inputs.remote.SCHEMES); a glob that matches no tar (each glob
must match one at least); tars of which none exists (a mistyped tar, a pattern whose every name
is missing: `scan`); a prefix under which no object has an image extension (`scan`), as an empty
folder is. A pattern some of whose names exist keeps the others as `missing` images (a gap in a
numbered series is a fact about the data, not a typo).
"""

import dataclasses
import glob
import hashlib
import os
import re
from pathlib import Path

from parallel.inputs import remote
from parallel.inputs.discovery import has_image_extension
from parallel.inputs.locations import describe_all
from parallel.inputs.manifest import Manifest
from parallel.locations import is_url
from parallel.messages import counted

FOLDER, PREFIX, TARS, PARQUET, TFRECORD = "folder", "prefix", "tars", "parquet", "tfrecord"
STREAMED = (TARS, PARQUET, TFRECORD)  # files read front to back, their images found as they are read
_SUFFIXES = {TARS: (".tar",), PARQUET: (".parquet",),
             TFRECORD: (".tfrecord", ".tfrecords", ".tfrec", ".tfrecord.gz", ".tfrecords.gz", ".tfrec.gz")}
_NAMES = {TARS: "tar", PARQUET: "Parquet file", TFRECORD: "TFRecord file"}
_RANGE = re.compile(r"\{(-?\d+)\.\.(-?\d+)\}")
_GLOB = re.compile(r"[*?\[]")


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
          ValueError: a prefix holds no image object, or none of the tars exists (or can be
            described: the line says why of the first).
        """
        if self.kind == FOLDER:
            return Manifest.scan(self.root, exclude)
        if self.kind == PREFIX:
            entries = remote.list_objects(self.root, has_image_extension)
            if not entries:
                raise ValueError("images=%s holds no image: no object under it has an image extension" % self.root)
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


def files_name(kind):
    """What one file of a STREAMED `kind` is called in a message: "tar", "Parquet file", "TFRecord file"."""
    return _NAMES[kind]


def file_kind(value):
    """The kind of file --images `value` names (or a pattern of: braces, a glob), by its name's ending:
    TARS (.tar), PARQUET (.parquet), TFRECORD (.tfrecord, .tfrecords, .tfrec, each maybe .gz); else None."""
    name = str(value).lower()
    return next((kind for kind, suffixes in _SUFFIXES.items() if name.endswith(suffixes)), None)


def is_tar(value):
    """Whether --images `value` names a tar, or a pattern (braces, a glob) of tars: it ends in .tar."""
    return file_kind(value) == TARS


def parse_images(values):
    """The Source that --images `values` names (see the module docstring).

    Args:
      values: str or Path, or a list of them (several tars).

    Raises:
      ValueError: no value, several values that are not all tars, a tar path holding "::", a
        pattern or glob that names no tar, a URL of a scheme not read here, a folder that does
        not exist, or a file (the message points to images_from=, which lists images).
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
    if len(values) == 1 and file_kind(values[0]) is None and not _names_files(values[0]):
        value = values[0]
        if is_url(value):
            return Source(PREFIX, value if value.endswith("/") else value + "/")
        return Source(FOLDER, str(Path(image_folder(value)).resolve()))
    expanded = {}  # a value of no known ending: the files it names, listed once (a store's glob is a listing)
    named = {value: file_kind(value) or _sniffed(value, expanded) for value in values}
    others = [value for value, kind in named.items() if kind is None]
    if len(values) == 1 and others and os.path.isfile(values[0]):
        raise ValueError("images=%s is a file, not a folder: to compute some images, list their paths in a "
                         "text file, one a line, and give it as images_from=" % values[0])
    if others:
        raise ValueError("images= takes one folder or prefix, or files (tars, Parquet, TFRecord); got %s, of "
                         "which %s is not a .tar, .parquet or .tfrecord, nor a file of one by its first bytes: "
                         "quote a pattern (--images 'shards/{000..099}.tar') and give one folder"
                         % (counted(len(values), "value"), others[0]))
    kinds = sorted(set(named.values()))
    if len(kinds) > 1:
        raise ValueError("images= takes files of one kind; got %s and %s" % (_NAMES[kinds[0]] + "s",
                                                                            _NAMES[kinds[1]] + "s"))
    kind = kinds[0]
    files = sorted({name for value in values for name in expanded.get(value) or _expand(value, kind)})
    if not files:
        raise ValueError("images=%s names no %s" % (" ".join(values), _NAMES[kind]))
    odd = [name for name in files if "::" in name]
    if odd:
        raise ValueError("images=%s: a %s whose path holds '::' cannot be keyed (<kind>://<member>::<file>); "
                         "rename it" % (odd[0], _NAMES[kind]))
    return Source(kind, "", tuple(files))


def _names_files(value):
    """Whether --images `value`, of no known ending, may name files: it is a local file, or a pattern
    (braces, a glob) of them."""
    if not is_url(value) and os.path.exists(value):  # a folder named "photos [2019]" is a folder
        return os.path.isfile(value)
    return "{" in value or bool(_GLOB.search(value.split("://", 1)[-1]))


def _sniffed(value, expanded):
    """The kind of the files `value` (of no known ending) names, by the first bytes of the first that exists
    (TensorFlow's ImageNet files are named train-00000-of-01024); None when it is none of STREAMED. The files
    it names are put in `expanded` ({value: [file]}), not to be listed again."""
    if not _names_files(value):
        return None
    expanded[value] = _expand(value, None)
    for name in expanded[value]:
        if is_url(name) or os.path.isfile(name):
            return sniff(name)
    return None


def sniff(location):
    """The kind of the file at `location` (a path or a URL) by its first bytes: PARQUET ("PAR1"), TARS
    (ustar), TFRECORD (a first record's length whose masked CRC-32C holds, maybe GZIP); None else, or when it
    cannot be read."""
    import zlib
    try:
        if is_url(location):
            head = remote.fetch(location, 0, 512)
        else:
            with open(location, "rb") as file:
                head = file.read(512)
    except (OSError, remote.ImageError):
        return None
    if head[:4] == b"PAR1":
        return PARQUET
    if head[257:262] == b"ustar":
        return TARS
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 12)
        except zlib.error:
            return None
    from parallel.inputs.tfrecord_stream import masked_crc
    if len(head) >= 12 and masked_crc(head[:8]) == int.from_bytes(head[8:12], "little"):
        return TFRECORD
    return None


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


def _expand(value, kind=TARS):
    """The files `value` names: itself, its brace expansion, or its glob's matches (absolute paths, or URLs).

    Raises:
      ValueError: a glob matches no file.
    """
    names = expand_braces(value)
    found = []
    for name in names:
        if _GLOB.search(name.split("://", 1)[-1]):
            matches = _glob(name)
            if not matches:
                raise ValueError("images=%s names no %s: the glob %s matches none" % (value, _NAMES.get(kind, "file"),
                                                                                      name))
            found.extend(matches)
        else:
            found.append(name if is_url(name) else os.path.abspath(name))
    return found


def _glob(pattern):
    if not is_url(pattern):
        return [os.path.abspath(path) for path in glob.glob(pattern, recursive=True) if os.path.isfile(path)]
    fs, path = remote.filesystem(pattern)
    fs.invalidate_cache()  # the store now, not an earlier listing of this process
    scheme = remote.scheme(pattern)
    return ["%s://%s" % (scheme, name) for name in fs.glob(path)]


def expand_braces(text):
    """Bash's brace expansion of `text`: {000..099} (zero-padded as written, either direction), {a,b,c}.

    Returns:
      list of str, in the order bash gives them.
    """
    start = text.find("{")
    while start != -1:
        stop = text.find("}", start)
        if stop == -1:
            break
        inner = text[start + 1:stop]
        head, tail = text[:start], text[stop + 1:]
        numbers = _RANGE.fullmatch(text[start:stop + 1])
        if numbers:
            first, last = numbers.group(1), numbers.group(2)
            width = max(len(first), len(last)) if first.lstrip("-").startswith("0") or \
                last.lstrip("-").startswith("0") else 0
            step = 1 if int(last) >= int(first) else -1
            choices = [str(number).zfill(width) for number in range(int(first), int(last) + step, step)]
        elif "," in inner:
            choices = inner.split(",")
        else:
            start = text.find("{", stop)
            continue
        return [expanded for choice in choices for expanded in expand_braces(head + choice + tail)]
    return [text]
