"""Benchmarks of search/: recall and query time of each index kind, duplicates, and a million rows in 4 GB.

    python benchmarks/bench_search.py --workdir /tmp/bench-search               # everything (~1 hour, 2 cores)
    python benchmarks/bench_search.py --workdir /tmp/bench-search --only recall duplicates million

The vectors are synthetic, shaped like fc7 after the ReLU: see fc7_like.py for exactly how they
are made. Parts:

sweep       the same, for hnsw and ivfpq at several search parameters (efSearch; rerank and nprobe),
            each time the median of 3 runs, and the brute force the median of 3 too.
recall      N = 100,000 x 4096, 1,000 queries (new rows of the same distribution). Each kind is built
            with Index.build from the rows streamed in blocks, in a fresh process (its peak RSS, VmHWM,
            is the build's memory; the index's size beside it); recall@10 is the share of the exact
            top 10 (numpy brute force: centred, normalised, full 4096 dimensions) that the index
            returns. Query time per query: the 1,000 queries as one batch, divided by 1,000, against
            the numpy brute force on the same batch (matrix product + argpartition), alternated for 3
            rounds, the medians; for ivfpq, also its recall without the full vectors (the PCA's order).
            Single-query latency: SINGLE queries asked one at a time (as the command line and the page
            ask them), the median and the 90th percentile, and numpy's brute force the same way.
            --kinds: which kinds (this part and duplicates); --generator: fc7_like (the default) or
            hard (fc7_like.py: before the ReLU, harder for an index).
duplicates  threshold 0.9 over the same 100,000 rows, each kind, in a fresh process per kind (its peak
            RSS, VmHWM, includes loading the index). Brute force: the N x N similarity matrix. Its
            memory is arithmetic (N^2 x 4 bytes); its time is measured on 5 blocks of 1,000 rows
            against all N rows and scaled to N rows. Recall: of the pairs brute force finds among
            those 5,000 rows (with any row), the share each kind found.
million     1,000,000 x 4096 (16 GB as float32) indexed with --kind ivfpq from rows generated a block
            at a time, in a fresh process: its peak RSS (VmHWM) and time.
"""

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import fc7_like  # noqa: E402
from search.duplicates import find_pairs  # noqa: E402
from search.index import Index, normalise  # noqa: E402

ROWS = int(os.environ.get("BENCH_SEARCH_ROWS", 100_000))  # smaller for a quick check of the script
QUERIES = 1_000
SINGLE = 100               # queries asked one at a time for the single-query latency
K = 10
THRESHOLD = 0.9
KINDS = ("exact", "hnsw", "ivfpq")


def peak_rss_mib():
    """VmHWM of this process, MiB (getrusage's ru_maxrss would include a parent's peak across fork)."""
    with open("/proc/self/status") as file:
        for line in file:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def say(*parts):
    print(*parts, flush=True)


def machine():
    flags = ""
    with open("/proc/cpuinfo") as file:
        for line in file:
            if line.startswith("flags"):
                wanted = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "sse4_2", "f16c")
                flags = " ".join(flag for flag in line.split(":")[1].split() if flag in wanted)
                break
    import faiss
    return {"cpu": platform.processor() or "?", "cores": os.cpu_count(), "flags": flags,
            "python": platform.python_version(), "numpy": np.__version__, "faiss": faiss.__version__,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)")}


def all_rows(generator="fc7_like"):
    return np.concatenate([vectors for _, vectors in fc7_like.batches(ROWS, generator=generator)])


def single_query_ms(search, unit_queries):
    """(median, 90th percentile) ms of `search(query [1, D])` over SINGLE queries asked one at a time."""
    times = []
    for query in unit_queries[:SINGLE]:
        started = time.perf_counter()
        search(query[None])
        times.append(1000 * (time.perf_counter() - started))
    return round(float(np.median(times)), 3), round(float(np.percentile(times, 90)), 3)


def build_in_child(folder, kind, generator):
    """Builds the ROWS-row index of `kind` in a fresh process: {"build_s", "peak_rss_mib", "index_mib"}."""
    child = subprocess.run([sys.executable, __file__, "--build-child", str(folder), kind, generator],
                           capture_output=True, text=True, check=True)
    return json.loads(child.stdout.strip().splitlines()[-1])


def build_child(folder, kind, generator):
    started = time.perf_counter()
    Index.build(None, folder, kind=kind, source=fc7_like.Source(ROWS, generator=generator))
    seconds = time.perf_counter() - started
    size = sum(path.stat().st_size for path in Path(folder).iterdir() if path.is_file())
    print(json.dumps({"build_s": round(seconds, 1), "peak_rss_mib": round(peak_rss_mib(), 1),
                      "index_mib": round(size / 2 ** 20, 1)}))


def brute_force(unit_rows, unit_queries, k):
    """(ids [Q, k] best first, seconds): numpy matrix product and argpartition."""
    started = time.perf_counter()
    scores = unit_queries @ unit_rows.T
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
    ids = np.take_along_axis(top, order, axis=1)
    return ids, time.perf_counter() - started


def part_recall(workdir, results, kinds=KINDS, rounds=3, generator="fc7_like"):
    queries = fc7_like.queries(QUERIES, generator=generator)
    rows = all_rows(generator)
    for kind in kinds:
        built = build_in_child(workdir / ("%s.index" % kind), kind, generator)
        index = Index.load(workdir / ("%s.index" % kind))
        unit_queries = index.prepare(queries)
        unit_rows = normalise(rows, index.mean)
        times, brute_times = [], []
        for _ in range(rounds):  # alternated, A B A B ...: the load of a shared machine falls on both
            exact, brute_seconds = brute_force(unit_rows, unit_queries, K)
            brute_times.append(brute_seconds)
            started = time.perf_counter()
            found, _ = index.search_ids(unit_queries, K)
            times.append(time.perf_counter() - started)
        single = single_query_ms(lambda query: index.search_ids(query, K), unit_queries)
        brute_single = single_query_ms(lambda query: brute_force(unit_rows, query, K), unit_queries)
        del unit_rows
        seconds, brute_seconds = float(np.median(times)), float(np.median(brute_times))
        recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(exact, found)])
        entry = {"kind": kind, "generator": generator, "rows": ROWS, "build_s": built["build_s"],
                 "build_peak_rss_mib": built["peak_rss_mib"], "index_mib": built["index_mib"],
                 "recall_at_10": round(float(recall), 4),
                 "single_query_ms": single[0], "single_query_ms_p90": single[1],
                 "brute_force_single_query_ms": brute_single[0],
                 "ms_per_query": round(1000 * seconds / QUERIES, 3),
                 "brute_force_ms_per_query": round(1000 * brute_seconds / QUERIES, 3),
                 "time_ratio": round(seconds / brute_seconds, 4), "rounds": rounds,
                 "ms_per_query_each": [round(1000 * value / QUERIES, 3) for value in times],
                 "brute_force_ms_per_query_each": [round(1000 * value / QUERIES, 3) for value in brute_times],
                 "recall_at_build": index.meta["recall_at_build"], "parameters": index.meta["parameters"]}
        if kind == "ivfpq":  # as an index built with full_vectors=False: the order of the PCA's vectors alone
            full, index._full = index._full, None
            started = time.perf_counter()
            found, _ = index.search_ids(unit_queries, K)
            index._full = full
            entry["without_full_vectors"] = {
                "recall_at_10": round(float(np.mean([len(set(a) & set(b)) / K for a, b in zip(exact, found)])), 4),
                "ms_per_query": round(1000 * (time.perf_counter() - started) / QUERIES, 3)}
        results.setdefault("recall", []).append(entry)
        say(json.dumps(entry))


def _matrix_blocks(workdir, unit_rows, blocks=5, block_rows=1000):
    """Brute force on `blocks` blocks of rows against all rows: (pairs among them as a set, seconds scaled to N)."""
    pairs, seconds = set(), 0.0
    starts = np.linspace(0, len(unit_rows) - block_rows, blocks).astype(int)
    for start in starts:
        began = time.perf_counter()
        scores = unit_rows[start:start + block_rows] @ unit_rows.T
        rows, columns = np.nonzero(scores >= THRESHOLD)
        seconds += time.perf_counter() - began
        for row, column in zip(rows + start, columns):
            if row != column:
                pairs.add((min(row, column), max(row, column)))
    sampled = {row for start in starts for row in range(start, start + block_rows)}
    return pairs, sampled, seconds * len(unit_rows) / (blocks * block_rows)


def _built(workdir, kind, results):
    """The 100,000-row index of `kind` in workdir: the recall part's, or built now."""
    folder = workdir / ("%s.index" % kind)
    if not (folder / "index.json").is_file():
        started = time.perf_counter()
        Index.build(None, folder, kind=kind, source=fc7_like.Source(ROWS))
        say(json.dumps({"built": kind, "seconds": round(time.perf_counter() - started, 1)}))
    return folder


def part_sweep(workdir, results, rounds=3):
    """Recall@10 and time per query of hnsw and ivfpq at several search parameters; each time the median
    of `rounds` runs of the 1,000 queries, the brute force likewise (median of `rounds`)."""
    queries = fc7_like.queries(QUERIES)
    rows = all_rows()
    settings = {"hnsw": [{"efSearch": value} for value in (16, 32, 64, 128)],
                "ivfpq": [{"nprobe": 32, "k_factor": 8, "rerank": value} for value in (1, 2, 3, 5, 10)] +
                         [{"nprobe": 64, "k_factor": 8, "rerank": 10}]}
    entries = []
    for kind, choices in settings.items():
        index = Index.load(_built(workdir, kind, results))
        unit_queries = index.prepare(queries)
        unit_rows = normalise(rows, index.mean)
        brute = [brute_force(unit_rows, unit_queries, K) for _ in range(rounds)]
        exact, brute_seconds = brute[0][0], float(np.median([seconds for _, seconds in brute]))
        del unit_rows
        for parameters in choices:
            index.set_search(**parameters)
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                found, _ = index.search_ids(unit_queries, K)
                times.append(time.perf_counter() - started)
            seconds = float(np.median(times))
            recall = np.mean([len(set(a) & set(b)) / K for a, b in zip(exact, found)])
            entry = {"kind": kind, "search": parameters, "recall_at_10": round(float(recall), 4),
                     "ms_per_query": round(1000 * seconds / QUERIES, 3),
                     "brute_force_ms_per_query": round(1000 * brute_seconds / QUERIES, 3),
                     "time_ratio": round(seconds / brute_seconds, 4)}
            entries.append(entry)
            say(json.dumps(entry))
    results["sweep"] = entries


def part_duplicates(workdir, results, kinds=KINDS):
    for kind in kinds:
        _built(workdir, kind, results)
    rows = all_rows()
    index = Index.load(workdir / ("%s.index" % kinds[0]))  # its mean: every kind's is the rows' mean
    unit_rows = normalise(rows, index.mean)
    del rows, index
    truth, sampled, matrix_seconds = _matrix_blocks(workdir, unit_rows)
    del unit_rows
    matrix_bytes = ROWS * ROWS * 4
    entry = {"brute_force_matrix_s_scaled": round(matrix_seconds, 1), "matrix_gib": round(matrix_bytes / 2 ** 30, 1),
             "truth_pairs_in_sample": len(truth), "kinds": []}
    for kind in kinds:
        child = subprocess.run([sys.executable, __file__, "--duplicates-child", str(workdir / ("%s.index" % kind))],
                               capture_output=True, text=True, check=True)
        measured = json.loads(child.stdout.strip().splitlines()[-1])
        pairs = np.load(workdir / ("%s.pairs.npy" % kind))
        found = {(a, b) for a, b in pairs.tolist() if a in sampled or b in sampled}
        recall = len(found & truth) / len(truth) if truth else None
        measured.update(kind=kind, recall=round(recall, 4) if recall is not None else None,
                        time_ratio=round(measured["seconds"] / matrix_seconds, 4),
                        memory_ratio=round(measured["peak_rss_mib"] * 2 ** 20 / matrix_bytes, 4),
                        extra_pairs_in_sample=len(found - truth))
        entry["kinds"].append(measured)
        say(json.dumps(measured))
    results["duplicates"] = entry


def duplicates_child(folder):
    started = time.perf_counter()
    index = Index.load(folder)
    pairs, scores = find_pairs(index, THRESHOLD, source=fc7_like.Source(ROWS))
    seconds = time.perf_counter() - started
    np.save(str(folder).replace(".index", ".pairs.npy"), pairs)
    print(json.dumps({"pairs": len(pairs), "seconds": round(seconds, 1), "peak_rss_mib": round(peak_rss_mib(), 1)}))


def million_child(folder, rows):
    started = time.perf_counter()
    index = Index.build(None, folder, kind="ivfpq", source=fc7_like.Source(rows))
    print(json.dumps({"rows": len(index), "seconds": round(time.perf_counter() - started, 1),
                      "peak_rss_mib": round(peak_rss_mib(), 1), "recall_at_build": index.meta["recall_at_build"],
                      "parameters": index.meta["parameters"]}))


def part_million(workdir, results, rows=1_000_000):
    child = subprocess.run([sys.executable, __file__, "--million-child", str(workdir / "million.index"), str(rows)],
                           capture_output=True, text=True, check=True)
    results["million"] = json.loads(child.stdout.strip().splitlines()[-1])
    say(json.dumps(results["million"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-search"))
    parser.add_argument("--only", nargs="+", choices=("recall", "sweep", "duplicates", "million"))
    parser.add_argument("--million-rows", type=int, default=1_000_000)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                        help="of the recall and duplicates parts")
    parser.add_argument("--generator", choices=("fc7_like", "hard"), default="fc7_like",
                        help="of the recall part's rows (fc7_like.py)")
    parser.add_argument("--duplicates-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--build-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--million-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.duplicates_child:
        return duplicates_child(args.duplicates_child)
    if args.build_child:
        return build_child(Path(args.build_child[0]), *args.build_child[1:])
    if args.million_child:
        return million_child(Path(args.million_child[0]), int(args.million_child[1]))
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = {"machine": machine(), "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                         time.gmtime())}
    say(json.dumps(results))
    for name in args.only or ("recall", "sweep", "duplicates", "million"):
        if name == "million":
            part_million(args.workdir, results, args.million_rows)
        else:
            if name == "sweep":
                part_sweep(args.workdir, results)
            elif name == "recall":
                part_recall(args.workdir, results, args.kinds, generator=args.generator)
            else:
                part_duplicates(args.workdir, results, args.kinds)
        (args.workdir / ("results-%s-%s.json" % ("-".join(args.only or ["all"]), args.generator))).write_text(
            json.dumps(results, indent=1))
    # The indexes are 1.6 GB each: removed once this run's parts are done (only this run's: another run
    # may be using the workdir's others).
    parts = set(args.only or ("recall", "sweep", "duplicates", "million"))
    made = (list(KINDS) if "sweep" in parts else list(args.kinds) if parts & {"recall", "duplicates"} else []) + (
        ["million"] if "million" in parts else [])
    for name in made:
        shutil.rmtree(args.workdir / ("%s.index" % name), ignore_errors=True)


if __name__ == "__main__":
    main()
