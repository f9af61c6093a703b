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

These rows are easy: 99 % of each row's exact top 10 come from its own generating cluster. The
`hard` generator (`Source(rows, generator="hard")`) is fc7 before the ReLU, dense with both signs, and
harder for an index in every way we could name:

    basis      float32 [128, 4096], N(0, 1/128); shared float32 [8, 4096], N(0, 4/8): a low-rank part
               every row has, whatever its cluster
    centres    float32 [2000, 128], N(0, 1), drawn with Zipf weights 1/(rank+1): clusters of uneven sizes
               (the largest about 1/8 of the rows, most a few dozen)
    a row      latent = centre[k] + 0.9 N(0, I_128): clusters that overlap
               pre = latent @ basis + N(0, I_8) @ shared + 0.35 N(0, I_4096); the row is `pre` (no ReLU)
    hubs       2 % of rows have latent x 0.1: near the centre, a neighbour of many
    continuum  rows 500-549 of each block of 1,000 are a chain: each the previous plus 0.45 N(0, I_4096),
               near-copies of falling similarity (cosine about 0.98 a step, 0.6 across the chain)
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


HARD_SUBSPACE, HARD_SHARED = 128, 8


def _hard_model(seed):
    rng = np.random.default_rng([seed, 24])
    basis = (rng.standard_normal((HARD_SUBSPACE, DIMS)) / np.sqrt(HARD_SUBSPACE)).astype(np.float32)
    shared = (rng.standard_normal((HARD_SHARED, DIMS)) * np.sqrt(4 / HARD_SHARED)).astype(np.float32)
    centres = rng.standard_normal((CENTRES, HARD_SUBSPACE)).astype(np.float32)
    weights = 1 / np.arange(1, CENTRES + 1)
    return basis, shared, centres, weights / weights.sum()


def hard_block(seed, index, model=None, copies=True):
    """Rows index * BLOCK .. (index + 1) * BLOCK - 1 of the hard generator: float32 [BLOCK, DIMS]."""
    basis, shared, centres, weights = model or _hard_model(seed)
    rng = np.random.default_rng([seed, index, 24])
    latent = centres[rng.choice(CENTRES, BLOCK, p=weights)] + 0.9 * rng.standard_normal((BLOCK, HARD_SUBSPACE),
                                                                                          dtype=np.float32)
    latent[rng.random(BLOCK) < 0.02] *= 0.1  # hubs
    pre = (latent @ basis + rng.standard_normal((BLOCK, HARD_SHARED), dtype=np.float32) @ shared
           + 0.35 * rng.standard_normal((BLOCK, DIMS), dtype=np.float32))
    if copies:
        for row in range(501, 550):  # the continuum: each the one before, a little changed
            pre[row] = pre[row - 1] + 0.45 * rng.standard_normal(DIMS, dtype=np.float32)
    return pre


def _blocks(generator, seed, copies):
    """block(index) of `generator` ("fc7_like" or "hard"), its model made once."""
    if generator == "hard":
        model = _hard_model(seed)
        return lambda index: hard_block(seed, index, model, copies)
    basis, centres = _model(seed)
    return lambda index: block(seed, index, basis, centres, copies)


def batches(rows, seed=0, copies=True, generator="fc7_like"):
    """Yields (paths, float32 [B, DIMS]) for rows 0 .. rows - 1, paths "synthetic/NNNNNNN.jpg"."""
    make = _blocks(generator, seed, copies)
    for index in range((rows + BLOCK - 1) // BLOCK):
        start = index * BLOCK
        vectors = make(index)[:rows - start]
        yield ["synthetic/%07d.jpg" % row for row in range(start, start + len(vectors))], vectors


def queries(count, seed=0, generator="fc7_like"):
    """`count` new rows of the same distribution (another seed stream, no near-copies): float32 [count, DIMS]."""
    make = _blocks(generator, seed, copies=False)
    return np.concatenate([make(10 ** 6 + index) for index in range((count + BLOCK - 1) // BLOCK)])[:count]


class Source:
    """`rows` synthetic rows as a `search.vectors.OutputVectors`-like source: what `Index.build(source=...)` reads."""

    def __init__(self, rows, seed=0, generator="fc7_like"):
        self.output, self.format, self.count, self.feature_size = "synthetic", "synthetic", rows, DIMS
        self.settings = {"layer": "relu7" if generator == "fc7_like" else "fc7", "synthetic": "%s seed %d"
                         % (generator, seed)}
        self.complete, self._seed, self._generator = True, seed, generator

    def batches(self, batch_rows=BLOCK, skip=None):
        for paths, vectors in batches(self.count, self._seed, generator=self._generator):
            yield paths, vectors
