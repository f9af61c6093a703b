"""Benchmarks of a job over many processes: the manifest's memory, and what sharding costs.

    python benchmarks/bench_jobs.py manifest [--paths 1000000]       # ~3 minutes, most of it making files
    python benchmarks/bench_jobs.py sharding [--images 240 --shard-size 96 --rounds 3]   # ~15 minutes on 2 cores

manifest  peak RSS (VmHWM) of a fresh process that scans a folder of --paths empty image files (1,000
          folders) and writes the job's manifest, and of one that reads a list file of as many
          paths; beside it, the peak of a process that only imports what they import       bar < 500 MB
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
from parallel.inputs.manifest import Manifest, read_list
started = time.perf_counter()
if sys.argv[1] == "imports":
    import pyarrow.parquet
    count = 0
elif sys.argv[1] == "scan":
    manifest = Manifest.scan(sys.argv[2])
    manifest.save(sys.argv[3])
    count = len(manifest)
else:
    manifest = read_list(sys.argv[2], sys.argv[4])
    manifest.save(sys.argv[3])
    count = len(manifest)
peak = [line for line in open("/proc/self/status") if line.startswith("VmHWM")][0].split()[1]
print(count, int(peak) / 1024, time.perf_counter() - started)
"""


def make_files(root, count):
    """`count` empty .jpg files in 1,000 folders (kept between runs)."""
    marker = root / (".made-%d" % count)
    if marker.exists():
        return
    per_folder = -(-count // 1000)
    for index in range(count):
        folder = root / ("f%04d" % (index // per_folder))
        if index % per_folder == 0:
            folder.mkdir(parents=True, exist_ok=True)
        open(folder / ("image_%07d.jpg" % index), "wb").close()
    marker.touch()


def bench_manifest(args, workdir):
    root = workdir / "many"
    started = time.perf_counter()
    make_files(root, args.paths)
    print("made %d files in %.0f s" % (args.paths, time.perf_counter() - started), flush=True)
    listing = workdir / "list.txt"
    if not listing.exists():
        listing.write_text("".join("f%04d/image_%07d.jpg\n" % (index // -(-args.paths // 1000), index)
                                   for index in range(args.paths)))
    results = {}
    for mode in ("imports", "scan", "list"):
        done = subprocess.run([sys.executable, "-c", SCAN, mode, str(root if mode == "scan" else listing),
                               str(workdir / ("manifest-%s.parquet" % mode)), str(root)],
                              capture_output=True, text=True, cwd=ROOT, check=True)
        count, peak, seconds = done.stdout.split()
        results[mode] = float(peak)
        print("%-8s %8s paths  peak RSS %7.1f MiB  %6.1f s" % (mode, count, float(peak), float(seconds)), flush=True)
    print("manifest of %d paths: peak %.0f MiB scanning a folder, %.0f MiB from a list (imports alone: %.0f MiB); "
          "bar < 500 MB: %s" % (args.paths, results["scan"], results["list"], results["imports"],
                                "met" if max(results["scan"], results["list"]) * 2 ** 20 < 500e6 else "NOT MET"))


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
    parser.add_argument("--paths", type=int, default=1_000_000)
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
