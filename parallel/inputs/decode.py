"""One image file -> uint8 [H, W, 3] RGB pixels, or the reason it cannot be used.

    load_image(path, size=(H, W))                -> uint8 [H, W, 3], or raises ImageError(kind, message)
    decode_row(path, images, row, size, ...)     -> None (images[row] written) or (kind, message); never raises
    decode_bytes_row(data, images, row, ...)     the same for an image's bytes (an object, a tar member)

    one image:
        os.stat checks -> Image.open -> JPEG draft -> pixel limit -> load -> EXIF orientation
        -> first frame -> RGB (transparency over white) -> crop or stretch to (H, W) -> [H, W, 3]

These are the decode rules; parallel.inputs.reader runs `decode_row` on a thread pool, a batch at a time.

Links (which files are found is parallel.inputs.manifest's business): a symlink to a file is read
through the link, even when the target lies outside the folder (a link is how users add a
file); a broken link or a symlink loop fails ("missing", "unreadable"), so that it shows in
the errors file instead of vanishing. A path longer than the system allows fails as
"unreadable".

Failure kinds (`ImageError.kind`, the `kind` column of the errors file):

    missing       gone since discovery, or a broken link
    unreadable    permission denied, a symlink loop, an I/O error
    not_a_file    a FIFO, a device, a socket, a folder: never opened (a FIFO would block)
    empty         0 bytes
    not_an_image  no JPEG, PNG, GIF, BMP, TIFF, WebP or PNM data (text or HTML saved as .jpg)
    too_large     more than `max_pixels` pixels (checked before decoding), or over Pillow's
                  own decompression-bomb limit; a tar member of more than MAX_BYTES bytes (passed
                  by unread: parallel.inputs.tar_stream)
    corrupt       truncated or damaged data, or pixels that cannot be made RGB
    unreachable   the object store did not answer (timeouts, 5xx, throttling) after its retries
                  (parallel.inputs.remote)
    changed       the object in the store was replaced since the job listed it: its recorded
                  version (ETag) is no longer there, so it is not read (parallel.inputs.remote);
                  not tried again in the run

Bytes (an object of a store, a member of a tar) follow the same rules from Image.open on; a
0-byte object is "empty".

Only those formats are tried, whatever the extension says (a PNG named .jpg is read; an EPS
named .jpg is not_an_image, so Ghostscript is never run on a user's file).

Pixels: "RGB" as is; "L", "1", "CMYK" (also Adobe-inverted CMYK and YCCK JPEGs), "YCbCr" via
Pillow's convert; "RGBA", "LA", "PA", and "P"/"L"/"RGB" with a transparent colour are
composited over white (transparent pixels become white, not black). 16-bit rule: 16-bit
data ("I;16", "I;16B", and "I", taken to hold 16-bit values and clipped to 0..65535) keeps
its high byte, `value >> 8`. Floating point ("F") is rounded and clipped to 0..255.

Resize: to (H, W) by a `Resize` (parallel.inputs.resize: the job's mode, its model's filter and short
side), after the EXIF orientation, before transparency is composited over white.

JPEG draft: large JPEGs are decoded at a reduced scale (1/2, 1/4, 1/8) that keeps the short side
>= max(H, W) (224 for VGG), or >= S with a short side S; features of such photos differ slightly
from a full-size decode, deterministically.
"""

import contextlib
import io
import os
import stat
import struct
import threading
import warnings
import zlib

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from parallel.inputs.resize import resize_rule, resized

MAX_PIXELS = 100_000_000
# The bytes of one image held in memory to decode it (a tar member): more is too_large, unread. An
# image within MAX_PIXELS takes at most 8 bytes a pixel uncompressed (16-bit RGBA): 800 MB.
MAX_BYTES = 1 << 30
KINDS = ("missing", "unreadable", "not_a_file", "empty", "not_an_image", "too_large", "corrupt", "unreachable",
         "changed")

# The Pillow formats behind the image extensions of parallel.inputs.manifest
# (MPO, a camera's multi-picture JPEG, opens as JPEG).
IMAGE_FORMATS = ("JPEG", "PNG", "GIF", "BMP", "TIFF", "WEBP", "PPM")
IMAGE_FORMAT_NAMES = "JPEG, PNG, GIF, BMP, TIFF, WebP or PNM"
# What Pillow raises on damaged data, besides its OSError("image file is truncated ...").
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, IndexError, KeyError, TypeError,
                  struct.error, zlib.error)
_MESSAGE_LIMIT = 300
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_ORIENTATION = 0x0112  # EXIF tag
_WHITE = (255, 255, 255)


class ImageError(Exception):
    """One image cannot be used; `kind` says why (see the module docstring), `message` how.

    Attributes:
      kind: one of KINDS.
      message: one line, no traceback; also `str(error)`.
    """

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __str__(self):
        return self.message

    def __reduce__(self):
        return type(self), (self.kind, self.message)


def load_image(path, size=(224, 224), resize="crop", max_pixels=MAX_PIXELS):
    """Decodes one image file to RGB pixels of a fixed size.

    Args:
      path: str or Path of the file (absolute, or relative to the working directory).
      size: (H, W) of the result.
      resize: "crop" (centre square, then resize) or "stretch" (whole image), or a Resize (a
        model's filter and short side: see the module docstring).
      max_pixels: images of more pixels (after JPEG draft) are refused before decoding.

    Returns:
      uint8 [H, W, 3] RGB, as an image viewer shows the file (EXIF orientation applied).

    Raises:
      ImageError: the file cannot be used; its `kind` is one of KINDS.
      ValueError: a bad `size`, `resize` or `max_pixels`.
    """
    size, resize, max_pixels = check_image_arguments(size, resize, max_pixels)
    return np.array(_decode(os.fspath(path), size, resize, max_pixels), dtype=np.uint8)


def decode_row(path, images, row, size, resize, max_pixels):
    """Decodes one image into a row of a batch; what each ImageReader worker runs by default.

    Args:
      path: str, the file (absolute, or relative to the working directory).
      images: uint8 [N, H, W, 3], the batch being filled; only `images[row]` is written.
      row: the index of this image in `images`.
      size: (H, W), as returned by check_image_arguments.
      resize: a Resize, as returned by check_image_arguments (or one of RESIZE_MODES).
      max_pixels: an int >= 1; larger images fail with kind "too_large".

    Returns:
      None when `images[row]` was written, else (kind, message): see failure_of. Never raises,
      so that one bad image is a failure of its own and not of the run.
    """
    try:
        images[row] = np.asarray(_decode(path, size, resize_rule(resize), max_pixels))
        return None
    except Exception as error:  # unexpected ones too: a failure of this image, not of the run
        return failure_of(error)


def decode_bytes_row(data, images, row, size, resize, max_pixels):
    """Decodes one image's bytes into a row of a batch: `decode_row` for bytes, same rules, same result.

    Args:
      data: bytes of the image (an object of a store, a member of a tar), or an ImageError: a
        failure met before decoding (the fetch), returned as (kind, message).
      images, row, size, resize, max_pixels: as decode_row.
    """
    try:
        if isinstance(data, ImageError):
            raise data
        if not len(data):
            raise ImageError("empty", "empty file (0 bytes)")
        with io.BytesIO(data) as file:
            images[row] = np.asarray(_decode_open(file, size, resize_rule(resize), max_pixels))
        return None
    except Exception as error:  # unexpected ones too: a failure of this image, not of the run
        return failure_of(error)


def failure_of(error):
    """The (kind, message) of an exception raised while decoding one image.

    Args:
      error: an ImageError, or any other Exception (unexpected: kind "corrupt", with the
        exception's type and words on one line).

    Returns:
      (kind, message): kind one of KINDS, message one line.
    """
    if isinstance(error, ImageError):
        return error.kind, error.message
    return "corrupt", _one_line("%s: %s" % (type(error).__name__, error))


def check_image_arguments(size, resize, max_pixels):
    """Checks the decode options, as load_image and parallel.inputs.reader.ImageReader take them.

    Args:
      size: (H, W), two integers >= 1.
      resize: one of RESIZE_MODES, or a Resize whose short side (if any) is >= max(H, W).
      max_pixels: an integer >= 1.

    Returns:
      ((H, W), Resize, max_pixels), H, W and max_pixels as Python ints.

    Raises:
      ValueError: a bad argument, named with the value received.
    """
    try:
        height, width = size
    except (TypeError, ValueError):
        raise ValueError("size must be (height, width); got %r" % (size,)) from None
    if not all(isinstance(side, (int, np.integer)) and side >= 1 for side in (height, width)):
        raise ValueError("size must be two positive integers (height, width); got %r" % (size,))
    resize = resize_rule(resize)
    if resize.short_side is not None and resize.short_side < max(height, width):  # the crop must fit in the image
        raise ValueError("resize short side must be at least the larger side of size %r; got %r"
                         % ((height, width), resize.short_side))
    if not isinstance(max_pixels, (int, np.integer)) or max_pixels < 1:
        raise ValueError("max_pixels must be at least 1; got %r" % (max_pixels,))
    return (int(height), int(width)), resize, int(max_pixels)


def _decode(path, size, resize, max_pixels):
    """The RGB PIL image of `path`, resized to `size` = (H, W) by the Resize `resize`; ImageError when it cannot be."""
    with _open_regular_file(path) as file:
        return _decode_open(file, size, resize, max_pixels)


def _decode_open(file, size, resize, max_pixels):
    """The RGB PIL image in the open binary `file`, resized to `size` = (H, W) by the Resize `resize`; ImageError
    when it cannot be."""
    try:
        try:
            with bomb_warnings_silenced():
                image = Image.open(file, formats=IMAGE_FORMATS)
        except UnidentifiedImageError:
            file.seek(0)
            raise ImageError("not_an_image", "not a %s image; it starts with %r"
                             % (IMAGE_FORMAT_NAMES, file.read(16))) from None
        stored_size = image.size
        # Only JPEG implements draft (a no-op for other formats). Asking for a square of
        # the larger target side (or the short side resized to, never less) keeps the short side
        # >= it, whatever the EXIF rotation.
        side = max(size) if resize.short_side is None else resize.short_side
        image.draft("RGB", (side, side))
        pixels = image.size[0] * image.size[1]
        if pixels > max_pixels:
            raise ImageError("too_large", "image of %dx%d pixels%s is more than the limit of %d pixels"
                             % (image.size + (" (decoding JPEG at reduced scale)"
                                              if image.size != stored_size else "", max_pixels)))
        # A GIF frame or TIFF tile can trip Pillow's warning again while loading; only
        # images above Pillow's warning size can, and they are rare, so only they wait.
        may_warn = Image.MAX_IMAGE_PIXELS is not None and pixels > Image.MAX_IMAGE_PIXELS
        with bomb_warnings_silenced() if may_warn else contextlib.nullcontext():
            image.load()  # the first frame of an animation: the frame open() leaves current
        image = _upright(image)
        image = resized(_rgb_or_rgba(image), size, resize)
        if image.mode == "RGBA":  # resized first: Pillow resamples RGBA premultiplied
            opaque = Image.new("RGB", image.size, _WHITE)
            opaque.paste(image, mask=image.getchannel("A"))
            image = opaque
        return image
    except ImageError:
        raise
    except Image.DecompressionBombError as error:
        raise ImageError("too_large", _one_line("refused by Pillow's decompression-bomb check: %s"
                                                % error)) from error
    except MemoryError as error:
        raise ImageError("too_large", "not enough memory to decode it") from error
    except _DECODE_ERRORS as error:
        raise _decode_error(error) from error



def _open_regular_file(path):
    """`path` opened for binary reading, once it is known to be a non-empty regular file.

    os.stat comes first: opening a FIFO would block until a writer appears. The open is
    non-blocking all the same and checked again with fstat, in case the file was replaced
    in between.
    """
    try:
        _check_regular_file(os.stat(path))
        descriptor = os.open(path, _OPEN_FLAGS)
    except OSError as error:
        raise _file_error(path, error) from error
    try:
        _check_regular_file(os.fstat(descriptor))
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _check_regular_file(status):
    mode = status.st_mode
    if stat.S_ISREG(mode):
        if status.st_size == 0:
            raise ImageError("empty", "empty file (0 bytes)")
        return
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            raise ImageError("not_a_file", "%s, not a regular file" % what)
    raise ImageError("not_a_file", "not a regular file (mode %o)" % mode)


def _file_error(path, error):
    """The ImageError of an OSError met while checking or opening `path`."""
    if isinstance(error, (FileNotFoundError, NotADirectoryError)):
        if os.path.islink(path):
            try:
                target = os.readlink(path)
            except OSError:
                target = "?"
            return ImageError("missing", _one_line("broken link: its target %s does not exist" % target))
        return ImageError("missing", "no such file (deleted or moved since it was found)")
    return ImageError("unreadable", _one_line("cannot read it: %s" % (error.strerror or error)))


def _decode_error(error):
    """The ImageError of an exception Pillow raised while decoding."""
    if isinstance(error, OSError) and error.errno is not None:  # the file system, not the data
        return ImageError("unreadable", _one_line("cannot read it: %s" % (error.strerror or error)))
    if isinstance(error, (OSError, SyntaxError)) and str(error):  # Pillow's own words
        return ImageError("corrupt", _one_line(str(error)))
    return ImageError("corrupt", _one_line("%s: %s" % (type(error).__name__, error)))


def _one_line(text):
    text = " ".join(str(text).split())
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT - 3] + "..."


_bomb_warnings_lock = threading.Lock()


@contextlib.contextmanager
def bomb_warnings_silenced():
    """Silences Pillow's DecompressionBombWarning: MAX_PIXELS is our limit.

    Image.MAX_IMAGE_PIXELS (global Pillow state) is left alone. catch_warnings swaps the
    process-wide list of filters, so the swap is serialised here; it is held around
    Image.open (header parsing, cheap) and around the load of the few images above Pillow's
    warning size only.
    """
    with _bomb_warnings_lock, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def _upright(image):
    """`image` turned as its EXIF orientation says, i.e. as a viewer shows it."""
    try:
        orientation = image.getexif().get(_ORIENTATION, 1)
    except Exception:  # unparsable EXIF: the pixels are still good, as stored
        return image
    if orientation in (2, 3, 4, 5, 6, 7, 8):
        return ImageOps.exif_transpose(image)
    return image


def _rgb_or_rgba(image):
    """`image` in mode "RGB", or "RGBA" when it has transparency (composited after resize)."""
    mode = image.mode
    if mode in ("RGB", "RGBA") and "transparency" not in image.info:
        return image
    if mode in ("RGBA", "RGBa", "LA", "La", "PA") or (mode in ("P", "L", "RGB") and "transparency" in image.info):
        return image.convert("RGBA")
    if mode == "I" or mode.startswith("I;") or mode == "F":
        values = np.asarray(image)
        if values.dtype.kind == "f":
            eight = np.clip(np.rint(np.nan_to_num(values)), 0, 255).astype(np.uint8)
        else:  # 16-bit data keeps its high byte
            eight = (np.clip(values, 0, 65535) >> 8).astype(np.uint8)
        return Image.fromarray(np.repeat(eight[:, :, np.newaxis], 3, axis=2))
    try:
        return image.convert("RGB")
    except (ValueError, OSError) as error:
        raise ImageError("corrupt", _one_line("cannot convert its %s pixels to RGB: %s" % (mode, error))) from error
