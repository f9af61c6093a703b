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
