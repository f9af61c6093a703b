"""A child process for the multi-process tests: the real engine, with a cheap model (a colour mean).

    python tests/job_child.py IMAGES OUTPUT FORMAT [--distributed static|ray] [--rank R] [--world-size W]
        [--shard-size N] [--step-seconds S] [--marker FILE] [--keep-shards] [--images-from FILE]

Prints the summary line on stderr and exits with the engine's status (130 when stopped).

JOB_CHILD_SIGNAL_AFTER_RETRIED=SIGKILL (or SIGTERM) in the environment: the process sends itself that signal once
the ledger records a retry of failed images (its `retried` line written, its closing line not yet), no race.
"""

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from hangs import HANG_SECONDS  # noqa: E402 -- tests/, this script's folder

SIZE = (8, 8)
WEIGHTS = {"colour/scale": np.array([1.0, 0.5, 0.25], np.float32)}


def colour_model(step_seconds=0.0, marker=None, batch_dependent=False):
    """A ModelSpec: uint8 [N, 8, 8, 3] -> float32 [N, 6], the mean colour times a weight, and its square.

    batch_dependent: add N / 1024 to every feature, as a real model's arithmetic may depend (in its
    last bits) on how many images a device computes at once.
    """
    import tensorflow as tf
    from parallel.model import ModelSpec
    tf1 = tf.compat.v1

    def slow(values):
        if marker:
            with open(marker, "a") as handle:
                handle.write("step %d\n" % os.getpid())
        time.sleep(step_seconds)
        return values

    def model(images):
        scale = tf1.get_variable("colour/scale", [3], initializer=tf1.zeros_initializer())
        mean = tf.reduce_mean(tf.cast(images, tf.float32), axis=[1, 2]) * scale
        if step_seconds or marker:
            mean = tf.numpy_function(slow, [mean], tf.float32)
            mean.set_shape([None, 3])
        features = tf.concat([mean, mean * mean], axis=1)
        if batch_dependent:
            features += tf.cast(tf.shape(images)[0], tf.float32) / 1024
        return features

    return ModelSpec(name="colour", fn=model, image_size=SIZE, load_weights=lambda: WEIGHTS, output_name="colour",
                     settings={"model": "colour"})


def config(images, output, output_format, distribution=None, images_from=None, step_seconds=0.0, marker=None,
           devices="cpu:0", per_device_batch=2, batch_dependent=False, image_column=None, keep=()):
    from parallel import jobs
    from parallel.devices import resolve_devices
    if not isinstance(images, (tuple, list)) and "://" not in str(images):
        images = Path(images)  # a folder or tars; a URL (a prefix of a store) stays as it is
    return jobs.Config(model=colour_model(step_seconds, marker, batch_dependent), images=images,
                         output=output if "://" in str(output) else Path(output), output_format=output_format,
                         devices=resolve_devices(devices=devices, gpu_count=0),
                         per_device_batch=per_device_batch, workers=1, images_from=images_from,
                         distribution=distribution, image_column=image_column, keep=keep)


def signal_after_retried(name):
    """Sends this process the signal `name` as soon as the ledger's `retried` line is written (see the docstring)."""
    import signal
    from parallel.jobs.ledger import Ledger
    add_retry = Ledger.add_retry

    def then_signalled(self, *args, **kwargs):
        add_retry(self, *args, **kwargs)
        os.kill(os.getpid(), getattr(signal, name))  # its handler runs at once, in this thread

    Ledger.add_retry = then_signalled


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("images")
    parser.add_argument("output")
    parser.add_argument("format")
    parser.add_argument("--distributed")
    parser.add_argument("--rank", type=int)
    parser.add_argument("--world-size", type=int)
    parser.add_argument("--shard-size", type=int)
    parser.add_argument("--step-seconds", type=float, default=0.0)
    parser.add_argument("--marker")
    parser.add_argument("--keep-shards", action="store_true")
    parser.add_argument("--images-from")
    parser.add_argument("--wait-seconds", type=float, default=HANG_SECONDS)  # for the manifest: a hang guard only
    args = parser.parse_args()
    import logging
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=logging.INFO)
    from parallel import engine, jobs
    from parallel.signals import exit_on_second_signal
    if os.environ.get("JOB_CHILD_SIGNAL_AFTER_RETRIED"):
        signal_after_retried(os.environ["JOB_CHILD_SIGNAL_AFTER_RETRIED"])
    distribution = None
    if args.distributed:
        distribution = jobs.Distribution(kind=args.distributed, rank=args.rank, world_size=args.world_size,
                                           shard_size=args.shard_size, keep_shards=args.keep_shards,
                                           wait_seconds=args.wait_seconds, gpus_per_worker=0)
    try:
        with exit_on_second_signal("stopped at once"):
            summary = jobs.run(config(args.images, args.output, args.format, distribution, args.images_from,
                                        args.step_seconds, args.marker))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ValueError as error:
        print("error: %s" % error, file=sys.stderr)
        return 2
    except engine.RunError as error:
        print("failed: %s" % error, file=sys.stderr)
        return 1
    print(summary.line(), file=sys.stderr)
    return summary.exit_status


if __name__ == "__main__":
    sys.exit(main())
