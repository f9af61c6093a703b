"""search/removals.py and `duplicates --removals`: on a collection with planted copies, the removals file lists
exactly the planted copies, one row kept a group by each rule; a rule the output cannot serve is refused first."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import search_features
from parallel.inputs.manifest import Manifest, manifest_path
from parallel.output.text_rows import TEXT_SUFFIX, TextRows, write_rows
from search import removals
from search.index import Index
from search_data import SETTINGS, clustered, near_copy, write_npy

THRESHOLD = "0.98"
# Planted groups: {original: its copies}; rows 60.. are the copies, in this order.
PLANTED = {0: [60, 61], 7: [62], 20: [63]}
SIZES = {0: 100, 60: 300, 61: 200, 7: 500, 62: 400, 20: 10, 63: 10}  # image bytes; 20 and 63 tie
CAPTIONS = {0: 0.2, 60: 0.1, 61: 0.3, 7: np.nan, 62: 0.25, 20: 0.3, 63: 0.3}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """An output of 64 rows with the PLANTED copies, image files of SIZES bytes and its manifest, and its index."""
    folder = tmp_path_factory.mktemp("planted")
    vectors = clustered(60, seed=3)
    copies = [near_copy(vectors[original], seed=copy) for original, group in PLANTED.items() for copy in group]
    images = folder / "images"
    (images / "img").mkdir(parents=True)
    for row in range(64):
        (images / "img" / ("%05d.jpg" % row)).write_bytes(b"x" * SIZES.get(row, 50))
    output = folder / "f.npy"
    write_npy(output, np.concatenate([vectors, np.stack(copies)]), settings=dict(SETTINGS, images=str(images)))
    Manifest.scan(images).save(manifest_path(output))
    return Index.build(output, folder / "f.index")


@pytest.fixture
def captioned(planted):
    """The planted output's text file as a job with --text-column writes it (parallel/output/text_rows.py), each
    row's caption score CAPTIONS' (0 where it names none); removed after the test."""
    path = Path(planted.meta["source"]["output"] + TEXT_SUFFIX)
    rows = [int(key[4:9]) for key in planted.paths]
    write_rows(path, TextRows(list(planted.paths), embeddings=np.ones((len(rows), 2), np.float32),
                              errors=[None] * len(rows),
                              scores=np.array([CAPTIONS.get(row, 0.0) for row in rows], np.float32)))
    yield path
    path.unlink()


def _read(path):
    table = pq.read_table(path)
    return table.to_pylist(), json.loads(table.schema.metadata[b"search.removals"])


@pytest.mark.parametrize("rule, kept", [("first-key", {0, 7, 20}), ("largest-image", {60, 7, 20}),
                                        ("highest-caption-score", {61, 62, 20})])
def test_the_removals_file_lists_the_planted_copies_one_kept_a_group(planted, captioned, tmp_path, rule, kept):
    assert search_features.main(["--quiet", "duplicates", str(planted.folder), "--threshold", THRESHOLD,
                                 "--removals", str(tmp_path / "r.parquet"), "--keep-rule", rule]) == 0
    rows, metadata = _read(tmp_path / "r.parquet")
    key = "img/%05d.jpg".__mod__
    groups = {frozenset([original] + copies) for original, copies in PLANTED.items()}
    found = {}
    for line in rows:
        found.setdefault(line["group"], []).append(line)
    assert {frozenset(int(line["key"][4:9]) for line in group) for group in found.values()} == groups
    for group in found.values():
        [keeper] = [line for line in group if not line["remove"]]
        assert group[0] is keeper and keeper["kept_key"] == keeper["key"] and keeper["score"] is None
        assert int(keeper["key"][4:9]) in kept
        for line in group[1:]:
            assert line["remove"] and line["kept_key"] == keeper["key"] and line["score"] >= float(THRESHOLD)
            vectors = planted.stored([planted.row(line["key"]), planted.row(keeper["key"])])
            assert line["score"] == pytest.approx(float(vectors[0] @ vectors[1]), abs=1e-6)
    assert {line["key"] for line in rows if line["remove"]} == {
        key(row) for group in groups for row in group} - {key(row) for row in kept}
    assert metadata == {"index": str(planted.folder), "threshold": float(THRESHOLD), "kind": "exact",
                        "keep_rule": rule}
    assert removals.removed_keys(tmp_path / "r.parquet") == {line["key"] for line in rows if line["remove"]}


def test_a_caption_rule_on_an_output_without_caption_scores_is_refused_first(planted, tmp_path, capsys):
    status = search_features.main(["--quiet", "duplicates", str(planted.folder), "--threshold", THRESHOLD,
                                   "--removals", str(tmp_path / "r.parquet"), "--keep-rule", "highest-caption-score",
                                   "--pairs", str(tmp_path / "pairs.csv")])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1 and "has no caption scores" in error
    assert not (tmp_path / "r.parquet").exists() and not (tmp_path / "pairs.csv").exists()


def test_image_sizes_come_from_the_manifest_and_ties_keep_the_first_key(planted):
    rows = np.array([0, 60, 61, 5], np.int64)
    assert removals.image_bytes(planted, rows).tolist() == [100, 300, 200, 50]
    assert removals.kept_rows(planted, [[20, 63], [5, 0]], "largest-image").tolist() == [20, 0]
    with pytest.raises(ValueError, match="keep rule 'biggest'"):
        removals.kept_rows(planted, [[0, 60]], "biggest")


def test_a_file_that_is_not_a_removals_file_is_refused(planted, tmp_path):
    with pytest.raises(ValueError, match="is not a removals file"):
        removals.removed_keys(planted.folder / "index.json")
