"""Benchmarks of the inputs: images from an S3-compatible store, and images packed in tars.

    python benchmarks/bench_inputs.py s3      # ~8 minutes on 2 cores: VGG16 end to end, S3 vs a folder
    python benchmarks/bench_inputs.py tars    # ~1 minute: decode only, tars vs files
    python benchmarks/bench_inputs.py s3 tars --images 64 --rounds 1     # a quick check of the script

s3     run_inference.py (real VGG16, seeded random weights in tensorflow-vgg's .npy layout, fc7,
       --devices cpu:0 --batch-size 8) over --images 640x480 JPEGs (160), once from a local folder and once
       from an s3:// prefix served by moto's ThreadedMotoServer on 127.0.0.1 (in this process: the
       store's work shares the 2 cores with the compute, which a real store does not), alternated for
       --rounds rounds; images/s from the run's own summary line (start-up excluded); the median of
       the ratios s3/folder of each round.                                               bar >= 0.95
tars   the readers alone (no model): ImageReader over the JPEGs as files, and StreamReader over the
       same JPEGs packed in tars of --per-tar members, read as a job reads a shard of them (one
       stream of parallel.inputs.tar_stream.stream_members, each tar opened once), decoded and resized to
       224x224 with --workers threads, alternated for --rounds rounds; images/s; the median of the
       ratios tars/files.                                                                bar >= 1.0

Nothing here talks to anything but 127.0.0.1.
"""

import argparse
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from run_benchmarks import make_jpegs, weights_files  # noqa: E402

BARS = {"s3/folder": 0.95, "tars/files": 1.0}


def cpu():
    with open("/proc/cpuinfo") as file:
        text = file.read()
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    wanted = [flag for flag in flags if flag in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_bf16")]
    return "%s, %d cores, flags %s" % (model, os.cpu_count(), " ".join(wanted))


def summary_rate(stderr):
    """images/s of a run_inference.py run, from its summary line (the loop only, start-up excluded)."""
    line = stderr.strip().splitlines()[-1]
    written = int(line.split(" written")[0].split()[-1])
    loop = float(line.split(" skipped in ")[1].split(" s ")[0])
    return written / loop, line


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def bench_s3(args, workdir):
    from moto.server import ThreadedMotoServer
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    images = make_jpegs(workdir / ("photos-%d" % args.images), args.images, (640, 480))
    npy, _ = weights_files(workdir)
    port = free_port()
    env = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
               AWS_ENDPOINT_URL_S3="http://127.0.0.1:%d" % port)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        import s3fs
        store = s3fs.S3FileSystem(endpoint_url=env["AWS_ENDPOINT_URL_S3"], key="bench", secret="bench")
        store.mkdir("bench")
        for path in sorted(images.glob("*.jpg")):
            store.pipe("bench/photos/" + path.name, path.read_bytes())
        sources = {"folder": str(images), "s3": "s3://bench/photos/"}
        rates = {name: [] for name in sources}
        lines = {}
        for _ in range(args.rounds):
            for name, source in sources.items():  # alternated: the machine's drift falls on both
                command = [sys.executable, str(ROOT / "run_inference.py"), "--images", source, "--weights", str(npy),
                           "--devices", "cpu:0", "--batch-size", "8", "--output", str(workdir / ("%s.csv" % name)),
                           "--overwrite"]
                result = subprocess.run(command, capture_output=True, text=True, env=env)
                if result.returncode != 0:
                    raise SystemExit("%s run failed: %s" % (name, result.stderr.strip().splitlines()[-1]))
                rate, lines[name] = summary_rate(result.stderr)
                rates[name].append(rate)
                print(json.dumps({"source": name, "images/s": round(rate, 3)}), flush=True)
        same = (workdir / "folder.csv").read_bytes() == (workdir / "s3.csv").read_bytes()
    finally:
        server.stop()
    ratios = [s3 / folder for s3, folder in zip(rates["s3"], rates["folder"])]
    return {"folder images/s": rates["folder"], "s3 images/s": rates["s3"], "s3/folder": statistics.median(ratios),
            "ratios": ratios, "outputs byte-identical": same, "summary lines": lines,
            "command": "run_inference.py --images <folder | s3://bench/photos/> --weights vgg16.npy --devices cpu:0 "
                       "--batch-size 8 --output <csv> --overwrite"}


def bench_tars(args, workdir):
    from parallel.inputs.reader import ImageReader
    from parallel.inputs.streams import StreamReader
    from parallel.inputs.tar_stream import stream_members
    images = make_jpegs(workdir / ("photos-%d" % args.images), args.images, (640, 480))
    names = sorted(path.name for path in images.glob("*.jpg"))[:args.images]
    tars = []
    for number, start in enumerate(range(0, len(names), args.per_tar)):
        path = workdir / ("tars-%d" % args.per_tar) / ("%06d.tar" % number)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(path, "w") as tar:
                for name in names[start:start + args.per_tar]:
                    tar.add(images / name, arcname=name)
        tars.append(str(path))

    def files():
        with ImageReader(images, names, batch_size=32, workers=args.workers) as reader:
            return sum(len(batch.paths) for batch in reader)

    def packed():  # the tars as a job reads a shard of them: one stream, each tar opened once, in turn
        members = itertools.chain.from_iterable(stream_members(tar, []) for tar in tars)
        with StreamReader(members, batch_size=32, workers=args.workers) as reader:
            return sum(len(batch.paths) for batch in reader)

    rates = {"files": [], "tars": []}
    for _ in range(args.rounds):
        for name, read in (("files", files), ("tars", packed)):
            started = time.perf_counter()
            count = read()
            rates[name].append(count / (time.perf_counter() - started))
            if count != len(names):
                raise SystemExit("%s read %d images, not %d" % (name, count, len(names)))
            print(json.dumps({"source": name, "images/s": round(rates[name][-1], 1)}), flush=True)
    ratios = [tar / file for tar, file in zip(rates["tars"], rates["files"])]
    return {"files images/s": rates["files"], "tars images/s": rates["tars"],
            "tars/files": statistics.median(ratios), "ratios": ratios, "images": len(names),
            "per tar": args.per_tar, "workers": args.workers}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", nargs="+", choices=("s3", "tars"))
    parser.add_argument("--images", type=int, default=None, help="default: 160 for s3, 1000 for tars")
    parser.add_argument("--per-tar", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-inputs-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results = {"machine": cpu(), "load before": os.getloadavg(), "command": " ".join(sys.argv),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps(results), flush=True)
    given = args.images
    for which in args.which:
        args.images = given or (160 if which == "s3" else 1000)
        results[which] = (bench_s3 if which == "s3" else bench_tars)(args, workdir)
        key = "s3/folder" if which == "s3" else "tars/files"
        value = results[which][key]
        print(json.dumps({which: results[which]}), flush=True)
        print("%s = %.3f (bar >= %.2f: %s)" % (key, value, BARS[key], "met" if value >= BARS[key] else "NOT met"),
              flush=True)
    (workdir / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
