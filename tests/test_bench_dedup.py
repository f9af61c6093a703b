"""benchmarks/bench_dedup.py on a tiny collection: the rows it streams to disk hold the planted near-copies at the
cosines it plants, and a quick run of its stages reports time, peak memory and a recall of every exact pair."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_dedup  # noqa: E402


def test_the_collection_holds_its_planted_copies(tmp_path, monkeypatch):
    monkeypatch.setattr(bench_dedup, "BLOCK_ROWS", 1000)  # several blocks, a ragged last one
    planted = bench_dedup.write_collection(tmp_path / "v.npy", 2500, 32)
    matrix = np.load(tmp_path / "v.npy")
    assert matrix.shape == (2500, 32) and planted == 10 + 10 + 5
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    scores = unit @ unit.T
    np.fill_diagonal(scores, -1)
    assert (scores.max(axis=1) >= bench_dedup.COPY_COSINES[0] - 1e-4).sum() >= 2 * planted - 5  # a copy and its row
    assert (tmp_path / "v.npy.paths.csv").read_text().splitlines()[:2] == ["path", "img/000000000.jpg"]


def test_a_quick_run_reports_time_memory_and_recall(tmp_path):
    results = bench_dedup.main(["--rows", "3000", "--dims", "32", "--kind", "exact", "--sample", "300",
                                "--workdir", str(tmp_path)])
    assert results["recall"] == 1.0 and results["precision"] == 1.0 and results["exact pairs of the sample"] > 0
    assert all(results[stage + " peak MiB"] > 50 and results[stage + " seconds"] > 0
               for stage in ("index", "duplicates", "export"))
    assert results["removed"] >= results["planted"] * 0.9 and (tmp_path / "results.json").is_file()


def test_reuse_index_searches_the_index_in_the_workdir_without_building_it(tmp_path, monkeypatch):
    bench_dedup.write_collection(tmp_path / "vectors-300-8.npy", 300, 8)
    (tmp_path / "vectors-300-8.ivfpq.index").mkdir()
    (tmp_path / "vectors-300-8.ivfpq.index" / "index.json").write_text("{}")
    stages = []

    class Searched(Exception):
        pass

    def run_stage(argv):
        stages.append(argv[0])
        raise Searched  # the stages after it need a real index: what is asked of the first is the point

    monkeypatch.setattr(bench_dedup, "run_stage", run_stage)
    argv = ["--rows", "300", "--dims", "8", "--nprobe", "4", "--workdir", str(tmp_path)]
    for flags, first in ((["--reuse-index"], "duplicates"), ([], "index")):
        try:
            bench_dedup.main(argv + flags)
        except Searched:
            pass
        assert stages.pop() == first
