"""EfficientNetB0's weight files (Keras's legacy HDF5 layout): read and checked, written.

Keras's files are `efficientnetb0_notop.h5` (every layer up to top_bn) and `efficientnetb0.h5` (also the
`predictions` layer). In both, the root attribute `layer_names` lists the layers, each layer's group has the
attribute `weight_names` and one dataset per name: "stem_conv/kernel:0" as tf.keras 2 wrote them,
"stem_conv/kernel" as Keras 3 writes them. Layers are read by their Keras name (from the table in
`efficientnet_b0_layers.py`), weights by the last part of their name; the one exception is the
Normalization layer, whose name Keras numbers ("normalization", "normalization_1", ...): it is the layer
whose weights are mean, variance and count.

This module imports no TensorFlow (h5py only when a file is read or written), so

    python -m models.weight_files random efficientnet_b0-random.h5 --model efficientnet_b0 [--seed N]

starts at once. It writes seeded RANDOM weights in the layout of the full file (Keras's EfficientNetB0
`load_weights` reads it), to check that an installation runs without the ImageNet file: features computed
with them are meaningless.
"""

from pathlib import Path

import numpy as np

from models.efficientnet_b0_layers import (IMAGENET_MEAN_RGB, IMAGENET_STDDEV_RGB, KERAS_LAYERS, TOP_LAYERS,
                                           keras_layers)
from models.weight_files import WeightsError

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_NORMALIZATION_WEIGHTS = {"mean", "variance", "count"}
# The names a weight has in other Keras versions: tf.keras 2 wrote "block1a_dwconv/depthwise_kernel:0",
# Keras 3 writes "block1a_dwconv/kernel".
_OTHER_NAMES = {"depthwise_kernel": ("kernel",)}


# ----------------------------------------------------------------------------- reading

def load_weights(path, include_top=False):
    """Reads EfficientNetB0's weights from a Keras .h5 file, checking every layer's weight names and shapes.

    Args:
      path: a Keras legacy .h5 weights file (the notop or the full one; a saved whole model's
        `model_weights` group is read too).
      include_top: whether the `predictions` layer is needed (only the full file has it); the other
        layers are read either way.

    Returns:
      {Keras layer name: {weight name: float32 array}}, e.g. "stem_conv": {"kernel": [3, 3, 3, 32]},
      "stem_bn": {"gamma": [32], "beta": [32], "moving_mean": [32], "moving_variance": [32]},
      "normalization": {"mean": [3], "variance": [3]} (the count is not read).

    Raises:
      WeightsError: the file is missing, not HDF5, not a Keras weights file, truncated, lacks a layer or
        a weight, or has a wrong shape; the message names the file, the layer and the shapes.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            magic = handle.read(8)
    except OSError as error:
        raise WeightsError("weights=%s: %s" % (path, error.strerror or error)) from None
    if magic != _HDF5_MAGIC:
        raise WeightsError("weights=%s is not a Keras .h5 weights file (efficientnetb0_notop.h5 or "
                           "efficientnetb0.h5)" % path)
    return _checked(_read_h5(path), path, include_top)


def _attribute_strings(node, name):
    values = node.attrs.get(name)
    if values is None:
        return None
    return [value.decode("utf-8") if isinstance(value, bytes) else str(value) for value in np.atleast_1d(values)]


def _base_name(weight_name):
    """"block1a_bn/gamma:0" and "efficientnetb0/block1a_bn/gamma" -> "gamma"."""
    return weight_name.rsplit("/", 1)[-1].split(":")[0]


def _read_h5(path):
    """{layer name: {weight base name: array}} of every layer with weights, in the file's layer order."""
    import h5py

    try:
        with h5py.File(path, "r") as file:
            root = file["model_weights"] if "model_weights" in file else file  # a whole saved model
            layer_names = _attribute_strings(root, "layer_names")
            if layer_names is None:
                raise WeightsError("weights=%s is an HDF5 file without Keras's 'layer_names' attribute; expected "
                                   "efficientnetb0_notop.h5 or efficientnetb0.h5" % path)
            raw = {}
            for name in layer_names:
                if name not in root:
                    continue  # reported by _checked, with the layers that are there
                group = root[name]
                weights = {_base_name(weight): np.asarray(group[weight])
                           for weight in _attribute_strings(group, "weight_names") or []}
                if weights:
                    raw["normalization" if set(weights) == _NORMALIZATION_WEIGHTS else name] = weights
            return raw
    except WeightsError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise WeightsError("weights=%s cannot be read as a Keras .h5 weights file (truncated or damaged?): %s"
                           % (path, str(error).splitlines()[0] if str(error) else type(error).__name__)) from None


def _checked(raw, path, include_top):
    weights = {}
    for layer in keras_layers(include_top):
        if layer.name not in raw:
            hint = (" (the predictions layer is only in the full file, efficientnetb0.h5, not in the notop one)"
                    if layer.name in TOP_LAYERS else "")
            names = list(raw)
            listing = (": " + ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")) if names else ""
            raise WeightsError("weights=%s has no layer %s%s; it has %d layers with weights%s"
                               % (path, layer.name, hint, len(names), listing))
        arrays = {}
        for name, shape in layer.weights:
            if name == "count":
                continue  # Keras's Normalization keeps it for adapt(); it changes no output
            found = [raw[layer.name][other] for other in (name,) + _OTHER_NAMES.get(name, ())
                     if other in raw[layer.name]]
            if not found:
                raise WeightsError("weights=%s: layer %s has no weight %s (it has %s)"
                                   % (path, layer.name, name, ", ".join(raw[layer.name])))
            array = found[0]
            if not np.issubdtype(array.dtype, np.floating):
                raise WeightsError("weights=%s: layer %s %s is %s, not a float array"
                                   % (path, layer.name, name, array.dtype))
            if tuple(array.shape) != shape:
                raise WeightsError("weights=%s: layer %s %s has shape %s; EfficientNetB0 needs %s"
                                   % (path, layer.name, name, tuple(array.shape), shape))
            arrays[name] = np.ascontiguousarray(array, dtype=np.float32)
        weights[layer.name] = arrays
    return weights


def looks_like_keras_imagenet_file(weights):
    """Whether `weights` (as load_weights returns) hold the Normalization of Keras's ImageNet files: the
    ImageNet mean, and the ImageNet standard deviations where the variance should be."""
    normalization = weights["normalization"]
    return (np.allclose(normalization["mean"], IMAGENET_MEAN_RGB)
            and np.allclose(normalization["variance"], IMAGENET_STDDEV_RGB))


# ----------------------------------------------------------------------------- writing

def random_weights(seed=0, imagenet_normalization=True):
    """Seeded random weights of every layer of the full file, float32 (the count int64).

    He-normal kernels; batch norms with gamma in [0.25, 0.75], small beta and mean, variance around 1.
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
            elif name == "gamma":
                # Below 1: with gammas around 1, float32 rounding grows through the 49 layers of a random
                # network until Keras's own features differ from its float64 ones by 1e-5 of their largest.
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
    import h5py

    layers = [layer for layer in KERAS_LAYERS if layer.name in weights]
    with h5py.File(path, "w") as file:
        file.attrs["layer_names"] = np.array([layer.name.encode() for layer in layers])
        file.attrs["backend"] = b"tensorflow"
        file.attrs["keras_version"] = b"2.4.0"
        for layer in layers:
            group = file.create_group(layer.name)
            names = ["%s/%s:0" % (layer.name, name) for name, _ in layer.weights]
            group.attrs["weight_names"] = np.array([name.encode() for name in names])
            for name, (weight, _) in zip(names, layer.weights):
                group.create_dataset(name, data=weights[layer.name][weight])


# ----------------------------------------------------------------------------- the random command

RANDOM_SUFFIXES = {".h5": "Keras's efficientnetb0.h5"}  # the full file: every endpoint reads it


def write_random(path, seed=0, imagenet_normalization=True):
    """Writes seeded random EfficientNetB0 weights (`random_weights`) to `path` in the layout of Keras's full file."""
    save_h5(random_weights(seed, imagenet_normalization), path)
