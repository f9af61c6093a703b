"""Throughput benchmarks: every figure is measured in this run, ratios between figures of the same run.

    python benchmarks/run_benchmarks.py                       # all of them, ~15 minutes on 2 cores
    python benchmarks/run_benchmarks.py --only writer decode  # a subset

1. compute:  the replicated graph on an in-memory uint8 batch (the ceiling for these devices and batch size)
2. end_to_end: run_inference.py on JPEG files, start-up excluded, as a ratio to (1)          bar >= 0.95
3. keras:    keras.applications.VGG16 + Model.predict over a tf.data pipeline, same files and weights;
             our end-to-end images/s as a ratio to it                                        bar >= 1.0
4. writer:   rows/s of 4096 floats, ours per --format vs pandas.DataFrame.to_csv               bar >= 10x
5. decode:   decode+resize images/s with 1 worker on photo-sized JPEGs; time to first batch (weights + graph)
6. memory:   peak RSS of the engine for N and 10xN images with a cheap model                bar within 5%
7. precision: compute images/s for fp32, bf16, fp16, as a ratio to fp32

Weights are seeded random in tensorflow-vgg's .npy layout and Keras's legacy .h5 layout (speed does not
depend on their values). Written to --workdir (default: a temporary folder).
"""

import argparse
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

BARS = {"end_to_end/compute": 0.95, "ours/keras": 1.0, "writer csv/pandas": 10.0}


def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import tensorflow as tf
    return "%s, %d cores, %.0f GiB, %s, Python %s, TensorFlow %s" % (
        cpu, os.cpu_count(), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30,
        platform.platform(terse=True), platform.python_version(), tf.__version__)


def make_jpegs(folder, count, size, seed=0):
    """`count` JPEGs of `size` (width, height): smooth random images, so they compress like photos."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for index in range(count):
        path = folder / ("photo_%06d.jpg" % index)
        if path.exists():
            continue
        small = rng.integers(0, 255, (size[1] // 16 + 1, size[0] // 16 + 1, 3), dtype=np.uint8)
        image = Image.fromarray(small).resize(size, Image.BICUBIC)
        image.save(path, quality=90)
    return folder


def weights_files(workdir):
    from models import vgg16
    npy, h5 = workdir / "vgg16.npy", workdir / "vgg16_weights_tf_dim_ordering_tf_kernels.h5"
    if not npy.exists() or not h5.exists():
        weights = vgg16.random_weights(seed=0)
        vgg16.save_npy(weights, npy)
        vgg16.save_h5(weights, h5)
    return npy, h5


def bench_compute(args, workdir, precision="fp32", steps=None):
    from models import vgg16
    from parallel.devices import resolve_devices
    from parallel.engine import DeviceRunner
    npy, _ = weights_files(workdir)
    devices = resolve_devices(devices=args.devices)
    model = vgg16.feature_model(endpoint="fc7", weights=str(npy), precision=precision)
    started = time.perf_counter()
    runner = DeviceRunner(model, devices, args.batch_size)
    ready = time.perf_counter() - started
    batch = np.random.default_rng(0).integers(0, 255, (runner.max_rows_per_step, 224, 224, 3), dtype=np.uint8)
    runner.run(batch)  # warm-up: first run allocates and picks kernels
    steps = steps or args.compute_steps
    started = time.perf_counter()
    for _ in range(steps):
        runner.run(batch)
    seconds = time.perf_counter() - started
    runner.close()
    return {"images/s": steps * len(batch) / seconds, "start-up s": ready}


def bench_end_to_end(args, workdir):
    npy, _ = weights_files(workdir)
    images = make_jpegs(workdir / "photos", args.images, (640, 480))
    output = workdir / "e2e.csv"
    command = [sys.executable, str(ROOT / "run_inference.py"), "--images", str(images), "--weights", str(npy),
               "--devices", args.devices, "--batch-size", str(args.batch_size), "--output", str(output),
               "--overwrite"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit("end-to-end run failed: %s" % result.stderr.strip().splitlines()[-1])
    summary = result.stderr.strip().splitlines()[-1]
    # "<n> images: ... in <s> s (<r> images/s) -> ..." : the loop's own timing, start-up excluded.
    rate = float(summary.split("(")[1].split(" images/s")[0])
    return {"images/s": rate, "command": " ".join(command[1:]), "summary": summary}


def bench_keras(args, workdir):
    import keras
    import tensorflow as tf
    _, h5 = weights_files(workdir)
    images = make_jpegs(workdir / "photos", args.images, (640, 480))
    files = sorted(str(path) for path in images.glob("*.jpg"))
    base = keras.applications.VGG16(weights=None)
    base.load_weights(str(h5))
    model = keras.Model(base.input, base.get_layer("fc2").output)
    per_step = args.batch_size * len(args.devices.split(","))

    def load(path):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        side = tf.minimum(tf.shape(image)[0], tf.shape(image)[1])
        image = tf.image.resize_with_crop_or_pad(image, side, side)
        image = tf.image.resize(image, (224, 224))
        return keras.applications.vgg16.preprocess_input(image)

    dataset = (tf.data.Dataset.from_tensor_slices(files).map(load, num_parallel_calls=tf.data.AUTOTUNE)
               .batch(per_step).prefetch(tf.data.AUTOTUNE))
    model.predict(dataset.take(1), verbose=0)  # warm-up, as our figure excludes start-up
    started = time.perf_counter()
    model.predict(dataset, verbose=0)
    return {"images/s": len(files) / (time.perf_counter() - started)}


def bench_writer(args, workdir):
    import pandas as pd
    from parallel.writer import FORMATS, open_writer
    rows = args.writer_rows
    features = np.random.default_rng(0).standard_normal((rows, 4096)).astype(np.float32)
    paths = ["folder/image_%06d.jpg" % index for index in range(rows)]
    results = {}
    frame = pd.DataFrame(features[:200], index=paths[:200], columns=["fc7_%d" % i for i in range(4096)])
    started = time.perf_counter()
    frame.to_csv(workdir / "pandas.csv", index_label="path")
    results["pandas.to_csv rows/s"] = 200 / (time.perf_counter() - started)
    for output_format in FORMATS:
        output = workdir / ("writer." + output_format)
        started = time.perf_counter()
        writer = open_writer(output, format=output_format, column_prefix="fc7", feature_size=4096,
                             settings={"benchmark": "writer"}, overwrite=True)
        for start in range(0, rows, 48):
            writer.write(paths[start:start + 48], features[start:start + 48])
        writer.close()
        results["%s rows/s" % output_format] = rows / (time.perf_counter() - started)
    return results


def bench_decode(args, workdir):
    from parallel.reader import load_image
    photos = make_jpegs(workdir / "large_photos", 40, (4000, 3000), seed=1)
    files = sorted(photos.glob("*.jpg"))
    started = time.perf_counter()
    for path in files:
        load_image(path)
    rate = len(files) / (time.perf_counter() - started)
    small = sorted(make_jpegs(workdir / "photos", args.images, (640, 480)).glob("*.jpg"))
    started = time.perf_counter()
    for path in small:
        load_image(path)
    return {"4000x3000 JPEG images/s/worker": rate,
            "640x480 JPEG images/s/worker": len(small) / (time.perf_counter() - started)}


MEMORY_SCRIPT = r"""
import os, resource, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
sys.path.insert(0, sys.argv[3])
import numpy as np, tensorflow as tf
from parallel import engine
from parallel.devices import resolve_devices

def colour(images):
    scale = tf.compat.v1.get_variable("scale", [3])
    return tf.reduce_mean(tf.cast(images, tf.float32), axis=[1, 2]) * scale

model = engine.ModelSpec(name="colour", fn=colour, image_size=(64, 64), output_name="colour",
                         load_weights=lambda: {"scale": np.ones(3, np.float32)})
summary = engine.run(engine.Config(model=model, images=sys.argv[1], output=sys.argv[2], overwrite=True,
                                   devices=resolve_devices(devices="cpu:0,cpu:1"), per_device_batch=32))
print(summary.written, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_memory(args, workdir):
    results = {}
    for count in (args.memory_images, 10 * args.memory_images):
        folder = make_jpegs(workdir / ("small_%d" % count), count, (96, 96), seed=2)
        result = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(folder), str(workdir / "memory.csv"),
                                 str(ROOT)], capture_output=True, text=True, check=True)
        written, max_rss_kib = map(int, result.stdout.split())
        results["peak RSS MiB, %d images" % written] = max_rss_kib / 1024
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None,
                        choices=("compute", "end_to_end", "keras", "writer", "decode", "memory", "precision"))
    parser.add_argument("--devices", default="cpu:0")
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--images", type=int, default=96, help="JPEGs for the end-to-end and Keras runs")
    parser.add_argument("--compute-steps", type=int, default=8)
    parser.add_argument("--writer-rows", type=int, default=2000)
    parser.add_argument("--memory-images", type=int, default=2000)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    selected = set(args.only or ("compute", "end_to_end", "keras", "writer", "decode", "memory", "precision"))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_"))
    workdir.mkdir(parents=True, exist_ok=True)

    print("machine: %s" % machine())
    print("command: %s" % " ".join([Path(sys.argv[0]).name] + sys.argv[1:]))
    print("devices %s, batch %d per device, %d JPEGs of 640x480" % (args.devices, args.batch_size, args.images))
    results, ratios = {}, {}
    for name, bench in (("compute", bench_compute), ("end_to_end", bench_end_to_end), ("keras", bench_keras),
                        ("writer", bench_writer), ("decode", bench_decode), ("memory", bench_memory)):
        if name in selected:
            results[name] = bench(args, workdir)
            print("%-10s %s" % (name, {k: (round(v, 2) if isinstance(v, float) else v)
                                       for k, v in results[name].items()}), flush=True)
    if "precision" in selected:
        fp32 = results.get("compute") or bench_compute(args, workdir)
        for precision in ("bf16", "fp16"):
            try:
                rate = bench_compute(args, workdir, precision, steps=max(2, args.compute_steps // 2))["images/s"]
                ratios["%s/fp32 compute" % precision] = rate / fp32["images/s"]
            except Exception as error:  # a precision without CPU kernels is reported, not fatal
                print("precision  %s: %s" % (precision, str(error).splitlines()[0]))
    if "compute" in results and "end_to_end" in results:
        ratios["end_to_end/compute"] = results["end_to_end"]["images/s"] / results["compute"]["images/s"]
    if "keras" in results and "end_to_end" in results:
        ratios["ours/keras"] = results["end_to_end"]["images/s"] / results["keras"]["images/s"]
    if "writer" in results:
        pandas_rate = results["writer"]["pandas.to_csv rows/s"]
        for key, value in results["writer"].items():
            if key != "pandas.to_csv rows/s":
                ratios["writer %s/pandas" % key.split()[0]] = value / pandas_rate
    if "memory" in results:
        small, large = results["memory"].values()
        ratios["memory 10N/N"] = large / small
    for key, value in ratios.items():
        bar = BARS.get(key)
        verdict = "" if bar is None else ("  (bar >= %s: %s)" % (bar, "met" if value >= bar else "NOT met"))
        print("ratio      %-24s %.3f%s" % (key, value, verdict))
    if "memory 10N/N" in ratios:
        print("ratio      memory bar: within 5%%: %s" % ("met" if ratios["memory 10N/N"] <= 1.05 else "NOT met"))


if __name__ == "__main__":
    main()
