"""Images that arrive as a stream of (key, bytes) -> decoded uint8 batches, in order, overlapped.

    items: (key, bytes or ImageError), ... e.g. parallel.inputs.tar_stream.stream_members(tar, index)
    items --StreamReader(batch_size, workers, prefetch_batches)--> Batch(paths, images, failures), ...

The reader of a tar: its members are known only as the tar is read, so the batches cannot be cut
from a list up front (parallel.inputs.reader). They are the next `batch_size` items each, in
order: for a stream that is a whole shard, steps start at the fixed positions 0, batch_size,
2 * batch_size, ... of the shard's members, whatever the number of processes.

One thread reads the stream, a chunk ahead of the decoding; `prefetch_batches` chunks decode on
the pool of `workers` threads (`parallel.inputs.decode.decode_bytes_row`, the rules of a file's
decode) while the caller computes the batch it holds. Memory: at most `prefetch_batches + 3`
chunks of bytes and their decoded images (held, decoding, queued, being read). An error of the stream itself
(not an image's: those are items of kind ImageError) is raised to the caller.
"""

import collections
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from parallel.inputs.decode import MAX_PIXELS, check_image_arguments, decode_bytes_row
from parallel.inputs.reader import collect_batch

_THREAD_PREFIX = "StreamReader"
_END = object()


class StreamReader:
    """Decoded batches of the images a stream of (key, bytes) items brings, in order.

        with StreamReader(stream_members(tar, index), batch_size=48) as reader:
            for batch in reader:          # Batch(paths=keys, images uint8 [N, H, W, 3], failures)
                ...

    Iterable once. Leaving the `with` block (or close()) stops the stream's thread and the decodes.
    """

    def __init__(self, items, batch_size, size=(224, 224), resize="crop", workers=None, prefetch_batches=2,
                 max_pixels=MAX_PIXELS, done=frozenset()):
        """Checks the arguments; no thread starts before iteration.

        Args:
          items: iterable of (key, data), data bytes or an ImageError.
          batch_size, size, resize, workers, prefetch_batches, max_pixels: as ImageReader's.
          done: keys computed already (a resumed attempt's rows): read past, not decoded; their slots in
            their batch hold zeros, so that each batch is the step of an uninterrupted read of the stream,
            and a batch of only such keys is not given at all.
        """
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError("batch_size must be at least 1; got %r" % (batch_size,))
        workers = (os.cpu_count() or 1) if workers is None else workers
        if not isinstance(workers, (int, np.integer)) or workers < 1:
            raise ValueError("workers must be at least 1; got %r" % (workers,))
        if not isinstance(prefetch_batches, (int, np.integer)) or prefetch_batches < 1:
            raise ValueError("prefetch_batches must be at least 1; got %r" % (prefetch_batches,))
        self.items = items
        self.batch_size, self.workers, self.prefetch_batches = int(batch_size), int(workers), int(prefetch_batches)
        self.size, self.resize, self.max_pixels = check_image_arguments(size, resize, max_pixels)
        self.count = 0  # items read so far
        self.done, self.done_count = done, 0  # keys read past, and how many were
        self._stop = threading.Event()
        self._thread = self._executor = None
        self._started = False

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Stops reading the stream and decoding; waits for the threads. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def __iter__(self):
        if self._started:
            raise ValueError("a StreamReader is read once; make a new one to read the stream again")
        self._started = True
        return self._batches()

    def _read_ahead(self, chunks):
        """The stream's thread: chunks of batch_size items into `chunks`, then _END (or the stream's error)."""
        chunk = []
        try:
            for item in self.items:
                chunk.append(item)
                if len(chunk) == self.batch_size:
                    if not self._put(chunks, chunk):
                        return
                    chunk = []
            if chunk and not self._put(chunks, chunk):
                return
            self._put(chunks, _END)
        except BaseException as error:  # handed to the caller, in order
            self._put(chunks, error)

    def _put(self, chunks, item):
        while not self._stop.is_set():
            try:
                chunks.put(item, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    def _batches(self):
        chunks = queue.Queue(maxsize=1)
        self._thread = threading.Thread(target=self._read_ahead, args=(chunks,), name=_THREAD_PREFIX, daemon=True)
        self._thread.start()
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix=_THREAD_PREFIX)
        pending = collections.deque()  # (keys, images, futures), oldest first
        ended = False
        try:
            while True:
                while not ended and len(pending) <= self.prefetch_batches:  # as ImageReader: prefetch ahead
                    chunk = chunks.get()
                    if chunk is _END:
                        ended = True
                    elif isinstance(chunk, BaseException):
                        raise chunk
                    else:
                        submitted = self._submit(chunk)
                        if submitted[0]:  # a chunk of keys all done is no step to compute
                            pending.append(submitted)
                if not pending:
                    return
                yield collect_batch(*pending.popleft())
        finally:
            for _, _, futures, _ in pending:
                for future in futures:
                    future.cancel()
            self.close()

    def _submit(self, chunk):
        """(the keys to compute, the step's images, their decodes' futures, their slots in the step)."""
        todo = [(slot, key, data) for slot, (key, data) in enumerate(chunk) if key not in self.done]
        self.count += len(chunk)
        self.done_count += len(chunk) - len(todo)
        allocate = np.empty if len(todo) == len(chunk) else np.zeros  # the slots of keys done hold zeros
        images = allocate((len(chunk),) + self.size + (3,), np.uint8)
        futures = [self._executor.submit(decode_bytes_row, data, images, slot, self.size, self.resize,
                                         self.max_pixels) for slot, _, data in todo]
        return [key for _, key, _ in todo], images, futures, [slot for slot, _, _ in todo]

