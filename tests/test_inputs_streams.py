"""A stream of (key, bytes) decoded a batch at a time, in order, with the rules of a file's decode."""

import io
import threading

import numpy as np
import pytest
from PIL import Image

from parallel.inputs.decode import ImageError, load_image
from parallel.inputs.resize import Resize
from parallel.inputs.streams import StreamReader


def png(value):
    buffer = io.BytesIO()
    Image.fromarray(np.full((6, 9, 3), value, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_batches_of_the_stream_in_order_with_failures_in_place(tmp_path):
    items = [("k%d" % index, png(index * 10)) for index in range(7)]
    items[2] = ("k2", b"not an image")
    items[5] = ("k5", ImageError("corrupt", "truncated"))
    with StreamReader(iter(items), batch_size=3, size=(4, 4), workers=2) as reader:
        batches = list(reader)
    assert [batch.paths for batch in batches] == [["k0", "k1"], ["k3", "k4"], ["k6"]]
    assert [(f.path, f.kind) for batch in batches for f in batch.failures] == [("k2", "not_an_image"),
                                                                               ("k5", "corrupt")]
    assert reader.count == 7
    (tmp_path / "k4.png").write_bytes(items[4][1])
    assert (batches[1].images[1] == load_image(tmp_path / "k4.png", size=(4, 4))).all()


def test_keys_done_are_read_past_their_slots_zeros_and_a_step_of_only_those_is_not_given():
    items = [("k%d" % index, png(index * 10 + 5)) for index in range(7)]
    done = {"k0", "k2", "k3", "k4", "k5"}
    with StreamReader(iter(items), batch_size=3, size=(4, 4), workers=2, done=done) as reader:
        batches = list(reader)
    assert [batch.paths for batch in batches] == [["k1"], ["k6"]]  # steps k0-k2, k6 (k3-k5 all done)
    assert [batch.images.shape[0] for batch in batches] == [3, 1]  # each the step of an uninterrupted read
    assert not batches[0].images[[0, 2]].any() and batches[0].images[1].all()
    assert batches[0].rows.tolist() == [1] and batches[1].rows is None  # k6 is the whole of its step
    assert (reader.count, reader.done_count) == (7, 5)


def test_the_stream_is_read_ahead_no_further_than_its_bound_and_closing_stops_it():
    taken = []

    def endless():
        for index in range(10 ** 6):
            taken.append(index)
            yield "k%d" % index, png(1)

    with StreamReader(endless(), batch_size=2, size=(2, 2), workers=1, prefetch_batches=1) as reader:
        batches = iter(reader)
        next(batches)
        threading.Event().wait(0.3)
        assert len(taken) <= 2 * 4  # the batch held, one decoding, one queued, one being read
    assert not any(thread.name.startswith("StreamReader") for thread in threading.enumerate())


def test_an_error_of_the_stream_itself_reaches_the_caller():
    def broken():
        yield "k0", png(1)
        raise OSError("the disk went away")

    with StreamReader(broken(), batch_size=1, size=(2, 2), workers=1) as reader, \
            pytest.raises(OSError, match="the disk went away"):
        list(reader)


def test_a_stream_is_resized_by_the_rule_it_is_given(tmp_path):
    rng = np.random.default_rng(4)
    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (31, 52, 3), dtype=np.uint8)).save(buffer, format="PNG")
    (tmp_path / "k0.png").write_bytes(buffer.getvalue())
    rule = Resize("crop", "bicubic", 12)
    with StreamReader(iter([("k0", buffer.getvalue())]), batch_size=1, size=(10, 10), resize=rule,
                      workers=1) as reader:
        [batch] = list(reader)
    assert np.array_equal(batch.images[0], load_image(tmp_path / "k0.png", (10, 10), rule))
    assert not np.array_equal(batch.images[0], load_image(tmp_path / "k0.png", (10, 10)))
