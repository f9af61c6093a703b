"""search/leakage.py and `duplicates --against`: the rows of one output with a near-copy in another, and nothing
else; outputs that cannot be compared, or an index against itself, refused with one line."""

import numpy as np
import pyarrow.parquet as pq
import pytest

import search_features
from search.index import Index
from search.leakage import find_leaks
from search_data import SETTINGS, clustered, near_copy, write_npy

COPIED = {3: 12, 7: 12, 30: 41, 55: 2}  # a row of the test split: the row of the training split it copies


@pytest.fixture(scope="module")
def splits(tmp_path_factory):
    """A training output (rows img/00000 ..) and a test output (rows img/01000 ..) whose COPIED rows are near-copies
    of training rows, and their indexes (the test split's its own mean: centring differs between them)."""
    folder = tmp_path_factory.mktemp("splits")
    train = clustered(80, seed=1)
    test = clustered(60, seed=2) * 1.3
    for row, original in COPIED.items():
        test[row] = near_copy(train[original], seed=row)
    write_npy(folder / "train.npy", train)
    write_npy(folder / "test.npy", test, first=1000)
    return (Index.build(folder / "train.npy", folder / "train.index"),
            Index.build(folder / "test.npy", folder / "test.index", kind="hnsw"))


def test_against_lists_the_planted_copies_across_two_outputs_and_nothing_else(splits, tmp_path, capsys):
    train, test = splits
    assert search_features.main(["duplicates", str(test.folder), "--against", str(train.folder),
                                 "--threshold", "0.95"]) == 0
    rows = pq.read_table(test.folder / "leakage.parquet").to_pylist()
    assert [(line["key"], line["kept_key"], line["group"], line["remove"]) for line in rows] == [
        ("img/01055.jpg", "img/00002.jpg", 1, True), ("img/01003.jpg", "img/00012.jpg", 2, True),
        ("img/01007.jpg", "img/00012.jpg", 2, True), ("img/01030.jpg", "img/00041.jpg", 3, True)]
    # The cosine centred on the training split's mean: the score a training row would have with it.
    for line in rows:
        vectors = np.load(test.meta["source"]["output"])[int(line["key"][4:9]) - 1000]
        expected = train.prepare(vectors)[0] @ train.stored([train.row(line["kept_key"])])[0]
        assert line["score"] == pytest.approx(expected, abs=1e-5)
    assert "4 rows of %s have a near-copy in %s" % (test.meta["source"]["output"], train.meta["source"]["output"]) \
        in capsys.readouterr().err
    keys, _, _ = find_leaks(train, test, 0.95)
    assert sorted(keys) == ["img/00002.jpg", "img/00012.jpg", "img/00041.jpg"]


def test_outputs_that_cannot_be_compared_are_refused(splits, tmp_path, capsys):
    train, _ = splits
    write_npy(tmp_path / "other.npy", clustered(20, dims=32), settings=dict(SETTINGS, layer="fc6"))
    other = Index.build(tmp_path / "other.npy", tmp_path / "other.index")
    for against, words in ((other.folder, "holds 64 features a row"), (train.folder, "is the index itself")):
        status = search_features.main(["--quiet", "duplicates", str(train.folder), "--against", str(against),
                                       "--removals", str(tmp_path / "leaks.parquet")])
        error = capsys.readouterr().err
        assert status == 2 and error.count("\n") == 1 and words in error, error
    assert not (tmp_path / "leaks.parquet").exists()
