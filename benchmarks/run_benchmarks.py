"""Throughput benchmarks: every figure is measured in this run, ratios between figures of the same run.

    python benchmarks/run_benchmarks.py                           # all of them, ~25 minutes on 2 cores
    python benchmarks/run_benchmarks.py --only writer decode      # a subset

throughput  compute: the replicated graph on an in-memory uint8 batch (the ceiling for these devices and
            batch size), and end_to_end: run_inference.py on JPEG files, start-up excluded; alternated
            for --rounds rounds, the median ratio end_to_end/compute                       bar >= 0.95
            Also the time to the first batch: weights read, graph built, weights on the devices, one step.
keras       keras.applications.VGG16 + Model.predict over a tf.data pipeline, same files and weights, on
            640x480 and on 4000x3000 JPEGs, alternated with ours for --rounds rounds; our end-to-end
            images/s as a ratio to the whole predict() call                                bar >= 1.0
            (and, for comparison only, to Keras's rate from its first batch to its last)
writer      rows/s of 4096 floats, ours per --format vs pandas.DataFrame.to_csv            bar >= 10x
decode      decode+resize images/s with 1 worker on photo-sized JPEGs
memory      peak RSS of the engine for N and 10xN images with a cheap model               bar within 5%
precision   compute images/s of bf16 and fp16 as a ratio to fp32

Weights are seeded random in tensorflow-vgg's .npy layout and Keras's legacy .h5 layout (speed does not
depend on their values). Written to --workdir (default: a temporary folder).
"""

import argparse
import os
import platform
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

BARS = {"end_to_end/compute": 0.95, "ours/keras 640x480": 1.0, "ours/keras 4000x3000": 1.0,
        "writer csv/pandas": 10.0}


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
    from models import weight_files
    npy, h5 = workdir / "vgg16.npy", workdir / "vgg16_weights_tf_dim_ordering_tf_kernels.h5"
    if not npy.exists() or not h5.exists():
        weights = weight_files.random_weights(seed=0)
        weight_files.save_npy(weights, npy)
        weight_files.save_h5(weights, h5)
    return npy, h5


def bench_compute(args, workdir, precision="fp32"):
    """The ceiling: the replicated graph on one in-memory uint8 batch, as many images as end_to_end."""
    from models import vgg16
    from parallel.devices import resolve_devices
    from parallel.engine import DeviceRunner
    npy, _ = weights_files(workdir)
    devices = resolve_devices(devices=args.devices)
    model = vgg16.feature_model(endpoint="fc7", weights=str(npy), precision=precision)
    started = time.perf_counter()
    runner = DeviceRunner(model, devices, args.batch_size)  # reads the weights, builds, loads the devices
    ready = time.perf_counter() - started
    batch = np.random.default_rng(0).integers(0, 255, (runner.max_rows_per_step, 224, 224, 3), dtype=np.uint8)
    runner.run(batch)  # warm-up: first run allocates and picks kernels
    first_batch = time.perf_counter() - started
    steps = max(1, args.images // len(batch))
    started = time.perf_counter()
    for _ in range(steps):
        runner.run(batch)
    seconds = time.perf_counter() - started
    runner.close()
    return {"images/s": steps * len(batch) / seconds, "start-up s": ready, "first batch s": first_batch}


def bench_end_to_end(args, workdir, images):
    """run_inference.py as a user runs it on the JPEGs in `images`; its own summary line times the loop,
    start-up excluded."""
    npy, _ = weights_files(workdir)
    output = workdir / "e2e.csv"
    command = [sys.executable, str(ROOT / "run_inference.py"), "--images", str(images), "--weights", str(npy),
               "--devices", args.devices, "--batch-size", str(args.batch_size), "--output", str(output),
               "--overwrite"]
    started = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit("end-to-end run failed: %s" % result.stderr.strip().splitlines()[-1])
    summary = result.stderr.strip().splitlines()[-1]
    # "<n> images: ... in <s> s (<r> images/s) -> ...; devices busy <p>%"
    written = int(summary.split(" written")[0].split()[-1])
    loop = float(summary.split(" skipped in ")[1].split(" s ")[0])
    return {"images/s": written / loop, "process start-up s": wall - loop, "command": " ".join(command[1:]),
            "summary": summary}


def bench_compute_and_end_to_end(args, workdir):
    """Both, alternated for --rounds rounds: this machine's speed drifts by +-10% over minutes, so
    each end-to-end run is compared with the compute run just before it, and the median is kept."""
    rounds, start_ups = [], []
    for round_index in range(args.rounds):
        compute_result = bench_compute(args, workdir)
        compute = compute_result["images/s"]
        end_to_end = bench_end_to_end(args, workdir, make_jpegs(workdir / "photos", args.images, (640, 480)))
        rounds.append((compute, end_to_end["images/s"]))
        start_ups.append((compute_result["start-up s"], compute_result["first batch s"],
                          end_to_end["process start-up s"]))
        print("round %d    compute %.2f images/s, end_to_end %.2f images/s, ratio %.3f   [%s]"
              % (round_index + 1, compute, end_to_end["images/s"], end_to_end["images/s"] / compute,
                 end_to_end["summary"]), flush=True)
    ratios = sorted(e2e / compute for compute, e2e in rounds)
    return {"compute images/s (median)": float(np.median([compute for compute, _ in rounds])),
            "end_to_end images/s (median)": float(np.median([e2e for _, e2e in rounds])),
            "end_to_end/compute per round": [round(ratio, 3) for ratio in ratios],
            "end_to_end/compute (median)": float(np.median(ratios)),
            "engine start-up s (median)": float(np.median([ready for ready, _, _ in start_ups])),
            "time to first batch s (median)": float(np.median([first for _, first, _ in start_ups])),
            "run_inference.py start-up s, imports included (median)": float(
                np.median([process for _, _, process in start_ups])),
            "command": end_to_end["command"]}


KERAS_SCRIPT = r"""
# What a TensorFlow user would write instead: keras.applications.VGG16 up to fc2, Model.predict over tf.data.
import os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras, tensorflow as tf
folder, weights, per_step = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".jpg"))
base = keras.applications.VGG16(weights=None)
base.load_weights(weights)
model = keras.Model(base.input, base.get_layer("fc2").output)

def load(path):  # the centre square, then 224x224, as tensorflow-vgg and run_inference.py do
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    side = tf.minimum(tf.shape(image)[0], tf.shape(image)[1])
    image = tf.image.resize_with_crop_or_pad(image, side, side)
    return keras.applications.vgg16.preprocess_input(tf.image.resize(image, (224, 224)))

def dataset(paths):
    return (tf.data.Dataset.from_tensor_slices(paths).map(load, num_parallel_calls=tf.data.AUTOTUNE)
            .batch(per_step).prefetch(tf.data.AUTOTUNE))


class Stamps(keras.callbacks.Callback):
    def on_predict_batch_begin(self, batch, logs=None):
        self.first = getattr(self, "first", None) or time.perf_counter()

    def on_predict_batch_end(self, batch, logs=None):
        self.last = time.perf_counter()

# Traced on one image first: building the graph is start-up, excluded as run_inference.py's is;
# like run_inference.py's, the timed run starts with a cold batch of the full size.
model.predict(dataset(files[:1]), verbose=0)
stamps = Stamps()
started = time.perf_counter()
model.predict(dataset(files), verbose=0, callbacks=[stamps])
# The whole predict() call, as a user waits for it; and from its first batch to its last only.
print(len(files) / (time.perf_counter() - started), len(files) / (stamps.last - stamps.first))
"""


def bench_keras(args, workdir):
    """Ours end-to-end vs Keras, alternated for --rounds rounds on web-sized and on camera-sized JPEGs."""
    _, h5 = weights_files(workdir)
    per_step = args.batch_size * len(args.devices.split(","))
    results = {}
    for label, folder in (("640x480", make_jpegs(workdir / "photos", args.images, (640, 480))),
                          ("4000x3000", make_jpegs(workdir / "large_photos", args.large_images, (4000, 3000),
                                                   seed=1))):
        ratios, batch_ratios = [], []
        for round_index in range(args.rounds):
            ours = bench_end_to_end(args, workdir, folder)["images/s"]
            result = subprocess.run([sys.executable, "-c", KERAS_SCRIPT, str(folder), str(h5), str(per_step)],
                                    capture_output=True, text=True, check=True)
            keras_rate, keras_batches_rate = map(float, result.stdout.split()[-2:])
            ratios.append(ours / keras_rate)
            batch_ratios.append(ours / keras_batches_rate)
            print("round %d    %s JPEGs: ours %.2f images/s, keras %.2f images/s (%.2f from its first batch to "
                  "its last), ratio %.3f (%.3f)" % (round_index + 1, label, ours, keras_rate, keras_batches_rate,
                                                   ours / keras_rate, ours / keras_batches_rate), flush=True)
        results["ours/keras %s per round" % label] = sorted(round(ratio, 3) for ratio in ratios)
        results["ours/keras %s (median)" % label] = float(np.median(ratios))
        results["ours/keras-batches-only %s (median)" % label] = float(np.median(batch_ratios))
    return results


def bench_writer(args, workdir):
    import pandas as pd

    from parallel.output import FORMATS, open_writer
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
    from parallel.inputs.decode import load_image
    photos = make_jpegs(workdir / "large_photos", args.large_images, (4000, 3000), seed=1)
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


def bench_precision(args, workdir):
    """Compute images/s of bf16 and fp16 as a ratio to fp32, each measured right after an fp32 run."""
    ratios = {}
    for precision in ("bf16", "fp16"):
        fp32 = bench_compute(args, workdir)["images/s"]
        try:
            reduced = bench_compute(args, workdir, precision)["images/s"]
        except Exception as error:  # a precision without kernels on these devices is reported, not fatal
            print("precision  %s: %s" % (precision, str(error).splitlines()[0]))
            continue
        ratios["%s/fp32 compute" % precision] = reduced / fp32
    return ratios


MEMORY_SCRIPT = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
sys.path.insert(0, sys.argv[3])
import numpy as np, tensorflow as tf
from parallel import engine, jobs
from parallel.devices import resolve_devices

def colour(images):
    scale = tf.compat.v1.get_variable("scale", [3])
    return tf.reduce_mean(tf.cast(images, tf.float32), axis=[1, 2]) * scale

model = engine.ModelSpec(name="colour", fn=colour, image_size=(64, 64), output_name="colour",
                         load_weights=lambda: {"scale": np.ones(3, np.float32)})
summary = jobs.run(jobs.Config(model=model, images=sys.argv[1], output=sys.argv[2], overwrite=True,
                                   devices=resolve_devices(devices="cpu:0,cpu:1"), per_device_batch=32))
# VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child of
# this benchmark would report the parent's peak.
peak_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(summary.written, peak_kib)
"""


def bench_memory(args, workdir):
    results = {}
    for count in (args.memory_images, 10 * args.memory_images):
        folder = make_jpegs(workdir / ("small_%d" % count), count, (96, 96), seed=2)
        result = subprocess.run([sys.executable, "-c", MEMORY_SCRIPT, str(folder), str(workdir / "memory.csv"),
                                 str(ROOT)], capture_output=True, text=True, check=True)
        written, peak_kib = map(int, result.stdout.split())
        results["peak RSS MiB, %d images" % written] = peak_kib / 1024
    return results


BENCHES = {"throughput": bench_compute_and_end_to_end, "keras": bench_keras, "writer": bench_writer,
           "decode": bench_decode, "memory": bench_memory, "precision": bench_precision}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, choices=tuple(BENCHES))
    parser.add_argument("--devices", default="cpu:0")
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--images", type=int, default=240,
                        help="JPEGs for the end-to-end and Keras runs; compute runs as many images")
    parser.add_argument("--large-images", type=int, default=48, help="JPEGs of 4000x3000 (camera photos)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternated rounds of compute / end-to-end, and of ours / Keras")
    parser.add_argument("--writer-rows", type=int, default=2000)
    parser.add_argument("--memory-images", type=int, default=2000)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    selected = [name for name in BENCHES if args.only is None or name in args.only]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_"))
    workdir.mkdir(parents=True, exist_ok=True)

    print("machine: %s" % machine())
    print("command: %s" % " ".join([Path(sys.argv[0]).name] + sys.argv[1:]))
    print("devices %s, batch %d per device, %d JPEGs of 640x480" % (args.devices, args.batch_size, args.images))
    results = {}
    for name in selected:
        results[name] = BENCHES[name](args, workdir)
        print("%-10s %s" % (name, {key: (round(value, 3) if isinstance(value, float) else value)
                                   for key, value in results[name].items()}), flush=True)

    ratios = {}
    if "throughput" in results:
        ratios["end_to_end/compute"] = results["throughput"]["end_to_end/compute (median)"]
    if "keras" in results:
        for label in ("640x480", "4000x3000"):
            ratios["ours/keras %s" % label] = results["keras"]["ours/keras %s (median)" % label]
            ratios["ours/keras-batches-only %s" % label] = results["keras"][
                "ours/keras-batches-only %s (median)" % label]
    if "writer" in results:
        pandas_rate = results["writer"]["pandas.to_csv rows/s"]
        for key, value in results["writer"].items():
            if key != "pandas.to_csv rows/s":
                ratios["writer %s/pandas" % key.split()[0]] = value / pandas_rate
    if "memory" in results:
        small, large = results["memory"].values()
        ratios["memory 10N/N"] = large / small
    for key, value in results.get("precision", {}).items():
        ratios[key] = value
    for key, value in ratios.items():
        print("ratio      %-24s %.3f%s" % (key, value, verdict(key, value)))


def verdict(key, value):
    if key in BARS:
        return "  (bar >= %s: %s)" % (BARS[key], "met" if value >= BARS[key] else "NOT met")
    if key == "memory 10N/N":
        return "  (bar: within 5%%: %s)" % ("met" if abs(value - 1) <= 0.05 else "NOT met")
    return ""


if __name__ == "__main__":
    main()
