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
It has no model in it: the caller says which layers and shapes it needs (`read_weights`), or takes the
file's layers (`read_layers`) and checks each one it finds (`checked`) when a layer's name varies (Keras
numbers some: "normalization_1") or its messages name the model's own layers. No TensorFlow; h5py is
imported when a file is read or written.
"""

from pathlib import Path

import numpy as np

from models import registry  # the models' names and tables only: no model, no TensorFlow
from models.files import HDF5_MAGIC, WeightsError, read_magic

ATTRIBUTES = {"backend": b"tensorflow", "keras_version": b"2.0.0"}  # as in the files Keras 2 wrote


def read_weights(path, expected, model, expected_file):
    """Reads and checks the layers `expected` names from a Keras legacy .h5 file.

    Args:
      path: the file.
      expected: {layer name: ((weight name, shape), ...)}, the weights of each layer in Keras's order,
        e.g. {"conv1_conv": (("kernel", (7, 7, 3, 64)), ("bias", (64,))), ...}; a weight that is not a
        float is given with its dtype, (name, shape, dtype) (see `checked`). The file's other layers (a
        top the caller does not need) are not checked.
      model: the model's name for messages ("ResNet50").
      expected_file: the file a user should pass, for messages.

    Returns:
      {layer name: {weight name: float32 array (or of the dtype given)}} for every layer of `expected`.

    Raises:
      WeightsError (one line naming the file, and the layer and shapes where one is wrong): the file is
        missing, not HDF5, not Keras's layout, truncated, lacks a layer, or has a weight of another
        count, shape or type.
    """
    layers = read_layers(path, expected_file)
    weights = {}
    for layer, shapes in expected.items():
        if layer not in layers:
            raise missing_layer(path, layer, model, [name for name, weights in layers.items() if weights],
                                "expected %s; " % expected_file)
        weights[layer] = checked(layers[layer], shapes, path, layer, model)
    return weights


def read_layers(path, expected_file):
    """Every layer of a Keras legacy .h5 file with its weights, unchecked.

    Args:
      path: the file (weights alone, or a whole saved model: its `model_weights` group is read).
      expected_file: the file a user should pass, for messages.

    Returns:
      {layer name: ((weight name, array), ...)} in the file's order (`layer_names`), () for a layer without
      weights; the weight names are the datasets' last part without ":0" ("stem_conv/kernel:0" and
      "efficientnetb0/stem_conv/kernel" -> "kernel"), the arrays as stored (float32 [3, 3, 3, 32], int64 []).

    Raises:
      WeightsError (one line naming the file): missing, not HDF5, without `layer_names`, truncated or damaged.
    """
    path = Path(path)
    if read_magic(path) != HDF5_MAGIC:
        raise WeightsError("weights=%s is not a Keras .h5 weights file (expected %s)%s"
                           % (path, expected_file, registry.what_else(path)))
    import h5py

    try:
        with h5py.File(path, "r") as file:
            root = file["model_weights"] if "model_weights" in file else file
            layer_names = _strings(root, "layer_names")
            if layer_names is None:
                raise WeightsError("weights=%s is an HDF5 file without Keras's 'layer_names' attribute; expected %s"
                                   % (path, expected_file))
            return {layer: tuple((name.rsplit("/", 1)[-1].split(":")[0], np.asarray(root[layer][name][()]))
                                 for name in _strings(root[layer], "weight_names") or [])
                    for layer in layer_names if layer in root}
    except WeightsError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise WeightsError("weights=%s cannot be read as a Keras .h5 weights file (truncated or damaged?): %s"
                           % (path, first_line)) from None


def missing_layer(path, layer, model, names, expected=""):
    """The WeightsError of a file without a layer the model needs, for every model's reader of Keras's files (and
    VGG16's of tensorflow-vgg's .npy).

    One line naming the file, the layer, a few of the file's own layers with weights and, when they are another
    model's, whose file it looks like (`registry.looks_like`): "weights=resnet50.h5 has no layer conv1_1 (Keras:
    block1_conv1), which VGG16 needs (the file has 107 layers with weights: conv1_conv, conv1_bn, conv2_block1_1_conv,
    conv2_block1_1_bn, ...); it looks like a ResNet50 weights file: pass --model resnet50".

    Args:
      path: the file.
      layer: the layer missing, as the message names it ("predictions (only in the full file)").
      model: the model's title ("VGG16").
      names: the file's names of its layers with weights, in its order.
      expected: what to say first in the parentheses ("expected resnet50_..._kernels.h5; ").
    """
    return WeightsError("weights=%s has no layer %s, which %s needs (%sthe file has %d layers with weights: %s)%s"
                        % (Path(path), layer, model, expected, len(names), _some(names),
                           registry.looks_like(names, model)))


def checked(weights, shapes, path, layer, model):
    """One layer's weights, as `read_layers` gives them, checked against the model's and named by it.

    Args:
      weights: ((weight name, array), ...) of the file's layer, in Keras's order.
      shapes: ((weight name, shape), ...) the model needs, in the same order; (weight name, shape, dtype)
        for a weight that is not a float, e.g. ("count", (), np.int64) (Keras's Normalization).
      path, layer, model: the file, the file's layer and the model's name, for messages.

    Returns:
      {weight name of `shapes`: contiguous array}, float32 (or the dtype `shapes` gives).

    Raises:
      WeightsError (one line): another number of weights, a shape of another size, or a float where an
        integer is needed or the other way round.
    """
    if len(weights) != len(shapes):
        raise WeightsError("weights=%s: layer %s has %d weights; %s needs %d (%s)"
                           % (Path(path), layer, len(weights), model, len(shapes), ", ".join(s[0] for s in shapes)))
    arrays = {}
    for (_, array), (name, shape, *dtype) in zip(weights, shapes):
        dtype = np.dtype(dtype[0] if dtype else np.float32)
        if tuple(array.shape) != tuple(shape):
            raise WeightsError("weights=%s: layer %s %s has shape %s; %s needs %s"
                               % (Path(path), layer, name, tuple(array.shape), model, tuple(shape)))
        kind = np.floating if np.issubdtype(dtype, np.floating) else np.integer
        if not np.issubdtype(array.dtype, kind):
            raise WeightsError("weights=%s: layer %s %s is %s, not %s array"
                               % (Path(path), layer, name, array.dtype,
                                  "a float" if kind is np.floating else "an integer"))
        arrays[name] = np.asarray(array, dtype=dtype, order="C")  # not ascontiguousarray: it makes [] [1]
    return arrays


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
        weights to its own by position (a file listing only the layers with weights reads the same).
        Datasets are named "<layer>/<weight name>:0", as Keras 2 named them; a weight name with a "/" is
        the weight's whole name, as Keras 2 named the weights of a layer nested in another
        ("convnext_tiny_stem_conv/kernel" in the layer convnext_tiny_stem). Float arrays are written as
        float32, others (Normalization's int64 count) as they are.
    """
    import h5py

    with h5py.File(path, "w") as file:
        file.attrs["layer_names"] = np.array([name.encode() for name, _ in layers])
        for key, value in ATTRIBUTES.items():
            file.attrs[key] = value
        for layer, weights in layers:
            group = file.create_group(layer)
            names = ["%s:0" % name if "/" in name else "%s/%s:0" % (layer, name) for name, _ in weights]
            group.attrs["weight_names"] = np.array([name.encode() for name in names], dtype="S%d" % max(
                [len(name) for name in names] + [1]))
            for name, (_, array) in zip(names, weights):
                array = np.asarray(array)
                group.create_dataset(name, data=array.astype(np.float32, copy=False)
                                     if np.issubdtype(array.dtype, np.floating) else array)
