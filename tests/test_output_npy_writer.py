"""Tests of parallel/output/npy_writer.py: the bytes numpy writes, a damaged part refused."""

import os

import numpy as np
import pytest
from outputs import SETTINGS, assert_same_content, make_batch

from parallel.output import OutputError, npy_writer, open_writer


@pytest.mark.parametrize("shape", [(0, 3), (1, 4096), (5, 7), (1000, 3), (12345, 1)])
def test_npy_output_and_parts_have_the_bytes_of_open_memmap_and_numpy_save(tmp_path, monkeypatch, shape):
    features = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    mapped = np.lib.format.open_memmap(tmp_path / "open_memmap.npy", mode="w+", dtype=np.float32, shape=shape)
    mapped[:] = features
    mapped.flush()
    del mapped
    paths = ["image_%d.jpg" % row for row in range(shape[0])]
    half = (shape[0] + 1) // 2
    batches = [batch for batch in [(paths[:half], features[:half]), (paths[half:], features[half:])] if batch[0]]
    output = tmp_path / "job" / "out.npy"
    monkeypatch.setattr(npy_writer, "_COPY_BYTES", 1000)  # blocks that split rows and floats
    copied = []
    real_write_npy = npy_writer._write_npy

    def write_npy(path, rows, feature_size, blocks):
        real_write_npy(path, rows, feature_size, (copied.append(len(block)) or block for block in blocks))
    with open_writer(output, format="npy", feature_size=shape[1], settings=SETTINGS) as writer:
        for index, (batch_paths, batch_features) in enumerate(batches):
            writer.write(batch_paths, batch_features)
            np.save(tmp_path / "save.npy", batch_features)
            part = tmp_path / "job" / "out.npy.parts" / ("part-%06d.npy" % index)
            assert part.read_bytes() == (tmp_path / "save.npy").read_bytes()
        monkeypatch.setattr(npy_writer, "_write_npy", write_npy)
    assert output.read_bytes() == (tmp_path / "open_memmap.npy").read_bytes()
    # The parts are copied a block at a time, never a whole part: memory stays bounded.
    assert sum(copied) == features.nbytes and all(size <= 1000 for size in copied)


def two_parts_the_second_cut(tmp_path, digests=True):
    """An output of two committed npy parts (as a kill leaves it), the second's last 4 bytes cut off."""
    output = tmp_path / "out.npy"
    writer = open_writer(output, format="npy", feature_size=64, settings=SETTINGS)
    writer.write(*make_batch(0))
    writer.write(*make_batch(1))
    writer.abort()
    if not digests:  # as an earlier version wrote its parts
        (tmp_path / "out.npy.parts" / "part-000001.sha256").unlink()
    part = tmp_path / "out.npy.parts" / "part-000001.npy"
    part.write_bytes(part.read_bytes()[:-4])
    return output


def test_a_damaged_npy_part_is_set_aside_and_its_rows_computed_again(tmp_path):
    output = two_parts_the_second_cut(tmp_path)
    writer = open_writer(output, format="npy", feature_size=64, settings=SETTINGS)
    assert writer.completed == frozenset(make_batch(0)[0])  # part 1 did not check out: its rows are to compute
    writer.write(*make_batch(1))
    writer.close()
    assert_same_content(output, "npy", [make_batch(0), make_batch(1)])


def test_a_damaged_npy_part_of_an_earlier_version_is_refused_when_merging(tmp_path):
    """A part written before parts carried their SHA-256 is still checked by its shape."""
    output = two_parts_the_second_cut(tmp_path, digests=False)
    with pytest.raises(OutputError, match="part-000001.npy is damaged: pass --overwrite"):
        open_writer(output, format="npy", feature_size=64, settings=SETTINGS).close()
    assert sorted(os.listdir(tmp_path)) == ["out.npy.parts", "out.npy.run.json"]
