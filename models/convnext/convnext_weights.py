"""ConvNeXt-Tiny's weight files: Keras's legacy `.h5` layout, read and checked, and written.

Keras's two files (`convnext_tiny_notop.h5` without the classifier, `convnext_tiny.h5` with it) hold one
HDF5 group per layer with weights, listed in the root attribute `layer_names`; each group lists its
datasets in the attribute `weight_names`, in Keras's legacy order. The layer names are the same in the
files Keras 2 wrote (the ones Keras downloads, `convnext_tiny_stage_0_block_0_depthwise_conv/kernel:0`)
and in those Keras 3 writes (`keras.src.legacy.saving.legacy_h5_format.save_weights_to_hdf5_group`:
`convnext_tiny_stage_0_block_0_depthwise_conv/kernel`, without ":0"): layers are found by their group
name and their datasets through `weight_names` (by `models/keras_h5.py`, which also writes them), so both
read alike. One layer has no fixed name: the
LayerNorm Keras puts after the pooling when include_top=False (`layer_normalization`, or
`layer_normalization_<n>`); it is taken as the notop file's one layer beyond the body.

This module imports no TensorFlow (h5py only when a file is read or written), so that

    python -m models.weight_files random convnext_tiny.h5 --model convnext_tiny

starts at once; it writes seeded RANDOM weights in the layout of Keras's full file, which Keras's own
`model.load_weights` reads. Features computed with them are meaningless.
"""

import numpy as np

from models import keras_h5
from models.convnext.convnext_layers import BODY, HEAD_DENSE, HEAD_LAYER_NORM, KERAS_PREFIX, LAYERS
from models.files import WeightsError

FULL_FILE, NOTOP_FILE = "convnext_tiny.h5", "convnext_tiny_notop.h5"  # Keras's names for its two files
NOTOP_LAYER_NORM = "layer_normalization"  # the name Keras gives the notop model's last LayerNorm


# ----------------------------------------------------------------------------- reading

def load_weights(path, with_top=False):
    """Reads ConvNeXt-Tiny's weights from a Keras `.h5` file, checking every layer's arrays and shapes.

    Args:
      path: Keras's `convnext_tiny_notop.h5` or `convnext_tiny.h5`, or a file in their layout (written by
        Keras 2 or 3, or by `save_h5`).
      with_top: the classifier (`head/dense`) is needed: only the full file has it.

    Returns:
      {layer name: tuple of float32 arrays in the table's order}, e.g. "stem": (kernel [4, 4, 3, 96],
      bias [96], gamma [96], beta [96]); "head/layernorm" always (the full file's head LayerNorm, or the
      notop file's last LayerNorm); "head/dense" when the file has it.

    Raises:
      WeightsError: the file is missing, not HDF5, truncated, of another model, lacks a layer (or the
        classifier, when `with_top`), or has a wrong shape; the message names the file, the layer and
        the shapes.
    """
    layers = keras_h5.read_layers(path, "%s or %s" % (NOTOP_FILE, FULL_FILE))
    groups = {name: weights for name, weights in layers.items() if weights}  # the layers with weights
    weights = {layer.name: _checked(groups, layer.keras_name, layer, path) for layer in BODY}
    if HEAD_DENSE.keras_name in groups:
        for layer in (HEAD_LAYER_NORM, HEAD_DENSE):
            weights[layer.name] = _checked(groups, layer.keras_name, layer, path)
        return weights
    if with_top:
        raise WeightsError("weights=%s has no layer %s (a notop file?): the classifier's layers need the full "
                           "file, %s" % (path, HEAD_DENSE.keras_name, FULL_FILE))
    body = {layer.keras_name for layer in BODY}
    beyond = [name for name in groups if name not in body]
    if len(beyond) != 1:
        raise WeightsError("weights=%s: expected one LayerNorm after the body (%s or Keras's notop %s); found "
                           "%d layers: %s" % (path, HEAD_LAYER_NORM.keras_name, NOTOP_LAYER_NORM, len(beyond),
                                              ", ".join(beyond) or "none"))
    weights[HEAD_LAYER_NORM.name] = _checked(groups, beyond[0], HEAD_LAYER_NORM, path)
    return weights


def _checked(groups, group_name, layer, path):
    """The arrays of `layer` from the file's group `group_name`, as float32, after checking them."""
    if group_name not in groups:
        raise keras_h5.missing_layer(path, "%s (%s)" % (group_name, layer.name), "ConvNeXt-Tiny", list(groups))
    if len(groups[group_name]) != len(layer.arrays):  # said here to name our layer as well as Keras's
        raise WeightsError("weights=%s: layer %s has %d arrays; ConvNeXt-Tiny's %s has %d (%s)"
                           % (path, group_name, len(groups[group_name]), layer.name, len(layer.arrays),
                              ", ".join(name for name, _ in layer.arrays)))
    return tuple(keras_h5.checked(groups[group_name], layer.arrays, path, group_name, "ConvNeXt-Tiny").values())


# ----------------------------------------------------------------------------- writing

def random_weights(seed=0):
    """Seeded random weights for every layer of the table, float32.

    ConvNeXt has no batch norm, so there are no statistics to calibrate: every LayerNorm normalizes
    with each position's own statistics. The scales are chosen instead so that every block adds to
    the residual stream a branch of the stream's own order (layer scales 0.05 .. 0.3, kernels of
    unit gain), and the features depend on the image. Features computed with them are meaningless:
    they are for tests, benchmarks and checking an installation.

    Args:
      seed: seed of numpy's default generator; the same seed gives the same weights.

    Returns:
      {layer name: tuple of arrays}, the shapes of `LAYERS`.
    """
    rng = np.random.default_rng(seed)

    def array(layer, name, shape):
        if name.endswith("kernel"):
            fan_in = int(np.prod(shape[:-1]))
            return rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(1.0 / fan_in))
        if name.endswith("gamma"):
            low, high = (0.05, 0.3) if layer.name.endswith("layer_scale") else (0.5, 1.5)
            return rng.uniform(low, high, shape).astype(np.float32)
        return rng.uniform(-0.2, 0.2, shape).astype(np.float32)  # biases and LayerNorm betas

    return {layer.name: tuple(array(layer, name, shape) for name, shape in layer.arrays) for layer in LAYERS}


def _weight_names(layer, group_name):
    """The names Keras 2 gave a layer's weights: "kernel" ("<layer>/kernel:0" in the file); in a Sequential
    of two layers (the stem and the downsampling blocks) the inner layer's, "<inner layer>/<weight>", e.g.
    "convnext_tiny_downsampling_conv_0/kernel"."""
    names = []
    for name, _ in layer.arrays:
        if "/" not in name:
            names.append(name)
            continue
        inner, weight = name.split("/")
        if layer.name == "stem":
            names.append("%s_stem_%s/%s" % (KERAS_PREFIX, inner, weight))
        else:
            index = int(layer.name.rsplit("_", 1)[1])
            names.append("%s_downsampling_%s_%d/%s" % (KERAS_PREFIX, inner, index, weight))
    return names


def save_h5(weights, path, include_top=True):
    """Writes `weights` in the legacy layout of Keras's convnext_tiny.h5 (or, include_top=False, of
    convnext_tiny_notop.h5), which Keras's `model.load_weights` reads into `keras.applications.ConvNeXtTiny`.

    Only the layers with weights are written (Keras skips the others when it loads): root attribute
    `layer_names`, one group per layer with its `weight_names` and datasets, as Keras 2 wrote them.

    Args:
      weights: {layer name: tuple of arrays}, as `random_weights` or `load_weights(with_top=True)` give.
      path: the file to write.
      include_top: write the classifier (the full file); else the notop file, whose last layer is the
        head's LayerNorm under Keras's name for it, "layer_normalization".
    """
    layers = [(layer, layer.keras_name) for layer in BODY]
    if include_top:
        layers += [(HEAD_LAYER_NORM, HEAD_LAYER_NORM.keras_name), (HEAD_DENSE, HEAD_DENSE.keras_name)]
    else:
        layers.append((HEAD_LAYER_NORM, NOTOP_LAYER_NORM))
    keras_h5.write_weights(path, [(group_name, tuple(zip(_weight_names(layer, group_name), weights[layer.name])))
                                  for layer, group_name in layers])


RANDOM_SUFFIXES = {".h5": "Keras's %s" % FULL_FILE}  # the layout each suffix is written in


def write_random(path, seed=0):
    """Writes seeded random ConvNeXt-Tiny weights to `path` in the layout of Keras's full file (every layer:
    it serves every endpoint). 28,589,128 float32 parameters, about 115 MB."""
    save_h5(random_weights(seed), path, include_top=True)
