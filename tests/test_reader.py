"""The reader: one image's decode (every awkward file we know), and the batched, bounded pipeline."""

import errno
import os
import pickle
import threading
import time
import warnings

import numpy as np
import pytest
from PIL import Image, ImageFile, JpegImagePlugin

from parallel import reader
from parallel.manifest import discover_images
from parallel.reader import MAX_PIXELS, RESIZE_MODES, Batch, Failure, ImageError, ImageReader, load_image

RED, GREEN, BLUE, WHITE = (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 255)


def solid(size, colour, mode="RGB"):
    return Image.new(mode, size, colour)


def halves(size, left, right, mode="RGB"):
    """An image of `size` (w, h) whose left half is `left` and right half `right`."""
    image = Image.new(mode, size, left)
    image.paste(right, (size[0] // 2, 0, size[0], size[1]))
    return image


def noise_jpeg(path, size=(64, 64), seed=0):
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)
    return path


def write_bad_files(folder, scratch):
    """empty.jpg, text.jpg and page.jpg (text saved as .jpg), cut.jpg and cut.png (truncated) in
    `folder`; the whole files they were cut from are left in `scratch`."""
    (folder / "empty.jpg").write_bytes(b"")
    (folder / "text.jpg").write_text("just some notes\n")
    (folder / "page.jpg").write_text("<!DOCTYPE html><html><body>Not found</body></html>")
    full = noise_jpeg(scratch / "whole.jpg").read_bytes()
    (folder / "cut.jpg").write_bytes(full[:len(full) // 2])
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(scratch / "f.png")
    full = (scratch / "f.png").read_bytes()
    (folder / "cut.png").write_bytes(full[:len(full) // 2])


def kind_of(path, **options):
    with pytest.raises(ImageError) as caught:
        load_image(path, **options)
    return caught.value


def reader_threads():
    return [thread for thread in threading.enumerate()
            if thread.name.startswith(reader._THREAD_PREFIX) and thread.is_alive()]


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    """Mode "1" PNGs: small files, huge images. 15000x15000 is over Pillow's own error limit
    (2 * 89478485 pixels); 12000x9000 is over ours (1e8) but only at Pillow's warning level."""
    folder = tmp_path_factory.mktemp("bombs")
    Image.new("1", (15000, 15000)).save(folder / "pillow_bomb.png")
    Image.new("1", (12000, 9000)).save(folder / "our_bomb.png")
    return folder


# --- constants, names ---------------------------------------------------------------------------------------------


def test_constants():
    assert RESIZE_MODES == ("crop", "stretch")
    assert MAX_PIXELS == 100_000_000


def test_a_name_that_is_not_utf8_is_discovered_as_surrogates_and_read(tmp_path):
    raw = os.fsencode(str(tmp_path)) + b"/caf\xe9.jpg"
    solid((6, 4), BLUE).save(tmp_path / "source.jpg")
    descriptor = os.open(raw, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (tmp_path / "source.jpg").read_bytes())
    finally:
        os.close(descriptor)
    (tmp_path / "source.jpg").unlink()
    found = discover_images(tmp_path)
    assert found == ["caf\udce9.jpg"] == [os.fsdecode(b"caf\xe9.jpg")]
    with ImageReader(tmp_path, found, batch_size=2, size=(4, 4), workers=1) as images:
        [batch] = list(images)
    assert batch.paths == found and batch.failures == []
    assert np.abs(batch.images[0].astype(int) - BLUE).max() < 8


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


def test_a_decompression_bomb_is_refused_before_decoding(bombs, monkeypatch):
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
    solid((100, 100), RED).save(bombs / "small.png")
    assert kind_of(bombs / "small.png", max_pixels=9999).kind == "too_large"
    assert calls == []
    load_image(bombs / "small.png", max_pixels=10000)
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
        real_open = os.open
        monkeypatch.setattr(os, "open", lambda path, *args, **kwargs: (
            (_ for _ in ()).throw(denied) if str(path).endswith("secret.png") else real_open(path, *args, **kwargs)))
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


# --- the reader --------------------------------------------------------------------------------------------


def test_every_bad_file_becomes_a_failure_and_costs_no_batch_mate(tmp_path, bombs):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    colours = {}
    for index in range(7):
        colour = (index * 30, 255 - index * 30, (index * 70) % 256)
        name = "good_%d.png" % index
        solid((6, 5), colour).save(root / name)
        colours[name] = colour
    (root / "x.jpg").mkdir()
    solid((6, 5), (1, 2, 3)).save(root / "x.jpg" / "inside.png")
    colours["x.jpg/inside.png"] = (1, 2, 3)
    solid((6, 5), (9, 8, 7)).save(outside / "far.png")
    os.symlink(outside / "far.png", root / "near.png")
    colours["near.png"] = (9, 8, 7)
    os.symlink(outside, root / "linked")
    expected = {
        "empty.jpg": "empty", "text.jpg": "not_an_image", "page.jpg": "not_an_image", "cut.jpg": "corrupt",
        "cut.png": "corrupt", "loop.jpg": "unreadable", "broken.png": "missing", "deleted.png": "missing",
        "huge.png": "too_large",
    }
    write_bad_files(root, outside)
    os.symlink("loop.jpg", root / "loop.jpg")
    os.symlink(outside / "nowhere.png", root / "broken.png")
    solid((6, 5), RED).save(root / "deleted.png")
    os.symlink(bombs / "our_bomb.png", root / "huge.png")
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "fifo.jpg")
        expected["fifo.jpg"] = "not_a_file"

    paths = discover_images(root)
    assert set(paths) == set(colours) | set(expected)
    (root / "deleted.png").unlink()  # gone between discovery and decoding
    batches = []
    with ImageReader(root, paths, batch_size=3, size=(4, 4), workers=2, prefetch_batches=1) as images:
        assert len(images) == -(-len(paths) // 3)
        batches = list(images)
    assert len(batches) == len(images)
    for index, batch in enumerate(batches):
        chunk = paths[index * 3:index * 3 + 3]
        assert isinstance(batch, Batch) and all(isinstance(failure, Failure) for failure in batch.failures)
        assert batch.paths == [path for path in chunk if path in colours]
        assert [failure.path for failure in batch.failures] == [path for path in chunk if path in expected]
        assert batch.images.shape == (len(batch.paths), 4, 4, 3) and batch.images.dtype == np.uint8
        for row, path in enumerate(batch.paths):
            assert (batch.images[row] == colours[path]).all(), path
    failures = [failure for batch in batches for failure in batch.failures]
    assert {failure.path: failure.kind for failure in failures} == expected
    assert all(failure.message and "\n" not in failure.message for failure in failures)
    assert [path for batch in batches for path in batch.paths] == [path for path in paths if path in colours]


def _tiny_images(folder, count):
    rng = np.random.default_rng(3)
    names = []
    for index in range(count):
        size = (int(rng.integers(1, 40)), int(rng.integers(1, 40)))
        name = "img_%03d.png" % index
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(folder / name)
        names.append(name)
    return names


def test_batches_equal_sequential_decoding_byte_for_byte(tmp_path, monkeypatch):
    names = _tiny_images(tmp_path, 30)
    expected = np.stack([load_image(tmp_path / name, size=(8, 8)) for name in names])
    real_decode_row = reader._decode_row
    rng = np.random.default_rng(4)
    delays = iter(rng.uniform(0, 0.004, 1000))

    def shuffled(*args):  # finish out of order
        time.sleep(next(delays))
        return real_decode_row(*args)

    monkeypatch.setattr(reader, "_decode_row", shuffled)
    with ImageReader(tmp_path, names, batch_size=4, size=(8, 8), workers=2, prefetch_batches=1) as images:
        batches = list(images)
    assert [len(batch.paths) for batch in batches] == [4] * 7 + [2]
    assert [path for batch in batches for path in batch.paths] == names
    assert np.concatenate([batch.images for batch in batches]).tobytes() == expected.tobytes()


class _Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.submitted = self.decoded = self.yielded = self.peak = 0


@pytest.fixture
def counted(monkeypatch):
    """Fake decodes (a row of the path's index), counting submissions and decodes."""
    counts = _Counts()

    class CountingExecutor(reader.ThreadPoolExecutor):
        def submit(self, *args, **kwargs):
            with counts.lock:
                counts.submitted += 1
                counts.peak = max(counts.peak, counts.submitted - counts.yielded)
            return super().submit(*args, **kwargs)

    def decode_row(path, images, row, size, resize, max_pixels):
        time.sleep(0.001)
        images[row] = int(os.path.basename(path)) % 256
        with counts.lock:
            counts.decoded += 1

    monkeypatch.setattr(reader, "ThreadPoolExecutor", CountingExecutor)
    monkeypatch.setattr(reader, "_decode_row", decode_row)
    return counts


def _wait_for(condition, timeout=5):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_prefetch_overlaps_the_consumer_and_is_bounded(tmp_path, counted):
    batch_size, prefetch, total = 5, 2, 300
    paths = [str(index) for index in range(total)]
    seen = []
    with ImageReader(tmp_path, paths, batch_size, size=(2, 2), workers=2, prefetch_batches=prefetch) as images:
        for batch in images:
            counted.yielded += len(batch.paths) + len(batch.failures)
            seen.extend(batch.paths)
            assert (batch.images[:, 0, 0, 0] == [int(path) % 256 for path in batch.paths]).all()
            # While we hold this batch, the next `prefetch` batches decode without being asked for.
            ahead = min(counted.yielded + prefetch * batch_size, total)
            assert _wait_for(lambda: counted.decoded >= ahead), (counted.decoded, ahead)
            time.sleep(0.002)  # a slow consumer
    assert seen == paths and counted.submitted == total
    assert counted.peak == (prefetch + 1) * batch_size


def test_leaving_early_cancels_and_stops_the_threads(tmp_path, counted):
    paths = [str(index) for index in range(200)]
    with ImageReader(tmp_path, paths, batch_size=4, size=(2, 2), workers=2, prefetch_batches=2) as images:
        for batch in images:
            assert reader_threads()
            break
        assert not reader_threads()  # the dropped iterator already shut its pool down
    assert not reader_threads()
    submitted = counted.submitted
    assert submitted <= 3 * 4
    time.sleep(0.05)
    assert counted.submitted == submitted
    with pytest.raises(ValueError, match="closed"):
        iter(images)


def test_close_while_holding_the_iterator_cancels_pending_decodes(tmp_path, counted):
    images = ImageReader(tmp_path, [str(index) for index in range(200)], batch_size=4, size=(2, 2), workers=1,
                         prefetch_batches=3)
    batches = iter(images)
    next(batches)
    images.close()  # `batches` is still referenced: close() must close it
    assert not reader_threads()
    decoded = counted.decoded
    assert counted.submitted <= 4 * 4 and decoded <= counted.submitted
    time.sleep(0.05)
    assert counted.decoded == decoded
    assert list(batches) == []
    images.close()  # idempotent


def test_an_unexpected_exception_is_a_corrupt_failure(tmp_path, monkeypatch):
    names = _tiny_images(tmp_path, 4)
    real_decode = reader._decode

    def decode(path, *args):
        if path.endswith("img_001.png"):
            raise RuntimeError("boom")
        return real_decode(path, *args)

    monkeypatch.setattr(reader, "_decode", decode)
    with ImageReader(tmp_path, names, batch_size=4, size=(3, 3), workers=2) as images:
        [batch] = list(images)
    assert batch.failures == [Failure("img_001.png", "corrupt", "RuntimeError: boom")]
    assert batch.paths == [names[0]] + names[2:] and batch.images.shape == (3, 3, 3, 3)


def test_a_batch_where_everything_failed_has_no_rows(tmp_path):
    with ImageReader(tmp_path, ["a.png", "b.png", "c.png"], batch_size=2, size=(5, 6), workers=1) as images:
        batches = list(images)
    assert [batch.images.shape for batch in batches] == [(0, 5, 6, 3), (0, 5, 6, 3)]
    assert all(batch.images.dtype == np.uint8 for batch in batches)
    assert [failure.kind for batch in batches for failure in batch.failures] == ["missing"] * 3


def test_reader_defaults_and_length(tmp_path):
    images = ImageReader(tmp_path, ["a"] * 10, batch_size=4)
    assert (len(images), images.workers, images.size, images.prefetch_batches) == (3, os.cpu_count() or 1,
                                                                                    (224, 224), 2)
    assert len(ImageReader(tmp_path, [], batch_size=4)) == 0
    assert list(ImageReader(tmp_path, [], batch_size=4)) == []


@pytest.mark.parametrize("options, message", [
    (dict(batch_size=0), "batch_size must be at least 1; got 0"),
    (dict(resize="squash"), "resize must be one of crop, stretch; got 'squash'"),
    (dict(workers=0), "workers must be at least 1; got 0"),
    (dict(prefetch_batches=0), "prefetch_batches must be at least 1; got 0"),
    (dict(size=(224, -1)), r"got \(224, -1\)"),
    (dict(max_pixels=-3), "max_pixels must be at least 1; got -3"),
])
def test_reader_refuses_bad_arguments_naming_them(tmp_path, options, message):
    arguments = dict(root=tmp_path, paths=["a.png"], batch_size=2)
    arguments.update(options)
    with pytest.raises(ValueError, match=message):
        ImageReader(**arguments)
