"""search.index: recall of every kind against numpy brute force, the metadata, rows added later, loading."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from search.index import Index, SearchError, choose_kind, normalise
from search_data import SETTINGS, clustered, write_npy

ROOT = Path(__file__).resolve().parent.parent
def exact_ids(rows, queries, mean, k):
    scores = normalise(queries, mean) @ normalise(rows, mean).T
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


@pytest.mark.parametrize("kind, bar", [("exact", 1.0), ("hnsw", 0.95), ("ivfpq", 0.85)])
def test_recall_against_brute_force_for_every_kind(tmp_path, kind, bar):
    rows, queries = clustered(3000), clustered(50, seed=1)
    write_npy(tmp_path / "f.npy", rows)
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind=kind)
    paths, scores = Index.load(tmp_path / "f.index").search(queries, k=10)
    truth = exact_ids(rows, queries, rows.mean(axis=0), 10)
    recall = np.mean([len({"img/%05d.jpg" % row for row in expected} & set(found)) / 10
                      for expected, found in zip(truth, paths)])
    assert recall >= bar, recall
    assert scores.shape == (50, 10) and np.all(np.diff(scores, axis=1) <= 1e-5)  # highest first
    assert index.meta["recall_at_build"]["recall"] >= bar - 0.05
    if kind == "exact":
        expected = np.sort(normalise(queries, rows.mean(axis=0)) @ normalise(rows, rows.mean(axis=0)).T, axis=1)
        np.testing.assert_allclose(scores, expected[:, ::-1][:, :10], atol=1e-5)


def test_the_metadata_says_what_was_indexed_and_how(tmp_path):
    rows = clustered(500)
    write_npy(tmp_path / "f.npy", rows)
    Index.build(tmp_path / "f.npy", tmp_path / "f.index")
    meta = json.loads((tmp_path / "f.index" / "index.json").read_text())
    assert meta["kind"] == "exact" and meta["rows"] == 500 and meta["feature_size"] == 64
    assert meta["source"]["output"] == str((tmp_path / "f.npy").resolve())
    assert {key: meta["source"]["settings"][key] for key in SETTINGS} == SETTINGS
    np.testing.assert_allclose(meta["mean"], rows.mean(axis=0), rtol=1e-5, atol=1e-6)
    assert meta["recall_at_build"] == {"k": 10, "queries": 200, "recall": 1.0, "against":
                                       "exact inner product over all 500 rows in 64 dimensions"}


def test_centring_matters_for_non_negative_vectors(tmp_path):
    rows = clustered(500)
    raw = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    assert np.median(raw @ raw.T) > 0.35  # without centring every cosine is high
    unit = normalise(rows, rows.mean(axis=0))
    assert abs(np.median(unit @ unit.T)) < 0.05


def test_the_kind_follows_the_size():
    assert choose_kind(1000, 4096) == "exact"
    assert choose_kind(200_000, 4096) == "exact"
    assert choose_kind(500_000, 4096, available_bytes=64 << 30) == "hnsw"
    assert choose_kind(500_000, 4096, available_bytes=8 << 30) == "ivfpq"


@pytest.mark.parametrize("kind", ["exact", "ivfpq"])
def test_add_indexes_the_rows_of_an_extended_output_once(tmp_path, kind):
    rows = clustered(2400)
    write_npy(tmp_path / "f.npy", rows[:2000])
    Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind=kind)
    (tmp_path / "f.npy").unlink()
    (tmp_path / "f.npy.paths.csv").unlink()
    (tmp_path / "f.npy.run.json").unlink()
    write_npy(tmp_path / "f.npy", rows)  # the same rows and 400 more, as a resumed run leaves them
    index = Index.load(tmp_path / "f.index")
    assert index.add() == 400
    assert index.add() == 0
    loaded = Index.load(tmp_path / "f.index")
    assert loaded.paths == ["img/%05d.jpg" % row for row in range(2400)] and loaded.meta["rows"] == 2400
    paths, _ = loaded.search(rows[2100:2110], k=1 if kind == "exact" else 10)
    hits = sum("img/%05d.jpg" % row in found for found, row in zip(paths, range(2100, 2110)))
    assert hits >= (10 if kind == "exact" else 9)  # an added row is found by its own vector


def test_add_refuses_an_output_of_other_settings(tmp_path):
    write_npy(tmp_path / "f.npy", clustered(300))
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index")
    write_npy(tmp_path / "g.npy", clustered(300, seed=2), settings=dict(SETTINGS, layer="fc7"))
    with pytest.raises(SearchError, match="layer='relu7', not 'fc7'"):
        index.add(tmp_path / "g.npy")


def test_queries_of_the_wrong_size_and_damaged_folders_are_refused(tmp_path):
    write_npy(tmp_path / "f.npy", clustered(300))
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index")
    with pytest.raises(SearchError, match=r"shape \(1, 63\); the index holds 64 features a row \(relu7\)"):
        index.search(np.zeros(63, np.float32))
    with pytest.raises(SearchError, match="not an index folder"):
        Index.load(tmp_path)
    (tmp_path / "f.index" / "paths.csv").write_text("path\nonly-one.jpg\n")
    with pytest.raises(SearchError, match="damaged: 1 paths, 300 vectors"):
        Index.load(tmp_path / "f.index")
    with pytest.raises(SearchError, match="kind='flat'"):
        Index.build(tmp_path / "f.npy", tmp_path / "g.index", kind="flat")


def test_an_indexed_path_finds_itself_first(tmp_path):
    rows = clustered(300)
    write_npy(tmp_path / "f.npy", rows)
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind="hnsw")
    row = index.row("img/00042.jpg")
    ids, scores = index.search_ids(index.stored([row]), 3)
    assert ids[0, 0] == 42 and scores[0, 0] == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(SearchError, match="'nope.jpg' is not in index"):
        index.row("nope.jpg")


def test_no_search_module_imports_tensorflow_or_the_engine():
    modules = sorted("search." + path.stem for path in (ROOT / "search").glob("*.py") if path.stem != "__init__")
    code = ("import sys, search\n" + "".join("import %s\n" % name for name in modules) +
            "from search import Index, read_output, find_pairs, write_page\n"
            "bad = sorted(name for name in sys.modules if name.split('.')[0] in ('tensorflow', 'keras') or "
            "name.startswith(('parallel.engine', 'parallel.jobs', 'parallel.runner', 'models')))\n"
            "print(len(%r), bad)\n" % modules)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "%d []" % len(modules)


def test_search_parameters_change_the_search_and_are_checked(tmp_path):
    rows = clustered(3000)
    write_npy(tmp_path / "f.npy", rows)
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind="ivfpq")
    queries = rows[:50]
    index.set_search(nprobe=1, k_factor=1)
    narrow = index.search_ids(index.prepare(queries), 10)[0]
    index.set_search(nprobe=64, k_factor=16)
    wide = index.search_ids(index.prepare(queries), 10)[0]
    truth = exact_ids(rows, queries, rows.mean(axis=0), 10)
    hits = [sum(len(set(a) & set(b)) for a, b in zip(truth, found)) for found in (narrow, wide)]
    assert hits[0] < hits[1]
    index.save()
    assert Index.load(tmp_path / "f.index").meta["parameters"]["search"] == {"nprobe": 64, "k_factor": 16,
                                                                                 "rerank": 3}
    with pytest.raises(SearchError, match="efSearch=10: a ivfpq index takes nprobe, k_factor, rerank"):
        index.set_search(efSearch=10)
    with pytest.raises(SearchError, match="nprobe=0; expected a whole number"):
        index.set_search(nprobe=0)


def test_ivfpq_reranks_its_candidates_with_the_full_vectors(tmp_path):
    # 320 dimensions with noise in all of them: the PCA to 256 loses what the exact neighbours depend on.
    rows, queries = clustered(3000, dims=320), clustered(50, dims=320, seed=1)
    write_npy(tmp_path / "f.npy", rows)
    full = Index.build(tmp_path / "f.npy", tmp_path / "full.index", kind="ivfpq")
    pca_only = Index.build(tmp_path / "f.npy", tmp_path / "pca.index", kind="ivfpq", full_vectors=False)
    assert (tmp_path / "full.index" / "vectors.f16").stat().st_size == 3000 * 320 * 2
    assert not (tmp_path / "pca.index" / "vectors.f16").exists()
    truth = exact_ids(rows, queries, rows.mean(axis=0), 10)
    recalls = []
    for folder in ("full.index", "pca.index"):
        index = Index.load(tmp_path / folder)
        ids, scores = index.search_ids(index.prepare(queries), 10)
        recalls.append(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, ids)]))
    assert recalls[0] >= 0.98 and recalls[0] > recalls[1], recalls
    index = Index.load(tmp_path / "full.index")
    ids, scores = index.search_ids(index.prepare(queries), 10)
    exact = np.take_along_axis(index.prepare(queries) @ normalise(rows, index.mean).T, ids, axis=1)
    np.testing.assert_allclose(scores, exact, atol=2e-3)  # cosines of the full vectors (float16 kept)
    index.set_search(rerank=1)
    assert index.search_ids(index.prepare(queries), 10)[0].shape == (50, 10)
    with pytest.raises(SearchError, match="rerank=2: a ivfpq index takes nprobe, k_factor$"):
        Index.load(tmp_path / "pca.index").set_search(rerank=2)
    assert full.meta["recall_at_build"]["recall"] >= 0.95
    assert pca_only.meta["recall_at_build"]["recall"] < full.meta["recall_at_build"]["recall"]


def test_full_vectors_short_of_the_rows_are_a_damaged_index(tmp_path):
    write_npy(tmp_path / "f.npy", clustered(3000))
    Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind="ivfpq")
    with open(tmp_path / "f.index" / "vectors.f16", "r+b") as file:
        file.truncate(2999 * 64 * 2)
    with pytest.raises(SearchError, match="damaged: vectors.f16 holds 383872 bytes, 3000 rows of 64 floats"):
        Index.load(tmp_path / "f.index")


def test_an_add_cuts_what_a_stopped_add_left_in_the_full_vectors(tmp_path):
    rows = clustered(3400)
    write_npy(tmp_path / "f.npy", rows[:3000])
    Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind="ivfpq")
    with open(tmp_path / "f.index" / "vectors.f16", "ab") as file:  # an add killed after writing vectors
        file.write(b"\xff" * 64 * 2 * 7)
    for name in ("f.npy", "f.npy.paths.csv", "f.npy.run.json"):
        (tmp_path / name).unlink()
    write_npy(tmp_path / "f.npy", rows)
    index = Index.load(tmp_path / "f.index")
    assert index.add() == 400
    assert (tmp_path / "f.index" / "vectors.f16").stat().st_size == 3400 * 64 * 2
    loaded = Index.load(tmp_path / "f.index")
    np.testing.assert_allclose(loaded.stored(range(2990, 3010)), normalise(rows[2990:3010], loaded.mean), atol=2e-3)


def test_the_lists_visited_grow_with_the_lists():
    from search.kinds import _nprobe
    assert [_nprobe(nlist) for nlist in (16, 64, 1024, 4096, 16384)] == [16, 32, 32, 128, 512]


@pytest.mark.parametrize("target, chosen", [(0.5, 3), (1.01, 20)])
def test_ivfpq_takes_the_fewest_candidates_that_reach_the_recall_target_at_build(tmp_path, monkeypatch, target,
                                                                                   chosen):
    import search.index
    monkeypatch.setattr(search.index, "RERANK_TARGET", target)  # 1.01: never reached, every step tried
    write_npy(tmp_path / "f.npy", clustered(3000))
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind="ivfpq")
    assert index.meta["parameters"]["search"]["rerank"] == chosen
    assert Index.load(tmp_path / "f.index").meta["parameters"]["search"]["rerank"] == chosen
