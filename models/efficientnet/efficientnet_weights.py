"""EfficientNetB0's weight files (Keras's legacy HDF5 layout): read and checked, written.

Keras's files are `efficientnetb0_notop.h5` (every layer up to top_bn) and `efficientnetb0.h5` (also the
`predictions` layer). In both, the root attribute `layer_names` lists the layers, each layer's group has the
attribute `weight_names` and one dataset per name: "stem_conv/kernel:0" as tf.keras 2 wrote them,
"stem_conv/kernel" as Keras 3 writes them. `models/keras_h5.py` reads and writes that layout; layers are
read by their Keras name (from the table in `efficientnet_layers.py`), weights in Keras's order; the one
exception is the Normalization layer, whose name Keras numbers ("normalization", "normalization_1", ...):
it is the layer whose weights are mean, variance and count (an int64).

This module imports no TensorFlow (h5py only when a file is read or written), so

    python -m models.weight_files random efficientnet_b0-random.h5 --model efficientnet_b0 [--seed N]

starts at once. It writes seeded RANDOM weights in the layout of the full file (Keras's EfficientNetB0
`load_weights` reads it), to check that an installation runs without the ImageNet file: features computed
with them are meaningless.
"""

import numpy as np

from models import keras_h5
from models.efficientnet.efficientnet_layers import (BLOCKS, IMAGENET_MEAN_RGB, IMAGENET_STDDEV_RGB, KERAS_LAYERS,
                                                     TOP_LAYERS, keras_layers)

_FILES = "efficientnetb0_notop.h5 or efficientnetb0.h5"  # Keras's two files, for messages
_NORMALIZATION_WEIGHTS = {"mean", "variance", "count"}


# ----------------------------------------------------------------------------- reading

def load_weights(path, include_top=False):
    """Reads EfficientNetB0's weights from a Keras .h5 file, checking every layer's weights and shapes.

    Args:
      path: a Keras legacy .h5 weights file (the notop or the full one; a saved whole model's
        `model_weights` group is read too).
      include_top: whether the `predictions` layer is needed (only the full file has it); the other
        layers are read either way.

    Returns:
      {Keras layer name: {weight name: float32 array}}, e.g. "stem_conv": {"kernel": [3, 3, 3, 32]},
      "stem_bn": {"gamma": [32], "beta": [32], "moving_mean": [32], "moving_variance": [32]},
      "normalization": {"mean": [3], "variance": [3]} (the count is checked, not returned).

    Raises:
      WeightsError: the file is missing, not HDF5, not a Keras weights file, truncated, lacks a layer or
        a weight, or has a wrong shape; the message names the file, the layer and the shapes.
    """
    layers = {name: weights for name, weights in keras_h5.read_layers(path, _FILES).items() if weights}
    # Keras numbers its Normalization layers ("normalization", "normalization_1", ...): it is the layer
    # whose weights are mean, variance and count.
    file_names = {"normalization": next((name for name, weights in layers.items()
                                         if {weight for weight, _ in weights} == _NORMALIZATION_WEIGHTS), None)}
    weights = {}
    for layer in keras_layers(include_top):
        file_name = file_names.get(layer.name, layer.name)
        if file_name not in layers:
            note = (" (only in the full file, efficientnetb0.h5, not in the notop one)" if layer.name in TOP_LAYERS
                    else " (mean, variance and count)" if layer.name == "normalization" else "")
            raise keras_h5.missing_layer(path, layer.name + note, "EfficientNetB0", list(layers))
        shapes = tuple((name, shape, np.int64 if name == "count" else np.float32) for name, shape in layer.weights)
        arrays = keras_h5.checked(layers[file_name], shapes, path, file_name, "EfficientNetB0")
        arrays.pop("count", None)  # Keras's Normalization keeps it for adapt(); it changes no output
        weights[layer.name] = arrays
    return weights


def looks_like_keras_imagenet_file(weights):
    """Whether `weights` (as load_weights returns) hold the Normalization of Keras's ImageNet files: the
    ImageNet mean, and the ImageNet standard deviations where the variance should be."""
    normalization = weights["normalization"]
    return (np.allclose(normalization["mean"], IMAGENET_MEAN_RGB)
            and np.allclose(normalization["variance"], IMAGENET_STDDEV_RGB))


# ----------------------------------------------------------------------------- writing

_ENDS_OF_RESIDUAL_BRANCHES = {block.name + "_project_bn" for block in BLOCKS if block.residual}


def random_weights(seed=0, imagenet_normalization=True):
    """Seeded random weights of every layer of the full file, float32 (the count int64).

    He-normal kernels; batch norms with gamma in [0.25, 0.75] ([0.1, 0.3] where a residual branch ends),
    small beta and mean, variance around 1.
    Features computed with them are meaningless: they are for tests, benchmarks and checking an
    installation (the `random` command).

    Args:
      seed: seed of numpy's default generator; the same seed gives the same weights.
      imagenet_normalization: the Normalization holds what Keras's ImageNet files hold (the ImageNet mean,
        and the standard deviations as variance: computed with the extra Rescaling); False: the ImageNet
        mean and variance (the standard deviations squared: computed without it).

    Returns:
      {Keras layer name: {weight name: array}}, the shapes of `KERAS_LAYERS`.
    """
    rng = np.random.default_rng(seed)
    weights = {}
    for layer in KERAS_LAYERS:
        arrays = {}
        for name, shape in layer.weights:
            if layer.kind == "normalization":
                variance = np.array(IMAGENET_STDDEV_RGB) ** (1 if imagenet_normalization else 2)
                array = {"mean": np.array(IMAGENET_MEAN_RGB), "variance": variance,
                         "count": np.array(0, np.int64)}[name]
            elif name in ("kernel", "depthwise_kernel"):
                fan_in = np.prod(shape[:-1]) if name == "kernel" else np.prod(shape[:2])
                array = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
            elif name == "gamma" and layer.name in _ENDS_OF_RESIDUAL_BRANCHES:
                # The batch norm that ends a residual branch scales it down, as in trained networks: with
                # branches as large as the shortcut, a random EfficientNet is chaotic, its float32 rounding
                # grows to 1e-5 of the largest feature (Keras's own) and bfloat16's to a cosine of 0.998.
                array = rng.uniform(0.1, 0.3, shape)
            elif name == "gamma":
                # Below 1, for the same reason: with gammas around 1 the rounding grows through the 49 layers.
                array = rng.uniform(0.25, 0.75, shape)
            elif name == "moving_variance":
                array = rng.uniform(0.5, 1.5, shape)
            else:  # beta, moving_mean, bias
                array = rng.uniform(-0.1, 0.1, shape)
            arrays[name] = array.astype(np.int64 if name == "count" else np.float32)
        weights[layer.name] = arrays
    return weights


def save_h5(weights, path):
    """Writes `weights` in Keras's legacy HDF5 layout, as tf.keras 2 wrote efficientnetb0.h5.

    Args:
      weights: {Keras layer name: {weight name: array}} of every layer of the full file (as
        `random_weights` gives), or of the notop file (without predictions: the notop layout).
      path: the file to write.

    The root attribute `layer_names` lists the layers with weights in Keras's model order (the order
    Keras's `load_weights` matches them by); each layer's group has `weight_names` ("stem_conv/kernel:0")
    and a dataset for each.
    """
    keras_h5.write_weights(path, [(layer.name, tuple((name, weights[layer.name][name]) for name, _ in layer.weights))
                                  for layer in KERAS_LAYERS if layer.name in weights])


# ----------------------------------------------------------------------------- the random command

RANDOM_SUFFIXES = {".h5": "Keras's efficientnetb0.h5"}  # the full file: every endpoint reads it


def write_random(path, seed=0, imagenet_normalization=True):
    """Writes seeded random EfficientNetB0 weights (`random_weights`) to `path` in the layout of Keras's full file."""
    save_h5(random_weights(seed, imagenet_normalization), path)
