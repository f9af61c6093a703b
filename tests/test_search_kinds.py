"""search/kinds.py: the kind for a size, the ivfpq index's lists and the sample that trains them."""

import numpy as np

import search.kinds
from search.index import Index
from search.kinds import TRAIN_PER_LIST, choose_kind, normalise, normalise_in_place, training_rows
from search_data import clustered, write_npy


def test_the_kind_follows_the_size():
    assert choose_kind(1000, 4096) == "exact"
    assert choose_kind(16_384, 4096) == "exact"  # 256 MiB: one query 16-28 ms on the benchmark's machine
    assert choose_kind(16_385, 4096, available_bytes=64 << 30) == "hnsw"
    assert choose_kind(200_000, 4096, available_bytes=64 << 30) == "hnsw"
    assert choose_kind(65_536, 1024) == "exact"
    assert choose_kind(500_000, 4096, available_bytes=64 << 30) == "hnsw"
    assert choose_kind(500_000, 4096, available_bytes=8 << 30) == "ivfpq"


def test_the_lists_visited_grow_with_the_lists():
    from search.kinds import _nprobe
    assert [_nprobe(nlist) for nlist in (16, 64, 1024, 4096, 16384)] == [16, 32, 32, 128, 512]


def test_the_sample_trains_each_list_with_faiss_s_minimum_within_its_bytes():
    assert training_rows("exact", 10_000_000, 512) == 0 and training_rows("hnsw", 10_000_000, 512) == 0
    assert training_rows("ivfpq", 10_000_000, 512) == 524_288  # 1 GiB: 8,192 lists of the 16,384 asked for
    assert search.kinds._nlist(10_000_000, 524_288) == 8192
    assert training_rows("ivfpq", 1_000_000, 4096) == 65_536  # 1 GiB
    assert search.kinds._nlist(1_000_000, 65_536) == 1024
    assert training_rows("ivfpq", 1_000_000, 512) == TRAIN_PER_LIST * 4096
    assert search.kinds._nlist(1_000_000, TRAIN_PER_LIST * 4096) == 4096
    assert training_rows("ivfpq", 20_000, 512) == 20_000  # at least TRAIN_ROWS, never more than the rows


def test_an_index_of_more_rows_than_its_sample_trains_no_list_on_fewer_rows_than_faiss_asks(tmp_path, monkeypatch,
                                                                                              capfd):
    # The sample held to 3,000 rows of the 20,000 (whose 4 sqrt(N) asks for 512 lists): before (4bb8621), its
    # 512 lists were trained on the TRAIN_ROWS sampled, 2 each, and faiss warned on stderr; now 64, 46 rows each.
    monkeypatch.setattr(search.kinds, "TRAIN_ROWS", 1000)
    monkeypatch.setattr(search.kinds, "TRAIN_BYTES", 3000 * 64 * 4)
    write_npy(tmp_path / "f.npy", clustered(20_000))
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind="ivfpq")
    parameters = index.meta["parameters"]
    assert parameters["trained_on"] == 3000 and parameters["nlist"] == 64
    assert "WARNING" not in capfd.readouterr().err
    assert index.meta["recall_at_build"]["recall"] >= 0.9


def test_normalising_in_place_gives_normalise_s_values():
    rows = clustered(1000)
    mean = rows.mean(axis=0)
    rows[7] = mean  # a row at the centre stays 0
    expected = normalise(rows, mean)
    assert normalise_in_place(rows, mean, rows=300) is rows
    np.testing.assert_array_equal(rows, expected)
