"""The job protocol's rules, written once for every source (a folder, a list, a prefix, tars) and every
output (a local file, an object in a store), on one process or many (see `parallel.jobs`).

    before_writing(config)      every check a run makes before it writes or removes anything; the
        -> weights              weights, loaded (a bad weights file is a usage error, found here)
    refuse_output_among_inputs  the output is none of the files or objects the job reads: an image,
                                a tar, the list file, the weights, a wids index
    refuse_what_it_cannot_replace
                                no name the job writes or removes (its output, a file or folder beside
                                it) is held by a FIFO, a link, a device, a socket, or a folder for a file;
                                and its folder takes new files (`refuse_unwritable`)
    read_locations(config)      those files and objects, with the flag that names each

A run that fails one of these checks has written and removed nothing, whatever its flags
(--overwrite included): so its corrected rerun is the same job, and no input is ever destroyed.
"""

import os
import tempfile
from pathlib import Path

from parallel.inputs.discovery import has_image_extension
from parallel.inputs.sources import PREFIX
from parallel.jobs.shards import JOB_FILES, JOB_FOLDERS  # the names --overwrite removes: one list
from parallel.locations import is_url
from parallel.output import OutputError
from parallel.output.durable import FOLDER, REGULAR_FILE, refuse_unless


def read_locations(config):
    """Every file or object the job reads, but the images of a folder (`identity.refuse_output_among_images`
    checks those, however the job names them).

    Args:
      config: the job's Config.

    Returns:
      list of (flag, location): location a local path (str) or a URL.
    """
    images = config.images if isinstance(config.images, (list, tuple)) else [config.images]
    found = [("images", os.fspath(value)) for value in images if is_url(os.fspath(value))
             or os.path.isfile(os.fspath(value))]  # a tar, or a wids index: a folder is never an output
    if config.source.streamed:
        found += [("images", tar) for tar in config.source.files]
    if config.images_from is not None:
        found.append(("images_from", os.fspath(config.images_from)))
    found += [("weights", os.fspath(path)) for path in config.model.files]
    return found


def refuse_output_among_inputs(config):
    """OutputError (one line) when the output is a file or object the job reads.

    A local output is compared with each local input by its absolute and resolved path and, when
    both exist, by identity (a hard link); a store output with each URL. An output in a store under
    the job's prefix, with an image extension, would be one of its images.
    """
    output = os.fspath(config.output)
    for flag, location in read_locations(config):
        if _same(output, location):
            raise OutputError("output=%s is what %s= names (%s), which the job reads: choose another output"
                              % (output, flag, location))
    if config.source.kind == PREFIX and is_url(output) and output.startswith(config.source.root) \
            and has_image_extension(output):
        raise OutputError("output=%s is an image under images=%s, which the job reads: choose another output"
                          % (output, config.source.root))


def _same(first, second):
    """Whether two locations (paths or URLs) name the same file or object."""
    if is_url(first) or is_url(second):
        return is_url(first) and is_url(second) and first.rstrip("/") == second.rstrip("/")
    if os.path.abspath(first) == os.path.abspath(second) or os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


def refuse_what_it_cannot_replace(config):
    """OutputError (one line) when a name the job writes, replaces or removes is held by what it must not touch.

    Those names are the output O and the files beside it (O.run.json, O.errors.csv, O.paths.csv,
    O.manifest.parquet, O.members.parquet, O.text.parquet), each a regular file or nothing, and its folders (O.parts,
    O.shards, O.attempts), each a real folder or nothing. A FIFO, a device, a socket or a symbolic link
    (never followed: what it points to may be an input) there is refused with or without --overwrite,
    which would not replace it either; found only once the job had been computed, it would stop the
    run with the job's files written (or, --overwrite, the others removed). A store output has none.
    A folder the job cannot write in is refused too (`refuse_unwritable`).
    """
    if is_url(config.output):
        return
    output = Path(config.output)
    if output.is_dir() and not output.is_symlink():
        raise OutputError("output=%s is a folder; give a file name" % output)
    advice = "move it away or choose another --output"
    for suffix in JOB_FILES:
        refuse_unless(Path(str(output) + suffix), REGULAR_FILE, advice)
    for suffix in JOB_FOLDERS:
        refuse_unless(Path(str(output) + suffix), FOLDER, advice)
    refuse_unwritable(output)


def refuse_unwritable(output):
    """OutputError (one line, naming `output` and why) when the job cannot write its files beside `output`.

    They all go in the output's folder (its lock first), created with its parents when missing: the
    nearest folder on the way that exists must take a new file. It is tried by creating an empty
    hidden file in it and removing it, which catches what permissions do not tell (a read-only
    mount; /proc, which refuses new files even to root); a file where a folder is needed is named.

    Args:
      output: Path of a local output.
    """
    folder = output.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError("output=%s cannot be written: %s is %s; choose another output"
                          % (output, folder, "a file, not a folder" if folder.is_file() else "not a folder"))
    try:
        descriptor, probe = tempfile.mkstemp(prefix="." + output.name + ".", suffix=".tmp", dir=folder)
    except OSError as error:
        raise OutputError("output=%s cannot be written: %s takes no new file (%s); choose another output"
                          % (output, folder, error.strerror or error)) from None
    os.close(descriptor)
    os.unlink(probe)


def before_writing(config, load_weights=True):
    """Every check of a run before it writes or removes anything; returns the model's weights.

    The output is none of the job's inputs (`refuse_output_among_inputs`), nothing under its names
    is what the job may not replace (`refuse_what_it_cannot_replace`), a store output's bucket
    can be reached, then the weights are loaded: a bad weights file is a usage error however the
    job runs, found before --overwrite removes an output.

    Args:
      config: the job's Config.
      load_weights: load them (else the caller does, before it writes anything).

    Returns:
      {variable name: array}, the model's weights (`ModelSpec.load_weights()`), or None.

    Raises:
      ValueError (OutputError among them): the run must not start; nothing was written or removed.
    """
    config.source  # noqa: B018 -- what images= names, checked (a ValueError when it names nothing)
    refuse_output_among_inputs(config)
    refuse_what_it_cannot_replace(config)
    if is_url(config.output):  # one request: no bucket, no credentials, no store, before the weights are read
        from parallel.output.stores import open_store
        store, name = open_store(config.output)
        store.check(name)
    return config.model.load_weights() if load_weights else None
