"""VGG16's weight files: read and checked, identified by content, written.

Weights come from either on-disk layout of the same ImageNet model:
- tensorflow-vgg's `vgg16.npy`: a pickled dict {layer: [weights, biases]}. A pickle can run
  code, so it is read with a restricted unpickler that only rebuilds numpy arrays, dicts,
  lists and tuples; anything else is refused before it runs.
- Keras's `vgg16_weights_tf_dim_ordering_tf_kernels.h5` (legacy Keras HDF5 layout: root
  attribute `layer_names`, per-layer attribute `weight_names`), layers block1_conv1 ...
  block5_conv3, fc1, fc2, predictions; `imagenet_download.py` fetches it into Keras's cache.

Layer names and shapes come from the table in `vgg16_layers.py`. This module imports no
TensorFlow (h5py only when an .h5 file is read or written), so its command starts at once:

    python -m models.weight_files random vgg16-random.npy [--seed N]   # or an .h5 path

writes seeded RANDOM weights in the real layout, to check that an installation runs without
the 553 MB ImageNet file. Features computed with them are meaningless.
"""

import os
import pickle
import sys
from pathlib import Path

import numpy as np

from models import keras_h5
from models.files import HDF5_MAGIC, NPY_MAGIC, WeightsError, read_magic
from models.registry import what_else
from models.vgg16_layers import CONV_BLOCKS, LAYERS


# ----------------------------------------------------------------------------- reading

def load_weights(path):
    """Reads the weights of all 16 layers from a file, checking every name and shape.

    Args:
      path: a tensorflow-vgg `vgg16.npy` or a Keras legacy `.h5` file (told apart by content).

    Returns:
      {layer name: (float32 weights, float32 biases)}, e.g. "conv1_1": ([3, 3, 3, 64], [64]).

    Raises:
      WeightsError: the file is missing, unreadable, truncated, of another layout, lacks a
        layer, has a wrong shape, or (npy) holds anything but arrays.
    """
    path = Path(path)
    magic = read_magic(path)
    if magic.startswith(NPY_MAGIC):
        raw = _read_npy(path)
        file_names = sorted(raw)
    elif magic == HDF5_MAGIC:
        raw, file_names = _read_h5(path)
    else:
        raise WeightsError("weights=%s is neither a tensorflow-vgg vgg16.npy nor a Keras .h5 weights file%s"
                           % (path, what_else(path, "vgg16")))
    return _checked(raw, path, file_names)


def _checked(raw, path, file_names):
    """The 16 layers of `raw` ({our name: [weights, biases]}) checked; `file_names` are the file's own names of its
    layers with weights (Keras's in an .h5 file), for the message of a missing layer."""
    weights = {}
    for layer in LAYERS:
        if layer.name not in raw:
            raise keras_h5.missing_layer(path, "%s (Keras: %s)" % (layer.name, layer.keras_name), "VGG16", file_names)
        arrays = raw[layer.name]
        if len(arrays) != 2:
            raise WeightsError("weights=%s: layer %s has %d arrays; expected 2 (weights, biases)"
                               % (path, layer.name, len(arrays)))
        pair = []
        for array, expected, what in zip(arrays, (layer.shape, layer.shape[-1:]), ("weights", "biases")):
            if not isinstance(array, np.ndarray) or not np.issubdtype(array.dtype, np.floating):
                raise WeightsError("weights=%s: layer %s %s are %s, not a float array"
                                   % (path, layer.name, what, getattr(array, "dtype", type(array).__name__)))
            if tuple(array.shape) != expected:
                raise WeightsError("weights=%s: layer %s (Keras: %s) %s have shape %s; VGG16 needs %s"
                                   % (path, layer.name, layer.keras_name, what, tuple(array.shape), expected))
            pair.append(np.ascontiguousarray(array, dtype=np.float32))
        weights[layer.name] = tuple(pair)
    return weights


class _Refused(pickle.UnpicklingError):
    """The pickle asked for something other than numpy arrays."""


class _ArraysOnlyUnpickler(pickle.Unpickler):
    """Rebuilds numpy arrays, dicts, lists, tuples, strings and numbers; refuses every other global.

    A pickle names the callables it runs; `find_class` is where they are looked up, so
    refusing there stops a crafted file before any of its code runs.
    """

    _numpy_core = np._core if hasattr(np, "_core") else np.core
    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"): _numpy_core.multiarray._reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _numpy_core.multiarray._reconstruct,
        ("numpy.core.multiarray", "scalar"): _numpy_core.multiarray.scalar,
        ("numpy._core.multiarray", "scalar"): _numpy_core.multiarray.scalar,
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): __import__("codecs").encode,  # bytes in protocol-2 pickles
    }

    def find_class(self, module, name):
        try:
            return self._ALLOWED[module, name]
        except KeyError:
            raise _Refused("it refers to %s.%s, and only numpy arrays are accepted"
                                         % (module, name)) from None


def _read_npy(path):
    """tensorflow-vgg's layout: a 0-d object array holding {layer: [weights, biases]}."""
    try:
        with open(path, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise WeightsError("weights=%s is an .npy file of format %d.%d; tensorflow-vgg's is 1.0"
                                   % ((path,) + tuple(version)))
            if not dtype.hasobject:
                raise WeightsError("weights=%s is a plain %s array of shape %s, not tensorflow-vgg's "
                                   "{layer: [weights, biases]} dict" % (path, dtype, shape))
            # encoding="latin1": vgg16.npy was pickled by Python 2 (as tensorflow-vgg's own loader assumes).
            content = _ArraysOnlyUnpickler(handle, encoding="latin1").load()
    except WeightsError:
        raise
    except _Refused as error:
        raise WeightsError("weights=%s refused: %s" % (path, error)) from None
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError,
            KeyError) as error:
        raise WeightsError("weights=%s cannot be read as vgg16.npy (truncated or damaged?): %s"
                           % (path, str(error) or type(error).__name__)) from None
    if isinstance(content, np.ndarray) and content.dtype == object and content.shape == ():
        content = content.item()
    if not isinstance(content, dict):
        raise WeightsError("weights=%s holds a %s, not tensorflow-vgg's {layer: [weights, biases]} dict"
                           % (path, type(content).__name__))
    raw = {}
    for name, arrays in content.items():
        if not isinstance(name, str) or not isinstance(arrays, (list, tuple)):
            raise WeightsError("weights=%s: entry %r is not layer name -> [weights, biases]" % (path, name))
        raw[name] = list(arrays)
    return raw


def _read_h5(path):
    """Keras's legacy HDF5 layout (`keras_h5.read_layers`): ({our layer name: [kernel, bias]}, [the file's names of
    its layers with weights])."""
    layers = keras_h5.read_layers(path, "vgg16_weights_tf_dim_ordering_tf_kernels.h5")
    # A layer without weights is a missing layer (reported by _checked, with the file's own layers: by our names
    # alone, another model's file would seem to hold fc8, which is its `predictions`); kernel first, then bias,
    # whatever the datasets are called (kernel:0, W_1:0, ...).
    raw = {layer.name: sorted((array for _, array in layers[layer.keras_name]), key=lambda array: -array.ndim)
           for layer in LAYERS if layers.get(layer.keras_name)}
    return raw, [name for name, weights in layers.items() if weights]


# ----------------------------------------------------------------------------- writing

def random_weights(seed=0):
    """Seeded random weights for every layer (He-normal kernels, small biases), float32.

    Features computed with them are meaningless: they are for tests, benchmarks and checking an
    installation (the `random` command).

    Args:
      seed: seed of numpy's default generator; the same seed gives the same weights.

    Returns:
      {layer name: (weights, biases)}, the shapes of `LAYERS`.
    """
    rng = np.random.default_rng(seed)
    weights = {}
    for layer in LAYERS:
        fan_in = int(np.prod(layer.shape[:-1]))
        kernel = rng.standard_normal(layer.shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        biases = rng.uniform(-0.1, 0.1, layer.shape[-1:]).astype(np.float32)
        weights[layer.name] = (kernel, biases)
    return weights


def save_npy(weights, path):
    """Writes `weights` in tensorflow-vgg's vgg16.npy layout (a pickled dict {layer: [weights, biases]})."""
    np.save(path, {name: [kernel, biases] for name, (kernel, biases) in weights.items()}, allow_pickle=True)


def save_h5(weights, path):
    """Writes `weights` in Keras's legacy HDF5 layout of vgg16_weights_tf_dim_ordering_tf_kernels.h5.

    Root attribute `layer_names` lists every Keras layer (those without weights have empty
    `weight_names`), each layer group has `weight_names` and its datasets, as Keras 2 wrote them.
    """

    by_keras_name = {layer.keras_name: layer for layer in LAYERS}
    keras_layers = ["input_1"]
    for block, (_, count) in enumerate(CONV_BLOCKS, start=1):
        keras_layers += ["block%d_conv%d" % (block, index) for index in range(1, count + 1)]
        keras_layers.append("block%d_pool" % block)
    keras_layers += ["flatten", "fc1", "fc2", "predictions"]
    layers = []
    for keras_name in keras_layers:
        layer = by_keras_name.get(keras_name)
        present = layer is not None and layer.name in weights
        layers.append((keras_name, tuple(zip(("kernel", "bias"), weights[layer.name])) if present else ()))
    keras_h5.write_weights(path, layers)


# ----------------------------------------------------------------------------- the command

RANDOM_SUFFIXES = {".npy": "tensorflow-vgg's", ".h5": "Keras's"}  # the layout each suffix is written in


def write_random(path, seed=0):
    """Writes seeded random VGG16 weights to `path`, in the layout its suffix names (RANDOM_SUFFIXES)."""
    save = save_npy if Path(path).suffix.lower() == ".npy" else save_h5
    save(random_weights(seed), path)


def main(argv=None):
    """`python -m models.weight_files random OUT [--model NAME] [--seed N]`; returns the exit status.

    Writes seeded random weights of any model of `models.registry`, in a layout its weight files module
    offers (VGG16: .npy or .h5).

    Exit status: 0 written; 2 a wrong extension, an existing file or a missing folder (nothing
    written); 1 the file could not be written (nothing is left of it).
    """
    from models import registry
    from parallel.flag_types import FlagParser

    parser = FlagParser(  # a flag given twice is refused in one line, not dropped
        prog="python -m models.weight_files",
        description="Model weight files. 'random' writes seeded random weights in a real layout, to check "
                    "that an installation runs without the ImageNet file: features computed with them are "
                    "meaningless.")
    commands = parser.add_subparsers(dest="command", required=True)
    random_command = commands.add_parser(
        "random", help="write seeded random weights (for a smoke test only: features are meaningless)")
    random_command.add_argument("output", type=Path,
                                help="file to write; its extension picks the layout (vgg16: .npy, tensorflow-vgg's, "
                                     "or .h5, Keras's; DINOv2 and CLIP: .safetensors, Hugging Face's, or no "
                                     "extension, a folder in Hugging Face's layout with its config.json, which "
                                     "--model clip and --model dinov2 read the size from; SigLIP's named sizes: no "
                                     "extension, a folder in transformers' layout; the other models: .h5, "
                                     "Keras's)")
    random_command.add_argument("--model", default=registry.DEFAULT_MODEL, choices=registry.NAMES,
                                help="whose weights (default: %(default)s)")
    random_command.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    args = parser.parse_args(argv)
    files = registry.weight_files(args.model)
    refusal = _refusal(args.output, args.model, files.RANDOM_SUFFIXES)
    if refusal:
        print("%s: error: %s" % (parser.prog, refusal), file=sys.stderr)
        return 2
    layout = files.RANDOM_SUFFIXES[args.output.suffix.lower()]
    written = False
    try:
        files.write_random(args.output, args.seed)
        written = True
    except OSError as error:
        print("%s: failed: cannot write %s: %s" % (parser.prog, args.output, error.strerror or error),
              file=sys.stderr)
        return 1
    except ValueError as error:  # a model without random weights of its own (siglip: its size is a checkpoint's)
        print("%s: error: %s" % (parser.prog, error), file=sys.stderr)
        return 2
    finally:
        if not written:
            args.output.unlink(missing_ok=True)  # it did not exist before: a partial file is ours
    print("wrote %s: RANDOM %s weights (seed %d) in %s layout\n"
          "WARNING: features computed with these weights are MEANINGLESS. Use this file only to check that an\n"
          "installation runs; for real features pass --weights imagenet, or a trained weights file."
          % (args.output, args.model, args.seed, layout), file=sys.stderr)
    return 0


def _refusal(output, model, suffixes):
    """Why `output` cannot be written, found before the weights are generated; None if it can be."""
    if output.suffix.lower() not in suffixes:
        return "%s: the name must end in %s for %s" % (
            output, " or ".join("%s (%s layout)" % (suffix or "no extension", layout)
                                for suffix, layout in suffixes.items()), model)
    if os.path.lexists(output):
        return "%s exists; it is not replaced (remove it, or choose another name)" % output
    if not output.parent.is_dir():
        return "%s: the folder %s does not exist" % (output, output.parent)
    return None

if __name__ == "__main__":
    sys.exit(main())
