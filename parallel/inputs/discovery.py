"""Discovery: the image files under a folder, each with its size and modification time.

Every file whose extension is one of IMAGE_EXTENSIONS (any case), walked with
`os.fwalk`, which opens each folder relative to its parent: a path longer than the system's
limit (PATH_MAX, 4096 bytes on Linux) is still found, and then fails as `unreadable` when it is
read, instead of vanishing. A symlinked folder is not descended (no loops, no duplicates); a
symlink to a file is an image, read through the link; a broken link or a link loop is found
too (size and time -1) and fails when read. `exclude` keeps the program's own files (an output
inside the images folder, its sidecars) from ever being taken for images.
"""

import array
import logging
import os
import stat

log = logging.getLogger("parallel")

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp",
                              ".ppm", ".pgm", ".pbm", ".pnm"})


def has_image_extension(name):
    """Whether the file name `name` ends with one of IMAGE_EXTENSIONS, in any case."""
    return os.path.splitext(name)[1].lower() in IMAGE_EXTENSIONS


def walk(root, exclude):
    """(paths, sizes, mtimes) of the image files under `root`, in the order found.

    Args: as `parallel.inputs.manifest.scan_images`.
    """
    # Three compact columns, not a tuple per image: a million images fit in a few hundred MB.
    paths, sizes, mtimes = [], array.array("q"), array.array("q")
    for path, size, mtime in iter_images(root, exclude):
        paths.append(path)
        sizes.append(size)
        mtimes.append(mtime)
    return paths, sizes, mtimes


def iter_images(root, exclude):
    """Yields (path, size, mtime_ns) of each image file under `root`, in the order found (see `walk`).

    Raises:
      ValueError: `root` is not a folder (before the first item).
    """
    top = os.fspath(root)
    if not os.path.isdir(top):
        raise ValueError("%s is not a folder" % (root,))
    return _walking(top, frozenset(exclude))


def _walking(top, exclude):
    def skip(error):
        log.warning("cannot list %s under %s (%s); skipping the images in it",
                    error.filename, top, error.strerror or error)

    for folder, folders, names, descriptor in os.fwalk(top, onerror=skip):
        relative = os.path.relpath(folder, top)
        prefix = "" if relative == os.curdir else relative.replace(os.sep, "/") + "/"
        folders[:] = [name for name in folders if prefix + name not in exclude]
        for name in names:
            path = prefix + name
            if has_image_extension(name) and path not in exclude:
                yield (path,) + size_and_time(name, descriptor)


def size_and_time(name, folder_descriptor):
    """(size, mtime_ns) of `name` (relative to the folder `folder_descriptor`, or a path when None)."""
    try:
        status = os.stat(name, dir_fd=folder_descriptor)  # through a link: the image is its target
    except OSError:
        return -1, -1  # a broken link or a loop: reading it reports the failure
    if not stat.S_ISREG(status.st_mode):
        return -1, -1  # a FIFO, a device: never opened, fails as not_a_file
    return status.st_size, status.st_mtime_ns


def discover_images(root, exclude=()):
    """Every image file under `root`, recursively, as sorted relative paths (see
    `parallel.inputs.manifest.scan_images`).

    Returns:
      list of str: paths relative to `root` with "/" separators, sorted.

    Raises:
      ValueError: `root` is not a folder.
    """
    return sorted(walk(root, exclude)[0])
