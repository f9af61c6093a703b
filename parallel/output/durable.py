"""Durable file operations: what survives a crash or a SIGKILL, and what is never replaced.

    with temporary_then_rename(path) as temporary:   # a library writes `temporary` by name
        write(temporary)
    fsync(path.parent)                               # the rename is durable once the folder is

    replace_atomically(path, data)                   # small files (the commit record): all or nothing

A file written this way is either the whole old content or the whole new one. Only regular
files are replaced or removed: `refuse_unless` stops at a device, a FIFO, a socket, a folder or
a symbolic link under an output's name, before anything is touched.

Standard library only, so that anything may write durably without loading the output
layer's dependencies (the weights download in `models/` uses it).
"""

import errno
import os
import stat
import tempfile

TEMPORARY_SUFFIX = ".tmp"
REGULAR_FILE = "a regular file"
FOLDER = "a folder"
_FILE_KINDS = ((stat.S_ISREG, REGULAR_FILE), (stat.S_ISDIR, FOLDER), (stat.S_ISLNK, "a symbolic link"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISSOCK, "a socket"))


class OutputError(ValueError):
    """The output cannot be written or resumed; the message is one line saying what to do."""


class OtherSettings(OutputError):
    """An output's commit record names other settings than the run's (`record.check_settings`)."""


class DamagedOutput(OutputError):
    """An output's files are not what its commit record says (cut, changed, a part missing): it cannot be resumed
    as it is. A job whose ledger proves the output its own starts it afresh (`parallel.jobs.assembly`)."""


def beside(path, suffix):
    """The file named `path` + `suffix` (`out.csv` -> `out.csv.run.json`), in the same folder.

    Args:
      path: Path.
      suffix: str appended to the name.
    """
    return path.with_name(path.name + suffix)


def fsync(path):
    """Makes a file's data, or a folder's entries, durable: a rename or a new file is durable
    only once the folder holding it is synced."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_all(descriptor, data):
    """Writes all of `data` (bytes, or a C-contiguous array as its raw bytes): a full disk is an OSError."""
    view = memoryview(data).cast("B")  # byte offsets, also for a 2-D array
    while view:
        written = os.write(descriptor, view)
        view = view[written:]


def replace_atomically(path, data):
    """Replaces the file `path` (a Path) by `data` (bytes): all of the old content or all of the new.

    Written to `<path>.tmp`, synced, renamed over `path`, and the folder synced: durable on return.
    """
    temporary = beside(path, TEMPORARY_SUFFIX)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    os.replace(temporary, path)
    fsync(path.parent)


def new_file_mode():
    """The mode of a file created now: 0o666 less the process's umask (0o644 under the usual 0o022).

    Read from /proc/self/status where the system says it (Linux), without changing it; else by setting
    it and back (to 0o022 meanwhile, never to 0, for a file another thread creates at that moment).
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


class temporary_then_rename:
    """`with temporary_then_rename(path) as temporary:` write `temporary`; on success it is
    fsync'ed and renamed over `path` (atomic), on an exception removed. The folder is not
    synced: the caller does, once for all the files it renamed. The file has the mode of a
    file created now (`new_file_mode`: 0o644 under the usual umask), whatever the temporary
    had: mkstemp's 0o600, or a library's own (safetensors writes 0o600).

    Args:
      path: Path of the file to write.
      unique: False: the temporary file is `<path>.tmp`, and a leftover of a killed run is
        removed first (one writer per output). True: a new file `<name>.<random>.tmp` beside
        `path`, created here (mode 0o600 while it is written), for writers that may run at
        once (two processes filling one cache); an OSError of its creation is raised here.
    """

    def __init__(self, path, unique=False):
        self._path = path
        self._unique = unique
        if unique:
            descriptor, name = tempfile.mkstemp(prefix=path.name + ".", suffix=TEMPORARY_SUFFIX, dir=path.parent)
            os.close(descriptor)
            self._temporary = path.with_name(os.path.basename(name))
        else:
            self._temporary = beside(path, TEMPORARY_SUFFIX)

    def __enter__(self):
        if not self._unique:
            remove(self._temporary)
        return self._temporary

    def __exit__(self, kind, value, traceback):
        try:
            if kind is None:
                os.chmod(self._temporary, new_file_mode())
                fsync(self._temporary)
                os.replace(self._temporary, self._path)
                return
        except BaseException:  # OSError, or a KeyboardInterrupt (a signal) during the rename
            self._discard()
            raise
        self._discard()

    def _discard(self):
        try:
            remove(self._temporary)
        except OSError:
            pass  # the error that brought us here matters more


def file_digest(path):
    """(size in bytes, SHA-256 hex) of the local file `path`: what a commit records of a file, and checks
    before the file is trusted again."""
    import hashlib
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return os.path.getsize(path), digest.hexdigest()


def remove(path):
    """Removes the file `path`; a missing file is not an error."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def is_disk_full(error):
    """Whether the exception `error` is a full disk or an exhausted quota."""
    return getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT)


def refuse_unless(path, allowed, advice):
    """Raises OutputError unless `path` is missing or is `allowed` (REGULAR_FILE or FOLDER).

    A symbolic link is never followed: replacing or removing it, or what it points to, could
    destroy a file that is not this program's (an input image, a device node).

    Args:
      path: Path to inspect.
      allowed: REGULAR_FILE or FOLDER.
      advice: str, what the user should do, ending the message.

    Returns:
      `allowed`, or None when nothing is at `path`.
    """
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise OutputError("cannot inspect %s: %s: %s" % (path, error.strerror, advice)) from error
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    if kind != allowed:
        raise OutputError("%s is %s; not replacing it: %s" % (path, kind, advice))
    return kind
