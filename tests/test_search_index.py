"""search.index: recall of every kind against numpy brute force, the metadata, rows added later, loading."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hangs import HANG_SECONDS
from search.index import Index, SearchError, normalise
from search_data import SETTINGS, clustered, hard, with_near_copy, write_npy

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
    with pytest.raises(SearchError, match=r"damaged \(1 paths, 300 vectors, 300 rows recorded\): build it again"):
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
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_SECONDS,
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
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
    rows, queries = clustered(1500, dims=320), clustered(50, dims=320, seed=1)
    write_npy(tmp_path / "f.npy", rows)
    full = Index.build(tmp_path / "f.npy", tmp_path / "full.index", kind="ivfpq")
    pca_only = Index.build(tmp_path / "f.npy", tmp_path / "pca.index", kind="ivfpq", full_vectors=False)
    assert (tmp_path / "full.index" / "vectors.f16").stat().st_size == 1500 * 320 * 2
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


@pytest.mark.parametrize("kind, target, chosen", [("ivfpq", 0.5, {"rerank": 3}), ("ivfpq", 1.01, {"rerank": 20}),
                                                  ("hnsw", 0.5, {"efSearch": 64}), ("hnsw", 1.01, {"efSearch": 512})])
def test_the_search_parameters_are_the_least_that_reach_the_recall_target_at_build(tmp_path, monkeypatch, kind,
                                                                                     target, chosen):
    import search.build
    monkeypatch.setattr(search.build, "RECALL_TARGET", target)  # 1.01: never reached, every step tried
    write_npy(tmp_path / "f.npy", hard(3000))
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind=kind)
    for meta in (index.meta, Index.load(tmp_path / "f.index").meta):
        assert {name: meta["parameters"]["search"][name] for name in chosen} == chosen


# --- the edges: small and uniform collections, values that are not finite, damaged folders -------------------

def _collection(rows):
    """(vectors, the row pairs that are near-copies): `rows` with a near-copy, or "6 identical" rows."""
    if rows == "6 identical":
        return np.repeat(clustered(1), 6, axis=0), [(left, right) for left in range(6) for right in range(left + 1, 6)]
    return with_near_copy(rows), [(0, rows - 1)]


@pytest.mark.parametrize("rows", [2, "6 identical", 10, 100, 4_200])  # 4,200: the pair in two blocks of 4,096
def test_near_copies_score_high_at_every_collection_size(tmp_path, rows):
    from search.duplicates import find_pairs
    vectors, copies = _collection(rows)
    write_npy(tmp_path / "f.npy", vectors)
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index")
    centred = len(vectors) >= 10 and rows != "6 identical"
    assert index.meta["centre"]["centred"] == centred
    np.testing.assert_array_equal(index.mean, vectors.mean(axis=0, dtype=np.float64).astype(np.float32)
                                  if centred else 0)
    pairs, scores = find_pairs(index, 0.75)
    assert set(copies) <= set(map(tuple, pairs.tolist())), (pairs, scores)
    assert scores.min() > 0.75 and scores.max() <= 1 + 1e-5
    # The query finds itself, and its near-copy next, with the score of the pair.
    ids, found = index.search_ids(index.stored([0]), min(len(vectors), 10))
    assert found[0, 0] == pytest.approx(1.0, abs=1e-5) and found[0, 1] > 0.75
    assert 0 in ids[0, :len(copies) + 1] and copies[0][1] in ids[0, :len(copies) + 1]


@pytest.mark.parametrize("rows", [2, 3, 5, 10, 11, 12])
def test_the_recall_at_build_of_an_exact_index_is_one_at_any_size(tmp_path, rows):
    write_npy(tmp_path / "f.npy", clustered(rows))
    assert Index.build(tmp_path / "f.npy", tmp_path / "f.index").meta["recall_at_build"]["recall"] == 1.0


def test_the_recall_at_build_counts_identical_rows_as_ties(tmp_path):
    vectors = np.concatenate([np.repeat(clustered(3), 8, axis=0), clustered(40, seed=3)])
    write_npy(tmp_path / "f.npy", vectors)
    for kind in ("exact", "hnsw"):
        index = Index.build(tmp_path / "f.npy", tmp_path / ("%s.index" % kind), kind=kind)
        assert index.meta["recall_at_build"]["recall"] == 1.0, kind


def test_a_kind_that_cannot_be_trained_on_so_few_rows_says_which_kinds_can(tmp_path):
    write_npy(tmp_path / "f.npy", clustered(35))
    with pytest.raises(SearchError, match=r"kind=ivfpq needs at least 256 rows to train its codes; output=.*f.npy "
                                          r"holds 35: use --kind exact or hnsw"):
        Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind="ivfpq")
    assert not (tmp_path / "f.index").exists()
    assert Index.build(tmp_path / "f.npy", tmp_path / "h.index", kind="hnsw").meta["recall_at_build"]["recall"] == 1


@pytest.mark.parametrize("kind", ["exact", "hnsw", "ivfpq"])
def test_rows_that_are_not_finite_are_left_out_and_named(tmp_path, kind):
    from search.duplicates import find_pairs
    vectors = with_near_copy(600)
    vectors[7, 3] = np.inf
    vectors[300, 0] = np.nan
    write_npy(tmp_path / "f.npy", vectors)
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind=kind)
    assert index.meta["left_out"] == {"rows": 2, "paths": ["img/00007.jpg", "img/00300.jpg"]}
    assert len(index) == 598 and "img/00007.jpg" not in index.paths
    finite = np.delete(vectors, [7, 300], axis=0)
    np.testing.assert_allclose(index.mean, finite.mean(axis=0), rtol=1e-5, atol=1e-6)
    assert index.meta["recall_at_build"]["recall"] >= 0.9
    paths, scores = index.search(vectors[[0, 1]], k=3)
    assert paths[0][:2] == ["img/00000.jpg", "img/00599.jpg"] and paths[1][0] == "img/00001.jpg"
    assert np.all(np.isfinite(scores))
    assert (0, 597) in set(map(tuple, find_pairs(index, 0.75)[0].tolist()))
    with pytest.raises(SearchError, match=r"query vector 1 holds values that are not finite"):
        index.search(vectors[[6, 7]])
    assert index.add() == 0 and index.left_out["rows"] == 2  # still left out, and said again


def test_an_output_of_rows_none_finite_is_refused(tmp_path):
    vectors = clustered(5)
    vectors[1:] = np.nan
    write_npy(tmp_path / "f.npy", vectors)
    with pytest.raises(SearchError, match="holds 1 rows with finite values: nothing to index"):
        Index.build(tmp_path / "f.npy", tmp_path / "f.index")


def _edit_meta(folder, edit):
    meta = json.loads((folder / "index.json").read_text())
    (folder / "index.json").write_text(json.dumps(edit(meta)))


DAMAGES = {
    "a list": lambda meta: [meta],
    "an unknown kind": lambda meta: dict(meta, kind="flat"),
    "another kind": lambda meta: dict(meta, kind="hnsw"),
    "rows as text": lambda meta: dict(meta, rows=str(meta["rows"])),
    "no mean": lambda meta: {key: value for key, value in meta.items() if key != "mean"},
    "a short mean": lambda meta: dict(meta, mean=meta["mean"][:-1]),
    "no source": lambda meta: {key: value for key, value in meta.items() if key != "source"},
    "settings a list": lambda meta: dict(meta, source=dict(meta["source"], settings=[])),
    "parameters as text": lambda meta: dict(meta, parameters="fast"),
    "a search parameter as text": lambda meta: dict(meta, parameters={"search": {"efSearch": "64"}}),
    "feature_size wrong": lambda meta: dict(meta, feature_size=63, mean=meta["mean"][:63]),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_hand_edited_index_json_is_damaged(tmp_path, damage):
    write_npy(tmp_path / "f.npy", clustered(300))
    Index.build(tmp_path / "f.npy", tmp_path / "f.index")
    _edit_meta(tmp_path / "f.index", DAMAGES[damage])
    with pytest.raises(SearchError, match=r"^index=.*f.index is damaged \(.+\): build it again$"):
        Index.load(tmp_path / "f.index")


@pytest.mark.parametrize("kind", ["hnsw", "ivfpq"])
@pytest.mark.parametrize("generator", [clustered, hard])
def test_the_parameters_chosen_at_build_reach_the_recall_bar_on_both_generators(tmp_path, kind, generator):
    rows = generator(4050)
    rows, queries = rows[:4000], rows[4000:]  # new rows of the same distribution
    write_npy(tmp_path / "f.npy", rows)
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind=kind)
    truth = exact_ids(rows, queries, index.mean, 10)
    found = index.search_ids(index.prepare(queries), 10)[0]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, found)])
    assert recall >= 0.95 and index.meta["recall_at_build"]["recall"] >= 0.95, (recall, index.meta["parameters"])


def test_a_loaded_hnsw_index_searches_with_the_ef_search_chosen_at_build(tmp_path, monkeypatch):
    import search.build
    monkeypatch.setattr(search.build, "RECALL_TARGET", 1.01)
    write_npy(tmp_path / "f.npy", hard(2000))
    Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind="hnsw")
    assert Index.load(tmp_path / "f.index")._index.hnsw.efSearch == 512


def test_ivfpq_visits_more_lists_when_re_ranking_more_is_not_enough(tmp_path, monkeypatch):
    import search.build
    monkeypatch.setattr(search.build, "RECALL_TARGET", 1.01)
    write_npy(tmp_path / "f.npy", hard(4000))
    index = Index.build(tmp_path / "f.npy", tmp_path / "f.index", kind="ivfpq")
    nlist = index.meta["parameters"]["nlist"]
    assert index.meta["parameters"]["search"] == {"nprobe": min(nlist, 32 * 8), "k_factor": 8, "rerank": 20}


def test_an_exact_build_holds_no_training_sample(tmp_path):
    # 36,864 rows of 1,024 floats, made 4,096 at a time: the 32,768-row sample builds held before (and its
    # normalised copy) would be 256 MiB of numpy arrays; a batch and its copies are a few dozen.
    import tracemalloc
    from search.vectors import OutputVectors

    def batches(batch_rows):
        for start in range(0, 9 * 4096, 4096):
            block = np.random.default_rng(start).standard_normal((4096, 1024), dtype=np.float32)
            yield ["img/%06d.jpg" % row for row in range(start, start + 4096)], block

    source = OutputVectors("generated", "npy", 9 * 4096, 1024, {}, True, batches)
    tracemalloc.start()
    try:
        index = Index.build(None, tmp_path / "f.index", kind="exact", source=source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(index) == 9 * 4096 and index.meta["recall_at_build"]["recall"] == 1.0
    assert peak < 100 << 20, peak / 2 ** 20  # numpy's arrays (faiss's storage is not traced)


CLIP_SETTINGS = {"model": "clip_vit_b32", "layer": "embedding", "weights": "model.safetensors (1 bytes)",
                 "precision": "fp32"}


def test_an_output_in_a_text_tower_s_space_is_not_centred_unless_asked(tmp_path):
    rows = clustered(200)
    write_npy(tmp_path / "clip.npy", rows, settings=CLIP_SETTINGS)
    write_npy(tmp_path / "pooled.npy", rows, settings=dict(CLIP_SETTINGS, layer="pooled"))
    raw = Index.build(tmp_path / "clip.npy", tmp_path / "clip.index")
    assert raw.meta["centre"]["centred"] is False and "text tower's space" in raw.meta["centre"]["reason"]
    assert not raw.mean.any()
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    _, scores = raw.search(rows[:3], k=200)
    np.testing.assert_allclose(np.sort(scores, axis=1), np.sort(unit[:3] @ unit.T, axis=1), atol=1e-5)
    # The same rows of another layer, or asked for: centred, as the rows allow.
    for index in (Index.build(tmp_path / "pooled.npy", tmp_path / "pooled.index"),
                  Index.build(tmp_path / "clip.npy", tmp_path / "centred.index", centre=True)):
        assert index.meta["centre"]["centred"] is True and "reason" not in index.meta["centre"]
    never = Index.build(tmp_path / "pooled.npy", tmp_path / "never.index", centre=False)
    assert never.meta["centre"]["centred"] is False and "reason" not in never.meta["centre"]
    with pytest.raises(SearchError, match="centre='no'; expected None"):
        Index.build(tmp_path / "clip.npy", tmp_path / "bad.index", centre="no")
    loaded = Index.load(tmp_path / "clip.index")
    assert loaded.meta["centre"] == raw.meta["centre"] and not loaded.mean.any()


def test_building_an_index_of_a_clip_output_imports_no_tensorflow(tmp_path):
    write_npy(tmp_path / "clip.npy", clustered(50), settings=CLIP_SETTINGS)
    code = ("import sys\nfrom search import Index\nIndex.build(%r, %r)\n"
            "print(sorted(name for name in sys.modules if name.split('.')[0] in ('tensorflow', 'keras', 'models')))"
            % (str(tmp_path / "clip.npy"), str(tmp_path / "clip.index")))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_SECONDS,
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    # the tables only (SigLIP's sizes name its models, read through the ViT's config reader): no TensorFlow, no Keras
    assert result.stdout.strip() == ("['models', 'models.files', 'models.siglip', 'models.siglip.siglip_layers', "
                                     "'models.text_queries', 'models.vit', 'models.vit.vit_config', "
                                     "'models.vit.vit_layers']")
