"""benchmarks/bench_service.py's own parts, on a tiny size (the benchmark itself takes minutes and 605 MB of
weights): its synthetic index is what its docstring says, one that takes sentences, and its arguments are checked."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_service  # noqa: E402
from search.index import Index  # noqa: E402
from search.queries import check_text_queries  # noqa: E402

SETTINGS = {"model": "clip_vit_b32", "layer": "embedding", "weights": "model.safetensors (random)"}


def test_the_synthetic_rows_are_clustered_unit_vectors_indexed_uncentred_for_sentences(tmp_path):
    paths, vectors = next(bench_service.source(10_000, SETTINGS).batches())  # one block
    assert paths[:2] == ["synthetic/0000000.jpg", "synthetic/0000001.jpg"] and vectors.shape == (10_000, 512)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    scores = vectors[:200] @ vectors.T
    nearest = np.sort(scores, axis=1)[:, -2]  # the best but itself: a row of its cluster, about 0.68
    assert np.median(nearest) > 0.6 and np.abs(np.median(scores)) < 0.05  # across clusters, about 0
    source = bench_service.source(300, SETTINGS)
    index = Index.build(None, tmp_path / "index", kind="hnsw", source=source)
    assert not index.meta["centre"]["centred"] and index.kind == "hnsw" and len(index) == 300
    check_text_queries(index)  # raises unless a sentence may be searched


def test_the_sentences_differ_and_the_arguments_are_checked(capsys):
    assert len(set(bench_service.sentences(2000))) == 2000
    with pytest.raises(SystemExit) as exit:
        bench_service.main(["--workdir", "unused", "--rows", "5"])
    assert exit.value.code == 2 and "--rows must be at least 10; got 5" in capsys.readouterr().err
