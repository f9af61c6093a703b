"""Benchmarks of a job over many processes: the manifest's memory, and what sharding costs.

    python benchmarks/bench_jobs.py manifest [--paths 1000000 4000000]   # ~15 minutes, most of it making files
    python benchmarks/bench_jobs.py sharding [--images 240 --shard-size 96 --rounds 3]   # ~15 minutes on 2 cores

manifest  peak RSS (VmHWM) of a fresh process that freezes a job's manifest as a sharded job does
          (parallel.inputs.sorting: sorted runs spilled to disk, the manifest written a shard at a
          time) from a folder of N empty image files (1,000 per folder), and of one that freezes
          it from a list file of as many paths; beside them, the peak of a process that only
          imports what they import; for each N of --paths       bar: the largest N within 1.1x of the smallest
sharding  run_inference.py end to end (VGG16, seeded random weights, one CPU device, JPEGs of 640x480):
          one process with --distributed static --rank 0 --world-size 1 (shards of --shard-size,
          then the output written from them) against the same command without --distributed;
          whole-process wall time, alternated for --rounds rounds; the median ratio of images/s
                                                                                           bar >= 0.97
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from run_benchmarks import machine, make_jpegs, weights_files  # noqa: E402

SCAN = """
import sys, time
from parallel.inputs.sorting import folder_entries, list_entries
started = time.perf_counter()
if sys.argv[1] == "imports":
    import pyarrow.parquet
    count = 0
else:
    entries = folder_entries(sys.argv[2]) if sys.argv[1] == "scan" else list_entries(sys.argv[2], sys.argv[4])
    entries.save(sys.argv[3], 10_000)
    count = len(entries)
peak = [line for line in open("/proc/self/status") if line.startswith("VmHWM")][0].split()[1]
print(count, int(peak) / 1024, time.perf_counter() - started)
"""


def make_files(root, count):
    """`count` empty .jpg files under `root`: parts of 1,000,000 (part0/, part1/, ...), each 1,000 folders of
    1,000 (kept between runs, so that N = 1,000,000 is part0/ of the tree of 4,000,000)."""
    for part in range(-(-count // 1_000_000)):
        folder_of_part = root / ("part%d" % part)
        marker = root / (".made-part%d" % part)
        if marker.exists():
            continue
        for index in range(1_000_000):
            folder = folder_of_part / ("f%04d" % (index // 1000))
            if index % 1000 == 0:
                folder.mkdir(parents=True, exist_ok=True)
            open(folder / ("image_%07d.jpg" % index), "wb").close()
        marker.touch()


def bench_manifest(args, workdir):
    root = workdir / "many"
    started = time.perf_counter()
    make_files(root, max(args.paths))
    print("made %d files in %.0f s" % (max(args.paths), time.perf_counter() - started), flush=True)
    peaks = {}
    for count in sorted(args.paths):
        parts = -(-count // 1_000_000)
        folder = root / "part0" if parts == 1 else root
        if parts > 1 and count != 1_000_000 * len(list(root.glob("part*"))):
            raise SystemExit("--paths: a multiple of 1,000,000 (the parts made), not %d" % count)
        listing = workdir / ("list-%d.txt" % count)
        if not listing.exists():
            with open(listing, "w") as file:
                for path in sorted(folder.rglob("*.jpg")):
                    file.write(path.relative_to(folder).as_posix() + "\n")
        for mode in ("imports", "scan", "list"):
            done = subprocess.run([sys.executable, "-c", SCAN, mode, str(folder if mode == "scan" else listing),
                                   str(workdir / ("manifest-%s.parquet" % mode)), str(folder)],
                                  capture_output=True, text=True, cwd=ROOT, check=True)
            found, peak, seconds = done.stdout.split()
            peaks[count, mode] = float(peak)
            print("%-8s %8s paths  peak RSS %7.1f MiB  %6.1f s" % (mode, found, float(peak), float(seconds)),
                  flush=True)
    small, large = min(args.paths), max(args.paths)
    for mode in ("scan", "list"):
        ratio = peaks[large, mode] / peaks[small, mode]
        print("%s: peak %.0f MiB for %d paths, %.0f MiB for %d: %.3fx (bar <= 1.1: %s)"
              % (mode, peaks[large, mode], large, peaks[small, mode], small, ratio, "met" if ratio <= 1.1 else
                 "NOT MET"), flush=True)


def timed_run(images, output, weights, extra):
    started = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "run_inference.py"), "--images", str(images), "--output", str(output),
                    "--weights", str(weights), "--devices", "cpu:0", "--quiet", *extra],
                   check=True, cwd=ROOT)
    return time.perf_counter() - started


def bench_sharding(args, workdir):
    images = workdir / "jpegs"
    make_jpegs(images, args.images, (640, 480))
    weights, _ = weights_files(workdir)
    ratios = []
    for round_index in range(args.rounds):
        for output in workdir.glob("sharded.*"):
            if output.is_dir():
                import shutil
                shutil.rmtree(output)
            else:
                output.unlink()
        plain = timed_run(images, workdir / "plain.csv", weights, ["--overwrite"])
        sharded = timed_run(images, workdir / "sharded.csv", weights,
                            ["--distributed", "static", "--rank", "0", "--world-size", "1",
                             "--shard-size", str(args.shard_size)])
        if (workdir / "plain.csv").read_bytes() != (workdir / "sharded.csv").read_bytes():
            raise SystemExit("the sharded output differs from the single-process one")
        ratios.append(plain / sharded)
        print("round %d: unsharded %.1f s (%.2f images/s), sharded %.1f s (%.2f images/s): ratio %.3f"
              % (round_index + 1, plain, args.images / plain, sharded, args.images / sharded, ratios[-1]), flush=True)
    median = statistics.median(ratios)
    print("sharded/unsharded images/s: median %.3f of %s; bar >= 0.97: %s"
          % (median, ", ".join("%.3f" % ratio for ratio in ratios), "met" if median >= 0.97 else "NOT MET"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", choices=("manifest", "sharding"))
    parser.add_argument("--paths", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--images", type=int, default=240)
    parser.add_argument("--shard-size", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(machine())
    print("CPU flags: %s" % " ".join(sorted({flag for line in open("/proc/cpuinfo") if line.startswith("flags")
                                             for flag in line.split() if flag.startswith(("avx", "amx", "fma"))})))
    print("command: python benchmarks/bench_jobs.py %s" % " ".join(sys.argv[1:]), flush=True)
    (bench_manifest if args.which == "manifest" else bench_sharding)(args, workdir)


if __name__ == "__main__":
    main()
