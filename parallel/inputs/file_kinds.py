"""The kinds of files of images --images takes (tars, Parquet and TFRecord files), told by a name's ending or
a file's first bytes; and a folder holding such files instead of images.

    file_kind("data/000.parquet")            -> PARQUET (TARS: .tar; TFRECORD: .tfrecord, .tfrecords, .tfrec, .gz)
    sniff("imagenet/train-00000-of-01024")   -> TFRECORD, by its first bytes (PARQUET, TARS too)
    files_instead_of_images("img2dataset/")  -> (PARQUET, its Parquet files), when it holds no image
    no_image_at("s3://b/pq/", names)         -> the line refusing a prefix of no image, naming the pattern
                                                of the files it holds instead
"""

import os
import shlex

from parallel.inputs import remote
from parallel.inputs.discovery import has_image_extension
from parallel.locations import is_url
from parallel.messages import counted

TARS, PARQUET, TFRECORD = "tars", "parquet", "tfrecord"
STREAMED = (TARS, PARQUET, TFRECORD)  # files read front to back, their images found as they are read
_SUFFIXES = {TARS: (".tar",), PARQUET: (".parquet",),
             TFRECORD: (".tfrecord", ".tfrecords", ".tfrec", ".tfrecord.gz", ".tfrecords.gz", ".tfrec.gz")}
_NAMES = {TARS: "tar", PARQUET: "Parquet file", TFRECORD: "TFRecord file"}


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


def files_instead_of_images(folder, value, own=None):
    """The files of a folder that holds no image but tars, Parquet or TFRecord files (by their endings): those
    the pattern 'folder/**/*.parquet' names.

    Its tree is walked until its first image (at once, for a folder of images), as `parallel.inputs.discovery`
    walks it (not into symlinked folders); as a glob, it takes no file under a hidden name (.cache/).

    Args:
      folder: the folder's path.
      value: the folder as given, for the messages.
      own: the job's output (an absolute path), whose files (it, and <own>.* beside it) are never its images.

    Returns:
      (kind, [absolute paths]), or None: it holds an image, or none of those files.

    Raises:
      ValueError: it holds no image and files of more than one kind: the line names the pattern of each.
    """
    found, below = {}, {}  # kind: [its files]; kind: whether one of them is in a folder under `folder`
    pending = [(folder, False)]  # a folder to list, and whether its path has a hidden name
    while pending:
        current, hidden = pending.pop()
        try:
            entries = os.scandir(current)
        except OSError:
            continue  # what cannot be listed holds no image the job could have either
        with entries:
            for entry in entries:
                path = os.path.abspath(entry.path)
                if own is not None and (path == own or path.startswith(own + ".")):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, hidden or entry.name.startswith(".")))
                        continue
                except OSError:
                    continue
                if has_image_extension(entry.name):
                    return None
                kind = file_kind(entry.name)
                if kind is not None and not (hidden or entry.name.startswith(".")):
                    found.setdefault(kind, []).append(path)
                    below[kind] = below.get(kind, False) or current != folder
    if len(found) > 1:
        raise ValueError("images=%s holds no image, and %s: a job reads files of one kind: pass %s" % (
            value, " and ".join(counted(len(found[kind]), _NAMES[kind]) for kind in sorted(found)),
            " or ".join("images=%s" % pattern_of(value, found[kind], below[kind]) for kind in sorted(found))))
    return next(iter(found.items()), None)


def no_image_at(prefix, names):
    """The line refusing a store's `prefix` (a URL ending in "/") that holds no image object: when `names` (the
    objects under it, relative to it) hold tars, Parquet or TFRecord files, it says so and names the pattern that
    takes them (one kind per job: the pattern of each), as a folder of them would be taken."""
    found = {}
    for name in names:
        kind = file_kind(name)
        if kind is not None and not any(part.startswith(".") for part in name.split("/")):
            found.setdefault(kind, []).append(name)
    if not found:
        return "images=%s holds no image: no object under it has an image extension" % prefix
    return "images=%s holds no image but %s: pass %s" % (
        prefix, " and ".join(counted(len(found[kind]), _NAMES[kind]) for kind in sorted(found)),
        " or ".join("images=%s" % pattern_of(prefix.rstrip("/"), found[kind], any("/" in name for name in found[kind]))
                    for kind in sorted(found)))


def pattern_of(folder, files, below):
    """The quoted pattern naming `files` under `folder` (as given): 'photos/*.parquet', or
    'photos/**/*.parquet' when some are `below` it, in its folders; each ending they have."""
    suffixes = sorted({max((suffix for suffixes in _SUFFIXES.values() for suffix in suffixes
                            if name.lower().endswith(suffix)), key=len) for name in files})
    ending = suffixes[0] if len(suffixes) == 1 else "{%s}" % ",".join(suffixes)
    return shlex.quote(os.path.join(folder, "**" if below else "", "*" + ending))


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
