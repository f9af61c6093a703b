"""Exact search: the inner product of every row, by numpy's matrix product over the vectors faiss holds.

    rows = stored_matrix(flat_index)               # float32 [N, D], a view of IndexFlatIP's storage (no copy)
    ids, scores = top_k(rows, queries, k)          # int64 [Q, k], float32 [Q, k], best first

Why not IndexFlatIP.search: for fewer than 20 queries faiss compares them one at a time on one core
(no BLAS), and for batches its BLAS path took about 4 times the CPU of numpy's matrix product for the
same work on this project's machine (issue 24; docs/benchmarks.md#search measures both). Memory: one
block of SCORES_BYTES of scores at a time, never Q x N at once.
"""

import numpy as np

SCORES_BYTES = 16 << 20  # scores of one block of queries against every row (argpartition's int64 ids: twice that)


def stored_matrix(flat_index):
    """float32 [ntotal, d]: the vectors of a faiss IndexFlat, as a view of its own storage (read-only use).

    Made again after every add: faiss may move its storage when it grows.
    """
    import faiss
    count, dims = flat_index.ntotal, flat_index.d
    if count == 0:
        return np.zeros((0, dims), dtype=np.float32)
    return faiss.rev_swig_ptr(flat_index.get_xb(), count * dims).reshape(count, dims)


def top_k(rows, queries, k):
    """The k rows of highest inner product with each query.

    Args:
      rows: float32 [N, D].
      queries: float32 [Q, D].
      k: neighbours per query, >= 1.

    Returns:
      (int64 [Q, k], float32 [Q, k]): rows best first (ties by row number) and their inner products;
      -1 and -inf where N < k.
    """
    count = len(rows)
    ids = np.full((len(queries), k), -1, dtype=np.int64)
    scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    if count == 0:
        return ids, scores
    take = min(k, count)
    per_block = max(1, SCORES_BYTES // (4 * count))
    for start in range(0, len(queries), per_block):
        block = queries[start:start + per_block] @ rows.T                              # [B, N]
        # The `take` largest, at the end of each row (no negated copy of the block).
        best = np.argpartition(block, count - take, axis=1)[:, count - take:] if take < count else \
            np.broadcast_to(np.arange(count), block.shape)
        best_scores = np.take_along_axis(block, best, axis=1)
        order = np.lexsort((best, -best_scores), axis=1)  # highest first, then the lower row
        ids[start:start + len(block), :take] = np.take_along_axis(best, order, axis=1)
        scores[start:start + len(block), :take] = np.take_along_axis(best_scores, order, axis=1)
    return ids, scores
