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

from parallel import locks
from parallel.devices import CPU_BATCH, GPU_BATCH, Devices, resolve_devices, set_float32_precision
from parallel.job import check_job, freeze_job, job_record, own_files
from parallel.loop import (EXIT_FAILED, EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE, Summary, WriterThread, log_stage_times,
                           run_loop)
from parallel.manifest import Manifest, discover_images, read_list
from parallel.messages import Progress, counted, first_line
from parallel.model import ModelSpec
from parallel.decode import RESIZE_MODES
from parallel.reader import ImageReader, step_lengths
from parallel.runner import DeviceRunner, build_graph
from parallel.shards import ShardedJob
from parallel.signals import EXIT_INTERRUPTED, StopRequest
from parallel.output import FORMATS, ErrorLog, OutputError, open_writer
from parallel.output.durable import is_disk_full
from parallel.staging import open_runner

log = logging.getLogger("parallel")

__all__ = ["Config", "DeviceRunner", "Distribution", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_SOME_FAILED",
           "EXIT_USAGE", "ModelSpec", "RunError", "Summary", "build_graph", "extract", "run"]


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
        None: by device kind (`Devices.default_batch`: 12 on CPU devices, 64 on GPUs).
      resize: "crop" (centre square, then resize) or "stretch".
      output_format: "csv", "parquet" or "npy".
      workers: decode threads; None: one per core.
      prefetch_batches: host batches decoded ahead of the devices.
      overwrite: start afresh instead of resuming an existing output.
      strict: the first unreadable image stops the run.
      progress: show a progress bar (the CLI sets it when stderr is a terminal).
      images_from: None, or a file listing the images (see `parallel.manifest.read_list`);
        relative paths in it are relative to `images`.
      distribution: None (one process), or how the job is spread over processes (`Distribution`).
    """

    model: ModelSpec
    images: Path
    output: Path
    devices: Devices
    per_device_batch: Optional[int] = None
    resize: str = "crop"
    output_format: str = "csv"
    workers: Optional[int] = None
    prefetch_batches: int = 2
    overwrite: bool = False
    strict: bool = False
    progress: bool = False
    images_from: Optional[Path] = None
    distribution: Optional["Distribution"] = None

    def __post_init__(self):
        if self.per_device_batch is None:  # by the kind of the devices that compute (frozen: object.__setattr__)
            if self.distribution is not None and self.distribution.kind == "ray":  # the actors', not this host's
                object.__setattr__(self, "per_device_batch",
                                   GPU_BATCH if self.distribution.gpus_per_worker else CPU_BATCH)
            else:
                object.__setattr__(self, "per_device_batch", self.devices.default_batch())
        _check_batching(self.per_device_batch, self.resize, self.workers, self.prefetch_batches)
        if self.output_format not in FORMATS:
            raise ValueError("output_format must be one of %s; got %r" % (", ".join(FORMATS), self.output_format))
        if self.distribution is not None and not isinstance(self.distribution, Distribution):
            raise ValueError("distribution must be a Distribution or None; got %r" % (self.distribution,))
        if self.distribution is not None and self.overwrite:
            raise ValueError("overwrite with a distributed job would let each process erase the others' shards: "
                             "remove %s and its files yourself, or choose another output" % self.output)

    @property
    def settings(self):
        """What the output records and a rerun must match: the model's settings, the images, the resizing."""
        source = {"images": str(Path(self.images).resolve())}
        if self.images_from is not None:
            source["images_from"] = str(Path(self.images_from).resolve())
        return dict(self.model.settings, **source, resize=self.resize,
                    image_size="%dx%d" % tuple(self.model.image_size))

    def scan(self):
        """The Manifest of the job's images as they are now (the folder, or the list file)."""
        if self.images_from is not None:
            return read_list(self.images_from, self.images)
        return Manifest.scan(self.images, exclude=own_files(Path(self.images), Path(self.output)))

    @property
    def host_batch(self):
        """Images per `sess.run`: per_device_batch on each device."""
        return self.per_device_batch * len(self.devices.names)

    @property
    def step_geometry(self):
        """What decides which images share a step and how many each device computes at once: {str: str}.

        A model's rounding may depend on it (oneDNN, cuDNN), so it is part of the job's record: every
        process of a job computes with the same. Under Ray it is that of each actor (gpus_per_worker
        GPUs, or one CPU device), not of the driver's host.
        """
        if self.distribution is not None and self.distribution.kind == "ray":
            devices = self.distribution.gpus_per_worker or 1
        else:
            devices = len(self.devices.names)
        return {"per_device_batch": str(self.per_device_batch), "devices": str(devices)}


@dataclasses.dataclass(frozen=True)
class Distribution:
    """How one job is spread over processes (see `parallel.shards`, `parallel.distributed`).

    Attributes:
      kind: "static" (each process is one rank of a scheduler: Slurm, torchrun, Kubernetes,
        TF_CONFIG) or "ray" (a Ray cluster's actors pull shards).
      rank, world_size: --rank and --world-size (static); None: from the environment.
      shard_size: images per shard; None: the job's recorded size, else 10,000.
      keep_shards: keep the shards (a Parquet dataset) once the output is written.
      wait_seconds: how long a process waits for another that is writing the manifest.
      ray_address: the Ray cluster to join ("auto", "ray://host:10001"); None: start one here.
      gpus_per_worker: GPUs each Ray actor is given (0: actors compute on the CPU).
      verbose: Ray actors show TensorFlow's log and Ray its own (--verbose); else they are as
        quiet as one process.
    """

    kind: str
    rank: Optional[int] = None
    world_size: Optional[int] = None
    shard_size: Optional[int] = None
    keep_shards: bool = False
    wait_seconds: float = 600.0
    ray_address: Optional[str] = None
    gpus_per_worker: int = 1
    verbose: bool = False

    def __post_init__(self):
        if self.kind not in ("static", "ray"):
            raise ValueError("distribution kind must be 'static' or 'ray'; got %r" % (self.kind,))
        if self.shard_size is not None and (not isinstance(self.shard_size, int) or self.shard_size < 1):
            raise ValueError("shard_size must be at least 1; got %r" % (self.shard_size,))
        if not isinstance(self.gpus_per_worker, int) or self.gpus_per_worker < 0:
            raise ValueError("gpus_per_worker must be 0 or more; got %r" % (self.gpus_per_worker,))


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
    """Extracts features of every image of the job into `config.output`.

    Resumes an output written earlier by the same job (same settings, same images, no image
    added, none changed or removed after its row was written): only images without a
    committed row are computed. Stops cleanly on SIGINT/SIGTERM. With
    `config.distribution`, this process runs its part of a job spread over several
    (`parallel.distributed`).

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
        raise ValueError("images=%s is not a folder" % images_root)
    if config.distribution is not None:
        from parallel import distributed
        return distributed.run(config)
    output = Path(config.output)
    settings = config.settings
    _, current, frozen = check_job(images_root, output, dict(settings, format=config.output_format,
                                                             column_prefix=config.model.output_name),
                                   scan=config.scan, overwrite=config.overwrite, geometry=config.step_geometry)
    weights = config.model.load_weights()  # a bad weights file fails before any output exists
    set_float32_precision(config.model.settings.get("precision"))  # process-global: before the Session
    started = time.perf_counter()
    with contextlib.ExitStack() as stages:
        runner = stages.enter_context(open_runner(config.model, config.devices, config.per_device_batch,
                                                  weights=weights))
        del weights  # the devices hold their copies now
        output.parent.mkdir(parents=True, exist_ok=True)
        stages.enter_context(output_lock(output))
        if config.overwrite:
            ShardedJob(output).remove_parts()  # of a job over several processes, written here before
        with disk_full_errors():
            writer = open_writer(output, format=config.output_format, column_prefix=config.model.output_name,
                                 feature_size=runner.feature_size, settings=settings, overwrite=config.overwrite,
                                 sort_paths=True)
        stages.callback(writer.abort)  # committed rows stay committed and resumable; no-op after close()
        job = freeze_job(frozen, current, writer, images_root, output, job=job_record(config))
        positions = [index for index, path in enumerate(job.paths) if path not in writer.completed]
        todo = [job.paths[index] for index in positions]
        log.info("%s under %s; devices: %s", counted(len(job), "image"), images_root,
                 config.devices.describe(config.per_device_batch))
        log.info("ready in %.1f s (weights to devices, graph, session)", time.perf_counter() - started)
        # The stop request covers the loop only: a signal during start-up or the final merge stops at once.
        with Progress(config.progress, total=len(job), initial=len(job) - len(todo)) as progress, \
                StopRequest() as stop:
            summary = extract_into(config, runner, writer, todo, positions, stop=stop, progress=progress)
        log_stage_times(summary)
        if not summary.interrupted:
            with run_errors():
                writer.close()  # parquet, npy: the final merge
    return dataclasses.replace(summary, discovered=len(job), already_done=len(job) - len(todo), output=output,
                               errors_file=ErrorLog.path_for(output))


def extract_into(config, runner, writer, paths, positions, stop=None, progress=None):
    """The loop over `paths` (relative to config.images) into an open writer; its errors file beside it.

    Args:
      config: Config (images, batching, resize, strict).
      runner: DeviceRunner.
      writer: an open FeatureWriter; left open (the caller closes or aborts it).
      paths: the images to compute, in order.
      positions: increasing ints, the place of each of `paths` in the job's image list. Step k
        computes those of the job's images k * host_batch .. (k + 1) * host_batch - 1 that are
        in `paths` (`parallel.reader.step_lengths`), so the rows are the bits of one
        uninterrupted run however the job was resumed or cut into shards.
      stop, progress: as for `run_loop`.

    Returns:
      Summary of the loop (see `run_loop`).

    Raises:
      RunError: the loop stopped part-way (disk full, a device error, strict and a bad image).
    """
    with run_errors(), contextlib.ExitStack() as stages:
        errors = stages.enter_context(ErrorLog(writer.output))
        reader = stages.enter_context(ImageReader(
            config.images, paths, config.host_batch, size=tuple(config.model.image_size), resize=config.resize,
            workers=config.workers, prefetch_batches=config.prefetch_batches,
            chunks=step_lengths(positions, config.host_batch)))
        sink = stages.enter_context(WriterThread(writer))
        return run_loop(reader, runner, sink, errors, images=len(paths), strict=config.strict, stop=stop,
                        progress=progress)


@contextlib.contextmanager
def run_errors():
    """Turns what stops a run part-way into RunError, whose message says that committed rows are kept."""
    try:
        yield
    except (OSError, ValueError, RuntimeError, tf.errors.OpError) as error:
        if isinstance(error, RunError):
            raise
        if isinstance(error, OutputError):  # the output layer's message already says what is kept and what to do
            raise RunError(first_line(error)) from error
        raise RunError("%s; rows committed so far are kept: rerun the same command to resume"
                       % (first_line(error) or type(error).__name__)) from error


@contextlib.contextmanager
def disk_full_errors():
    """A full disk is a RunError (exit status 1), even at the first write.

    It is no usage error, and something was written when it struck (a sidecar, a header). The
    output's other refusals (another job's output, a foreign file) stay ValueErrors: nothing written.
    """
    try:
        yield
    except OutputError as error:
        if not is_disk_full(error.__cause__):
            raise
        raise RunError(first_line(error)) from error


@contextlib.contextmanager
def output_lock(output):
    """One process writing `output` at a time: a second is refused with one line."""
    path = Path(output).with_name(Path(output).name + ".lock")
    try:
        with locks.exclusive(path):
            yield
    except locks.Busy:
        raise OutputError("another run is writing %s now (it holds %s): wait for it to end, or choose another "
                          "output" % (output, path.name)) from None


def extract(model, images, devices="cpu:0", per_device_batch=None, resize="crop", workers=None, prefetch_batches=2):
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
      per_device_batch: images per device per step; None: by device kind (12 on CPU devices,
        64 on GPUs), as for `run`.
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
    if isinstance(devices, str):
        devices = resolve_devices(devices=devices)
    if not isinstance(devices, Devices):
        raise ValueError("devices must be a Devices or device names such as 'cpu:0'; got %r" % (devices,))
    if per_device_batch is None:
        per_device_batch = devices.default_batch()
    _check_batching(per_device_batch, resize, workers, prefetch_batches)
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
    set_float32_precision(model.settings.get("precision"))  # process-global: before the Session
    with open_runner(model, devices, per_device_batch) as runner, ImageReader(
            root, paths, host_batch, size=tuple(model.image_size), resize=resize, workers=workers,
            prefetch_batches=prefetch_batches) as reader:
        run_loop(reader, runner, sink, failures, images=len(paths))
        if failures.rows:
            log.warning("%s could not be read: %s", counted(len(failures.rows), "image"),
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
