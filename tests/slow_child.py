"""The engine with a model whose every step sleeps inside Session.run (a numpy_function), as a program.

    python tests/slow_child.py IMAGES OUTPUT MARKER STEP_SECONDS LOAD_SECONDS

The main thread is in C++ for STEP_SECONDS at each step, as on a long GPU step, and Python signal handlers
cannot run; loading the weights takes LOAD_SECONDS. Each step and the loading are noted in MARKER ("step",
"loading"), so that a test signals the process at the moment it means to. The run is inside the command
line's signal handling (exit_on_second_signal); the summary line, or "interrupted; ...", goes to stderr, and the
process exits with the run's status (130 when stopped), at once, as the command line does (exit_now).

`config` is the same job in another process (a test's rerun of what a stopped child left).
"""

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def config(images, output, marker=None, step_seconds=0.0, load_seconds=0.0):
    """The job: the images of folder `images` (8x8, per_device_batch 2, one reader) on cpu:0 into `output` (csv)."""
    import numpy as np
    import tensorflow as tf
    from parallel import engine, jobs
    from parallel.devices import resolve_devices
    tf1 = tf.compat.v1

    def note(text):
        if marker:
            with open(marker, "a") as handle:
                handle.write(text + "\n")

    def slow_step(values):
        note("step")
        time.sleep(float(step_seconds))
        return values

    def model(batch):
        scale = tf1.get_variable("slow/scale", [3], initializer=tf1.zeros_initializer())
        mean = tf.reduce_mean(tf.cast(batch, tf.float32), axis=[1, 2]) * scale
        slowed = tf.numpy_function(slow_step, [mean], tf.float32)
        slowed.set_shape([None, 3])
        return slowed

    def load_weights():
        note("loading")
        time.sleep(float(load_seconds))
        return {"slow/scale": np.array([1.0, 0.5, 0.25], np.float32)}

    spec = engine.ModelSpec(name="slow", fn=model, image_size=(8, 8), load_weights=load_weights,
                            output_name="slow", settings={"model": "slow"})
    return jobs.Config(model=spec, images=images, output=output, per_device_batch=2, workers=1,
                       devices=resolve_devices(devices="cpu:0", gpu_count=0))


def main(images, output, marker, step_seconds, load_seconds):
    from parallel import jobs
    from parallel.signals import EXIT_INTERRUPTED, exit_on_second_signal
    job = config(images, output, marker, step_seconds, load_seconds)  # TensorFlow imported, the graph not built
    try:
        with exit_on_second_signal("stopped at once; rerun the same command to resume"):
            summary = jobs.run(job)
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(summary.line(), file=sys.stderr)
    return summary.exit_status


if __name__ == "__main__":
    from parallel.signals import exit_now
    exit_now(main(*sys.argv[1:6]))
