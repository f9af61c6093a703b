"""Synthetic vectors shaped like fc7 after the ReLU, for the search benchmarks (bench_search.py).

How they are made (seeded, the same for the same arguments, generated a block at a time so that
a million rows never sit in memory):

    basis      float32 [64, 4096], N(0, 1/64): a 64-dimensional subspace of the 4096 dimensions
    centres    float32 [2000, 64], N(0, 1): 2,000 clusters in that subspace
    a row      pre = (centre[k] + 0.5 N(0, I_64)) @ basis + 0.25 N(0, I_4096), k uniform among the clusters
               row = max(0, pre - 0.5)   (the ReLU: about 2/3 of the values are 0, all >= 0)
    near-copy  one row in 100 (row i with i % 100 == 1) is the row before it made again from the same
               `pre` plus 0.05 N(0, I_4096), then the ReLU: a near-duplicate, cosine about 0.99

Real fc7 features are not this, but they share what matters to an index: non-negative, sparse after the
ReLU, clustered, most of their variance in far fewer dimensions than 4096, and noisy in all of them.
"""

import numpy as np

DIMS = 4096
SUBSPACE = 64
CENTRES = 2000
BLOCK = 1000


def _model(seed):
    rng = np.random.default_rng(seed)
    basis = (rng.standard_normal((SUBSPACE, DIMS)) / np.sqrt(SUBSPACE)).astype(np.float32)
    centres = rng.standard_normal((CENTRES, SUBSPACE)).astype(np.float32)
    return basis, centres


def block(seed, index, basis=None, centres=None, copies=True):
    """Rows index * BLOCK .. (index + 1) * BLOCK - 1: float32 [BLOCK, DIMS]."""
    if basis is None:
        basis, centres = _model(seed)
    rng = np.random.default_rng([seed, index])
    labels = rng.integers(0, CENTRES, BLOCK)
    latent = centres[labels] + 0.5 * rng.standard_normal((BLOCK, SUBSPACE), dtype=np.float32)
    pre = latent @ basis + 0.25 * rng.standard_normal((BLOCK, DIMS), dtype=np.float32)
    if copies:
        pre[1::100] = pre[0::100] + 0.05 * rng.standard_normal((len(pre[1::100]), DIMS), dtype=np.float32)
    return np.maximum(pre - 0.5, 0, dtype=np.float32)


def batches(rows, seed=0, copies=True):
    """Yields (paths, float32 [B, DIMS]) for rows 0 .. rows - 1, paths "synthetic/NNNNNNN.jpg"."""
    basis, centres = _model(seed)
    for index in range((rows + BLOCK - 1) // BLOCK):
        start = index * BLOCK
        vectors = block(seed, index, basis, centres, copies)[:rows - start]
        yield ["synthetic/%07d.jpg" % row for row in range(start, start + len(vectors))], vectors


def queries(count, seed=0):
    """`count` new rows of the same distribution (another seed stream, no near-copies): float32 [count, DIMS]."""
    basis, centres = _model(seed)
    parts = [block(seed, 10 ** 6 + index, basis, centres, copies=False)
             for index in range((count + BLOCK - 1) // BLOCK)]
    return np.concatenate(parts)[:count]


class Source:
    """`rows` synthetic rows as a `search.vectors.OutputVectors`-like source: what `Index.build(source=...)` reads."""

    def __init__(self, rows, seed=0):
        self.output, self.format, self.count, self.feature_size = "synthetic", "synthetic", rows, DIMS
        self.settings = {"layer": "relu7", "synthetic": "fc7_like seed %d" % seed}
        self.complete, self._seed = True, seed

    def batches(self, batch_rows=BLOCK, skip=None):
        for paths, vectors in batches(self.count, self._seed):
            yield paths, vectors
