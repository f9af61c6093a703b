"""Files under paths longer than PATH_MAX (4,096 bytes on Linux), made one component at a time."""

import os


def make_deep_folder(root, depth=20):
    """A folder `depth` levels of 250-byte names under `root`: its path is far over PATH_MAX."""
    deep = root
    for _ in range(depth):
        deep = deep / ("d" * 250)
        mkdir_relative(deep)
    return deep


def mkdir_relative(path):
    """mkdir of a path that may be longer than PATH_MAX: relative to an fd of its parent."""
    descriptor = open_folder(path.parent)
    try:
        os.mkdir(path.name, dir_fd=descriptor)
    finally:
        os.close(descriptor)


def write_relative(path, data):
    folder = open_folder(path.parent)
    try:
        descriptor = os.open(path.name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=folder)
        os.write(descriptor, data)
        os.close(descriptor)
    finally:
        os.close(folder)


def open_folder(path):
    """An fd of `path`, walking down from / one component at a time (no PATH_MAX limit)."""
    descriptor = os.open("/", os.O_RDONLY)
    for part in path.parts[1:]:
        child = os.open(part, os.O_RDONLY, dir_fd=descriptor)
        os.close(descriptor)
        descriptor = child
    return descriptor
