"""Benchmark of de-duplication and export at scale: time, peak memory, and the recall of the exact pairs.

    python benchmarks/bench_dedup.py --rows 1000000      # ~20 minutes on 2 cores: 2 GB of vectors, 4 GB of disk
    python benchmarks/bench_dedup.py --rows 10000000     # hours: 20 GB of vectors, about 32 GB of disk
    python benchmarks/bench_dedup.py --rows 20000 --sample 200 --kind exact   # a quick check of the script
    python benchmarks/bench_dedup.py --rows 1000000 --nprobe 8 --reuse-index  # the index above, searched again

The collection (`write_collection`): --rows synthetic vectors of --dims floats (512), clustered (a cluster of
about CLUSTER_ROWS rows around a random centre; two rows of one cluster score about 0.5), and PLANTED of them
near-copies of another row of their block of BLOCK_ROWS rows, each at a cosine drawn uniformly from 0.92 to 0.999
(a chain of copies now and then: a copy of a copy). They are streamed to disk as an npy output (float32 [N, D]
and its paths file, `<output>.paths.csv`) a block at a time, never held whole.

The stages, each a command of search_features.py in its own process, timed (wall) and measured (the peak
resident memory of that process, os.wait4's ru_maxrss):

    index        search_features.py index OUTPUT --kind KIND (ivfpq by default: PCA 256 + IVF-PQ, the full
                 vectors in float16 on disk for re-ranking)
    duplicates   search_features.py duplicates INDEX --threshold T --removals FILE: every row's nearest
                 --neighbours rows over the compressed index, re-ranked with the full vectors, then grouped,
                 one kept a group
    export       search_features.py export INDEX --removals FILE: every row but those removed, as Parquet
                 (rows a second in the results)

Recall (`exact_pairs`): --sample rows drawn at random; every row of the collection whose cosine with one of
them (centred on the index's mean, as the index scores) is at least T, by brute force over the output read a
block at a time: the exact pairs of the sample. The recall is the share of those the duplicates stage found
(pairs.csv), and the precision the share of the pairs it found with a sampled row that are exact pairs.

Results: printed, and written to WORKDIR/results.json. The collection is kept in --workdir for the next run of
the same size (delete it to free the disk).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BLOCK_ROWS = 65_536
CLUSTER_ROWS = 1_000
PLANTED = 0.01          # share of the rows that are near-copies of another
COPY_COSINES = (0.92, 0.999)


def write_collection(output, rows, dims, seed=0):
    """Writes the npy output `output` (and its paths file) of `rows` synthetic rows (module docstring), a block
    at a time. Returns the number of planted near-copies."""
    from numpy.lib.format import open_memmap
    from parallel.output.csv_rows import write_paths_csv
    from parallel.output.record import PATHS_SUFFIX
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(1, rows // CLUSTER_ROWS), dims)).astype(np.float32)
    matrix = open_memmap(str(output) + ".tmp", mode="w+", dtype=np.float32, shape=(rows, dims))
    planted = 0
    for start in range(0, rows, BLOCK_ROWS):
        stop = min(rows, start + BLOCK_ROWS)
        block_rng = np.random.default_rng([seed, start])
        block = centres[block_rng.integers(0, len(centres), stop - start)] + block_rng.standard_normal(
            (stop - start, dims), dtype=np.float32)
        copies = block_rng.choice(stop - start, size=int(PLANTED * (stop - start)), replace=False)
        for row in copies:
            original = block[block_rng.integers(0, stop - start)]
            cosine = block_rng.uniform(*COPY_COSINES)
            noise = block_rng.standard_normal(dims).astype(np.float32)
            noise -= (noise @ original) / (original @ original) * original  # orthogonal: the cosine is exact
            noise *= np.linalg.norm(original) * np.tan(np.arccos(cosine)) / np.linalg.norm(noise)
            block[row] = original + noise
        planted += len(copies)
        matrix[start:stop] = block
    matrix.flush()
    del matrix
    os.replace(str(output) + ".tmp", output)
    write_paths_csv(Path(str(output) + PATHS_SUFFIX), ("img/%09d.jpg" % row for row in range(rows)))
    return planted


def write_apart(output, rows, dims):
    """`write_collection` in a process of its own; returns the number of planted near-copies. Linux gives a child
    the resident high-water mark of the process it is spawned from (vfork, then exec: os.wait4's ru_maxrss is
    at least it), and the collection written through a memory map is resident here: each stage's peak would
    be at least that of the writing."""
    code = "import sys; sys.path.insert(0, %r); import bench_dedup; print(bench_dedup.write_collection(%r, %d, %d))" % (
        str(Path(__file__).resolve().parent), str(output), rows, dims)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return int(done.stdout.split()[-1])


def exact_pairs(output, mean, sample, threshold):
    """{(sampled row, other row)} of every row whose cosine with a sampled row (centred on `mean`) is >= threshold:
    brute force, the output read BLOCK_ROWS rows at a time."""
    from search.kinds import normalise
    matrix = np.load(output, mmap_mode="r")
    queries = normalise(np.asarray(matrix[sample]), mean)
    found = set()
    for start in range(0, len(matrix), BLOCK_ROWS):
        block = normalise(np.asarray(matrix[start:start + BLOCK_ROWS]), mean)
        scores = queries @ block.T
        for query, column in zip(*np.nonzero(scores >= threshold)):
            other = start + int(column)
            if other != sample[query]:
                found.add((int(sample[query]), other))
    return found


def run_stage(argv, program=None):
    """Runs search_features.py with `argv` in its own process: (wall seconds, its CPU seconds, its peak RSS in MiB).

    The CPU seconds (user and system, of the process and its threads) are what a busy machine does not move much:
    the wall time on a shared machine is that and the waiting. `program`: the words given to Python before `argv`
    in search_features.py's place (a script and its flags, or "-c" and code), or None."""
    program = list(program) if program is not None else [str(ROOT / "search_features.py"), "--quiet"]
    started = time.monotonic()
    child = subprocess.Popen([sys.executable] + program + argv, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.monotonic() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit("%s %s exited with %d" % (Path(program[0]).name, " ".join(argv), child.returncode))
    cpu = usage.ru_utime + usage.ru_stime
    return round(seconds, 1), round(cpu, 1), round(usage.ru_maxrss / 1024, 1)  # Linux: ru_maxrss in KiB


def found_pairs(pairs_csv):
    """{(row, row)} of the pairs a duplicates run wrote (pairs.csv), both orders."""
    import csv
    found = set()
    with open(pairs_csv, newline="") as file:
        for line in csv.DictReader(file):
            left, right = (int(line[name][4:13]) for name in ("path_a", "path_b"))
            found |= {(left, right), (right, left)}
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dims", type=int, default=512)
    parser.add_argument("--kind", default="ivfpq", choices=("exact", "hnsw", "ivfpq"))
    parser.add_argument("--threshold", type=float, default=0.9)
    parser.add_argument("--neighbours", type=int, default=20)
    parser.add_argument("--nprobe", type=int, help="duplicates: IVF lists visited a row (default: the index's)")
    parser.add_argument("--sample", type=int, default=1000, help="rows whose exact pairs measure the recall")
    parser.add_argument("--workdir", default=str(ROOT / "results" / "bench_dedup"))
    parser.add_argument("--reuse-index", action="store_true",
                        help="an index of this collection and kind already in --workdir is searched, not built again "
                             "(a sweep of --nprobe); its build's figures are those of results.json's run")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    output = workdir / ("vectors-%d-%d.npy" % (args.rows, args.dims))
    results = {"rows": args.rows, "dims": args.dims, "kind": args.kind, "threshold": args.threshold,
               "neighbours": args.neighbours, "nprobe": args.nprobe, "cpus": os.cpu_count()}
    if not output.exists():
        started = time.monotonic()
        results["planted"] = write_apart(output, args.rows, args.dims)
        results["write seconds"] = round(time.monotonic() - started, 1)
    index = workdir / ("vectors-%d-%d.%s.index" % (args.rows, args.dims, args.kind))
    removals = index / "removals.parquet"
    if args.reuse_index and (index / "index.json").exists():
        results["index"] = "reused"
    else:
        results["index seconds"], results["index CPU seconds"], results["index peak MiB"] = run_stage(
            ["index", str(output), "--index", str(index), "--kind", args.kind, "--overwrite"])
    results["duplicates seconds"], results["duplicates CPU seconds"], results["duplicates peak MiB"] = run_stage(
        ["duplicates", str(index), "--threshold", str(args.threshold), "--neighbours", str(args.neighbours),
         "--removals", str(removals)] + (["--nprobe", str(args.nprobe)] if args.nprobe else []))
    results["export seconds"], results["export CPU seconds"], results["export peak MiB"] = run_stage(
        ["export", str(index), "--removals", str(removals), "--out", str(index / "export.parquet")])
    import pyarrow.parquet as pq
    results["removed"] = int(pq.read_table(removals, columns=["remove"]).column(0).to_numpy().sum())
    results["exported rows a second"] = round((args.rows - results["removed"]) / results["export seconds"])
    meta = json.loads((index / "index.json").read_text())
    sample = np.sort(np.random.default_rng(1).choice(args.rows, size=min(args.sample, args.rows), replace=False))
    started = time.monotonic()
    exact = exact_pairs(output, np.asarray(meta["mean"], np.float32), sample, args.threshold)
    results["exact pairs seconds"] = round(time.monotonic() - started, 1)
    sampled = set(sample.tolist())
    found = {pair for pair in found_pairs(index / "pairs.csv") if pair[0] in sampled}
    results["exact pairs of the sample"] = len(exact)
    results["recall"] = round(len(exact & found) / len(exact), 4) if exact else None
    results["precision"] = round(len(exact & found) / len(found), 4) if found else None
    results["index recall@10 at build"] = meta["recall_at_build"]["recall"]
    results["search"] = meta["parameters"].get("search")
    return report(results, workdir)


def report(results, workdir):
    """Prints `results` a line each ("name = value") and writes them to WORKDIR/results.json; returns them."""
    for name, value in results.items():
        print("%s = %s" % (name, value))
    (Path(workdir) / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
