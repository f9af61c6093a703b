"""Image files -> decoded uint8 batches, in order, decoded on a thread pool ahead of the devices.

    relative paths ("a/b.jpg", from parallel.inputs.manifest)
    paths --ImageReader(batch_size, workers, prefetch_batches)--> Batch(paths, images, failures), ...
        images: uint8 [N, H, W, 3] RGB, one row per decoded image, in input order

Each worker decodes one image at a time with `parallel.inputs.decode.decode_row` (the decode rules and
the failure kinds are there), or with the `decode` callable given to ImageReader.

While the caller runs one batch on the devices, the next `prefetch_batches` batches are being
decoded; at most `(prefetch_batches + 1) * batch_size` images are submitted and not yet
handed to the caller, so memory does not grow with the number of paths. An image that
cannot be read never stops the run and never costs its batch-mates their rows: it becomes a
`Failure` of its batch.
"""

import collections
import dataclasses
import functools
import os
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from parallel.inputs.decode import MAX_PIXELS, check_image_arguments, decode_row, failure_of
from parallel.inputs.locations import locate
from parallel.inputs.remote import StoreUnavailable
from parallel.locations import is_url

_THREAD_PREFIX = "ImageReader"


@dataclasses.dataclass(frozen=True)
class Failure:
    """An image of a batch that could not be used.

    Attributes:
      path: the path as given to ImageReader (relative to its root).
      kind: one of parallel.inputs.decode.KINDS.
      message: one line saying what went wrong.
    """

    path: str
    kind: str
    message: str


@dataclasses.dataclass
class Batch:
    """One chunk of `batch_size` input paths, decoded.

    Attributes:
      paths: the images that decoded, in input order.
      images: uint8 [S, H, W, 3] RGB: the whole step, S its length in an uninterrupted run of
        the job, whichever of its images are computed now. A slot whose image failed, or is not
        computed now (it has a row already), holds zeros: so which images share a step, and
        the shape the devices compute, never depend on what failed or was done before.
      failures: the other images of the chunk, in input order.
      rows: int [len(paths)], the slot of images holding each of paths; None when they are all
        of its rows, in order (S == len(paths)).
    """

    paths: list
    images: np.ndarray
    failures: list
    rows: object = None

    def features_of_paths(self, features):
        """The rows of `features` (float32 [S, D], computed from `images`) that are `paths`'."""
        return features if self.rows is None else features[self.rows]


class ImageReader:
    """Decoded batches of the images at `paths`, in order, decoded ahead on a thread pool.

        with ImageReader(root, paths, batch_size=48) as reader:
            for batch in reader:          # len(reader) batches
                features = run(batch.images)   # meanwhile the next batches decode
                write(batch.paths, features)
                log_failures(batch.failures)

    Batch i holds paths[i * batch_size:(i + 1) * batch_size] (the last may be shorter), or,
    with `chunks`, the next chunks[i] paths; each path is in its `paths` or its `failures`.
    Decoding runs on `workers` threads (Pillow releases the GIL while decoding and resizing);
    at most `(prefetch_batches + 1) * batch_size` images are submitted and not yet yielded.
    Leaving the `with` block (or close()) cancels what is pending and waits for the threads to
    end; a loop left early without `with` does the same as soon as its iterator is dropped.
    Each iteration starts from the first path.

    Each worker runs `decode` for one image of a chunk; a test or a caller can hand in its own
    (slow, failing, counting, or one that wraps decode_row):

        def slow(path, images, row, size, resize, max_pixels):
            time.sleep(0.1)
            return decode_row(path, images, row, size, resize, max_pixels)

        ImageReader(root, paths, batch_size=4, decode=slow)
    """

    def __init__(self, root, paths, batch_size, size=(224, 224), resize="crop", workers=None,
                 prefetch_batches=2, max_pixels=MAX_PIXELS, *, decode=decode_row, chunks=None, steps=None,
                 versions=None):
        """Checks the arguments; no thread starts before iteration.

        Args:
          root: folder the paths are relative to, str or Path; or a prefix URL (s3://b/photos/).
          paths: relative paths ("a/b.jpg"), e.g. from `parallel.inputs.manifest.discover_images`,
            or URLs (fetched through `parallel.inputs.remote`, retried; see `locate`).
          batch_size: input paths per batch (>= 1).
          size: (H, W) of every image.
          resize: "crop" or "stretch", or a `parallel.inputs.resize.Resize` (with the filter and short
            side of a model's spec; see parallel.inputs.resize).
          workers: decode threads (>= 1); None: os.cpu_count().
          prefetch_batches: batches decoded ahead of the one the caller holds (>= 1).
          max_pixels: larger images fail with kind "too_large".
          decode: what a worker runs for each image, `decode(path, images, row, size, resize,
            max_pixels)`, with `path` joined to `root` (`parallel.inputs.locations.locate`), `images` the chunk's uint8
            [len(chunk), H, W, 3] and `size`, `resize` (a Resize), `max_pixels` as checked here. It writes
            `images[row]` and returns None, or returns (kind, message) for an image that cannot
            be used. An exception it raises is a failure of that image only, as
            `parallel.inputs.decode.failure_of` words it. Default: `parallel.inputs.decode.decode_row`.
          chunks: None (batches of `batch_size` paths), or the lengths of the consecutive
            batches `paths` is cut into, each 1 .. batch_size, adding up to len(paths): the
            engine's steps at fixed positions of a job (see `step_lengths`).
          steps: None, or for each chunk (its step's length S, the slot 0 .. S - 1 of each of its
            paths): each batch is then the whole step, its other slots zeros (see `step_layout`
            and `Batch`).
          versions: None, or one str per path: the version (ETag) the job recorded for the
            object (its manifest's etag column; "" for a file, or for any version). A URL is
            then read only as that version (`parallel.inputs.remote.fetch`): one replaced
            since fails as kind "changed", so no row is of a version the job did not record.
            Used by the default `decode`; a `decode` handed in reads as it will.

        Raises:
          ValueError: a bad argument, named with the value received.
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError("batch_size must be at least 1; got %r" % (batch_size,))
        if workers is None:
            workers = os.cpu_count() or 1
        if not isinstance(workers, (int, np.integer)) or workers < 1:
            raise ValueError("workers must be at least 1; got %r" % (workers,))
        if not isinstance(prefetch_batches, (int, np.integer)) or prefetch_batches < 1:
            raise ValueError("prefetch_batches must be at least 1; got %r" % (prefetch_batches,))
        if not callable(decode):
            raise ValueError("decode must be callable; got %r" % (decode,))
        self.paths = list(paths)
        self.versions = None if versions is None else list(versions)
        if self.versions is not None and len(self.versions) != len(self.paths):
            raise ValueError("versions must give one version per path (%d); got %d"
                             % (len(self.paths), len(self.versions)))
        self.chunks = self._check_chunks(chunks, len(self.paths), int(batch_size))
        if steps is not None and [len(slots) for _, slots in steps] != self.chunks:
            raise ValueError("steps must give a slot to each path of each chunk; got %d steps for %d chunks"
                             % (len(steps), len(self.chunks)))
        self.steps = steps
        self.size, self.resize, self.max_pixels = check_image_arguments(size, resize, max_pixels)
        self.root = root if is_url(root) else os.path.abspath(os.fspath(root))
        self.batch_size = int(batch_size)
        self.workers = int(workers)
        self.prefetch_batches = int(prefetch_batches)
        self.decode = decode
        self.executor = None  # the pool of the current iteration
        self._iteration = None  # weak reference to the current iteration's generator
        self._closed = False

    @staticmethod
    def _check_chunks(chunks, path_count, batch_size):
        """The batch lengths: `chunks` checked, or batch_size each (the last shorter)."""
        if chunks is None:
            return [batch_size] * (path_count // batch_size) + ([path_count % batch_size] if path_count % batch_size
                                                                 else [])
        chunks = [int(length) for length in chunks]
        if any(not 1 <= length <= batch_size for length in chunks) or sum(chunks) != path_count:
            raise ValueError("chunks must be lengths of 1 .. batch_size=%d adding up to the %d paths; got %d chunks "
                             "adding up to %d" % (batch_size, path_count, len(chunks), sum(chunks)))
        return chunks

    def __len__(self):
        """Number of batches."""
        return len(self.chunks)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Cancels pending decodes and waits for the worker threads to end. Idempotent."""
        self._closed = True
        self._stop_iteration()

    def __iter__(self):
        if self._closed:
            raise ValueError("this ImageReader is closed; make a new one to read again")
        self._stop_iteration()
        batches = self._batches()
        self._iteration = weakref.ref(batches)
        return batches

    def _stop_iteration(self):
        batches = self._iteration() if self._iteration is not None else None
        self._iteration = None
        if batches is not None:
            try:
                batches.close()  # runs its `finally`: cancel, shut down
            except ValueError:  # closed from another thread while it runs
                pass
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)

    def _batches(self):
        executor = ThreadPoolExecutor(self.workers, thread_name_prefix=_THREAD_PREFIX)
        self.executor = executor
        pending = collections.deque()  # (start, images, futures) of submitted chunks, oldest first
        next_chunk, next_start = 0, 0
        try:
            while pending or next_chunk < len(self.chunks):
                # The caller has handed back the previous batch: top up to prefetch + 1 chunks,
                # then wait for the oldest. While the caller holds a batch, prefetch are decoding.
                while len(pending) <= self.prefetch_batches and next_chunk < len(self.chunks):
                    step = self.steps[next_chunk] if self.steps is not None else None
                    pending.append(self._submit(executor, next_start, self.chunks[next_chunk], step))
                    next_start += self.chunks[next_chunk]
                    next_chunk += 1
                yield self._collect(*pending.popleft())
        finally:
            for submitted in pending:
                for future in submitted[2]:
                    future.cancel()
            executor.shutdown(wait=True, cancel_futures=True)

    def _submit(self, executor, start, length, step=None):
        chunk = self.paths[start:start + length]
        if step is None:
            images, slots = np.empty((len(chunk),) + self.size + (3,), np.uint8), range(len(chunk))
        else:  # the whole step; slots of images not computed now stay zeros
            images, slots = np.zeros((step[0],) + self.size + (3,), np.uint8), step[1]
        futures = [executor.submit(self._decoder(location, start + number), location, images, row, self.size,
                                   self.resize, self.max_pixels)
                   for number, (row, location) in enumerate(zip(slots, (locate(self.root, path) for path in chunk)))]
        return start, images, futures, (None if step is None else list(slots))

    def _decoder(self, location, position):
        """What decodes the image at `location` (paths[position]): `decode`; by default, for a URL, its
        fetch (pinned to its recorded version, when `versions` gives one) and decode."""
        if self.decode is decode_row and is_url(location):
            from parallel.inputs.remote import decode_url_row
            if self.versions is not None and self.versions[position]:
                return functools.partial(decode_url_row, version=self.versions[position])
            return decode_url_row
        return self.decode

    def _collect(self, start, images, futures, slots):
        return collect_batch(self.paths[start:start + len(futures)], images, futures, slots)


def collect_batch(paths, images, futures, slots=None):
    """The Batch of decoded images once their decodes are done; the slots of images that failed hold zeros.

    The step keeps its shape: a model's rounding may depend on how many images a device computes
    at once, so the rows of an image's step-mates never depend on whether it could be read.

    Args:
      paths: the images' keys.
      images: uint8 [S, H, W, 3], slot `slots[i]` filled by `futures[i]`, the others zeros.
      futures: a future per path of its decode (None, or the (kind, message) of a failure).
      slots: the slot of each path in `images`; None: 0 .. len(paths) - 1 (S == len(paths)).
    """
    slots = range(len(paths)) if slots is None else slots
    kept, failures, rows = [], [], []
    for slot, path, future in zip(slots, paths, futures):
        try:
            failed = future.result()
        except StoreUnavailable:  # no image's failure: the run stops, and resumes once the store is back
            raise
        except Exception as error:  # decode_row does not raise; a decoder handed in may
            failed = failure_of(error)
        if failed is None:
            kept.append(path)
            rows.append(slot)
        else:
            images[slot] = 0  # whatever a failed decode left there: the step computes the same bytes
            failures.append(Failure(path, *failed))
    whole = len(rows) == len(images) and rows == list(range(len(images)))
    return Batch(paths=kept, images=images, failures=failures, rows=None if whole else np.asarray(rows, np.int64))


def step_layout(positions, step_size, total):
    """Each step's length in an uninterrupted run of a job of `total` images, and the slots of `positions` in it.

    Args:
      positions: increasing int positions, in the job's image list, of the images to compute.
      step_size: images per step (the host batch).
      total: the job's images (its last step is the shorter one).

    Returns:
      list of (length, [slot, ...]), one per step that holds any of `positions` (ImageReader's
      `steps`, beside `step_lengths`' chunks).
    """
    layout = []
    for position in positions:
        step, slot = divmod(int(position), int(step_size))
        if position >= total:
            raise ValueError("position %d is not in a job of %d images" % (position, total))
        if not layout or layout[-1][0] != step:
            layout.append((step, min(step_size, total - step * step_size), []))
        layout[-1][2].append(slot)
    return [(length, slots) for _, length, slots in layout]


def step_lengths(positions, step_size):
    """How a job's images still to compute fall into steps that start at fixed positions of the job.

    Step k of a job holds its images k * step_size .. (k + 1) * step_size - 1, whichever of them
    are computed now: so which images share a step (and a model's rounding may depend on how many
    do) never depends on where an earlier run stopped, which images failed before, or how the job
    was cut into shards.

    Args:
      positions: increasing int positions, in the job's image list, of the images to compute.
      step_size: images per step (the host batch).

    Returns:
      list of int: the lengths of the consecutive batches of those images (ImageReader's `chunks`).
    """
    steps = np.asarray(positions, dtype=np.int64) // int(step_size)
    if not len(steps):
        return []
    if np.any(np.diff(steps) < 0):
        raise ValueError("positions must be increasing; got %r" % (list(positions)[:10],))
    return np.unique(steps, return_counts=True)[1].tolist()
