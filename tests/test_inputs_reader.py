"""The reader: decoded batches in order, prefetch that overlaps and is bounded, cancellation, failures per batch."""

import os
import threading
import time

import numpy as np
import pytest
from PIL import Image

from hangs import HANG_SECONDS
from image_files import BLUE, RED, solid, write_bad_files
from parallel.inputs import reader
from parallel.inputs.decode import ImageError, decode_row, load_image
from parallel.inputs.resize import Resize
from parallel.inputs.manifest import discover_images
from parallel.inputs.reader import Batch, Failure, ImageReader


def reader_threads():
    return [thread for thread in threading.enumerate()
            if thread.name.startswith(reader._THREAD_PREFIX) and thread.is_alive()]


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
        # The step keeps its shape (a model's rounding may depend on it): a failed image's slot holds zeros.
        assert batch.images.shape == (len(chunk), 4, 4, 3) and batch.images.dtype == np.uint8
        slots = {path: slot for slot, path in enumerate(chunk)}
        assert list(batch.features_of_paths(np.arange(len(chunk)))) == [slots[path] for path in batch.paths]
        for path in chunk:
            assert (batch.images[slots[path]] == (colours[path] if path in colours else 0)).all(), path
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


def test_batches_equal_sequential_decoding_byte_for_byte(tmp_path):
    names = _tiny_images(tmp_path, 30)
    expected = np.stack([load_image(tmp_path / name, size=(8, 8)) for name in names])
    rng = np.random.default_rng(4)
    delays = iter(rng.uniform(0, 0.004, 1000))

    def shuffled(*args):  # finish out of order
        time.sleep(next(delays))
        return decode_row(*args)

    with ImageReader(tmp_path, names, batch_size=4, size=(8, 8), workers=2, prefetch_batches=1,
                     decode=shuffled) as images:
        batches = list(images)
    assert [len(batch.paths) for batch in batches] == [4] * 7 + [2]
    assert [path for batch in batches for path in batch.paths] == names
    assert np.concatenate([batch.images for batch in batches]).tobytes() == expected.tobytes()


def test_the_reader_resizes_by_the_rule_it_is_given_and_hands_it_to_its_decode(tmp_path):
    rng = np.random.default_rng(3)
    names = ["portrait.png", "landscape.png"]
    for name, shape in zip(names, ((70, 41, 3), (33, 58, 3))):
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(tmp_path / name)
    rule = Resize("crop", "bicubic", 20)
    seen = []

    def spy(path, images, row, size, resize, max_pixels):
        seen.append(resize)
        return decode_row(path, images, row, size, resize, max_pixels)

    for decode in (decode_row, spy):
        with ImageReader(tmp_path, names, batch_size=2, size=(16, 16), resize=rule, workers=2, decode=decode) as images:
            [batch] = list(images)
        for name, pixels in zip(names, batch.images):
            assert np.array_equal(pixels, load_image(tmp_path / name, (16, 16), rule)), name
            assert not np.array_equal(pixels, load_image(tmp_path / name, (16, 16))), name
    assert seen == [rule, rule]
    with ImageReader(tmp_path, names, batch_size=2, size=(16, 16), workers=1, decode=spy) as images:
        list(images)
    assert seen[2:] == [Resize(), Resize()]  # "crop", checked: VGG16's rule
    with pytest.raises(ValueError, match="resize short side must be at least the larger side of size"):
        ImageReader(tmp_path, names, batch_size=2, size=(24, 24), resize=rule)


def fill_with_index(path, images, row, size, resize, max_pixels):
    """A fake decode of the paths "0", "1", ...: the row is filled with the path's number (mod 256)."""
    time.sleep(0.001)
    images[row] = int(os.path.basename(path)) % 256


class Counting:
    """A decoder that counts the calls to another.

    Attributes:
      started, decoded: calls begun, calls ended.
      yielded: images the caller has been handed; the test keeps it.
      peak: the most images started and not yet yielded. A worker starts only what the reader
        has submitted, so this is at most the reader's own count, and equals it once the
        workers have caught up.
    """

    def __init__(self, decode):
        self.decode = decode
        self.lock = threading.Lock()
        self.started = self.decoded = self.yielded = self.peak = 0

    def __call__(self, *args):
        with self.lock:
            self.started += 1
            self.peak = max(self.peak, self.started - self.yielded)
        failed = self.decode(*args)
        with self.lock:
            self.decoded += 1
        return failed


@pytest.fixture
def counted():
    """Fake decodes (a row of the path's index), counted."""
    return Counting(fill_with_index)


def _wait_for(condition):
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_prefetch_overlaps_the_consumer_and_is_bounded(tmp_path, counted):
    batch_size, prefetch, total = 5, 2, 300
    paths = [str(index) for index in range(total)]
    seen = []
    with ImageReader(tmp_path, paths, batch_size, size=(2, 2), workers=2, prefetch_batches=prefetch,
                     decode=counted) as images:
        for batch in images:
            # While we hold this batch, the next `prefetch` batches decode without being asked for.
            # This batch counts as yielded only after the wait, so `peak` sees all that was
            # submitted when it was handed over: itself and the `prefetch` batches ahead.
            ahead = min(counted.yielded + (prefetch + 1) * batch_size, total)
            assert _wait_for(lambda: counted.decoded >= ahead), (counted.decoded, ahead)
            counted.yielded += len(batch.paths) + len(batch.failures)
            seen.extend(batch.paths)
            assert (batch.images[:, 0, 0, 0] == [int(path) % 256 for path in batch.paths]).all()
            time.sleep(0.002)  # a slow consumer
    assert seen == paths and counted.started == total
    assert counted.peak == (prefetch + 1) * batch_size


def test_leaving_early_cancels_and_stops_the_threads(tmp_path, counted):
    paths = [str(index) for index in range(200)]
    with ImageReader(tmp_path, paths, batch_size=4, size=(2, 2), workers=2, prefetch_batches=2,
                     decode=counted) as images:
        for batch in images:
            assert reader_threads()
            break
        assert not reader_threads()  # the dropped iterator already shut its pool down
    assert not reader_threads()
    started = counted.started
    assert started <= 3 * 4
    time.sleep(0.05)
    assert counted.started == started
    with pytest.raises(ValueError, match="closed"):
        iter(images)


def test_close_while_holding_the_iterator_cancels_pending_decodes(tmp_path, counted):
    images = ImageReader(tmp_path, [str(index) for index in range(200)], batch_size=4, size=(2, 2), workers=1,
                         prefetch_batches=3, decode=counted)
    batches = iter(images)
    next(batches)
    images.close()  # `batches` is still referenced: close() must close it
    assert not reader_threads()
    decoded = counted.decoded
    assert counted.started <= 4 * 4 and decoded <= counted.started
    time.sleep(0.05)
    assert counted.decoded == decoded
    assert list(batches) == []
    images.close()  # idempotent


def test_an_unexpected_exception_is_a_corrupt_failure(tmp_path):
    names = _tiny_images(tmp_path, 4)

    def failing(path, *args):
        if path.endswith("img_001.png"):
            raise RuntimeError("boom")
        return decode_row(path, *args)

    with ImageReader(tmp_path, names, batch_size=4, size=(3, 3), workers=2, decode=failing) as images:
        [batch] = list(images)
    assert batch.failures == [Failure("img_001.png", "corrupt", "RuntimeError: boom")]
    assert batch.paths == [names[0]] + names[2:] and batch.images.shape == (4, 3, 3, 3)  # the step's shape
    assert not batch.images[1].any() and list(batch.rows) == [0, 2, 3]


def test_a_decoder_fails_an_image_by_returning_its_kind_or_raising_an_image_error(tmp_path):
    names = _tiny_images(tmp_path, 3)
    outcomes = {"img_000.png": ("empty", "returned"), "img_002.png": ImageError("too_large", "raised")}

    def judging(path, *args):
        outcome = outcomes.get(os.path.basename(path))
        if isinstance(outcome, ImageError):
            raise outcome
        return outcome or decode_row(path, *args)

    with ImageReader(tmp_path, names, batch_size=3, size=(3, 3), workers=1, decode=judging) as images:
        [batch] = list(images)
    assert batch.failures == [Failure("img_000.png", "empty", "returned"),
                              Failure("img_002.png", "too_large", "raised")]
    assert batch.paths == ["img_001.png"]
    assert batch.features_of_paths(batch.images).tobytes() == load_image(tmp_path / "img_001.png",
                                                                         size=(3, 3)).tobytes()


def test_a_batch_where_everything_failed_has_no_rows(tmp_path):
    with ImageReader(tmp_path, ["a.png", "b.png", "c.png"], batch_size=2, size=(5, 6), workers=1) as images:
        batches = list(images)
    assert [batch.images.shape for batch in batches] == [(2, 5, 6, 3), (1, 5, 6, 3)]  # zeros, never computed
    assert not any(batch.images.any() or batch.paths for batch in batches)
    assert all(batch.images.dtype == np.uint8 for batch in batches)
    assert [failure.kind for batch in batches for failure in batch.failures] == ["missing"] * 3


def test_reader_defaults_and_length(tmp_path):
    images = ImageReader(tmp_path, ["a"] * 10, batch_size=4)
    assert (len(images), images.workers, images.size, images.prefetch_batches) == (3, os.cpu_count() or 1,
                                                                                    (224, 224), 2)
    assert images.decode is decode_row
    assert len(ImageReader(tmp_path, [], batch_size=4)) == 0
    assert list(ImageReader(tmp_path, [], batch_size=4)) == []


@pytest.mark.parametrize("options, message", [
    (dict(batch_size=0), "batch_size must be at least 1; got 0"),
    (dict(resize="squash"), "resize must be one of crop, stretch; got 'squash'"),
    (dict(workers=0), "workers must be at least 1; got 0"),
    (dict(prefetch_batches=0), "prefetch_batches must be at least 1; got 0"),
    (dict(size=(224, -1)), r"got \(224, -1\)"),
    (dict(max_pixels=-3), "max_pixels must be at least 1; got -3"),
    (dict(decode="decode_row"), "decode must be callable; got 'decode_row'"),
    (dict(chunks=[3]), r"chunks must be lengths of 1 .. batch_size=2 adding up to the 1 paths; got 1 chunks"),
    (dict(chunks=[1, 1]), "adding up to the 1 paths; got 2 chunks adding up to 2"),
])
def test_reader_refuses_bad_arguments_naming_them(tmp_path, options, message):
    arguments = dict(root=tmp_path, paths=["a.png"], batch_size=2)
    arguments.update(options)
    with pytest.raises(ValueError, match=message):
        ImageReader(**arguments)


def test_chunks_cut_the_batches_where_they_say(tmp_path):
    names = ["%d.png" % index for index in range(6)]
    for name in names:
        solid((4, 4), RED).save(tmp_path / name)
    with ImageReader(tmp_path, names, batch_size=3, size=(4, 4), workers=2, chunks=[1, 3, 2]) as images:
        assert len(images) == 3
        assert [batch.paths for batch in images] == [names[:1], names[1:4], names[4:]]


@pytest.mark.parametrize("positions, step_size, lengths", [
    ([], 4, []),
    ([0, 1, 2, 3, 4, 5], 4, [4, 2]),
    ([1, 3, 4, 7, 8, 13], 4, [2, 2, 1, 1]),  # steps 0, 1, 2 and 3 of the job, whatever is left of each
    ([5], 2, [1]),
])
def test_step_lengths_follow_fixed_positions_of_the_job(positions, step_size, lengths):
    assert reader.step_lengths(positions, step_size) == lengths


def test_step_lengths_refuse_positions_out_of_order():
    with pytest.raises(ValueError, match="positions must be increasing"):
        reader.step_lengths([3, 1], 2)
