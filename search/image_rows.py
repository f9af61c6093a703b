"""An image file given as a query that is one of the indexed output's images, unchanged: its row answers.

    rows = ImageRows(index)                            # the output's manifest is read once, on first need
    row, why = rows.row("photos/cats/01.jpg")          # (int, None), or (None, why it must be computed)

Computing an image through the model takes seconds (the model is built and its weights read); its row
in the index holds the same features, when the file is the one the row was computed from. That is
proven as the job proves it on a rerun (parallel/inputs/manifest.py): the file's resolved path lies
under the output's recorded images folder (`settings["images"]`), its path relative to it is a row of
the index, and its size and modification time are those the output's manifest
(`<output>.manifest.parquet`) records for it. What cannot be proven (no manifest, a changed file, a
folder of tars or of a store) is computed again, as before.

Imports parallel.inputs.manifest (which imports no TensorFlow and no engine), never the engine.
"""

import os
import stat
from pathlib import Path

from parallel.inputs.manifest import Manifest, manifest_path
from parallel.locations import is_url

SHARDS_SUFFIX = ".shards"  # search/vectors.py: a kept <output>.shards/ folder; its manifest is <output>'s


class ImageRows:
    """The rows of an index that image files are, checked against the indexed output's manifest (read once)."""

    def __init__(self, index):
        """
        Args:
          index: a loaded `search.index.Index`.
        """
        self._index = index
        self._manifest = None  # {path: (size, mtime_ns)}, read on first need

    def row(self, file):
        """The index's row of the image `file` (str or Path), when the file is that row's image, unchanged.

        Returns:
          (row, None) when its row answers; (None, why) when it must be computed: a short reason.
        """
        settings = self._index.settings
        root = settings.get("images")
        if not isinstance(root, str) or not root or is_url(root) or settings.get("input") == "tars":
            return None, "the indexed output's images are not a folder of files"
        keys = _keys_under(file, Path(root))
        if not keys:
            return None, "not under the indexed images folder %s" % root
        rows = [(key, self._row(key)) for key in keys]
        key, row = next(((key, row) for key, row in rows if row is not None), (keys[0], None))
        if row is None:
            return None, "%s is not a row of the index" % key
        recorded = self._recorded().get(key)
        if recorded is None:
            return None, "the output's manifest does not record %s: it cannot be proven unchanged" % key
        try:
            status = os.stat(file)
        except OSError as error:
            return None, "cannot stat it (%s)" % (error.strerror or error)
        if not stat.S_ISREG(status.st_mode) or -1 in recorded or (status.st_size, status.st_mtime_ns) != recorded:
            return None, "changed since its row %s was computed (size or modification time)" % key
        return row, None

    def _row(self, key):
        try:
            return self._index.row(key)
        except ValueError:
            return None

    def _recorded(self):
        """{path: (size, mtime_ns)} of the indexed output's manifest; {} when it has none or it is damaged."""
        if self._manifest is None:
            manifest = read_manifest(self._index)
            self._manifest = {} if manifest is None or manifest.etags is not None else dict(
                zip(manifest.paths, zip(manifest.sizes, manifest.mtimes)))
        return self._manifest


def job_output(index):
    """The output of the job `index` was built from (str): its recorded output, or for a kept <output>.shards/
    folder, its output, beside which the job's files are (the manifest, the members index)."""
    output = index.meta["source"]["output"]
    return output[:-len(SHARDS_SUFFIX)] if output.endswith(SHARDS_SUFFIX) else output


def read_manifest(index):
    """The Manifest of the output `index` was built from (`<output>.manifest.parquet`), or None when it has none,
    or it is damaged or unreadable: then nothing can be proven from it."""
    try:
        return Manifest.load(manifest_path(job_output(index)))
    except (ValueError, OSError):  # damaged (DamagedManifest) or unreadable
        return None


def _keys_under(file, root):
    """The paths of `file` relative to `root` with "/" separators, as the output keys its rows: the file
    resolved, and the file in its resolved folder (a link in the images folder is a row read through the
    link); [] when neither is under `root`."""
    file = Path(file)
    keys = []
    for candidate in (file.resolve(), file.absolute().parent.resolve() / file.name):
        try:
            key = candidate.relative_to(root).as_posix()
        except ValueError:
            continue
        if key not in keys:
            keys.append(key)
    return keys
