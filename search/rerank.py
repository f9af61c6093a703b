"""The full vectors an ivfpq index keeps on disk, and the re-ranking of a search's candidates with them.

    <index>/vectors.f16   every row's normalised vector (centred, norm 1), float16 [rows, D],
                          little-endian, no header: 2 D bytes a row (8 KB for fc7)

The PCA of an ivfpq index keeps only what its 256 axes hold; the exact neighbours are those of the
full D dimensions. So a search asks the IVF-PQ for RERANK x k candidates and orders them by their
full vectors, read from this file: RERANK x k rows a query (by pread: never mapped into the
process), never the whole file in memory. float16 keeps the 3 leading digits of each component: cosines to about 1e-3.
"""

import contextlib
import os

import numpy as np

FULL_VECTORS = "vectors.f16"
HALF = np.dtype("<f2")
QUERIES_AT_ONCE = 8  # queries whose candidates are decoded at once: 8 x 30 x 4096 floats = 3.9 MB


@contextlib.contextmanager
def appending(path, rows_held, feature_size):
    """Yields write(unit float32 [B, D]) appending to `path` after its first `rows_held` rows (what an
    add that stopped part-way left after them is cut); flushed to disk on leaving. `path` None: a
    write that keeps nothing (an index without full vectors)."""
    if path is None:
        yield lambda unit: None
        return
    with open(path, "ab") as file:
        file.truncate(rows_held * feature_size * HALF.itemsize)
        yield lambda unit: file.write(np.asarray(unit, dtype=HALF).tobytes())
        file.flush()
        os.fsync(file.fileno())


def map_full_vectors(path, rows, feature_size, folder):
    """The full vectors in `path` (`FullVectors`), None for an empty index.

    Raises:
      SearchError: the file is missing or holds fewer rows than the index.
    """
    from search.kinds import SearchError
    try:
        size = os.stat(path).st_size
    except OSError:
        size = -1
    if size < rows * feature_size * HALF.itemsize:
        raise SearchError("index=%s is damaged: %s holds %d bytes, %d rows of %d floats expected: build it again"
                          % (folder, os.path.basename(path), max(size, 0), rows, feature_size))
    return FullVectors(path, rows, feature_size) if rows else None


class FullVectors:
    """float16 [rows, D] in a file, rows read by `pread` when indexed: `full[ids]` -> float16 [len(ids), D].

    Not memory-mapped: the rows a search reads (and the pages around them, which the kernel maps
    with each fault) would stay in the process's resident memory until the whole file did; read
    this way they are the page cache's, never the process's.
    """

    def __init__(self, path, rows, feature_size):
        self.shape, self._row_bytes = (rows, feature_size), feature_size * HALF.itemsize
        self._file = open(path, "rb", buffering=0)

    def __getitem__(self, rows):
        rows = np.asarray(rows, dtype=np.int64).ravel()
        out = np.empty((len(rows), self.shape[1]), dtype=HALF)
        if not len(rows):
            return out
        if rows.min() < 0 or rows.max() >= self.shape[0]:
            raise IndexError("rows %d .. %d of %d" % (rows.min(), rows.max(), self.shape[0]))
        buffer = memoryview(out).cast("B")
        descriptor, size = self._file.fileno(), self._row_bytes
        if rows[-1] - rows[0] == len(rows) - 1 and np.all(np.diff(rows) == 1):  # a block: one read
            _read_fully(descriptor, buffer, int(rows[0]) * size)
            return out
        for position, row in enumerate(rows.tolist()):
            _read_fully(descriptor, buffer[position * size:(position + 1) * size], row * size)
        return out

    def close(self):
        self._file.close()


def _read_fully(descriptor, buffer, offset):
    while len(buffer):
        done = os.preadv(descriptor, [buffer], offset)
        if done <= 0:
            raise OSError("%s ends before its rows do" % FULL_VECTORS)
        buffer, offset = buffer[done:], offset + done


def rerank(full, unit_vectors, candidates, k):
    """The k best of each query's candidate rows, scored by their full vectors.

    Args:
      full: float16 [N, D] (`FullVectors`, or an array), the rows' normalised vectors.
      unit_vectors: float32 [Q, D], the normalised queries.
      candidates: int64 [Q, C], candidate rows of each query (-1: none).
      k: neighbours per query.

    Returns:
      (int64 [Q, k], float32 [Q, k]): rows best first and their cosines; -1 and -inf where a query
      has fewer than k candidates.
    """
    from search.kinds import import_faiss
    feature_size = full.shape[1]
    # faiss's SIMD decoder: float16 -> float32 three times as fast as numpy's astype (measured, AVX2).
    halves = import_faiss().ScalarQuantizer(feature_size, import_faiss().ScalarQuantizer.QT_fp16)
    ids = np.full((len(unit_vectors), k), -1, dtype=np.int64)
    scores = np.full((len(unit_vectors), k), -np.inf, dtype=np.float32)
    for start in range(0, len(unit_vectors), QUERIES_AT_ONCE):
        block = candidates[start:start + QUERIES_AT_ONCE]
        valid = block >= 0
        codes = np.ascontiguousarray(full[np.where(valid, block, 0).ravel()]).view(np.uint8)  # [B C, 2 D]
        gathered = halves.decode(codes).reshape(block.shape + (feature_size,))                # [B, C, D]
        exact = np.matmul(gathered, unit_vectors[start:start + len(block), :, None])[:, :, 0]
        exact[~valid] = -np.inf
        order = np.argsort(-exact, axis=1, kind="stable")[:, :k]
        taken = np.take_along_axis(exact, order, axis=1)
        found = np.where(np.isfinite(taken), np.take_along_axis(block, order, axis=1), -1)
        ids[start:start + len(block), :order.shape[1]] = found
        scores[start:start + len(block), :order.shape[1]] = taken
    return ids, scores
