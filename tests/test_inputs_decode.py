"""One image's decode: pixels, formats, every awkward file we know, and a batch row that never raises."""

import errno
import os
import pickle
import threading
import warnings

import numpy as np
import pytest
from PIL import Image, ImageFile, JpegImagePlugin

from image_files import BLUE, GREEN, RED, WHITE, noise_jpeg, solid, write_bad_files
from parallel.inputs.decode import (KINDS, MAX_BYTES, MAX_PIXELS, RESIZE_MODES, ImageError, decode_row, failure_of,
                                    load_image)


def halves(size, left, right, mode="RGB"):
    """An image of `size` (w, h) whose left half is `left` and right half `right`."""
    image = Image.new(mode, size, left)
    image.paste(right, (size[0] // 2, 0, size[0], size[1]))
    return image


def kind_of(path, **options):
    with pytest.raises(ImageError) as caught:
        load_image(path, **options)
    return caught.value


def fail_to_open(monkeypatch, name, error):
    """os.open raises `error` for the paths that end with `name`, and opens the others."""
    real_open = os.open

    def open_or_fail(path, *args, **kwargs):
        if str(path).endswith(name):
            raise error
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_or_fail)


# --- constants, names ---------------------------------------------------------------------------------------------


def test_constants():
    assert RESIZE_MODES == ("crop", "stretch")
    assert MAX_PIXELS == 100_000_000
    assert MAX_BYTES == 1 << 30 > 8 * MAX_PIXELS  # 16-bit RGBA, uncompressed, within the pixel limit
    assert KINDS == ("missing", "unreadable", "not_a_file", "empty", "not_an_image", "too_large", "corrupt",
                     "unreachable", "changed")


# --- one image: pixels -------------------------------------------------------------------------------------


def test_output_is_uint8_of_the_requested_height_and_width(tmp_path):
    image = Image.new("RGB", (100, 60), RED)
    image.paste(BLUE, (0, 30, 100, 60))  # top red, bottom blue
    image.save(tmp_path / "a.png")
    for resize in RESIZE_MODES:
        pixels = load_image(tmp_path / "a.png", size=(30, 50), resize=resize)
        assert pixels.shape == (30, 50, 3) and pixels.dtype == np.uint8
    stretched = load_image(str(tmp_path / "a.png"), size=(30, 50), resize="stretch")
    assert (stretched[0] == RED).all() and (stretched[-1] == BLUE).all()
    assert load_image(tmp_path / "a.png").shape == (224, 224, 3)


def test_crop_keeps_the_centre_and_stretch_keeps_everything(tmp_path):
    image = Image.new("RGB", (100, 50), GREEN)  # 2:1, red and blue outer fifths
    image.paste(RED, (0, 0, 20, 50))
    image.paste(BLUE, (80, 0, 100, 50))
    image.save(tmp_path / "wide.png")
    cropped = load_image(tmp_path / "wide.png", size=(10, 10), resize="crop")
    assert (cropped == GREEN).all()
    stretched = load_image(tmp_path / "wide.png", size=(10, 20), resize="stretch")
    assert (stretched[:, 0] == RED).all() and (stretched[:, -1] == BLUE).all()
    assert (stretched[:, 10] == GREEN).all()


def test_a_1x1_and_a_20000x1_image(tmp_path):
    solid((1, 1), (10, 20, 30)).save(tmp_path / "dot.png")
    for resize in RESIZE_MODES:
        assert (load_image(tmp_path / "dot.png", size=(7, 5), resize=resize) == (10, 20, 30)).all()
    line = Image.new("RGB", (20000, 1), BLUE)
    line.paste(RED, (9990, 0, 10010, 1))  # the centre pixel (9999) is red
    line.save(tmp_path / "line.png")
    assert (load_image(tmp_path / "line.png", size=(4, 4), resize="crop") == RED).all()
    stretched = load_image(tmp_path / "line.png", size=(4, 8), resize="stretch")
    assert stretched.shape == (4, 8, 3) and (stretched[:, 0] == BLUE).all() and (stretched[:, -1] == BLUE).all()


def test_cmyk_jpeg(tmp_path):
    solid((30, 20), (0, 255, 255, 0), mode="CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    assert Image.open(tmp_path / "cmyk.jpg").mode == "CMYK"
    pixels = load_image(tmp_path / "cmyk.jpg", size=(8, 8))
    assert pixels.shape == (8, 8, 3) and np.abs(pixels.astype(int) - RED).max() < 10  # M + Y = red


def test_ycck_jpeg(tmp_path):
    solid((30, 20), (0, 255, 255, 0), mode="CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    data = bytearray((tmp_path / "cmyk.jpg").read_bytes())
    adobe = data.index(b"Adobe")  # APP14: FFEE, length (2), "Adobe", version (2), flags0 (2), flags1 (2), transform
    assert data[adobe - 4:adobe - 2] == b"\xff\xee"
    assert data[adobe + 11] == 0  # written as plain CMYK
    data[adobe + 11] = 2  # YCCK
    (tmp_path / "ycck.jpg").write_bytes(bytes(data))
    assert Image.open(tmp_path / "ycck.jpg").info["adobe_transform"] == 2
    pixels = load_image(tmp_path / "ycck.jpg", size=(8, 8))
    assert pixels.shape == (8, 8, 3) and pixels.dtype == np.uint8
    assert not np.array_equal(pixels, load_image(tmp_path / "cmyk.jpg", size=(8, 8)))  # decoded as YCCK


@pytest.mark.parametrize("dtype, suffix", [(np.uint16, "png"), (">u2", "tif"), (np.int32, "tif")])
def test_16_bit_keeps_the_high_byte(tmp_path, dtype, suffix):
    values = np.array([[0, 256, 32768, 65535]] * 4).astype(dtype)
    Image.fromarray(values).save(tmp_path / ("deep." + suffix))
    assert Image.open(tmp_path / ("deep." + suffix)).mode in ("I;16", "I;16B", "I")
    pixels = load_image(tmp_path / ("deep." + suffix), size=(4, 4), resize="stretch")
    assert pixels[0, :, 0].tolist() == [0, 1, 128, 255]
    assert (pixels == pixels[:, :, :1]).all()  # grey


def test_floating_point_is_rounded_and_clipped(tmp_path):
    Image.fromarray(np.array([[-5.0, 0.4, 127.6, 300.0]] * 4, np.float32)).save(tmp_path / "float.tif")
    pixels = load_image(tmp_path / "float.tif", size=(4, 4), resize="stretch")
    assert pixels[0, :, 0].tolist() == [0, 0, 128, 255]


def test_1_bit_png(tmp_path):
    halves((8, 8), 0, 1, mode="1").save(tmp_path / "bits.png")
    assert Image.open(tmp_path / "bits.png").mode == "1"
    pixels = load_image(tmp_path / "bits.png", size=(8, 8))
    assert (pixels[:, :4] == 0).all() and (pixels[:, 4:] == 255).all()


def test_palette_png_transparent_index_becomes_white(tmp_path):
    image = halves((8, 8), 0, 1, mode="P")
    image.putpalette(RED + GREEN)
    image.save(tmp_path / "palette.png", transparency=1)
    assert "transparency" in Image.open(tmp_path / "palette.png").info
    pixels = load_image(tmp_path / "palette.png", size=(8, 8))
    assert (pixels[:, :4] == RED).all() and (pixels[:, 4:] == WHITE).all()


@pytest.mark.parametrize("mode, opaque, clear, expected", [
    ("LA", (100, 255), (0, 0), (100, 100, 100)),
    ("RGBA", (0, 0, 255, 255), (0, 0, 0, 0), BLUE),
    ("RGBA", (0, 0, 255, 255), (0, 255, 0, 0), BLUE),
])
def test_alpha_is_composited_over_white(tmp_path, mode, opaque, clear, expected):
    halves((8, 8), opaque, clear, mode=mode).save(tmp_path / "alpha.png")
    for size in ((8, 8), (4, 4)):  # same size, and resized (composited after the resize)
        pixels = load_image(tmp_path / "alpha.png", size=size)
        half = size[1] // 2
        assert (pixels[:, :half - 1] == expected).all() and (pixels[:, half + 1:] == WHITE).all()


def test_animated_gif_gives_its_first_frame(tmp_path):
    solid((8, 8), RED).save(tmp_path / "anim.gif", save_all=True, append_images=[solid((8, 8), BLUE)], duration=50)
    assert Image.open(tmp_path / "anim.gif").n_frames == 2
    assert (load_image(tmp_path / "anim.gif", size=(4, 4)) == RED).all()


@pytest.mark.parametrize("orientation, transpose", [(6, Image.Transpose.ROTATE_270), (8, Image.Transpose.ROTATE_90)])
def test_exif_orientation_is_applied(tmp_path, orientation, transpose):
    stored = halves((40, 20), RED, BLUE)
    exif = Image.Exif()
    exif[0x0112] = orientation
    stored.save(tmp_path / "rotated.jpg", quality=95, exif=exif)
    stored.transpose(transpose).save(tmp_path / "upright.jpg", quality=95)
    for resize in RESIZE_MODES:
        pixels = load_image(tmp_path / "rotated.jpg", size=(16, 16), resize=resize).astype(int)
        expected = load_image(tmp_path / "upright.jpg", size=(16, 16), resize=resize).astype(int)
        assert np.abs(pixels - expected).mean() < 4
    stretched = load_image(tmp_path / "rotated.jpg", size=(16, 16), resize="stretch").astype(int)
    top, bottom = stretched[:6].mean(axis=(0, 1)), stretched[-6:].mean(axis=(0, 1))
    first, second = (RED, BLUE) if orientation == 6 else (BLUE, RED)  # 6: turned clockwise, left goes up
    assert np.abs(top - first).max() < 12 and np.abs(bottom - second).max() < 12


def test_a_large_jpeg_is_decoded_at_reduced_scale(tmp_path, monkeypatch):
    ramp = np.linspace(0, 255, 2000)[np.newaxis, :, np.newaxis] * np.ones((1500, 1, 3))
    Image.fromarray(ramp.astype(np.uint8)).save(tmp_path / "big.jpg", quality=90)
    noise_jpeg(tmp_path / "narrow.jpg", size=(1000, 230))
    drafts = []
    real_draft = JpegImagePlugin.JpegImageFile.draft

    def draft(image, mode, size):
        result = real_draft(image, mode, size)
        drafts.append((mode, size, image.size))
        return result

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", draft)
    pixels = load_image(tmp_path / "big.jpg")
    assert pixels.shape == (224, 224, 3)
    assert drafts == [("RGB", (224, 224), (500, 375))]  # 1/4 scale: short side 375 >= 224
    with Image.open(tmp_path / "big.jpg") as full:  # close to a full-size decode
        reference = np.asarray(full.convert("RGB").resize((224, 224), Image.BILINEAR, box=(250, 0, 1750, 1500)))
    assert np.abs(pixels.astype(int) - reference).mean() < 2
    load_image(tmp_path / "narrow.jpg")
    assert drafts[-1] == ("RGB", (224, 224), (1000, 230))  # never below the target: no reduction


# --- one image: refusals -----------------------------------------------------------------------------------


def test_a_decompression_bomb_is_refused_before_decoding(bombs, tmp_path, monkeypatch):
    calls = []
    real_load, real_getdecoder = ImageFile.ImageFile.load, Image._getdecoder
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda image: calls.append("load") or real_load(image))
    monkeypatch.setattr(Image, "_getdecoder", lambda *args: calls.append("decoder") or real_getdecoder(*args))
    limit = Image.MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Pillow's DecompressionBombWarning must not escape
        error = kind_of(bombs / "pillow_bomb.png")
        assert error.kind == "too_large" and "decompression-bomb" in error.message
        error = kind_of(bombs / "our_bomb.png")
        assert error.kind == "too_large"
        assert "12000x9000 pixels is more than the limit of 100000000" in str(error)
    assert calls == []
    assert Image.MAX_IMAGE_PIXELS == limit  # global Pillow state untouched
    solid((100, 100), RED).save(tmp_path / "small.png")
    assert kind_of(tmp_path / "small.png", max_pixels=9999).kind == "too_large"
    assert calls == []
    load_image(tmp_path / "small.png", max_pixels=10000)
    assert "decoder" in calls  # the spy sees a real decode


def test_empty_text_html_and_truncated_files(tmp_path):
    write_bad_files(tmp_path, tmp_path)
    assert (kind_of(tmp_path / "empty.jpg").kind, str(kind_of(tmp_path / "empty.jpg"))) == (
        "empty", "empty file (0 bytes)")
    text, page = kind_of(tmp_path / "text.jpg"), kind_of(tmp_path / "page.jpg")
    assert (text.kind, page.kind) == ("not_an_image", "not_an_image")
    assert "just some notes" in text.message and "<!DOCTYPE html>" in page.message
    for name in ("cut.jpg", "cut.png"):
        error = kind_of(tmp_path / name)
        assert error.kind == "corrupt" and "truncated" in error.message.lower(), error.message
        assert "\n" not in error.message and error.message == str(error)


def test_the_format_comes_from_the_content_not_the_name(tmp_path):
    solid((4, 4), GREEN).save(tmp_path / "really_a_png.jpg", format="PNG")
    assert (load_image(tmp_path / "really_a_png.jpg", size=(2, 2)) == GREEN).all()
    solid((4, 4), GREEN).save(tmp_path / "icon.png", format="ICO")  # readable by Pillow, not one of ours
    assert kind_of(tmp_path / "icon.png").kind == "not_an_image"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway")
def test_a_real_unreadable_file(tmp_path):
    solid((4, 4), RED).save(tmp_path / "secret.png")
    os.chmod(tmp_path / "secret.png", 0)
    assert kind_of(tmp_path / "secret.png").kind == "unreadable"


@pytest.mark.parametrize("where", ["os.open", "Image.open"])
def test_permission_denied_is_unreadable(tmp_path, monkeypatch, where):
    solid((4, 4), RED).save(tmp_path / "secret.png")
    denied = PermissionError(errno.EACCES, "Permission denied")
    if where == "os.open":
        fail_to_open(monkeypatch, "secret.png", denied)
    else:
        monkeypatch.setattr(Image, "open", lambda *args, **kwargs: (_ for _ in ()).throw(denied))
    error = kind_of(tmp_path / "secret.png")
    assert (error.kind, error.message) == ("unreadable", "cannot read it: Permission denied")


def test_links_that_go_nowhere(tmp_path):
    os.symlink("loop.jpg", tmp_path / "loop.jpg")
    os.symlink(tmp_path / "nowhere.png", tmp_path / "broken.png")
    loop, broken = kind_of(tmp_path / "loop.jpg"), kind_of(tmp_path / "broken.png")
    assert loop.kind == "unreadable" and "symbolic links" in loop.message
    assert broken.kind == "missing" and "broken link" in broken.message and "nowhere.png" in broken.message
    assert kind_of(tmp_path / "gone.png").kind == "missing"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no os.mkfifo")
def test_a_fifo_is_not_a_file_and_does_not_hang(tmp_path):
    os.mkfifo(tmp_path / "fifo.jpg")
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(kind_of(tmp_path / "fifo.jpg")), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock it before failing
        os.close(os.open(tmp_path / "fifo.jpg", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_image blocked on a FIFO")
    assert outcome[0].kind == "not_a_file" and "FIFO" in outcome[0].message
    (tmp_path / "folder.jpg").mkdir()
    assert kind_of(tmp_path / "folder.jpg").kind == "not_a_file"


def test_image_error():
    error = ImageError("corrupt", "image file is truncated (12 bytes not processed)")
    assert (error.kind, error.message, str(error)) == ("corrupt", "image file is truncated (12 bytes not processed)",
                                                       "image file is truncated (12 bytes not processed)")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.kind, copy.message) == (error.kind, error.message)


@pytest.mark.parametrize("options, message", [
    (dict(resize="squash"), "resize must be one of crop, stretch; got 'squash'"),
    (dict(size=(0, 5)), r"size must be two positive integers \(height, width\); got \(0, 5\)"),
    (dict(size=224), "size must be \\(height, width\\); got 224"),
    (dict(max_pixels=0), "max_pixels must be at least 1; got 0"),
])
def test_load_image_refuses_bad_arguments_naming_them(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        load_image(tmp_path / "any.png", **options)


# --- one row of a batch ------------------------------------------------------------------------------------


def test_decode_row_writes_its_row_or_says_why_not_and_never_raises(tmp_path, monkeypatch):
    solid((6, 4), GREEN).save(tmp_path / "good.png")
    solid((6, 4), BLUE).save(tmp_path / "boom.png")
    (tmp_path / "empty.jpg").write_bytes(b"")
    images = np.zeros((3, 2, 2, 3), np.uint8)
    assert decode_row(str(tmp_path / "good.png"), images, 1, (2, 2), "crop", MAX_PIXELS) is None
    assert decode_row(str(tmp_path / "empty.jpg"), images, 2, (2, 2), "crop", MAX_PIXELS) == (
        "empty", "empty file (0 bytes)")
    fail_to_open(monkeypatch, "boom.png", RuntimeError("boom\nand more"))  # unexpected: not an OSError
    assert decode_row(str(tmp_path / "boom.png"), images, 0, (2, 2), "crop", MAX_PIXELS) == (
        "corrupt", "RuntimeError: boom and more")
    assert (images[1] == GREEN).all() and (images[[0, 2]] == 0).all()  # only the row that decoded is written


def test_failure_of_an_exception():
    assert failure_of(ImageError("missing", "no such file")) == ("missing", "no such file")
    assert failure_of(KeyError("x")) == ("corrupt", "KeyError: 'x'")
    kind, message = failure_of(ValueError("long\n" * 200))
    assert kind == "corrupt" and "\n" not in message and len(message) == 300 and message.endswith("...")
