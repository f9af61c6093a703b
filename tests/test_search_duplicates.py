"""search.duplicates: the pair list against brute force, groups, the histogram, the threshold it suggests, the CSV
files."""

import csv

import numpy as np
import pytest

from search import duplicates
from search.duplicates import find_pairs, group_pairs, histogram, histogram_text, nearest_scores, suggest_threshold
from search.index import Index, normalise
from search_data import clustered, write_npy


def with_copies(rows=2000, copies=150, seed=0):
    """Clustered vectors, the last `copies` rows near-copies (small noise) of the first `copies`."""
    vectors = clustered(rows - copies, seed=seed)
    rng = np.random.default_rng(seed + 7)
    near = np.maximum(vectors[:copies] + 0.02 * rng.standard_normal(vectors[:copies].shape), 0)
    return np.concatenate([vectors, near.astype(np.float32)])


def brute_force_pairs(vectors, threshold):
    unit = normalise(vectors, vectors.mean(axis=0))
    scores = unit @ unit.T
    left, right = np.nonzero(np.triu(scores >= threshold, k=1))
    return set(zip(left.tolist(), right.tolist())), scores


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dup")
    vectors = with_copies()
    write_npy(folder / "f.npy", vectors)
    return folder, vectors, {kind: Index.build(folder / "f.npy", folder / ("%s.index" % kind), kind=kind)
                             for kind in ("exact", "hnsw", "ivfpq")}


@pytest.mark.parametrize("threshold", [0.95, 0.8, 0.5])
def test_the_exact_pair_list_is_that_of_brute_force(indexed, threshold, monkeypatch):
    _, vectors, indexes = indexed
    monkeypatch.setattr(duplicates, "BLOCK", 300)  # several blocks, a ragged last one
    pairs, scores = find_pairs(indexes["exact"], threshold)
    expected, matrix = brute_force_pairs(vectors, threshold)
    found = set(map(tuple, pairs.tolist()))
    # Equal up to the pairs within float32 rounding of the threshold.
    borderline = {pair for pair in expected ^ found if abs(matrix[pair] - threshold) < 1e-5}
    assert found - borderline == expected - borderline
    assert np.all(pairs[:, 0] < pairs[:, 1])
    np.testing.assert_allclose(scores, matrix[pairs[:, 0], pairs[:, 1]], atol=1e-5)


@pytest.mark.parametrize("kind", ["hnsw", "ivfpq"])
def test_the_approximate_kinds_find_the_near_copies(indexed, kind):
    _, vectors, indexes = indexed
    expected, _ = brute_force_pairs(vectors, 0.9)
    found = set(map(tuple, find_pairs(indexes[kind], 0.9)[0].tolist()))
    assert len(expected & found) >= 0.95 * len(expected)
    copies = {(row, row + 1850) for row in range(150)}
    assert len(copies & found) >= 0.95 * len(copies)


def test_groups_are_the_connected_components_largest_first():
    pairs = np.array([[0, 1], [5, 6], [1, 2], [8, 9], [6, 7], [7, 5], [2, 3]])
    assert group_pairs(pairs, 12) == [[0, 1, 2, 3], [5, 6, 7], [8, 9]]
    assert group_pairs(np.zeros((0, 2), np.int64), 3) == []


def test_the_histogram_of_nearest_scores(indexed):
    _, vectors, indexes = indexed
    scores = nearest_scores(indexes["exact"], sample=500)
    unit = normalise(vectors, vectors.mean(axis=0))
    matrix = unit @ unit.T
    np.fill_diagonal(matrix, -np.inf)
    assert len(scores) == 500
    assert set(np.round(scores, 4)) <= set(np.round(matrix.max(axis=1), 4))
    counts, edges = histogram(scores)
    assert counts.sum() == 500 and len(edges) == 101
    text = histogram_text(counts, edges)
    assert "#" in text and text.splitlines()[-1].startswith(" 0.98- 1.00")  # the near-copies


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_the_suggested_threshold_groups_the_planted_near_copies_and_nothing_else(indexed, kind):
    _, vectors, indexes = indexed  # rows 1850-1999: near-copies of rows 0-149
    _, matrix = brute_force_pairs(vectors, 1.0)
    np.fill_diagonal(matrix, -np.inf)
    nearest = matrix.max(axis=1)
    copies, rest = nearest[list(range(150)) + list(range(1850, 2000))].min(), nearest[150:1850].max()
    assert rest < copies  # planted apart: a threshold between them exists
    threshold, why = suggest_threshold(nearest_scores(indexes[kind]), len(indexes[kind]))
    assert rest < threshold <= copies
    groups = group_pairs(find_pairs(indexes[kind], threshold)[0], 2000)
    assert sorted(groups) == [[row, row + 1850] for row in range(150)]
    assert why == ("suggested threshold %r: in the gap between the 300 rows (15.0%%) whose nearest neighbour scores "
                   "%.3f or more and the rest, at most %.3f (from 2,000 rows' nearest neighbours)"
                   % (threshold, copies, rest))
    # From a sample, said so; the gap is the same.
    threshold, why = suggest_threshold(nearest_scores(indexes[kind], sample=500), 2000)
    assert rest < threshold <= copies and why.endswith("(from the nearest neighbours of a sample of 500 of the "
                                                       "2,000 rows)")


def test_no_threshold_is_suggested_for_rows_without_near_copies(tmp_path):
    write_npy(tmp_path / "f.npy", clustered(2000, seed=1))
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index")
    scores = nearest_scores(index)
    threshold, why = suggest_threshold(scores, len(index))
    assert threshold is None and why.startswith("no threshold suggested: no gap in 2,000 rows' nearest neighbours "
                                                "sets a group of near-copies apart from the rest (the most telling, "
                                                "below ")
    assert why.endswith("comes by chance more than 1 time in 100); the highest score is %.3f: choose one from the "
                        "histogram" % scores.max())
    assert suggest_threshold(scores[:15]) == (None, "no threshold suggested: 15 rows' nearest neighbours are too "
                                                    "few to tell near-copies from the rest; choose one from the "
                                                    "histogram")
    assert suggest_threshold(np.zeros(0))[0] is None


def test_exact_copies_tied_at_1_are_told_apart_from_a_smooth_rest():
    rng = np.random.default_rng(0)
    rest = 0.6 + 0.3 * rng.beta(5, 2, 1000)  # smooth, its highest about 0.9
    assert suggest_threshold(rest) == (None, suggest_threshold(rest)[1])
    threshold, why = suggest_threshold(np.concatenate([rest, np.ones(40)]))
    assert rest.max() < threshold <= 1.0 and "the 40 rows (3.8%) whose nearest neighbour scores 1.000 or more" in why


def test_pairs_and_groups_files(tmp_path, indexed):
    _, _, indexes = indexed
    index = indexes["exact"]
    pairs, scores = find_pairs(index, 0.97)
    duplicates.write_pairs(tmp_path / "pairs.csv", index.paths, pairs, scores)
    duplicates.write_groups(tmp_path / "groups.csv", index.paths, group_pairs(pairs, len(index)))
    with open(tmp_path / "pairs.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == len(pairs) and rows[0].keys() == {"path_a", "path_b", "score"}
    assert [float(row["score"]) for row in rows] == sorted((float(row["score"]) for row in rows), reverse=True)
    with open(tmp_path / "groups.csv", newline="") as file:
        members = list(csv.DictReader(file))
    assert {row["path"] for row in members} == {path for row in rows for path in (row["path_a"], row["path_b"])}


def test_a_threshold_out_of_range_is_refused(indexed):
    with pytest.raises(ValueError, match="threshold=1.5; expected a cosine between -1 and 1"):
        find_pairs(indexed[2]["exact"], 1.5)


def test_the_nearest_scores_of_an_ivfpq_index_are_those_of_its_full_vectors(indexed):
    """`duplicates --calibrate` and the page's histogram on the default ivfpq index (full vectors kept)."""
    _, _, indexes = indexed
    assert indexes["ivfpq"].keeps_full_vectors
    approximate, exact = (nearest_scores(indexes[kind], sample=300) for kind in ("ivfpq", "exact"))
    assert len(approximate) == len(exact) == 300  # the same rows: the sample is drawn from the same count
    assert np.mean(np.abs(approximate - exact) < 2e-3) >= 0.95
