"""Keras's legacy HDF5 weights layout, read and written by layer name, for any model.

The layout of Keras's ImageNet files (`*_weights_tf_dim_ordering_tf_kernels*.h5`), which Keras 2's
`save_weights` wrote and Keras 3 writes with `keras.src.legacy.saving.legacy_h5_format`:

    / attrs: layer_names = [every layer's name, in the model's order]   (or layer_names0, layer_names1, ...
                                                                         when the list is too long for one)
    /<layer> attrs: weight_names = ["<layer>/kernel:0", "<layer>/bias:0"]   (empty for a layer without weights)
    /<layer>/<weight name>: the array

A whole saved model keeps the same under `/model_weights`. Keras reads such a file by ORDER (the n-th layer
with weights of the file into the n-th of the model); this module reads it by NAME, and gives each weight
by its short name ("kernel", "gamma", "moving_mean", ...) taken in the order of `weight_names`, which is
Keras's (trainable weights first), whatever the datasets are called ("kernel:0", "kernel", "W_1:0").
It has no model in it: the caller says which layers and shapes it needs. No TensorFlow; h5py is imported
when a file is read or written.
"""

from pathlib import Path

import numpy as np

from models.weight_files import WeightsError

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ATTRIBUTES = {"backend": b"tensorflow", "keras_version": b"2.0.0"}  # as in the files Keras 2 wrote


def read_weights(path, expected, model, expected_file):
    """Reads and checks the layers `expected` names from a Keras legacy .h5 file.

    Args:
      path: the file.
      expected: {layer name: ((weight name, shape), ...)}, the weights of each layer in Keras's order,
        e.g. {"conv1_conv": (("kernel", (7, 7, 3, 64)), ("bias", (64,))), ...}. The file's other layers
        (a top the caller does not need) are not read.
      model: the model's name for messages ("ResNet50").
      expected_file: the file a user should pass, for messages.

    Returns:
      {layer name: {weight name: float32 array}} for every layer of `expected`.

    Raises:
      WeightsError (one line naming the file, and the layer and shapes where one is wrong): the file is
        missing, not HDF5, not Keras's layout, truncated, lacks a layer, or has a weight of another
        count, shape or type.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            magic = handle.read(8)
    except OSError as error:
        raise WeightsError("weights=%s: %s" % (path, error.strerror or error)) from None
    if magic != HDF5_MAGIC:
        raise WeightsError("weights=%s is not a Keras .h5 weights file (expected %s)" % (path, expected_file))
    import h5py

    try:
        with h5py.File(path, "r") as file:
            root = file["model_weights"] if "model_weights" in file else file
            layer_names = _strings(root, "layer_names")
            if layer_names is None:
                raise WeightsError("weights=%s is an HDF5 file without Keras's 'layer_names' attribute; expected %s"
                                   % (path, expected_file))
            present = set(layer_names)
            weights = {}
            for layer, shapes in expected.items():
                if layer not in present or layer not in root:
                    raise WeightsError("weights=%s has no layer %s, which %s needs (expected %s; the file has %d "
                                       "layers: %s)" % (path, layer, model, expected_file, len(layer_names),
                                                        _some(layer_names)))
                group = root[layer]
                arrays = [group[name] for name in _strings(group, "weight_names") or []]
                weights[layer] = _checked(arrays, shapes, path, layer, model)
            return weights
    except WeightsError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise WeightsError("weights=%s cannot be read as a Keras .h5 weights file (truncated or damaged?): %s"
                           % (path, first_line)) from None


def _checked(arrays, shapes, path, layer, model):
    if len(arrays) != len(shapes):
        raise WeightsError("weights=%s: layer %s has %d weights; %s needs %d (%s)"
                           % (path, layer, len(arrays), model, len(shapes), ", ".join(name for name, _ in shapes)))
    checked = {}
    for dataset, (name, shape) in zip(arrays, shapes):
        if tuple(dataset.shape) != tuple(shape):
            raise WeightsError("weights=%s: layer %s %s has shape %s; %s needs %s"
                               % (path, layer, name, tuple(dataset.shape), model, tuple(shape)))
        if not np.issubdtype(dataset.dtype, np.floating):
            raise WeightsError("weights=%s: layer %s %s is %s, not a float array" % (path, layer, name, dataset.dtype))
        checked[name] = np.ascontiguousarray(dataset[()], dtype=np.float32)
    return checked


def _strings(node, name):
    """A string-list attribute, joined from Keras's chunks (`name0`, `name1`, ...) when it was split."""
    if name in node.attrs:
        values = list(np.atleast_1d(node.attrs[name]))
    elif "%s0" % name in node.attrs:
        values, chunk = [], 0
        while "%s%d" % (name, chunk) in node.attrs:
            values += list(np.atleast_1d(node.attrs["%s%d" % (name, chunk)]))
            chunk += 1
    else:
        return None
    return [value.decode("utf-8") if isinstance(value, bytes) else str(value) for value in values]


def _some(names, count=4):
    return ", ".join(names[:count]) + (", ..." if len(names) > count else "") if names else "none"


def write_weights(path, layers):
    """Writes Keras's legacy .h5 layout, which Keras's own `model.load_weights(path)` reads.

    Args:
      path: the file to write (replaced if it exists).
      layers: [(layer name, ((weight name, array), ...)), ...] for EVERY layer of the Keras model, in its
        order (`model.layers`), with () for a layer without weights: Keras matches the file's layers with
        weights to its own by position. Datasets are named "<layer>/<weight name>:0", as Keras 2 named them.
    """
    import h5py

    with h5py.File(path, "w") as file:
        file.attrs["layer_names"] = np.array([name.encode() for name, _ in layers])
        for key, value in ATTRIBUTES.items():
            file.attrs[key] = value
        for layer, weights in layers:
            group = file.create_group(layer)
            names = ["%s/%s:0" % (layer, name) for name, _ in weights]
            group.attrs["weight_names"] = np.array([name.encode() for name in names], dtype="S%d" % max(
                [len(name) for name in names] + [1]))
            for name, (_, array) in zip(names, weights):
                group.create_dataset(name, data=np.asarray(array, dtype=np.float32))
