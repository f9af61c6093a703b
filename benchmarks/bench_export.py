"""Benchmark of export with --images-out: the selected rows' images written as WebDataset tars, rows and MB a second.

    python benchmarks/bench_export.py --images 10000     # ~3 minutes on 2 busy cores; 0.8 GB of JPEGs, 2.0 GB of disk
    python benchmarks/bench_export.py --images 24 --shard-size 8 --no-read-back   # a quick check of the script

The photos (`make_photos`): --images JPEGs of 640x480, quality 90, each upsampled random noise on a grid of its
own fineness (6 to 120 cells across: smooth as a sky to busy as foliage), so that their sizes spread as photos'
do (10,000 of them: 21.5 to 125.2 KB, 79.6 KB on average). They are kept in --workdir for the next run of the same
size.

The stages, each in its own process, timed (wall and CPU seconds: user and system, of the process and its
threads) and measured (its peak resident memory, os.wait4's ru_maxrss), bench_dedup.run_stage:

    photos      the JPEGs written (skipped when they are there)
    job         run_inference.py --images PHOTOS --format npy, with tests/cli_child.py's colour model (a colour
                mean, uint8 [N, 8, 8, 3] -> float32 [N, 6]) in VGG16's place: the export does not depend on the
                model that made the features, and the job records the manifest the export proves each image by
    index       search_features.py index OUTPUT --kind exact
    removals    a removals file (search.removals.write_removals) that removes a seeded random half of the rows
    rows only   search_features.py export INDEX --out rows.parquet: every row, Parquet only (the process's
                start-up, the index read and the Parquet file: what the images add to is this)
    all         search_features.py export INDEX --out all.parquet --images-out all/: every row and its image
    all again   the same command over the finished export: each tar checked against its recorded SHA-256 and
                none written (search/export_tars.py: resumable as a job is), the Parquet file written again
    selection   search_features.py export INDEX --removals FILE --out selection.parquet --images-out selection/
    read back   run_inference.py --images 'selection/*.tar' with the same model: the export as a job's input

Rows and MB a second are the rows exported and their image bytes (1 MB = 10^6 bytes) over the stage's wall
seconds, and over its CPU seconds (what a busy machine moves least). What the results say is checked from the
files: the samples and image bytes in the tars (their members' headers) against the rows and the photos' sizes,
the Parquet files' rows, and the read-back job's features against the indexed rows' (equal, sample by sample).

Results: printed, and written to WORKDIR/results.json. The exports are written afresh each run (a finished
export would be resumed).
"""

import argparse
import os
import shutil
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dedup import report, run_stage  # noqa: E402 -- benchmarks/, this script's folder

CLI_CHILD = ROOT / "tests" / "cli_child.py"
SIZE = (640, 480)
CELLS = (6, 120)   # the noise grid's columns, drawn per photo: its fineness
QUALITY = 90
REMOVED = 0.5      # share of the rows the removals file removes


def make_photos(folder, count, seed=0):
    """Writes `count` JPEGs `folder`/photo_000000.jpg ... (module docstring), those not there yet."""
    import numpy as np
    from PIL import Image
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        path = folder / ("photo_%06d.jpg" % number)
        if path.exists():
            continue
        rng = np.random.default_rng([seed, number])
        cells = int(rng.integers(*CELLS))
        noise = rng.integers(0, 255, (cells * SIZE[1] // SIZE[0] + 1, cells + 1, 3), dtype=np.uint8)
        Image.fromarray(noise).resize(SIZE, Image.BICUBIC).save(path, "JPEG", quality=QUALITY)


def removed_rows(count, seed=0):
    """The rows the removals file removes: a seeded random REMOVED share of `count`, ascending (int64)."""
    import numpy as np
    return np.sort(np.random.default_rng(seed).choice(count, size=int(REMOVED * count), replace=False))


def write_half_removals(index_folder, path, seed=0):
    """Writes the removals file `path` removing `removed_rows` of the index: each removed row a group with a kept
    row (one not removed)."""
    import numpy as np
    from search.index import Index
    from search.removals import table_columns, write_removals
    index = Index.load(index_folder)
    removed = removed_rows(len(index), seed)
    kept = np.setdiff1d(np.arange(len(index)), removed)[:len(removed)]
    groups = np.repeat(np.arange(1, len(removed) + 1), 2)
    rows = np.stack([kept, removed], axis=1).ravel()
    keys = [index.paths[row] for row in rows.tolist()]
    kept_keys = [index.paths[row] for row in np.repeat(kept, 2).tolist()]
    remove = np.tile([False, True], len(removed))
    scores = np.where(remove, np.float32(0.95), np.float32(np.nan))
    write_removals(Path(path), table_columns(groups, keys, kept_keys, remove, scores), {"benchmark": "bench_export"})


def apart(call):
    """bench_dedup.run_stage's program that runs `call` (Python code calling this module) in its own process."""
    return ["-c", "import sys; sys.path.insert(0, %r); import bench_export; bench_export.%s"
            % (str(Path(__file__).resolve().parent), call)]


def tar_contents(folder):
    """(tars, samples: their .jpg members, the bytes of those members, the tars' bytes) of the tars in `folder`,
    read from the members' headers; {sample: bytes} of each .jpg member."""
    sizes, tar_bytes = {}, 0
    tars = sorted(Path(folder).glob("*.tar"))
    for path in tars:
        tar_bytes += path.stat().st_size
        with tarfile.open(path) as tar:
            for member in tar:
                if member.name.endswith(".jpg"):
                    sizes[member.name[:-4]] = member.size
    return len(tars), len(sizes), sum(sizes.values()), tar_bytes, sizes


def tar_states(folder):
    """{tar name: (inode, size, mtime_ns)} of `folder`'s tars: what a resumed export that wrote nothing keeps."""
    return {path.name: (path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns)
            for path in Path(folder).glob("*.tar")}


def timed(results, name, argv, program=None):
    """Runs a stage (bench_dedup.run_stage) and records its wall and CPU seconds and peak MiB under `name`."""
    seconds, cpu, peak = run_stage(argv, program)
    results[name + " seconds"], results[name + " CPU seconds"], results[name + " peak MiB"] = seconds, cpu, peak
    print("%-10s %7.1f s, %7.1f CPU s, peak %7.1f MiB" % (name, seconds, cpu, peak), flush=True)
    return seconds, cpu


def rates(results, name, rows, image_bytes, seconds, cpu):
    """Rows and MB of images a second (wall and CPU) of stage `name`; `image_bytes` None: rows only."""
    results[name + " rows a second"] = round(rows / seconds)
    results[name + " rows a CPU second"] = round(rows / cpu)
    if image_bytes is None:
        return
    results[name + " MB a second"] = round(image_bytes / 1e6 / seconds, 1)
    results[name + " MB a CPU second"] = round(image_bytes / 1e6 / cpu, 1)


def read_back_equal(workdir, selection_parquet):
    """Whether the read-back job's features are the indexed rows' features, sample by sample, and as many."""
    import numpy as np
    import pyarrow.parquet as pq
    features = np.load(workdir / "features.npy", mmap_mode="r")
    back = np.load(workdir / "read-back.npy")
    # A key of the job over tars: tar://000000001.jpg::/.../00000.tar
    samples = [line.split("://", 1)[1].split(".jpg::")[0]
               for line in (workdir / "read-back.npy.paths.csv").read_text().splitlines()[1:]]
    table = pq.read_table(selection_parquet, columns=["row", "sample"])
    row_of = dict(zip(table.column("sample").to_pylist(), table.column("row").to_pylist()))
    return len(samples) == len(row_of) and bool(np.array_equal(back, features[[row_of[s] for s in samples]]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=10_000, help="photos: rows of the index")
    parser.add_argument("--shard-size", type=int, default=1000, help="samples a tar (export's own default: 10,000)")
    parser.add_argument("--workdir", default=str(ROOT / "results" / "bench_export"))
    parser.add_argument("--no-read-back", action="store_true", help="leave out the read back stage (TensorFlow's "
                        "start-up: 3 CPU seconds)")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    photos, output, index = workdir / ("photos-%d" % args.images), workdir / "features.npy", workdir / "features.index"
    results = {"images": args.images, "shard size": args.shard_size, "cpus": os.cpu_count(),
               "load average at the start": round(os.getloadavg()[0], 2)}
    timed(results, "photos", [], apart("make_photos(%r, %d)" % (str(photos), args.images)))
    files = {entry.name: entry.stat().st_size for entry in os.scandir(photos)}
    results["image bytes"] = sum(files.values())
    results["image KB mean, min, max"] = [round(results["image bytes"] / len(files) / 1e3, 1),
                                          round(min(files.values()) / 1e3, 1), round(max(files.values()) / 1e3, 1)]
    child = [str(CLI_CHILD), "--quiet", "--devices", "cpu:0", "--format", "npy", "--overwrite"]
    timed(results, "job", ["--images", str(photos), "--output", str(output)], child)
    timed(results, "index", ["index", str(output), "--index", str(index), "--kind", "exact", "--overwrite"])
    removals = workdir / "removals.parquet"
    timed(results, "removals", [], apart("write_half_removals(%r, %r)" % (str(index), str(removals))))
    for name in ("all", "selection"):
        shutil.rmtree(workdir / name, ignore_errors=True)
    export = ["export", str(index), "--shard-size", str(args.shard_size)]
    seconds, cpu = timed(results, "rows only", export + ["--out", str(workdir / "rows.parquet")])
    rates(results, "rows only", args.images, None, seconds, cpu)
    all_rows = export + ["--out", str(workdir / "all.parquet"), "--images-out", str(workdir / "all")]
    seconds, cpu = timed(results, "all", all_rows)
    rates(results, "all", args.images, results["image bytes"], seconds, cpu)
    before = tar_states(workdir / "all")
    timed(results, "all again", all_rows)
    results["all again wrote no tar"] = tar_states(workdir / "all") == before
    selected = args.images - int(REMOVED * args.images)
    seconds, cpu = timed(results, "selection", export + ["--removals", str(removals), "--out",
                                                         str(workdir / "selection.parquet"), "--images-out",
                                                         str(workdir / "selection")])
    if not args.no_read_back:
        timed(results, "read back", ["--images", str(workdir / "selection" / "*.tar"), "--output",
                                     str(workdir / "read-back.npy")], child)
    import pyarrow.parquet as pq
    for name in ("all", "selection"):
        table = pq.read_table(workdir / (name + ".parquet"), columns=["key", "sample"])
        tars, samples, image_bytes, tar_bytes, sizes = tar_contents(workdir / name)
        keys = table.column("key").to_pylist()
        results[name + " rows in the Parquet file"] = len(keys)
        results[name + " tars"], results[name + " samples in the tars"] = tars, samples
        results[name + " image bytes in the tars"], results[name + " tar bytes"] = image_bytes, tar_bytes
        results[name + " image bytes of the rows' files"] = sum(files[key] for key in keys)
        results[name + " each sample its row's file's bytes"] = all(
            sizes.get(sample) == files[key] for sample, key in zip(table.column("sample").to_pylist(), keys))
    rates(results, "selection", selected, results["selection image bytes of the rows' files"], seconds, cpu)
    if not args.no_read_back:
        results["read back features equal the rows'"] = read_back_equal(workdir, workdir / "selection.parquet")
    results["load average at the end"] = round(os.getloadavg()[0], 2)
    return report(results, workdir)


if __name__ == "__main__":
    main()
