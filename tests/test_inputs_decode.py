"""One image's decode: pixels, formats, every awkward file we know, and a batch row that never raises."""

import errno
import os
import pickle
import threading
import warnings

import numpy as np
import pytest
from PIL import Image, ImageFile, JpegImagePlugin

from hangs import HANG_SECONDS
from image_files import BLUE, GREEN, RED, WHITE, noise_jpeg, solid, write_bad_files
from parallel.inputs.decode import (KINDS, MAX_BYTES, MAX_PIXELS, ImageError, decode_bytes_row, decode_row,
                                    failure_of, load_image)
from parallel.inputs.resize import RESIZE_FILTERS, RESIZE_MODES, Resize


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
    import parallel.model
    assert RESIZE_MODES == ("crop", "stretch")
    assert RESIZE_FILTERS == parallel.model.RESIZE_FILTERS == ("bilinear", "bicubic")  # a spec's names are ours
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


# --- resize rules: the model's filter and short side -------------------------------------------------------------

# (width, height): portrait, landscape, upscaled, large, square, a short side already 224; noise, the hardest case.
ODD_SIZES = ((333, 500), (641, 427), (97, 150), (1531, 1023), (300, 300), (224, 301))


@pytest.fixture(scope="module")
def odd_pngs(tmp_path_factory):
    """PNG files of noise, one of each of ODD_SIZES (no JPEG draft involved): [(path, PIL image)]."""
    folder = tmp_path_factory.mktemp("odd")
    rng = np.random.default_rng(5)
    files = []
    for width, height in ODD_SIZES:
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))
        image.save(folder / ("%dx%d.png" % (width, height)), compress_level=1)
        files.append((folder / ("%dx%d.png" % (width, height)), image))
    return files


def hugging_face_crop(image, short_side, crop, resample=Image.Resampling.BICUBIC):
    """What transformers' slow image processors do with `size={"shortest_edge": short_side}` and `crop_size`
    (CLIPImageProcessor; BitImageProcessor as facebook/dinov2-* configure it), written from their code:
    image_transforms.get_resize_output_image_size (default_to_square=False), image_transforms.resize (a
    PIL resize, reducing_gap None), image_transforms.center_crop (offsets floor-divided). The fast
    processors crop at the same offsets, int((h - H) / 2.0)."""
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = short_side, int(short_side * long / short)
    new_height, new_width = (new_long, new_short) if width <= height else (new_short, new_long)
    resized = np.asarray(image.resize((new_width, new_height), resample=resample, reducing_gap=None))
    crop_height, crop_width = crop
    top, left = (new_height - crop_height) // 2, (new_width - crop_width) // 2
    return resized[top:top + crop_height, left:left + crop_width]


def old_rule(image, size, resize):
    """The decode's resize before models gave a filter and a short side: bilinear, one Pillow call."""
    width, height = image.size
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    box = (left, top, left + side, top + side) if resize == "crop" else None
    return np.asarray(image.resize((size[1], size[0]), Image.Resampling.BILINEAR, box=box))


def test_the_default_rule_is_the_old_one_byte_for_byte(odd_pngs):
    """VGG16, ResNet50, EfficientNetB0 and ConvNeXt keep their pixels: a mode alone, or the defaults of a Resize."""
    for path, image in odd_pngs:
        for mode in RESIZE_MODES:
            for size in ((224, 224), (31, 47)):
                expected = old_rule(image, size, mode)
                assert np.array_equal(load_image(path, size, mode), expected), (path.name, mode, size)
                assert np.array_equal(load_image(path, size, Resize(mode)), expected), (path.name, mode, size)


@pytest.mark.parametrize("short_side, size", [(224, (224, 224)), (256, (224, 224)), (240, (200, 230))])
def test_the_short_side_rule_is_hugging_face_s_resize_then_centre_crop(odd_pngs, short_side, size):
    rule = Resize("crop", "bicubic", short_side)
    for path, image in odd_pngs:
        pixels = load_image(path, size, rule)
        assert pixels.shape == size + (3,)
        assert np.array_equal(pixels, hugging_face_crop(image, short_side, size)), (path.name, short_side, size)
        # ... and the test can fail: another rule gives other pixels (noise: most of them), unless neither resamples.
        if min(image.size) != short_side:
            assert (pixels != old_rule(image, size, "crop")).mean() > 0.5, path.name
    path, image = odd_pngs[1]
    bilinear = load_image(path, size, Resize("crop", "bilinear", short_side))
    assert np.array_equal(bilinear, hugging_face_crop(image, short_side, size, Image.Resampling.BILINEAR))
    assert not np.array_equal(bilinear, load_image(path, size, rule))


def test_the_centre_crop_offset_is_floor_divided_as_hugging_face_s():
    """A margin of 3 pixels: Hugging Face's processors start the crop at 1 (3 // 2); torchvision's CenterCrop
    (OpenAI's CLIP, DINOv2's own evaluation) at round(1.5) = 2. Every column a different grey, so the offset shows."""
    columns = np.arange(227, dtype=np.uint8)
    image = Image.fromarray(np.repeat(np.broadcast_to(columns, (224, 227))[:, :, np.newaxis], 3, axis=2))
    images = np.zeros((1, 224, 224, 3), np.uint8)
    buffer = __import__("io").BytesIO()
    image.save(buffer, format="PNG")
    assert decode_bytes_row(buffer.getvalue(), images, 0, (224, 224), Resize("crop", "bicubic", 224),
                            MAX_PIXELS) is None
    assert images[0, 0, :3, 0].tolist() == [1, 2, 3]  # short side 224 already: no resampling, columns 1 .. 224
    assert np.array_equal(images[0], np.asarray(image)[:, 1:225])


def test_stretch_and_the_centre_square_take_the_model_s_filter(odd_pngs):
    for path, image in odd_pngs[:3]:
        stretched = load_image(path, (40, 60), Resize("stretch", "bicubic", 64))  # no short side in stretch
        assert np.array_equal(stretched, np.asarray(image.resize((60, 40), Image.Resampling.BICUBIC)))
        assert not np.array_equal(stretched, load_image(path, (40, 60), "stretch"))
        width, height = image.size
        side = min(width, height)
        box = ((width - side) // 2, (height - side) // 2, (width - side) // 2 + side, (height - side) // 2 + side)
        square = load_image(path, (32, 32), Resize("crop", "bicubic"))
        assert np.array_equal(square, np.asarray(image.resize((32, 32), Image.Resampling.BICUBIC, box=box)))


def test_the_short_side_rule_composites_transparency_after_the_crop(tmp_path):
    halves((300, 260), (0, 0, 255, 255), (0, 0, 0, 0), mode="RGBA").save(tmp_path / "alpha.png")
    pixels = load_image(tmp_path / "alpha.png", (224, 224), Resize("crop", "bicubic", 256))
    assert (pixels[:, :100] == BLUE).all() and (pixels[:, 124:] == WHITE).all()


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


def test_a_jpeg_large_enough_for_draft_keeps_its_short_side_at_least_the_model_s(tmp_path, monkeypatch):
    ramp = np.linspace(0, 255, 2400)[np.newaxis, :, np.newaxis] * np.ones((1900, 1, 3))
    Image.fromarray(ramp.astype(np.uint8)).save(tmp_path / "big.jpg", quality=90)
    drafts = []
    real_draft = JpegImagePlugin.JpegImageFile.draft
    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft",
                        lambda image, mode, size: (real_draft(image, mode, size), drafts.append((size, image.size)))[0])
    assert load_image(tmp_path / "big.jpg").shape == (224, 224, 3)
    assert drafts == [((224, 224), (300, 238))]  # 1/8 scale: short side 238 >= 224, but less than 256
    pixels = load_image(tmp_path / "big.jpg", resize=Resize("crop", "bicubic", 256))
    assert pixels.shape == (224, 224, 3)
    assert drafts[1] == ((256, 256), (600, 475))  # 1/4 scale: short side 475 >= 256
    with Image.open(tmp_path / "big.jpg") as full:  # close to a full-size decode's
        reference = hugging_face_crop(full.convert("RGB"), 256, (224, 224))
    assert np.abs(pixels.astype(int) - reference).mean() < 2


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
    worker.join(HANG_SECONDS)  # a guard against a hang only (tests/hangs.py)
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
    (dict(resize=3), "resize must be one of crop, stretch, or a Resize; got 3"),
    (dict(resize=Resize(short_side=200)),
     r"resize short side must be at least the larger side of size \(224, 224\); got 200"),
    (dict(size=(200, 230), resize=Resize(short_side=229)),
     r"resize short side must be at least the larger side of size \(200, 230\); got 229"),
])
def test_load_image_refuses_bad_arguments_naming_them(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        load_image(tmp_path / "any.png", **options)


@pytest.mark.parametrize("options, message", [
    (dict(mode="squash"), "resize must be one of crop, stretch; got 'squash'"),
    (dict(filter="lanczos"), "resize filter must be one of bilinear, bicubic; got 'lanczos'"),
    (dict(filter="BICUBIC"), "resize filter must be one of bilinear, bicubic; got 'BICUBIC'"),
    (dict(short_side=0), "resize short side must be None or a positive integer; got 0"),
    (dict(short_side=True), "resize short side must be None or a positive integer; got True"),
    (dict(short_side=256.0), "resize short side must be None or a positive integer; got 256.0"),
])
def test_a_bad_resize_rule_is_refused_naming_the_value(options, message):
    with pytest.raises(ValueError, match=message):
        Resize(**options)


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
