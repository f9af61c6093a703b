"""The recall an index is built with: the exact top k of a few rows, found as the rows are added, against
what the index returns for them once built (recorded in index.json as recall_at_build)."""

import numpy as np

TIE = 1e-6  # scores this close to the k-th exact one are ties with it


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
        row left out: {"k", "queries", "recall", "against"}.

        Only rows count: with fewer than k + 1 rows, the places no row fills (id -1) are neither asked
        for nor found. A row found in place of an exact neighbour with the same score (identical rows,
        ties) is a hit: the exact top k is then any of them.
        """
        exact = self
        found, found_scores = index.search_ids(exact.queries, exact.k + 1)
        # ivfpq's scores are those of float16 vectors (to about 1e-3): ties cannot be told from its order.
        ties = index.kind != "ivfpq"
        hits = total = 0
        for row, (truth, truth_scores) in enumerate(zip(exact.ids(), exact._scores)):
            own = exact.self_ids[row]
            kept = [(neighbour, score) for neighbour, score in zip(truth, truth_scores)
                    if neighbour >= 0 and neighbour != own][:exact.k]
            if not kept:
                continue
            last = kept[-1][1] - TIE if ties else np.inf
            wanted = {neighbour for neighbour, _ in kept}
            found_row = [(neighbour, score) for neighbour, score in zip(found[row], found_scores[row])
                         if neighbour >= 0 and neighbour != own][:len(kept)]
            hits += sum(neighbour in wanted or score >= last for neighbour, score in found_row)
            total += len(kept)
        return {"k": exact.k, "queries": len(exact.queries), "recall": round(hits / total, 4) if total else None,
                "against": "exact inner product over all %d rows in %d dimensions"
                           % (len(index.paths), index.meta["feature_size"])}
