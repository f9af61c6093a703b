"""The recall an index is built with: the exact top k of a few rows, found as the rows are added, against
what the index returns for them once built (recorded in index.json as recall_at_build)."""

import numpy as np


class ExactNeighbours:
    """The exact top-k rows of a few queries, updated batch by batch as the index is filled."""

    def __init__(self, queries, k):
        self.queries, self.k = queries, k
        self._scores = np.full((len(queries), k + 1), -np.inf, dtype=np.float32)
        self._ids = np.full((len(queries), k + 1), -1, dtype=np.int64)
        self.self_ids = np.full(len(queries), -1, dtype=np.int64)

    def update(self, batch, first_row):
        scores = self.queries @ batch.T
        ids = np.broadcast_to(np.arange(first_row, first_row + len(batch)), scores.shape)
        # The query's own row (identical vector) is the one scoring ~1 with itself: remembered to be left out.
        for query, row in zip(*np.nonzero(scores >= 1 - 1e-5)):
            if self.self_ids[query] < 0 and np.array_equal(batch[row], self.queries[query]):
                self.self_ids[query] = first_row + row
        all_scores = np.concatenate([self._scores, scores], axis=1)
        all_ids = np.concatenate([self._ids, ids], axis=1)
        top = np.argsort(-all_scores, axis=1, kind="stable")[:, :self.k + 1]
        self._scores = np.take_along_axis(all_scores, top, axis=1)
        self._ids = np.take_along_axis(all_ids, top, axis=1)

    def ids(self):
        return self._ids

    def measure(self, index):
        """recall@k of `index` (built) against the exact neighbours found while filling it, each query's own
        row left out: {"k", "queries", "recall", "against"}."""
        exact = self
        found = index.search_ids(exact.queries, exact.k + 1)[0]
        hits = total = 0
        for row, truth in enumerate(exact.ids()):
            truth = [neighbour for neighbour in truth if neighbour != exact.self_ids[row]][:exact.k]
            found_row = [neighbour for neighbour in found[row] if neighbour != exact.self_ids[row]][:exact.k]
            hits += len(set(truth) & set(found_row))
            total += len(truth)
        return {"k": exact.k, "queries": len(exact.queries), "recall": round(hits / total, 4) if total else None,
                "against": "exact inner product over all %d rows in %d dimensions"
                           % (len(index.paths), index.meta["feature_size"])}
