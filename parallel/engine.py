"""The engine: builds the graph once, owns the Session, and runs read -> devices -> write.

    files --ImageReader (decode pool)--> uint8 batches --DeviceRunner (one sess.run on every
    device)--> float32 features --writer thread--> output

The three stages overlap: the reader decodes the next batches while the devices compute,
and a writer thread formats and commits the previous batch. Queues between them are
bounded, so memory does not grow with the number of images.
"""

import collections
import contextlib
import dataclasses
import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from parallel.data_parallelism import data_parallelism, merge_results
from parallel.devices import Devices
from parallel.model import ModelSpec
from parallel.placement import ReplicatedVariables
from parallel.manifest import IMAGE_EXTENSIONS, Manifest, describe_changes, manifest_path, other_source_message
from parallel.decode import RESIZE_MODES
from parallel.reader import ImageReader
from parallel.shard_features import shard_features, shard_sizes
from parallel.signals import EXIT_INTERRUPTED, StopRequest
from parallel.writer import (FORMATS, PARTS_SUFFIX, ErrorLog, OutputError, check_settings, open_writer, read_record,
                             sidecar_path)

tf1 = tf.compat.v1
log = logging.getLogger("parallel")

# Exit statuses, documented in the README ("Failure behaviour").
EXIT_OK = 0
EXIT_FAILED = 1          # the run could not complete
EXIT_USAGE = 2           # bad flags or inputs; nothing was written
EXIT_SOME_FAILED = 3     # the run completed, but some images could not be read


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
        if not isinstance(self.per_device_batch, int) or self.per_device_batch < 1:
            raise ValueError("--batch-size must be at least 1; got %r" % (self.per_device_batch,))
        if self.resize not in RESIZE_MODES:
            raise ValueError("--resize %r; expected one of %s" % (self.resize, ", ".join(RESIZE_MODES)))
        if self.output_format not in FORMATS:
            raise ValueError("--format %r; expected one of %s" % (self.output_format, ", ".join(FORMATS)))
        if self.workers is not None and self.workers < 1:
            raise ValueError("--workers must be at least 1; got %r" % (self.workers,))
        if self.prefetch_batches < 1:
            raise ValueError("--prefetch must be at least 1; got %r" % (self.prefetch_batches,))

    @property
    def host_batch(self):
        """Images per `sess.run`: per_device_batch on each device."""
        return self.per_device_batch * len(self.devices.names)


@dataclasses.dataclass
class Summary:
    """What became of every discovered image; the counts add up to `discovered`.

    Attributes:
      discovered: image files found under --images.
      written: rows committed by this run.
      failed: images that could not be read (listed in the errors file).
      already_done: rows committed by an earlier run of the same output (resume).
      skipped: images not reached because the run was stopped.
      seconds: wall time of the read -> run -> write loop (start-up excluded).
      device_seconds: of `seconds`, the time the devices were computing (`sess.run`).
      reader_wait_seconds: of `seconds`, the time the devices waited for decoded images.
      writer_wait_seconds: of `seconds`, the time the devices waited for the writer (its
        queue full, and the last batches committed after the devices finished).
      output: where the rows are.
      interrupted: stopped by SIGINT/SIGTERM.
    """

    discovered: int = 0
    written: int = 0
    failed: int = 0
    already_done: int = 0
    skipped: int = 0
    seconds: float = 0.0
    device_seconds: float = 0.0
    reader_wait_seconds: float = 0.0
    writer_wait_seconds: float = 0.0
    output: Optional[Path] = None
    interrupted: bool = False

    @property
    def exit_status(self):
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_SOME_FAILED if self.failed else EXIT_OK

    def line(self):
        """The one-line summary printed at the end of a run."""
        rate = self.written / self.seconds if self.seconds > 0 else 0.0
        text = ("%d images: %d written, %d failed, %d already done, %d skipped in %.1f s (%.1f images/s) -> %s"
                % (self.discovered, self.written, self.failed, self.already_done, self.skipped,
                   self.seconds, rate, self.output))
        if self.failed:
            text += " (failures: %s)" % ErrorLog.path_for(self.output)
        if self.seconds > 0 and self.device_seconds > 0:
            text += "; devices busy %.0f%%" % (100 * self.device_seconds / self.seconds)
        return text


def build_graph(model, device_names):
    """The graph the engine runs: `model.fn` once per device, each with a resident copy of the weights.

    Nothing runs here, so the graph can be built, and its placement checked, for devices this
    machine does not have.

    Args:
      model: ModelSpec.
      device_names: graph device names, one replica each ("/device:GPU:0", ...).

    Returns:
      (graph, placement, placeholders, outputs): the `tf.Graph`; its `ReplicatedVariables`
      (which `load` fills); per device, a placeholder `uint8 [None, H, W, 3]` and the
      features `float32 [None, D]`, flattened.

    Raises:
      ValueError: the model's features have no fixed size per image.
    """
    height, width = model.image_size
    graph = tf.Graph()
    with graph.as_default():
        placement = ReplicatedVariables(device_names)

        def replica():
            images = tf1.placeholder(tf.uint8, [None, height, width, 3], name="images")
            features = model.fn(images)
            size = features.shape[1:].num_elements()
            if size is None:
                raise ValueError("model %s returns features of unknown size %s" % (model.name, features.shape))
            return images, tf.reshape(features, [-1, size])

        placeholders, outputs = data_parallelism(placement, replica)
    return graph, placement, placeholders, outputs


class DeviceRunner:
    """Builds the replicated graph once and runs uint8 batches through every device.

    Each device gets a placeholder `uint8 [None, H, W, 3]` and a resident copy of the
    weights (`ReplicatedVariables`), loaded from host arrays once; the graph is then
    finalized, so nothing can be added to it per step.
    """

    def __init__(self, model, devices, per_device_batch, weights=None):
        """Builds the graph and the Session, and loads the weights.

        Args:
          model: ModelSpec.
          devices: Devices.
          per_device_batch: rows per device per step (the largest batch `run` sends).
          weights: {variable name: array}; None calls `model.load_weights()`.
        """
        self.devices = devices
        self.max_rows_per_step = per_device_batch * len(devices.names)
        self.graph, placement, self.placeholders, self.outputs = build_graph(model, devices.names)
        self.feature_size = self.outputs[0].shape[1]
        self.session = tf1.Session(graph=self.graph, config=devices.session_config())
        try:
            placement.load(self.session, model.load_weights() if weights is None else weights)
        except BaseException:
            self.session.close()
            raise
        self.graph.finalize()

    def run(self, images):
        """Features of a batch of any size, in row order.

        A device that runs out of memory halves the rows per step and the batch is
        retried (with a warning), down to one row per device; no row is lost.

        Args:
          images: uint8 [N, H, W, 3], N >= 1.

        Returns:
          float32 [N, feature_size].
        """
        results, start = [], 0
        while start < len(images):
            chunk = images[start:start + self.max_rows_per_step]
            try:
                fetches, feed_dict = shard_features(chunk, self.placeholders, self.outputs)
                per_device = self.session.run(fetches, feed_dict)
            except tf.errors.ResourceExhaustedError:
                if self.max_rows_per_step <= len(self.devices.names):
                    raise
                self.max_rows_per_step = max(len(self.devices.names), self.max_rows_per_step // 2)
                log.warning("out of memory on a device; retrying with %d images per step",
                            self.max_rows_per_step)
                continue
            results.append(merge_results(per_device, shard_sizes(len(chunk), len(self.devices.names))))
            start += len(chunk)
        return np.concatenate(results) if len(results) > 1 else results[0]

    def close(self):
        self.session.close()


class _WriterThread:
    """Formats and commits batches on a thread of its own, behind a bounded queue."""

    _DONE = object()

    def __init__(self, writer, depth=2):
        self._writer = writer
        self._queue = queue.Queue(maxsize=depth)
        self._error = None
        self.rows_committed = 0
        self._thread = threading.Thread(target=self._loop, name="writer", daemon=True)
        self._thread.start()

    def _loop(self):
        while True:
            item = self._queue.get()
            if item is self._DONE:
                return
            if self._error is not None:
                continue  # drain so that put() never blocks forever
            try:
                self._writer.write(*item)
                self.rows_committed += len(item[0])
            except BaseException as error:  # handed to the main thread
                self._error = error

    def put(self, paths, features):
        self._raise_if_failed()
        self._queue.put((paths, features))

    def finish(self):
        """Waits for every queued batch to be committed; re-raises a writer error."""
        self._queue.put(self._DONE)
        self._thread.join()
        self._raise_if_failed()

    def _raise_if_failed(self):
        if self._error is not None:
            raise self._error


class _Progress:
    """A tqdm bar on stderr, or nothing."""

    def __init__(self, enabled, total, initial):
        self._bar = None
        if enabled:
            from tqdm import tqdm
            self._bar = tqdm(total=total, initial=initial, unit="img", dynamic_ncols=True, smoothing=0.1)

    def update(self, count, failed):
        if self._bar is not None:
            self._bar.update(count)
            if failed:
                self._bar.set_postfix(failed=failed, refresh=False)

    def close(self):
        if self._bar is not None:
            self._bar.close()


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
        job), raised before anything is logged or written; `parallel.writer.OutputError`
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
    record = _check_output(config, images_root, output, settings)
    current = Manifest.scan(images_root, exclude=_own_files(images_root, output))
    if not len(current):
        raise ValueError("--images %s contains no images (looked for %s, recursively)"
                         % (images_root, " ".join(sorted(IMAGE_EXTENSIONS))))
    frozen = None
    if record is not None and record["rows"]:  # the job's input is frozen once a row is committed
        frozen = Manifest.load(manifest_path(output))
        if frozen is not None:  # refused before the weights are loaded; stale rows are judged below
            refusal = describe_changes(frozen.changes(current), images_root, output)
            if refusal:
                raise ValueError(refusal)
    weights = config.model.load_weights()  # a bad weights file fails before any output exists

    started = time.perf_counter()
    runner = DeviceRunner(config.model, config.devices, config.per_device_batch, weights=weights)
    del weights  # the devices hold their copies now
    try:
        writer = open_writer(output, format=config.output_format,
                             column_prefix=config.model.output_name, feature_size=runner.feature_size,
                             settings=settings, overwrite=config.overwrite)
        try:
            job = _freeze(frozen, current, writer, images_root, output)
        except BaseException:
            writer.abort()
            raise
        log.info("%d images under %s; devices: %s", len(job), images_root, config.devices.describe())
        log.info("ready in %.1f s (weights to devices, graph, session)", time.perf_counter() - started)
        try:
            summary = _extract(config, runner, writer, job.paths)
            if summary.interrupted:
                writer.abort()
            else:
                writer.close()  # parquet, npy: the final merge
        except BaseException as error:
            writer.abort()  # committed rows stay committed and resumable
            if isinstance(error, (OSError, ValueError, RuntimeError, tf.errors.OpError)):
                raise RunError("%s; rows committed so far are kept: rerun the same command to resume"
                               % _first_line(error)) from error
            raise
        return summary
    finally:
        runner.close()


def _check_output(config, images_root, output, settings):
    """Refuses, before anything is loaded or written, an output that this job must not touch.

    Returns:
      the output's commit record (see `parallel.writer.read_record`), or None when the run
      starts afresh (a new output, or --overwrite).
    """
    if output.is_dir():
        raise OutputError("--output %s is a folder; give a file name" % output)
    if os.path.lexists(output) and _is_inside(output, images_root) and read_record(output) is None:
        raise OutputError("--output %s is a file under --images %s, not an output of this program: choose "
                          "another --output" % (output, images_root))
    if config.overwrite:
        return None
    record = read_record(output)
    if record is None:
        if os.path.lexists(output):
            raise OutputError("%s exists and was not written by this program (no %s): pass --overwrite to "
                              "replace it or choose another --output" % (output, sidecar_path(output).name))
        return None
    recorded = record["settings"]
    if "images" in recorded and recorded["images"] != settings["images"]:
        raise OutputError(other_source_message(output, recorded["images"], settings["images"]))
    check_settings(output, recorded, dict(settings, format=config.output_format,
                                          column_prefix=config.model.output_name), ignore=("feature_size",))
    return record


def _is_inside(path, folder):
    """Whether `path` (resolved) lies in `folder` (resolved), at any depth."""
    try:
        Path(path).resolve().relative_to(Path(folder).resolve())
    except ValueError:
        return False
    return True


def _own_files(images_root, output):
    """Paths relative to `images_root` of this output's files that lie inside it: never images."""
    if not _is_inside(output, images_root):
        return ()
    relative = Path(output).resolve().relative_to(images_root.resolve()).as_posix()
    # The sidecars end in .json, .csv, .parquet or .tmp, never an image extension: only the
    # output itself and its parts folder could be taken for images.
    return (relative, relative + PARTS_SUFFIX)


def _freeze(frozen, current, writer, images_root, output):
    """The job's manifest: frozen by its first run, and checked against the rows committed since.

    Args:
      frozen: the saved Manifest, or None (a new job, --overwrite, or no row committed yet).
      current: Manifest of the folder now.
      writer: the open FeatureWriter (its `completed` rows decide what is stale).

    Returns:
      Manifest: the job's images (the frozen list; repaired images with their new size and time).

    Raises:
      ValueError: an image was added, or changed or removed after its row was written.
    """
    path = manifest_path(output)
    if frozen is None:
        if writer.rows_committed:
            raise OutputError("%s is missing, so the images of %s cannot be checked: pass --overwrite to "
                              "start afresh" % (path, output))
        current.save(path)
        return current
    changes = frozen.changes(current)
    refusal = describe_changes(changes, images_root, output, committed=writer.completed)
    if refusal:
        raise ValueError(refusal)
    if changes.changed:  # images without a row that were repaired: record their new size and time
        frozen = frozen.updated(current, changes.changed)
        frozen.save(path)
    return frozen


def _first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def _extract(config, runner, writer, paths):
    """The read -> run -> write loop over the images `writer` has not committed yet."""
    summary = Summary(discovered=len(paths), output=Path(config.output))
    todo = [path for path in paths if path not in writer.completed]
    summary.already_done = len(paths) - len(todo)
    errors = ErrorLog(config.output)
    progress = _Progress(config.progress, total=len(paths), initial=summary.already_done)
    writer_thread = _WriterThread(writer)
    reader = ImageReader(config.images, todo, config.host_batch, size=tuple(config.model.image_size),
                         resize=config.resize, workers=config.workers, prefetch_batches=config.prefetch_batches)
    clock = _StageClock()
    reached = 0
    try:
        with StopRequest() as stop, reader:
            batches = iter(reader)
            while True:
                with clock.stage("reader_wait_seconds"):
                    batch = next(batches, None)
                if batch is None:
                    break
                for failure in batch.failures:
                    errors.add(failure.path, failure.kind, failure.message)
                    if config.strict:
                        raise RuntimeError("--strict: %s: %s (%s)" % (failure.path, failure.message, failure.kind))
                summary.failed += len(batch.failures)
                if len(batch.paths):
                    with clock.stage("device_seconds"):
                        features = runner.run(batch.images)
                    with clock.stage("writer_wait_seconds"):
                        writer_thread.put(batch.paths, features)
                reached += len(batch.paths) + len(batch.failures)
                progress.update(len(batch.paths) + len(batch.failures), summary.failed)
                if stop.signal_name is not None:
                    summary.interrupted = True
                    break
    finally:
        # However the loop ended, the batches already handed to the writer are committed.
        with clock.stage("writer_wait_seconds"):
            writer_thread.finish()
        progress.close()
        errors.close()
    summary.written = writer_thread.rows_committed
    summary.skipped = len(todo) - reached
    summary.seconds = clock.elapsed()
    for name, seconds in clock.totals.items():
        setattr(summary, name, seconds)
    log.info("%.1f s: devices %.1f s, waiting for the reader %.1f s, for the writer %.1f s",
             summary.seconds, summary.device_seconds, summary.reader_wait_seconds, summary.writer_wait_seconds)
    return summary


class _StageClock:
    """Wall time of the loop, and how much of it went to each stage (clip-retrieval's runner does the same)."""

    def __init__(self):
        self._started = time.perf_counter()
        self.totals = collections.defaultdict(float)

    @contextlib.contextmanager
    def stage(self, name):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.totals[name] += time.perf_counter() - started

    def elapsed(self):
        return time.perf_counter() - self._started
