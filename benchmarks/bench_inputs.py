"""Benchmarks of the inputs: images from an S3-compatible store, and images packed in tars, Parquet and TFRecord files.

    python benchmarks/bench_inputs.py s3        # ~8 minutes on 2 cores: VGG16 end to end, S3 vs a folder
    python benchmarks/bench_inputs.py tars      # ~1 minute: decode only, tars vs files
    python benchmarks/bench_inputs.py parquet   # ~20 seconds with the next: decode only, Parquet vs tars
    python benchmarks/bench_inputs.py tfrecord  # decode only, TFRecord (plain, GZIP) vs tars
    python benchmarks/bench_inputs.py s3 tars parquet tfrecord --images 64 --rounds 1   # a quick check of the script

s3       run_inference.py (real VGG16, seeded random weights in tensorflow-vgg's .npy layout, fc7,
         --devices cpu:0 --batch-size 8) over --images 640x480 JPEGs (160), once from a local folder and once
         from an s3:// prefix served by moto's ThreadedMotoServer on 127.0.0.1 (in this process: the
         store's work shares the 2 cores with the compute, which a real store does not), alternated for
         --rounds rounds; images/s from the run's own summary line (start-up excluded); the median of
         the ratios s3/folder of each round.                                             bar >= 0.95
tars     the readers alone (no model): ImageReader over the JPEGs as files, and StreamReader over the
         same JPEGs packed in tars of --per-tar members, read as a job reads a shard of them (one
         stream of parallel.inputs.streamed.stream_images, each tar opened once), decoded and resized
         to 224x224 with --workers threads, alternated for --rounds rounds; images/s; the median of the
         ratios tars/files.                                                              bar >= 1.0
parquet  the readers alone, as tars: the same JPEGs in tars and in Parquet files of img2dataset's
         columns (key, jpg, caption, url, width, height; --per-tar rows a file, row groups of 100,
         pyarrow's defaults otherwise: Snappy, and a dictionary, which holds a row group's images), each read
         as one stream of stream_images over its files through StreamReader, alternated; images/s; the
         median of the ratios parquet/tars.                                             bar >= 1.0
tfrecord the same with TFRecord files of tf.train.Example in ImageNet's feature names (image/encoded,
         image/class/label, image/filename, ...; tf.io.TFRecordWriter), plain and GZIP, --per-tar records a
         file; the medians of tfrecord/tars (bar >= 1.0) and tfrecord-gzip/tars (no bar: GZIP's inflate is
         work a tar does not have and no reader can skip, zlib's, about a sixth of a 640x480 image's decode
         and resize here: 194 us of CPU an image for the inflate alone, against 17 us to stream a plain
         TFRecord's image and 20 a tar's, 1,050-1,150 to decode and resize it. Its ratio is reported so
         that the cost of GZIP is known; a bar would judge zlib, not the reader).

Every decode mode also reports CPU microseconds per image (time.process_time over the read, all
threads) and the ratios of those ("by CPU": the other's CPU per image / this one's), figures that
another process's load on the same cores moves much less than images/s. parquet and tfrecord read
each kind's first file once before the rounds, so that no import (pyarrow, TensorFlow's protobufs)
falls in a timing.

Nothing here talks to anything but 127.0.0.1.
"""

import argparse
import functools
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

BARS = {"s3/folder": 0.95, "tars/files": 1.0, "parquet/tars": 1.0, "tfrecord/tars": 1.0}  # tfrecord-gzip: none
SIZE = (640, 480)  # the JPEGs' (width, height)
SUFFIXES = {"tars": ".tar", "parquet": ".parquet", "tfrecord": ".tfrecord", "tfrecord-gzip": ".tfrecord.gz"}


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


def pack(kind, images, names, folder, per_file):
    """The JPEGs `names` of the folder `images`, in order, packed `per_file` a file into files of `kind` in `folder`.

    kind: "tars" (tarfile, as tar(1) writes), "parquet" (img2dataset's columns, row groups of 100), "tfrecord" or
    "tfrecord-gzip" (tf.train.Example in ImageNet's feature names, tf.io.TFRecordWriter). Files an earlier run
    left in `folder` are kept (it is named by kind, count and per_file). Returns their paths (str), in order.
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, start in enumerate(range(0, len(names), per_file)):
        path = folder / ("%06d%s" % (number, SUFFIXES[kind]))
        if not path.exists():
            part = path.with_name(path.name + ".part")  # a run cut short leaves no file that looks whole
            WRITERS[kind](part, images, list(enumerate(names[start:start + per_file], start)))
            os.replace(part, path)
        paths.append(str(path))
    return paths


def write_tar(path, images, rows):
    with tarfile.open(path, "w") as tar:
        for _, name in rows:
            tar.add(images / name, arcname=name)


def write_parquet(path, images, rows):
    """img2dataset's `parquet` output's columns (its key: the image's number, 9 digits); pyarrow's defaults but
    the row groups: Snappy, and a dictionary encoding, whose limit (1 MB) is checked every 1024 rows, so that a
    row group of 100 holds its images in one dictionary page and their indices in a data page."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.table({"key": ["%09d" % position for position, _ in rows],
                      "jpg": pa.array([(images / name).read_bytes() for _, name in rows], pa.binary()),
                      "caption": ["a photograph, %s" % name for _, name in rows],
                      "url": ["https://example.com/photos/%s" % name for _, name in rows],
                      "width": pa.array([SIZE[0]] * len(rows), pa.int32()),
                      "height": pa.array([SIZE[1]] * len(rows), pa.int32())})
    pq.write_table(table, path, row_group_size=100)


def write_tfrecord(path, images, rows, compression=None):
    """tf.train.Examples as TensorFlow's ImageNet script (build_imagenet_data.py) writes them, without boxes."""
    import tensorflow as tf

    def feature(value):
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value if isinstance(value, bytes)
                                                                     else value.encode()]))
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression)) as writer:
        for position, name in rows:
            values = {"image/height": SIZE[1], "image/width": SIZE[0], "image/colorspace": "RGB",
                      "image/channels": 3, "image/class/label": position % 1000 + 1,
                      "image/class/synset": "n%08d" % (position % 1000), "image/class/text": "class %d" % position,
                      "image/format": "JPEG", "image/filename": name, "image/encoded": (images / name).read_bytes()}
            writer.write(tf.train.Example(features=tf.train.Features(
                feature={key: feature(value) for key, value in values.items()})).SerializeToString())


WRITERS = {"tars": write_tar, "parquet": write_parquet, "tfrecord": write_tfrecord,
           "tfrecord-gzip": lambda path, images, rows: write_tfrecord(path, images, rows, "GZIP")}


def read_stream(kind, paths, workers):
    """The files `paths` read as a job reads a shard of them: one stream of stream_images, each file opened once,
    in turn, decoded and resized to 224x224 by StreamReader in batches of 32: the count of images decoded."""
    from parallel.inputs.sources import PARQUET, TARS, TFRECORD
    from parallel.inputs.streamed import stream_images
    from parallel.inputs.streams import StreamReader
    kind = {"tars": TARS, "parquet": PARQUET, "tfrecord": TFRECORD, "tfrecord-gzip": TFRECORD}[kind]
    items = itertools.chain.from_iterable(stream_images(kind, path, []) for path in paths)
    with StreamReader(items, batch_size=32, workers=workers) as reader:
        return sum(len(batch.paths) for batch in reader)


def alternate(readers, rounds, expected):
    """Each of `readers` (name -> callable() -> images read) run in turn, `rounds` times (the machine's drift
    falls on all): ({name: images/s of each round}, {name: CPU microseconds per image of each round})."""
    rates, cpu = {name: [] for name in readers}, {name: [] for name in readers}
    for _ in range(rounds):
        for name, read in readers.items():
            started, processor = time.perf_counter(), time.process_time()
            count = read()
            rates[name].append(count / (time.perf_counter() - started))
            cpu[name].append((time.process_time() - processor) / max(count, 1) * 1e6)
            if count != expected:
                raise SystemExit("%s read %d images, not %d" % (name, count, expected))
            print(json.dumps({"source": name, "images/s": round(rates[name][-1], 1),
                              "CPU us/image": round(cpu[name][-1], 1), "load": os.getloadavg()[0]}), flush=True)
    return rates, cpu


def compared(rates, cpu, name, base):
    """The figures of reader `name` against `base`: images/s ratios per round and their median; the same ratio
    from CPU time (base's CPU per image / name's: what the rate would be on cores to itself)."""
    ratios = [mine / theirs for mine, theirs in zip(rates[name], rates[base])]
    by_cpu = [theirs / mine for mine, theirs in zip(cpu[name], cpu[base])]
    return {"%s/%s" % (name, base): statistics.median(ratios), "%s/%s ratios" % (name, base): ratios,
            "%s/%s by CPU" % (name, base): statistics.median(by_cpu), "%s/%s by CPU ratios" % (name, base): by_cpu}


def jpegs(args, workdir):
    images = make_jpegs(workdir / ("photos-%d" % args.images), args.images, SIZE)
    return images, sorted(path.name for path in images.glob("*.jpg"))[:args.images]


def packed(kind, args, workdir, images, names):
    return pack(kind, images, names, workdir / ("%s-%d-%d" % (kind, len(names), args.per_tar)), args.per_tar)


def bench_tars(args, workdir):
    from parallel.inputs.reader import ImageReader
    images, names = jpegs(args, workdir)
    tars = packed("tars", args, workdir, images, names)

    def files():
        with ImageReader(images, names, batch_size=32, workers=args.workers) as reader:
            return sum(len(batch.paths) for batch in reader)

    rates, cpu = alternate({"files": files, "tars": lambda: read_stream("tars", tars, args.workers)},
                           args.rounds, len(names))
    return dict(compared(rates, cpu, "tars", "files"), **{
        "files images/s": rates["files"], "tars images/s": rates["tars"], "files CPU us/image": cpu["files"],
        "tars CPU us/image": cpu["tars"], "images": len(names), "per tar": args.per_tar, "workers": args.workers})


def bench_packed(kinds, args, workdir):
    """`kinds` (of WRITERS) against tars, decode only: the figures of each and its ratios to tars."""
    images, names = jpegs(args, workdir)
    files = {kind: packed(kind, args, workdir, images, names) for kind in ("tars",) + kinds}
    readers = {kind: (lambda kind=kind, paths=paths: read_stream(kind, paths, args.workers))
               for kind, paths in files.items()}
    for kind, paths in files.items():  # imports (pyarrow, TensorFlow's protobufs) and first calls, untimed
        read_stream(kind, paths[:1], args.workers)
    rates, cpu = alternate(readers, args.rounds, len(names))
    results = {"images": len(names), "per file": args.per_tar, "workers": args.workers,
               "bytes": {kind: sum(os.path.getsize(path) for path in paths) for kind, paths in files.items()}}
    for kind in files:
        results.update({"%s images/s" % kind: rates[kind], "%s CPU us/image" % kind: cpu[kind]})
    for kind in kinds:
        results.update(compared(rates, cpu, kind, "tars"))
    return results


MODES = {  # name: (the bench, its default --images, the ratios it reports)
    "s3": (bench_s3, 160, ("s3/folder",)),
    "tars": (bench_tars, 1000, ("tars/files",)),
    "parquet": (functools.partial(bench_packed, ("parquet",)), 1000, ("parquet/tars",)),
    "tfrecord": (functools.partial(bench_packed, ("tfrecord", "tfrecord-gzip")), 1000,
                 ("tfrecord/tars", "tfrecord-gzip/tars")),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("which", nargs="+", choices=tuple(MODES))
    parser.add_argument("--images", type=int, default=None, help="default: 160 for s3, 1000 for the others")
    parser.add_argument("--per-tar", type=int, default=100, help="images a tar (a Parquet, a TFRecord file)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-inputs-"))
    workdir.mkdir(parents=True, exist_ok=True)
    command = sys.argv[:1] + (sys.argv[1:] if argv is None else list(argv))
    results = {"machine": cpu(), "load before": os.getloadavg(), "command": " ".join(command),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(json.dumps(results), flush=True)
    given = args.images
    for which in args.which:
        bench, default, keys = MODES[which]
        args.images = given or default
        results[which] = dict(bench(args, workdir), **{"load after": os.getloadavg()})
        print(json.dumps({which: results[which]}), flush=True)
        for key in keys:
            value, bar = results[which][key], BARS.get(key)
            verdict = "no bar" if bar is None else "bar >= %.2f: %s" % (bar, "met" if value >= bar else "NOT met")
            by_cpu = results[which].get(key + " by CPU")
            print("%s = %.3f%s (%s)" % (key, value, "" if by_cpu is None else ", by CPU time %.3f" % by_cpu, verdict),
                  flush=True)
    (workdir / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
