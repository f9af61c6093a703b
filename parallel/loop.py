"""The read -> compute -> write loop, over the stages it is handed.

    for batch in batches:                        # Batch(paths, images uint8 [N, H, W, 3], failures)
        failures.add(path, kind, message)        # each image of the batch that could not be read
        for features in compute.submit(batch.images):   # float32 [N, D] of each batch now complete
            sink.put(paths of that batch, features)     # committed in the background (WriterThread)
    for features in compute.flush():             # the batches still in flight
        sink.put(paths of that batch, features)
    sink.finish()                                # waits until every batch put is committed

`compute` is a function `images -> features` (each batch complete at once), or a stage whose
features come back later, in submit order (a `StagedRunner` returns a batch's features from the
next `submit`, or from `flush`).

`run_loop` owns no stage: the engine opens the real ones (ImageReader, a DeviceRunner or
StagedRunner, WriterThread over a FeatureWriter, ErrorLog), a test or the in-memory API hands
in others, slow, failing or collecting. The loop counts what became of every image and times
how long the devices computed and how long they waited for each stage (clip-retrieval's runner
does the same).
"""

import collections
import contextlib
import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Optional

from parallel.messages import counted
from parallel.signals import EXIT_INTERRUPTED

log = logging.getLogger("parallel")

# Exit statuses, documented in docs/failure-behaviour.md ("Exit status").
EXIT_OK = 0
EXIT_FAILED = 1          # the run could not complete
EXIT_USAGE = 2           # bad flags or inputs; nothing was written
EXIT_SOME_FAILED = 3     # the run completed, but some images could not be read


class StrictError(RuntimeError):
    """strict=True and an image could not be read."""


@dataclasses.dataclass
class Summary:
    """What became of every discovered image; the counts add up to `discovered`.

    Attributes:
      discovered: images of the job.
      written: rows committed by this run.
      failed: images that could not be read (listed in the errors file).
      already_done: rows committed by an earlier run of the same output (resume).
      skipped: images not reached because the run was stopped.
      seconds: wall time of the read -> compute -> write loop (start-up excluded).
      device_seconds: of `seconds`, the time the devices were computing (`sess.run`).
      reader_wait_seconds: of `seconds`, the time the devices waited for decoded images.
      writer_wait_seconds: of `seconds`, the time the devices waited for the writer (the batch
        before not committed yet, and the last batch committed after the devices finished).
      output: where the rows are.
      errors_file: where the failed images are listed.
      interrupted: stopped by SIGINT/SIGTERM.
      pending_shards: a distributed job's shards not committed yet (the output is written
        when the last is).
      failure_cause: what every failed image of the output says, when it is one thing
        (`parallel.messages.one_cause`): the line gives it beside the errors file.
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
    errors_file: Optional[Path] = None
    interrupted: bool = False
    pending_shards: tuple = ()
    failure_cause: Optional[str] = None

    @property
    def exit_status(self):
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_SOME_FAILED if self.failed else EXIT_OK

    def line(self):
        """The one-line summary printed at the end of a run.

        A rerun with nothing to compute says so ("240 images: all already done -> out.csv"),
        without a rate or a device load that would only measure its start-up.
        """
        nothing_computed = not (self.written or self.skipped or self.interrupted)
        if nothing_computed and self.already_done:
            done = ("all already done" if self.already_done == self.discovered
                    else "%d already done, %d failed" % (self.already_done, self.failed))
            text = "%s: %s -> %s" % (counted(self.discovered, "image"), done, self.output)
        else:
            rate = self.written / self.seconds if self.seconds > 0 else 0.0
            text = ("%s: %d written, %d failed, %d already done, %d skipped in %.1f s (%.1f images/s) -> %s"
                    % (counted(self.discovered, "image"), self.written, self.failed, self.already_done, self.skipped,
                       self.seconds, rate, self.output))
        if self.failed and self.errors_file is not None:
            text += " (failures: %s%s)" % (self.errors_file, ": " + self.failure_cause if self.failure_cause else "")
        if not nothing_computed and self.seconds > 0 and self.device_seconds > 0:
            text += "; devices busy %.0f%%" % (100 * self.device_seconds / self.seconds)
        if self.pending_shards:
            count = len(self.pending_shards)
            text += ("; %s to come from other processes (%s): the output is written when the last is committed"
                     % (counted(count, "shard"), ", ".join(str(index) for index in self.pending_shards[:10])
                        + (", ..." if count > 10 else "")))
        return text


def run_loop(batches, compute, sink, failures, *, images, strict=False, stop=None, progress=None,
             clock=time.perf_counter):
    """Runs every batch through `compute` into `sink`; the loop of the module docstring.

    Args:
      batches: iterable of `parallel.inputs.reader.Batch`, in order.
      compute: callable, `images: uint8 [N, H, W, 3]` (N >= 1) -> `float32 [N, D]`; or an
        object with `submit(images)`, which returns the features of the batches submitted so
        far that are now complete (a list, in submit order, maybe empty), and `flush()`, which
        returns those of every batch still in flight.
      sink: has `put(paths, features)` and `finish()`, which returns the rows committed;
        `finish()` is called however the loop ends, so that what was put is committed.
      failures: has `add(path, kind, message)`, called for each image that could not be read.
      images: how many images `batches` holds (those not reached count as skipped).
      strict: the first image that cannot be read raises StrictError.
      stop: None, or an object whose `signal_name` becomes set when the run must stop after
        the batches in flight (`parallel.signals.StopRequest`).
      progress: None, or has `update(images, failed)`, called after each batch is handed to
        `compute`.
      clock: the seconds the loop's times are read from (a test hands in one it moves itself).

    Returns:
      Summary with `written`, `failed`, `skipped`, `interrupted` and the times set; the
      caller fills in what it knows (`discovered`, `already_done`, `output`).
    """
    summary = Summary()
    stage_clock = _StageClock(clock)
    stage = compute if hasattr(compute, "submit") else _Immediate(compute)
    in_flight = collections.deque()  # each batch submitted whose features are not back

    def put(completed):
        for features in completed:
            with stage_clock.stage("writer"):
                batch = in_flight.popleft()
                sink.put(batch.paths, batch.features_of_paths(features))

    reached, strict_error = 0, None
    try:
        iterator = iter(batches)
        while True:
            with stage_clock.stage("reader"):
                batch = next(iterator, None)
            if batch is None:
                break
            strict_error = _record_failures(batch.failures, failures, strict)
            if strict_error is not None:
                break
            summary.failed += len(batch.failures)
            if len(batch.paths):
                in_flight.append(batch)
                with stage_clock.stage("devices"):
                    completed = stage.submit(batch.images)
                put(completed)
            reached += len(batch.paths) + len(batch.failures)
            if progress is not None:
                progress.update(len(batch.paths) + len(batch.failures), summary.failed)
            if stop is not None and stop.signal_name is not None:
                summary.interrupted = True
                break
        # However the loop stopped (the end, a stop request, --strict), the batches handed to
        # the devices are written, as they are when each batch comes back at once.
        with stage_clock.stage("devices"):
            completed = stage.flush()
        put(completed)
        if strict_error is not None:
            raise strict_error
    finally:
        # However the loop ended, the batches already handed to the sink are committed.
        with stage_clock.stage("writer"):
            summary.written = sink.finish()
    summary.skipped = images - reached
    summary.seconds = stage_clock.elapsed()
    summary.device_seconds = stage_clock.totals["devices"]
    summary.reader_wait_seconds = stage_clock.totals["reader"]
    summary.writer_wait_seconds = stage_clock.totals["writer"]
    return summary


def log_stage_times(summary):
    """One log line: where the loop's time went (the devices, waiting for the reader, for the writer)."""
    log.info("%.1f s: devices %.1f s, waiting for the reader %.1f s, for the writer %.1f s",
             summary.seconds, summary.device_seconds, summary.reader_wait_seconds, summary.writer_wait_seconds)


def _record_failures(batch_failures, failures, strict):
    """Adds each failure to `failures`; with `strict`, stops at the first and returns its StrictError."""
    for failure in batch_failures:
        failures.add(failure.path, failure.kind, failure.message)
        if strict:
            return StrictError("--strict: %s: %s (%s)" % (failure.path, failure.message, failure.kind))
    return None


class _Immediate:
    """A compute function as a stage whose batches complete at once."""

    def __init__(self, compute):
        self._compute = compute

    def submit(self, images):
        return [self._compute(images)]

    def flush(self):
        return []


class WriterThread:
    """A sink that commits batches to a writer on a thread of its own, one batch at a time.

    `put` hands a batch over once the one before it is committed: the writer commits batch N while the
    devices compute batch N + 1, and never holds a backlog. So a kill (even SIGKILL) costs at most two
    batches of device work, the one being committed and the one on the devices; a queue of computed
    batches waiting for the writer would be lost with them (docs/failure-behaviour.md). When committing
    is slower than computing, the devices wait for the writer (the summary's "waiting for the writer").

    The writer needs `write(paths, features)`. A writer error is raised by the next `put` or by
    `finish`. A context manager: leaving the block finishes (commits what was put).
    """

    _DONE = object()

    def __init__(self, writer):
        self._writer = writer
        self._handed = threading.Condition()
        self._batch = None  # the batch handed over and not yet committed, or _DONE
        self._error = None
        self._finished = False
        self.rows_committed = 0
        self._thread = threading.Thread(target=self._loop, name="writer", daemon=True)
        self._thread.start()

    def _loop(self):
        while True:
            with self._handed:
                self._handed.wait_for(lambda: self._batch is not None)
                batch = self._batch
            if batch is self._DONE:
                return
            if self._error is None:  # after an error, batches are taken and dropped: put() never blocks forever
                try:
                    self._writer.write(*batch)
                    self.rows_committed += len(batch[0])
                except BaseException as error:  # handed to the main thread
                    self._error = error
            with self._handed:
                self._batch = None
                self._handed.notify_all()

    def _hand_over(self, batch):
        """Waits until the batch before is committed, then hands `batch` to the writer's thread."""
        with self._handed:
            self._handed.wait_for(lambda: self._batch is None)
            self._batch = batch
            self._handed.notify_all()

    def put(self, paths, features):
        """Hands a batch to the writer once the one before it is committed: `paths` (list of str), `features`
        float32 [len(paths), D]."""
        self._raise_if_failed()
        self._hand_over((paths, features))

    def finish(self):
        """Waits for every batch put to be committed; re-raises a writer error.

        Returns:
          int: rows committed through this sink.
        """
        self._stop()
        self._raise_if_failed()
        return self.rows_committed

    def _stop(self):
        if not self._finished:
            self._finished = True
            self._hand_over(self._DONE)
            self._thread.join()

    def _raise_if_failed(self):
        if self._error is not None:
            raise self._error

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        self._stop()


class _StageClock:
    """Wall time of the loop, and how much of it went to each stage, read from `clock` (seconds)."""

    def __init__(self, clock):
        self._clock = clock
        self._started = clock()
        self.totals = collections.defaultdict(float)

    @contextlib.contextmanager
    def stage(self, name):
        started = self._clock()
        try:
            yield
        finally:
            self.totals[name] += self._clock() - started

    def elapsed(self):
        return self._clock() - self._started
