"""The images of exported rows as WebDataset tars (img2dataset's layout), written so that a killed export resumes.

    failed = write_tars(index, rows, "subset/", shard_size=10_000)   # {sample: why} of the images not written

The layout: shards `00000.tar`, `00001.tar`, ... of `shard_size` samples each, in the order of the rows given; a
sample's members share its key, the sample's number in the export on 9 digits (`000000001`):

    000000001.jpg    the image's bytes exactly as the output read them (never decoded or re-encoded): the
                     extension is its format's (JPEG .jpg, PNG .png, WebP .webp, ...), read from its header
    000000001.txt    each value kept beside the row (`run_inference.py --keep txt,json`), as a member named
                     by it, UTF-8
    000000001.json   unless a value named json is kept: {"key": the row's key, "row": its row in the index}

So `run_inference.py --images 'subset/*.tar'` reads the export as a job's input, each image the bytes the
indexed row was computed from: a job with the same model and settings gives the same features.

Each image is read back as the service reads it (search/indexed_images.py): only when it is proven the image
indexed (inside the images folder, unchanged since, as the output's manifest records; a member by its entry in
the output's members index; an object at its recorded ETag). One that cannot be is not written: it is named
in the record and on stderr, and its sample number is left out (the numbers of the others do not move).

Resumable as a job is: each tar is written to `<name>.tmp`, fsync'ed and renamed, and then recorded in
`_export.json` (written atomically, with the SHA-256 of its own content): the export's identity (the keys of
its rows, in order, and the shard size) and each finished tar's size and SHA-256. A rerun with the same rows
checks each recorded tar against its digest and writes only the tars it cannot prove; a record for other rows
is refused (a usage error), a damaged one is not trusted (every tar written again).
"""

import hashlib
import io
import json
import tarfile
from pathlib import Path

from parallel.output.durable import file_digest, fsync, replace_atomically, temporary_then_rename
from search.kinds import SearchError

RECORD = "_export.json"
SHARD_SIZE = 10_000      # samples a tar: img2dataset's default
MAX_IMAGE_BYTES = 1 << 30  # parallel.inputs.decode.MAX_BYTES: what the engine reads at most
_EXTENSIONS = {"image/jpeg": "jpg", "image/png": "png", "image/gif": "gif", "image/bmp": "bmp", "image/tiff": "tif",
               "image/webp": "webp", "image/x-portable-anymap": "ppm"}


def sample_name(number):
    """The key of the export's sample `number` (from 0): 9 digits."""
    return "%09d" % number


def shard_name(number):
    return "%05d.tar" % number


def export_identity(keys, shard_size):
    """The SHA-256 (hex) of the keys exported, in order, and the shard size: what a rerun must match."""
    digest = hashlib.sha256(("%d\n" % shard_size).encode())
    for key in keys:
        digest.update(key.encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()


def write_tars(index, rows, folder, shard_size=SHARD_SIZE, progress=None, say=None):
    """Writes the images of `rows` into `folder` as tars, resuming what a killed export left (module docstring).

    Args:
      index: a loaded `search.index.Index`.
      rows: int64 [S], the rows exported, in order.
      folder: the tars' folder (created).
      shard_size: samples a tar.
      progress: callable(samples done, samples in all, what) or None.
      say: callable(one line) for each image not written, or None.

    Returns:
      {sample name: why} of the images not written.

    Raises:
      SearchError: `folder` holds the tars of another export (before anything is written).
    """
    from search.indexed_images import IndexedImages
    from search.queries import Kept, members_index
    if not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError("shard_size=%r; expected a whole number of at least 1" % (shard_size,))
    folder = Path(folder)
    identity = export_identity((index.paths[row] for row in rows), shard_size)
    record = _read_record(folder / RECORD)
    if record is not None and record["identity"] != identity:
        raise SearchError("%s holds the tars of another export (other rows or shard size): remove it, or choose "
                          "another --images-out" % folder)
    if record is None:
        record = {"identity": identity, "shard_size": shard_size, "samples": len(rows), "done": {}}
    folder.mkdir(parents=True, exist_ok=True)
    images = IndexedImages(index, members_index(index))
    names = Kept(index).names
    failed = {}
    for shard, start in enumerate(range(0, len(rows), shard_size)):
        name = shard_name(shard)
        done = record["done"].get(name)
        if done is None or not _proven(folder / name, done):
            record["done"].pop(name, None)
            done = {"failed": _write_tar(folder / name, index, images, names, rows[start:start + shard_size],
                                         start)}
            done["bytes"], done["sha256"] = file_digest(folder / name)
            fsync(folder)
            record["done"][name] = done
            _write_record(folder / RECORD, record)
        for sample, why in done["failed"].items():
            failed[sample] = why
            if say:
                say("sample %s (%s) not written: %s" % (sample, index.paths[rows[int(sample)]], why))
        if progress:
            progress(min(len(rows), start + shard_size), len(rows), "images")
    return failed


def _write_tar(path, index, images, names, rows, first):
    """Writes one tar of the samples of `rows` (the first numbered `first`); {sample name: why} of those not."""
    from search.indexed_images import Changed, TooLarge, image_type
    keys = [index.paths[row] for row in rows]
    kept = images.member_entries(keys)  # one read of the members index for the tar: entries and kept values
    failed = {}
    with temporary_then_rename(path) as temporary:
        with tarfile.open(temporary, "w", format=tarfile.PAX_FORMAT) as tar:
            for offset, (row, key) in enumerate(zip(rows.tolist(), keys)):
                sample = sample_name(first + offset)
                try:
                    data = images.read_image(key, MAX_IMAGE_BYTES, entries=kept)
                    extension = _EXTENSIONS[image_type(data)]
                except TooLarge:
                    failed[sample] = "larger than %d bytes" % MAX_IMAGE_BYTES
                    continue
                except (Changed, OSError, ValueError, KeyError) as error:
                    failed[sample] = str(error).splitlines()[0] if str(error) else type(error).__name__
                    continue
                members = [(extension, data)]
                entry = kept.get(key)
                values = dict(zip(names, entry.kept)) if entry is not None and entry.kept else {}
                members += [(name, value.encode("utf-8", "surrogateescape")) for name, value in values.items()
                            if value is not None]
                if "json" not in names:
                    members.append(("json", json.dumps({"key": key, "row": row}, ensure_ascii=False).encode(
                        "utf-8", "surrogateescape")))
                for extension, content in members:
                    info = tarfile.TarInfo("%s.%s" % (sample, extension))
                    info.size, info.mode, info.mtime = len(content), 0o644, 0
                    tar.addfile(info, io.BytesIO(content))
    return failed


def _proven(path, done):
    """Whether the tar at `path` is the one recorded (its size and SHA-256)."""
    try:
        return list(file_digest(path)) == [done["bytes"], done["sha256"]]
    except OSError:
        return False


def _read_record(path):
    """The export's record at `path`, or None when there is none or it is damaged (then nothing is trusted)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        checksum = record.pop("checksum")
        if checksum != _checksum(record) or not isinstance(record.get("done"), dict):
            return None
        return record
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return None


def _write_record(path, record):
    replace_atomically(path, (json.dumps(dict(record, checksum=_checksum(record)), indent=1) + "\n").encode("utf-8"))


def _checksum(record):
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode("utf-8")).hexdigest()

