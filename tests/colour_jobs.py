"""A cheap colour model and small image folders, so that a job runs end to end in milliseconds on CPU."""

import csv

import numpy as np
import tensorflow as tf
from PIL import Image

from parallel import engine, jobs
from parallel.devices import resolve_devices

tf1 = tf.compat.v1
SIZE = (16, 16)


def colour_model(images):
    """uint8 [N, 16, 16, 3] -> float32 [N, 2, 3]: per-image mean colour times a weight, and its square."""
    scale = tf1.get_variable("colour/scale", [3], initializer=tf1.zeros_initializer())
    mean = tf.reduce_mean(tf.cast(images, tf.float32), axis=[1, 2]) * scale
    return tf.stack([mean, mean * mean], axis=1)


WEIGHTS = {"colour/scale": np.array([1.0, 0.5, 0.25], np.float32)}
MODEL = engine.ModelSpec(name="colour", fn=colour_model, image_size=SIZE, load_weights=lambda: WEIGHTS,
                         output_name="colour", settings={"model": "colour"})


def make_images(folder, count, bad=(), seed=1):
    """`count` small PNGs of distinct colours in two sub-folders; names in `bad` get garbage bytes."""
    rng = np.random.default_rng(seed)
    names = []
    for index in range(count):
        name = "%s/img_%02d.png" % ("a" if index % 2 else "b", index)
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name in bad:
            path.write_bytes(b"<html>not an image</html>")
        else:
            Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(path)
        names.append(name)
    return sorted(names)


def config_for(tmp_path, images, num_devices=1, per_device_batch=2, **overrides):
    settings = dict(model=MODEL, images=images, output=tmp_path / "out" / "features.csv",
                    devices=resolve_devices(devices=",".join("cpu:%d" % i for i in range(num_devices)), gpu_count=0),
                    per_device_batch=per_device_batch, workers=2)
    settings.update(overrides)
    return jobs.Config(**settings)


def read_rows(path):
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return rows[0], [(row[0], np.array(row[1:], np.float32)) for row in rows[1:]]


class StopAfter:
    """A StopRequest whose signal comes after `batches` batches, as a SIGTERM part-way would."""

    def __init__(self, batches):
        self.batches = batches

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        pass

    @property
    def signal_name(self):  # the loop asks once per batch
        self.batches -= 1
        return "SIGTERM" if self.batches <= 0 else None


class Killed(BaseException):
    """What a SIGKILL at that moment would leave (nothing after it runs)."""


class KillAfter(StopAfter):
    """A StopRequest that raises Killed where StopAfter's signal would come: after `batches` batches, the run
    is cut short as by a SIGKILL once its writer has committed the batches handed to it (the loop's `finally`)."""

    @property
    def signal_name(self):
        if StopAfter.signal_name.fget(self) is not None:
            raise Killed("after the batches asked for")
        return None
