"""Seeded random VGG16 weights for the tests, in the real on-disk layouts.

They are what `python -m models.weight_files random OUT [--seed N]` writes (that command is
tested in test_weight_files.py); here they are made once for both layouts.
"""

from models.imagenet_download import VGG16_FILE
from models.weight_files import random_weights, save_h5, save_npy


def random_weight_files(folder, seed=0, weights=None):
    """Writes the same seeded random weights in both layouts into `folder`.

    Args:
      folder: an existing folder (pathlib.Path).
      seed: the seed of `models.weight_files.random_weights`.
      weights: `random_weights(seed)` when the caller has them already (they cost 2.8 s of CPU to make).

    Returns:
      (weights, paths): {layer name: (float32 weights, float32 biases)}, and
      {"npy": folder/vgg16.npy (tensorflow-vgg's layout), "h5": folder/<VGG16_FILE.name> (Keras's)}.
    """
    weights = random_weights(seed) if weights is None else weights
    paths = weight_files_in(folder)
    save_npy(weights, paths["npy"])
    save_h5(weights, paths["h5"])
    return weights, paths


def weight_files_in(folder):
    """The files `random_weight_files` writes in `folder`: {"npy": vgg16.npy, "h5": <VGG16_FILE.name>}."""
    return {"npy": folder / "vgg16.npy", "h5": folder / VGG16_FILE.name}
