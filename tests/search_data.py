"""Vectors and outputs for the tests of search/: small, clustered, non-negative like fc7 after the ReLU."""

import numpy as np

from parallel.output import open_writer

SETTINGS = {"model": "vgg16", "layer": "relu7", "weights": "imagenet", "precision": "fp32"}


def clustered(rows, dims=64, centres=40, seed=0):
    """Non-negative clustered vectors (a ReLU of a mixture in a 16-dimensional subspace, plus noise): float32."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((16, dims)) / 4
    middles = rng.standard_normal((centres, 16))
    latent = middles[rng.integers(0, centres, rows)] + 0.5 * rng.standard_normal((rows, 16))
    return np.maximum(latent @ basis + 0.2 * rng.standard_normal((rows, dims)) + 0.3, 0).astype(np.float32)


def write_npy(output, vectors, first=0, settings=SETTINGS):
    writer = open_writer(output, format="npy", feature_size=vectors.shape[1], settings=settings)
    writer.write(["img/%05d.jpg" % row for row in range(first, first + len(vectors))], vectors)
    writer.close()


def near_copy(vector, seed=0, noise=0.045):
    """A near-copy of one non-negative row, as a re-encoded JPEG is of its photo: raw cosine about 0.999."""
    rng = np.random.default_rng(seed)
    scale = noise * np.sqrt(np.mean(np.square(vector)))
    return np.maximum(vector + scale * rng.standard_normal(vector.shape), 0).astype(np.float32)


def with_near_copy(rows, seed=0):
    """`rows` clustered vectors (rows >= 2), the last a near-copy of the first."""
    vectors = clustered(max(1, rows - 1), seed=seed)
    return np.concatenate([vectors, near_copy(vectors[0], seed)[None]])


def hard(rows, dims=64, centres=40, seed=0):
    """Harder vectors, as fc7 before the ReLU (benchmarks/fc7_like.py's `hard` generator, small): both signs,
    clusters of uneven sizes that overlap, a low-rank part every row shares, hubs near the centre, and a
    continuum of near-copies (rows 100-139 a chain, each the one before a little changed): float32."""
    rng = np.random.default_rng([seed, 24])
    basis, shared = rng.standard_normal((16, dims)) / 4, rng.standard_normal((2, dims))
    weights = 1 / np.arange(1, centres + 1)
    middles = rng.standard_normal((centres, 16))
    latent = middles[rng.choice(centres, rows, p=weights / weights.sum())] + 0.9 * rng.standard_normal((rows, 16))
    latent[rng.random(rows) < 0.02] *= 0.1
    vectors = latent @ basis + rng.standard_normal((rows, 2)) @ shared + 0.3 * rng.standard_normal((rows, dims))
    for row in range(101, min(rows, 140)):
        vectors[row] = vectors[row - 1] + 0.15 * rng.standard_normal(dims)
    return vectors.astype(np.float32)
