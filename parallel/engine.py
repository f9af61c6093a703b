"""The engine: opens the stages of a run together and runs the loop over them.

    files --ImageReader (decode pool)--> uint8 batches --DeviceRunner (one sess.run on every
    device)--> float32 features --WriterThread--> FeatureWriter --> output

    run(Config(...))           a folder into an output file: resumable, one job per output
    extract(model, images)     a folder or a list of files into (paths, features) in memory

The stages overlap: the reader decodes the next batches while the devices compute, and a
writer thread formats and commits the previous batch. Queues between them are bounded, so
memory does not grow with the number of images.
"""

import contextlib
import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from parallel.devices import Devices, resolve_devices
from parallel.job import check_job, freeze_job
from parallel.loop import (EXIT_FAILED, EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE, Progress, StrictError, Summary,
                           WriterThread, run_loop)
from parallel.manifest import discover_images
from parallel.model import ModelSpec
from parallel.reader import RESIZE_MODES, ImageReader
from parallel.runner import DeviceRunner, build_graph
from parallel.signals import EXIT_INTERRUPTED, StopRequest
from parallel.output import FORMATS, ErrorLog, open_writer

log = logging.getLogger("parallel")

__all__ = ["Config", "DeviceRunner", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_SOME_FAILED", "EXIT_USAGE",
           "ModelSpec", "RunError", "Summary", "build_graph", "extract", "run"]


class RunError(RuntimeError):
    """The run stopped part-way (disk full, a device error, --strict); committed rows are kept."""


@dataclasses.dataclass(frozen=True)
class Config:
    """One run. Everything the CLI parses; no flags are read anywhere else.

    Attributes:
      model: the model to run (see `ModelSpec`).
      images: folder searched recursively for images.
      output: output file; its sidecars sit beside it.
      devices: checked `Devices` (see `parallel.devices.resolve_devices`).
      per_device_batch: images per device per step; a host batch is this times the devices.
      resize: "crop" (centre square, then resize) or "stretch".
      output_format: "csv", "parquet" or "npy".
      workers: decode threads; None: one per core.
      prefetch_batches: host batches decoded ahead of the devices.
      overwrite: start afresh instead of resuming an existing output.
      strict: the first unreadable image stops the run.
      progress: show a progress bar (the CLI sets it when stderr is a terminal).
    """

    model: ModelSpec
    images: Path
    output: Path
    devices: Devices
    per_device_batch: int = 12
    resize: str = "crop"
    output_format: str = "csv"
    workers: Optional[int] = None
    prefetch_batches: int = 2
    overwrite: bool = False
    strict: bool = False
    progress: bool = False

    def __post_init__(self):
        _check_batching(self.per_device_batch, self.resize, self.workers, self.prefetch_batches)
        if self.output_format not in FORMATS:
            raise ValueError("output_format must be one of %s; got %r" % (", ".join(FORMATS), self.output_format))

    @property
    def host_batch(self):
        """Images per `sess.run`: per_device_batch on each device."""
        return self.per_device_batch * len(self.devices.names)


def _check_batching(per_device_batch, resize, workers, prefetch_batches):
    """ValueError naming the parameter and the value received, for the arguments of a run."""
    if isinstance(per_device_batch, bool) or not isinstance(per_device_batch, int) or per_device_batch < 1:
        raise ValueError("per_device_batch must be at least 1; got %r" % (per_device_batch,))
    if resize not in RESIZE_MODES:
        raise ValueError("resize must be one of %s; got %r" % (", ".join(RESIZE_MODES), resize))
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError("workers must be at least 1; got %r" % (workers,))
    if not isinstance(prefetch_batches, int) or prefetch_batches < 1:
        raise ValueError("prefetch_batches must be at least 1; got %r" % (prefetch_batches,))


def run(config):
    """Extracts features of every image under `config.images` into `config.output`.

    Resumes an output written earlier by the same job (same settings, same images folder,
    no image added, none changed or removed after its row was written): only images
    without a committed row are computed. Stops cleanly on SIGINT/SIGTERM.

    Args:
      config: Config.

    Returns:
      Summary (its `exit_status` is what the CLI exits with).

    Raises:
      ValueError: bad inputs (missing or empty folder, bad weights, an output of another
        job), raised before anything is logged or written; `parallel.output.OutputError`
        (also a ValueError) when the output cannot be written.
      RunError: the run stopped part-way (disk full, a device error, --strict); committed
        rows are kept.
    """
    images_root = Path(config.images)
    if not images_root.is_dir():
        raise ValueError("--images %s is not a folder" % images_root)
    output = Path(config.output)
    settings = dict(config.model.settings, images=str(images_root.resolve()), resize=config.resize,
                    image_size="%dx%d" % tuple(config.model.image_size))
    _, current, frozen = check_job(images_root, output, dict(settings, format=config.output_format,
                                                             column_prefix=config.model.output_name),
                                   overwrite=config.overwrite)
    weights = config.model.load_weights()  # a bad weights file fails before any output exists
    started = time.perf_counter()
    with contextlib.ExitStack() as stages:
        runner = stages.enter_context(DeviceRunner(config.model, config.devices, config.per_device_batch,
                                                   weights=weights))
        del weights  # the devices hold their copies now
        writer = open_writer(output, format=config.output_format, column_prefix=config.model.output_name,
                             feature_size=runner.feature_size, settings=settings, overwrite=config.overwrite,
                             sort_paths=True)
        stages.callback(writer.abort)  # committed rows stay committed and resumable; no-op after close()
        job = freeze_job(frozen, current, writer, images_root, output)
        todo = [path for path in job.paths if path not in writer.completed]
        log.info("%d images under %s; devices: %s", len(job), images_root, config.devices.describe())
        log.info("ready in %.1f s (weights to devices, graph, session)", time.perf_counter() - started)
        try:
            errors = stages.enter_context(ErrorLog(output))
            reader = stages.enter_context(ImageReader(
                images_root, todo, config.host_batch, size=tuple(config.model.image_size), resize=config.resize,
                workers=config.workers, prefetch_batches=config.prefetch_batches))
            sink = stages.enter_context(WriterThread(writer))
            progress = stages.enter_context(Progress(config.progress, total=len(job),
                                                     initial=len(job) - len(todo)))
            stop = stages.enter_context(StopRequest())
            summary = run_loop(reader, runner.run, sink, errors, images=len(todo), strict=config.strict,
                               stop=stop, progress=progress)
            if not summary.interrupted:
                writer.close()  # parquet, npy: the final merge
        except (OSError, ValueError, RuntimeError, tf.errors.OpError) as error:
            raise RunError("%s; rows committed so far are kept: rerun the same command to resume"
                           % _first_line(error)) from error
    return dataclasses.replace(summary, discovered=len(job), already_done=len(job) - len(todo), output=output,
                               errors_file=ErrorLog.path_for(output))


def extract(model, images, devices="cpu:0", per_device_batch=12, resize="crop", workers=None, prefetch_batches=2):
    """Features of a folder of images, or of a list of image files, in memory.

    For notebooks and pipelines, and small jobs: nothing is written. For a large job, or one
    that must survive a kill, use `run(Config(...))`, which writes an output and resumes it.

        from models import vgg16
        from parallel import extract
        paths, features = extract(vgg16.feature_model(weights="vgg16.npy"), "photos/")

    Args:
      model: ModelSpec (e.g. `models.vgg16.feature_model(...)`).
      images: a folder (str or Path: every image under it, recursively), or a list of
        image file paths (str or Path, absolute or relative to the working directory).
      devices: `Devices`, or device names as for the CLI's --devices ("cpu:0,cpu:1",
        "gpu:0,gpu:1").
      per_device_batch: images per device per step.
      resize: "crop" or "stretch" (see `parallel.decode`).
      workers: decode threads; None: one per core.
      prefetch_batches: host batches decoded ahead of the devices.

    Returns:
      (paths, features): the images that could be read, in input order (sorted relative
      paths for a folder, the given paths for a list), and float32 [len(paths), D]. Images
      that could not be read are left out, with a warning naming them.

    Raises:
      ValueError: a bad argument (named with the value received), a folder with no image.
    """
    _check_batching(per_device_batch, resize, workers, prefetch_batches)
    if isinstance(devices, str):
        devices = resolve_devices(devices=devices)
    if not isinstance(devices, Devices):
        raise ValueError("devices must be a Devices or device names such as 'cpu:0'; got %r" % (devices,))
    if isinstance(images, (str, os.PathLike)):
        root = Path(images)
        paths = discover_images(root)
        if not paths:
            raise ValueError("images=%s contains no images" % (images,))
    elif isinstance(images, (list, tuple)) and images:
        root, paths = Path(os.getcwd()), [os.fspath(path) for path in images]
    else:
        raise ValueError("images must be a folder or a non-empty list of files; got %r" % (images,))
    sink, failures = _Collected(), _Failures()
    host_batch = per_device_batch * len(devices.names)
    with DeviceRunner(model, devices, per_device_batch) as runner, ImageReader(
            root, paths, host_batch, size=tuple(model.image_size), resize=resize, workers=workers,
            prefetch_batches=prefetch_batches) as reader:
        run_loop(reader, runner.run, sink, failures, images=len(paths))
        if failures.rows:
            log.warning("%d images could not be read: %s", len(failures.rows),
                        "; ".join("%s (%s: %s)" % row for row in failures.rows[:5]))
        features = (np.concatenate(sink.features) if sink.features
                    else np.zeros((0, runner.feature_size), np.float32))
    return sink.paths, features


class _Collected:
    """A sink that keeps the features in memory."""

    def __init__(self):
        self.paths, self.features = [], []

    def put(self, paths, features):
        self.paths.extend(paths)
        self.features.append(features)

    def finish(self):
        return len(self.paths)


class _Failures:
    """Failed images, kept in memory."""

    def __init__(self):
        self.rows = []

    def add(self, path, kind, message):
        self.rows.append((path, kind, message))


def _first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
