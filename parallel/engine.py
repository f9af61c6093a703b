"""The engine: one list of images through reader -> devices -> writer.

    files --ImageReader (decode pool)--> uint8 batches --DeviceRunner (one sess.run on every
    device)--> float32 features --WriterThread--> FeatureWriter --> output

    extract_into(config, runner, writer, paths, positions)   a list of images into an open writer
    extract_stream(config, runner, writer, items)            a stream of (key, bytes), a tar's, likewise
    extract(model, images)     a folder, a prefix, or a list of files, URLs and tar members into
                               (paths, features) in memory

The stages overlap: the reader decodes the next batches while the devices compute, and a
writer thread formats and commits the previous batch. Queues between them are bounded, so
memory does not grow with the number of images.

The engine knows nothing of jobs: which images, which output, one process or many is the job
layer's (`parallel.jobs`), which calls it. It imports nothing from there.
"""

import contextlib
import dataclasses
import logging
import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from parallel.devices.compute import DeviceRunner, build_graph
from parallel.devices.selection import Devices, resolve_devices, set_float32_precision
from parallel.devices.staging import open_runner
from parallel.inputs.decode import decode_bytes_row, decode_row
from parallel.inputs.manifest import discover_images
from parallel.inputs.reader import ImageReader, step_layout, step_lengths
from parallel.inputs.resize import RESIZE_MODES, Resize
from parallel.inputs.sources import image_folder
from parallel.inputs.streams import StreamReader
from parallel.inputs.tars import is_member
from parallel.locations import is_url
from parallel.loop import EXIT_FAILED, EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE, Summary, WriterThread, run_loop
from parallel.messages import counted, error_line, first_line
from parallel.model import ModelSpec
from parallel.output import ErrorLog, OutputError
from parallel.output.durable import is_disk_full
from parallel.signals import EXIT_INTERRUPTED

log = logging.getLogger("parallel")

REMOTE_THREADS = 16  # reader threads for images in a store: fetches wait on the network, not the cores

__all__ = ["DeviceRunner", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_SOME_FAILED", "EXIT_USAGE", "ModelSpec",
           "RunError", "Summary", "build_graph", "extract", "extract_into", "extract_stream"]


class RunError(RuntimeError):
    """The run stopped part-way (disk full, a device error, --strict); committed rows are kept."""


def check_batching(per_device_batch, resize, workers, prefetch_batches):
    """ValueError naming the parameter and the value received, for the arguments of a run."""
    if isinstance(per_device_batch, bool) or not isinstance(per_device_batch, int) or per_device_batch < 1:
        raise ValueError("per_device_batch must be at least 1; got %r" % (per_device_batch,))
    if resize not in RESIZE_MODES:
        raise ValueError("resize must be one of %s; got %r" % (", ".join(RESIZE_MODES), resize))
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError("workers must be at least 1; got %r" % (workers,))
    if not isinstance(prefetch_batches, int) or prefetch_batches < 1:
        raise ValueError("prefetch_batches must be at least 1; got %r" % (prefetch_batches,))


def extract_into(config, runner, writer, paths, positions, stop=None, progress=None, total=None, versions=None):
    """The loop over `paths` (relative to config.images) into an open writer; its errors file beside it.

    Args:
      config: Config (images, batching, resize, strict).
      runner: DeviceRunner.
      writer: an open FeatureWriter; left open (the caller closes or aborts it).
      paths: the images to compute, in order.
      positions: increasing ints, the place of each of `paths` in the job's image list. Step k
        computes those of the job's images k * host_batch .. (k + 1) * host_batch - 1 that are
        in `paths` (`parallel.inputs.reader.step_lengths`), so the rows are the bits of one
        uninterrupted run however the job was resumed or cut into shards.
      stop, progress: as for `run_loop`.
      total: the job's images. Given, each step is computed whole, as in an uninterrupted run
        (the slots of images not computed now hold zeros: `parallel.inputs.reader.Batch`), so
        that a row never depends on which images failed or were done before.
      versions: None, or the version (ETag) the job recorded for each of `paths` ("" for a file):
        an object is read only as that version (`ImageReader`'s `versions`).

    Returns:
      Summary of the loop (see `run_loop`).

    Raises:
      RunError: the loop stopped part-way (disk full, a device error, strict and a bad image).
    """
    with run_errors(), contextlib.ExitStack() as stages:
        errors = stages.enter_context(ErrorLog(writer.output))
        reader = stages.enter_context(_job_reader(config, paths, positions, total, versions))
        sink = stages.enter_context(WriterThread(writer))
        return run_loop(reader, runner, sink, errors, images=len(paths), strict=config.strict, stop=stop,
                        progress=progress)


def extract_stream(config, runner, writer, items, stop=None, progress=None, remote=False):
    """`extract_into` for images that arrive as a stream: a tar's members, read front to back once.

    Items whose key `writer` has committed (a resumed attempt's) are read past, not decoded or computed:
    their slots in their steps hold zeros, so the others' rows are those of one uninterrupted run.

    Args:
      config, runner, writer, stop, progress: as extract_into.
      items: iterable of (key, bytes or ImageError), e.g. `parallel.inputs.tar_stream.stream_members`:
        the whole of a shard, so its steps are its items 0 .. host_batch - 1, host_batch .., the
        same whatever the number of processes (`parallel.inputs.streams`).
      remote: the stream comes from a store: decode on REMOTE_THREADS threads at least.

    Returns:
      Summary of the loop; `discovered` counts the items read.
    """
    with run_errors(), contextlib.ExitStack() as stages:
        errors = stages.enter_context(ErrorLog(writer.output))
        reader = stages.enter_context(StreamReader(
            items, config.host_batch, size=tuple(config.model.image_size),
            resize=_resize_of(config.model, config.resize), workers=_workers(config.workers, remote),
            prefetch_batches=config.prefetch_batches, done=writer.completed))
        sink = stages.enter_context(WriterThread(writer))
        summary = run_loop(reader, runner, sink, errors, images=0, strict=config.strict, stop=stop, progress=progress)
    reached = summary.written + summary.failed + reader.done_count
    return dataclasses.replace(summary, discovered=reader.count, already_done=reader.done_count,
                               skipped=reader.count - reached)


def extract_rows(config, runner, keys, positions, total, decode=None, versions=None):
    """The features of a few of a job's images, each computed at its place in its step, in memory.

    Each step is computed whole, as in an uninterrupted run (the other slots hold zeros), so the
    rows are bit for bit those of a run in which these images were computed with their
    step-mates: how a job retries the images that failed before.

    Args:
      config: Config (images, batching, resize).
      runner: DeviceRunner.
      keys: the images (relative paths, URLs, tar member keys with `decode`), in job order.
      positions: increasing ints, the place of each in the job's list.
      total: the job's images.
      decode: ImageReader's decode (None: files and URLs; `member_decoder` for tar members).
      versions: as for `extract_into`.

    Returns:
      (paths, features float32 [len(paths), D], failures [(key, kind, message)]): the images that
      read now, and those that still fail.
    """
    sink, failures = _Collected(), _Failures()
    with run_errors(), _job_reader(config, keys, positions, total, versions, decode or decode_row) as reader:
        run_loop(reader, runner, sink, failures, images=len(keys))
    features = np.concatenate(sink.features) if sink.features else np.zeros((0, runner.feature_size), np.float32)
    return sink.paths, features, failures.rows


def _job_reader(config, paths, positions, total, versions, decode=decode_row):
    """The ImageReader of `paths` of a job at their `positions` (`extract_into`, `extract_rows`): its steps
    those of an uninterrupted run of `total` images (None: only the images given), reads pinned to `versions`."""
    root = getattr(config, "image_root", config.images) or os.getcwd()  # tars: member keys, no root
    return ImageReader(root, paths, config.host_batch, size=tuple(config.model.image_size),
                       resize=_resize_of(config.model, config.resize),
                       workers=_workers(config.workers, is_url(root) or any(map(is_url, paths))),
                       prefetch_batches=config.prefetch_batches, decode=decode,
                       chunks=step_lengths(positions, config.host_batch),
                       steps=None if total is None else step_layout(positions, config.host_batch, total),
                       versions=versions)


def _resize_of(model, mode):
    """How the reader resizes a job's images: `mode` (--resize, "crop" or "stretch") with the filter and
    short side of `model` (a ModelSpec), its one source. A `parallel.inputs.resize.Resize`."""
    return Resize(mode, model.resize_filter, model.resize_short_side)


def _workers(workers, remote):
    """Reader threads: `workers` (None: a core each); for a store's images at least REMOTE_THREADS,
    so that their fetches, which wait on the network, run ahead of the devices."""
    workers = workers or os.cpu_count() or 1
    return max(workers, REMOTE_THREADS) if remote else workers


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
                       % error_line(error)) from error


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


def extract(model, images, devices="cpu:0", per_device_batch=None, resize=None, workers=None, prefetch_batches=2,
            index=None, image_column=None):
    """Features of a folder of images, or of a list of image files, in memory.

    For notebooks and pipelines, and small jobs: nothing is written. For a large job, or one
    that must survive a kill, use `run(Config(...))`, which writes an output and resumes it.

        from models import vgg16
        from parallel import extract
        paths, features = extract(vgg16.feature_model(weights="vgg16-random.npy"), "photos/")

    Args:
      model: ModelSpec (e.g. `models.vgg16.feature_model(...)`).
      images: a folder (str or Path: every image under it, recursively), a prefix of an object
        store ("s3://bucket/photos/": every image object under it, listed once), or a list of
        image file paths (str or Path, absolute or relative to the working directory) and
        object URLs (s3://, http(s)://: fetched with the retries of a job's).
      devices: `Devices`, or device names as for the CLI's --devices ("cpu:0,cpu:1",
        "gpu:0,gpu:1").
      per_device_batch: images per device per step; None: by device kind (12 on CPU devices,
        64 on GPUs), as for `run`.
      resize: "crop" or "stretch" (see `parallel.inputs.decode`), with the filter and short side of
        `model`'s spec; None: the model's own mode (`ModelSpec.resize_mode`: "crop" but for SigLIP).
      workers: decode threads; None: one per core.
      prefetch_batches: host batches decoded ahead of the devices.
      index: for tar members in `images` (tar://<member>::<tar>, as a job's rows name them), the
        job's `<output>.members.parquet`: each member is read by its byte range. None: each tar
        named is read once, front to back, before the images are computed. Rows of Parquet and
        TFRecord files (parquet://<id>::<file>, tfrecord://<id>::<file>) likewise.
      image_column: for rows of Parquet or TFRecord files, the column or feature of their images (the
        job's --image-column; None: found by name).

    Returns:
      (paths, features): the images that could be read, in input order (sorted relative
      paths for a folder or a prefix, the given paths and URLs for a list), and float32 [len(paths), D]. Images
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
    if resize is None:
        resize = model.resize_mode
    check_batching(per_device_batch, resize, workers, prefetch_batches)
    if isinstance(images, str) and is_url(images):  # a prefix of a store: its images, listed once
        from parallel.inputs.discovery import has_image_extension
        from parallel.inputs.remote import list_objects
        root = images if images.endswith("/") else images + "/"
        paths = [entry[0] for entry in list_objects(root, has_image_extension)]
        if not paths:
            raise ValueError("images=%s contains no images" % (images,))
    elif isinstance(images, (str, os.PathLike)):
        root = Path(image_folder(images))
        paths = discover_images(root)
        if not paths:
            raise ValueError("images=%s contains no images" % (images,))
    elif isinstance(images, (list, tuple)) and images:
        root, paths = Path(os.getcwd()), [os.fspath(path) for path in images]
    else:
        raise ValueError("images must be a folder or a non-empty list of files; got %r" % (images,))
    decode = decode_row
    if any(is_member(path) for path in paths):
        decode = member_decoder(paths, index, image_column)
    sink, failures = _Collected(), _Failures()
    host_batch = per_device_batch * len(devices.names)
    set_float32_precision(model.settings.get("precision"))  # process-global: before the Session
    with open_runner(model, devices, per_device_batch) as runner, ImageReader(
            root, paths, host_batch, size=tuple(model.image_size), resize=_resize_of(model, resize), workers=workers,
            prefetch_batches=prefetch_batches, decode=decode) as reader:
        run_loop(reader, runner, sink, failures, images=len(paths))
        if failures.rows:
            log.warning("%s could not be read: %s", counted(len(failures.rows), "image"),
                        "; ".join("%s (%s: %s)" % row for row in failures.rows[:5]))
        features = (np.concatenate(sink.features) if sink.features
                    else np.zeros((0, runner.feature_size), np.float32))
    return sink.paths, features


def member_decoder(paths, index, image_column=None):
    """ImageReader's decode for a list holding members of tars, Parquet or TFRecord files (their bytes from
    `parallel.inputs.streamed.member_reader`, by their entries when `index` is a members index), URLs and files."""
    from parallel.inputs.remote import decode_url_row
    from parallel.inputs.streamed import member_reader
    read = member_reader(paths, index, image_column)

    def decode(location, images, row, size, resize, max_pixels):
        if is_member(location):
            return decode_bytes_row(read(location), images, row, size, resize, max_pixels)
        if is_url(location):
            return decode_url_row(location, images, row, size, resize, max_pixels)
        return decode_row(location, images, row, size, resize, max_pixels)
    return decode


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
