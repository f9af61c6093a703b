"""Fault injection for tests: nodes that are not regular files, failing or crashing file operations,
and a disk that fills up."""

import errno
import os
import shutil
import stat
import subprocess

import pytest

NODE_KINDS = {"fifo": "a FIFO", "character device": "a character device", "symbolic link": "a symbolic link"}


@pytest.fixture
def make_node():
    """make_node(path, kind, target) puts something that is not a regular file at `path` (a link
    points to `target`). A FIFO is held open for writing until the test ends, so that code
    opening it to read fails the test instead of blocking it for ever."""
    descriptors = []

    def make(path, kind, target):
        if kind == "fifo":
            os.mkfifo(path)
            descriptors.append(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        elif kind == "character device":
            if os.geteuid() != 0:
                pytest.skip("os.mknod of a character device needs root")
            os.mknod(path, stat.S_IFCHR | 0o666, os.stat("/dev/null").st_rdev)  # a copy of /dev/null
        else:
            path.symlink_to(target)
    yield make
    for descriptor in descriptors:
        os.close(descriptor)


def in_place_of(path, kind, make_node, elsewhere, link_to_folder=False):
    """Puts `kind` (one of NODE_KINDS, or "folder") at `path`, once a regular file or folder there is moved
    away. A link points to an image in `elsewhere` (made here, holding precious.jpg: an input the test keeps
    an eye on), or to `elsewhere` itself with `link_to_folder`. Returns what a refusal calls it."""
    elsewhere.mkdir(exist_ok=True)
    (elsewhere / "precious.jpg").write_bytes(b"\xff\xd8 a photo")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if kind == "folder":
        path.mkdir()
        return "a folder"
    make_node(path, kind, elsewhere if link_to_folder else elsewhere / "precious.jpg")
    return NODE_KINDS[kind]


def failing(real, error_number, after):
    """`real`, raising OSError(error_number) from its call number `after` + 1 on."""
    calls = {"count": 0}

    def call(*args, **kwargs):
        calls["count"] += 1
        if calls["count"] > after:
            raise OSError(error_number, os.strerror(error_number))
        return real(*args, **kwargs)
    return call


class Crash(Exception):
    """Stands for SIGKILL: raised just before the n-th file operation."""


class CrashingModule:
    """Wraps `os` or `shutil` as the writer sees it, crashing before operation number `crash_at`."""

    OPERATIONS = {"open", "write", "fsync", "replace", "ftruncate", "unlink", "link", "rmtree", "copyfile"}

    def __init__(self, module, counter):
        self._module = module
        self._counter = counter

    def __getattr__(self, name):
        real = getattr(self._module, name)
        if name not in self.OPERATIONS:
            return real

        def operation(*args, **kwargs):
            self._counter["done"] += 1
            if self._counter["done"] >= self._counter["crash_at"]:  # a dead process does nothing more
                raise Crash(name)
            return real(*args, **kwargs)
        return operation


def crash_file_operations(patch, modules, counter):
    """Wraps `os` and `shutil` as each of `modules` sees them in CrashingModules sharing `counter`.

    Args:
      patch: a pytest MonkeyPatch (or its context), which undoes the wrapping.
      modules: the modules whose file operations may crash.
      counter: {"done": operations so far, "crash_at": the operation that crashes}.
    """
    for module in modules:
        for name in ("os", "shutil"):
            if hasattr(module, name):
                patch.setattr(module, name, CrashingModule(getattr(module, name), counter))


class TmpfsDisk:
    """A tmpfs that the test mounted: full is full (ENOSPC from write(), SIGBUS from a store
    through a memory map), whichever library writes."""

    real = True

    def __init__(self, folder):
        self.folder = folder
        self._ballast = folder / "ballast"

    def leave_free(self, free_bytes):
        """Fills the file system with a ballast file until `free_bytes` (whole pages) are free."""
        status = os.statvfs(self.folder)
        with open(self._ballast, "wb") as file:
            file.write(bytes(status.f_bavail * status.f_frsize - free_bytes))
        status = os.statvfs(self.folder)
        assert status.f_bavail * status.f_frsize == free_bytes

    def free_space(self):
        self._ballast.unlink()


class SimulatedDisk:
    """Without root or tmpfs: os.write fails with ENOSPC once `free_bytes` have been written.
    Only the writer's own writes go through os.write (npy, not pyarrow nor Python file objects)."""

    real = False

    def __init__(self, folder, monkeypatch):
        self.folder = folder
        self._monkeypatch = monkeypatch

    def leave_free(self, free_bytes):
        free = {"bytes": free_bytes}
        real_write = os.write

        def write(descriptor, data):
            if free["bytes"] <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written = real_write(descriptor, memoryview(data)[:free["bytes"]])
            free["bytes"] -= written
            return written
        self._monkeypatch.setattr(os, "write", write)

    def free_space(self):
        self._monkeypatch.undo()


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    """A folder on a file system of its own that a test can fill: a 1 MiB tmpfs, else a SimulatedDisk."""
    folder = tmp_path / "small"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)]
    if os.geteuid() != 0 or not shutil.which("mount") or subprocess.run(mount, capture_output=True).returncode:
        yield SimulatedDisk(folder, monkeypatch)
        return
    try:
        yield TmpfsDisk(folder)
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode:
            subprocess.run(["umount", "--lazy", str(folder)], check=True)
            pytest.fail("umount %s failed: a file on it was left open" % folder)
