"""ResNet50's weight files: Keras's legacy .h5 layout, read and checked by layer name, and written.

Keras's two ImageNet files for `keras.applications.ResNet50` (`resnet.py` names them and their hashes):
- `resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5`: every convolution and batch norm (`conv1_conv`,
  `conv1_bn`, ..., `conv5_block3_3_bn`), what every endpoint below the top needs;
- `resnet50_weights_tf_dim_ordering_tf_kernels.h5`: the same and `predictions` (the 1000-class Dense).
Either is read by Keras's layer names (the names of `resnet_layers.py`), with `models/keras_h5.py`; a
layer's shapes are checked before anything is built. No TensorFlow here, so the `random` command starts
at once:

    python -m models.weight_files random resnet50_weights_tf_dim_ordering_tf_kernels.h5 --model resnet50

writes seeded RANDOM weights in Keras's layout (with the top; a name containing "notop" is written without
it, as Keras's notop file), which `keras.applications.ResNet50(weights=None).load_weights(path)` reads.
Features computed with them are meaningless.
"""

from pathlib import Path

import numpy as np

from models import keras_h5
from models.resnet.resnet_layers import PREDICTIONS, keras_layer_names, weight_shapes

NOTOP_FILE_NAME = "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"
FILE_NAME = "resnet50_weights_tf_dim_ordering_tf_kernels.h5"

RANDOM_SUFFIXES = {".h5": "Keras's"}  # the layout each suffix is written in


def load_weights(path, include_top=False):
    """Reads ResNet50's weights from a Keras legacy .h5 file, checking every name and shape.

    Args:
      path: Keras's notop or full file (or a file written by Keras's `save_weights_to_hdf5_group`).
      include_top: also read `predictions` (only the full file has it).

    Returns:
      {Keras layer name: {weight name: float32 array}}, e.g. "conv1_conv": {"kernel": [7, 7, 3, 64],
      "bias": [64]}, "conv1_bn": {"gamma": [64], "beta": [64], "moving_mean": [64], "moving_variance": [64]}.

    Raises:
      WeightsError: the file is missing, not Keras's layout, damaged, lacks a layer (`predictions` in a
        notop file, with include_top) or has a weight of another shape.
    """
    return keras_h5.read_weights(path, weight_shapes(include_top), "ResNet50",
                                 FILE_NAME if include_top else "%s or %s" % (NOTOP_FILE_NAME, FILE_NAME))


def random_weights(seed=0, include_top=True):
    """Seeded random weights of every layer, float32: He-normal kernels, small biases, batch norms near 1
    (those ending a residual branch near 0.2).

    Features computed with them are meaningless: they are for tests, benchmarks and checking an
    installation (the `random` command).

    Args:
      seed: seed of numpy's default generator; the same seed gives the same weights.
      include_top: with `predictions`.

    Returns:
      {Keras layer name: {weight name: array}}, the shapes of `resnet_layers.weight_shapes`.
    """
    rng = np.random.default_rng(seed)
    weights = {}
    for layer, shapes in weight_shapes(include_top).items():
        arrays = {}
        for name, shape in shapes:
            if name == "kernel":
                fan_in = int(np.prod(shape[:-1]))
                arrays[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))
            elif name == "gamma" and layer.endswith("_3_bn"):
                # The last batch norm of a residual branch scales it down, as in trained ResNets: with
                # branches as large as the shortcut, a random ResNet50 amplifies float32 rounding about
                # tenfold (Keras's own features then differ from float64 by 1e-5 of their largest value).
                arrays[name] = rng.uniform(0.1, 0.3, shape).astype(np.float32)
            elif name in ("gamma", "moving_variance"):
                arrays[name] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
            else:  # bias, beta, moving_mean
                arrays[name] = rng.uniform(-0.1, 0.1, shape).astype(np.float32)
        weights[layer] = arrays
    return weights


def save_h5(weights, path):
    """Writes `weights` in Keras's legacy layout: with the top if `weights` has `predictions`, else notop.

    The file lists every layer of Keras's ResNet50 in Keras's order, so Keras's own `load_weights` (which
    reads by order) reads it; this module's `load_weights` reads it by name.
    """
    include_top = PREDICTIONS[0] in weights
    shapes = weight_shapes(include_top)
    layers = [(name, tuple((weight, weights[name][weight]) for weight, _ in shapes.get(name, ())))
              for name in keras_layer_names(include_top)]
    keras_h5.write_weights(path, layers)


def write_random(path, seed=0):
    """Writes seeded random ResNet50 weights to `path` in Keras's layout: notop if its name says "notop"."""
    include_top = "notop" not in Path(path).name.lower()
    save_h5(random_weights(seed, include_top), path)

