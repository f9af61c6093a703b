"""VGG16 (Simonyan & Zisserman, 2014) from raw TensorFlow ops, built from a table, and its weights.

    images uint8 [N, 224, 224, 3] RGB
      -> preprocess (on the device): float, RGB -> BGR, minus the Caffe mean (B 103.939, G 116.779, R 123.68)
      -> conv1_1 conv1_2 pool1 -> conv2_1 conv2_2 pool2 -> conv3_1..3 pool3 -> conv4_1..3 pool4 -> conv5_1..3 pool5
      -> fc6 relu6 -> fc7 relu7 -> fc8 prob

Endpoints carry tensorflow-vgg's names. "fc7" means different things in different tools:
here, as in tensorflow-vgg (`vgg.fc7`), `fc7` is the PRE-activation of the second
fully-connected layer and `relu7` the value after the ReLU, which is what Caffe's in-place
"fc7" blob and Keras's `fc2` layer give. No dropout: this is inference.

Variables are `vgg16/<layer>/weights` and `vgg16/<layer>/biases` (tensorflow-vgg's layer
names), created with `tf.compat.v1.get_variable` so that the engine's placement strategy
gives every device its own copy; their values are loaded from host arrays, never embedded
in the graph. Only the layers up to the requested endpoint are built and loaded.

Weights come from either on-disk layout of the same ImageNet model:
- tensorflow-vgg's `vgg16.npy`: a pickled dict {layer: [weights, biases]}. A pickle can run
  code, so it is read with a restricted unpickler that only rebuilds numpy arrays, dicts,
  lists and tuples; anything else is refused before it runs.
- Keras's `vgg16_weights_tf_dim_ordering_tf_kernels.h5` (legacy Keras HDF5 layout: root
  attribute `layer_names`, per-layer attribute `weight_names`), layers block1_conv1 ...
  block5_conv3, fc1, fc2, predictions. `weights="imagenet"` uses Keras's cache file, or
  downloads it from where Keras does and checks Keras's published MD5.
"""

import dataclasses
import hashlib
import logging
import os
import pickle
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import tensorflow as tf

from parallel.engine import ModelSpec

tf1 = tf.compat.v1
log = logging.getLogger("parallel")

IMAGE_SIZE = (224, 224)
BGR_MEAN = (103.939, 116.779, 123.68)

# The table: (output channels, convolutions) per block, then the fully-connected layers.
CONV_BLOCKS = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))
FULLY_CONNECTED = (("fc6", 4096), ("fc7", 4096), ("fc8", 1000))

ENDPOINTS = ("pool5", "fc6", "relu6", "fc7", "relu7", "fc8", "prob")
PRECISIONS = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}

PARAMETER_COUNT = 138_357_544          # pinned by the tests
PARAMETER_COUNT_TO_FC7 = 134_260_544

IMAGENET_URL = ("https://storage.googleapis.com/tensorflow/keras-applications/"
                "vgg16/vgg16_weights_tf_dim_ordering_tf_kernels.h5")
IMAGENET_MD5 = "64373286793e3c8b2b4e3219cbf3544b"  # Keras's published hash of that file
IMAGENET_FILE = "vgg16_weights_tf_dim_ordering_tf_kernels.h5"


class WeightsError(ValueError):
    """A weights file that cannot be used: the message names the file, the layer and the shapes."""


@dataclasses.dataclass(frozen=True)
class Layer:
    """One layer with weights: tensorflow-vgg name, Keras name, weights shape; biases are [shape[-1]].

    `pool` names the 2x2 max-pool that follows the layer (the last convolution of a block).
    """

    name: str
    keras_name: str
    shape: tuple
    pool: str = None

    @property
    def is_conv(self):
        return len(self.shape) == 4


def _build_table():
    layers, channels = [], 3
    for block, (width, count) in enumerate(CONV_BLOCKS, start=1):
        for index in range(1, count + 1):
            layers.append(Layer("conv%d_%d" % (block, index), "block%d_conv%d" % (block, index),
                                (3, 3, channels, width), "pool%d" % block if index == count else None))
            channels = width
    size = IMAGE_SIZE[0] // 2 ** len(CONV_BLOCKS)
    inputs = size * size * channels  # pool5 flattened in NHWC order: 7 * 7 * 512
    for (name, width), keras_name in zip(FULLY_CONNECTED, ("fc1", "fc2", "predictions")):
        layers.append(Layer(name, keras_name, (inputs, width)))
        inputs = width
    return tuple(layers)


LAYERS = _build_table()
_LAYER_BY_NAME = {layer.name: layer for layer in LAYERS}
# The last layer with weights each endpoint needs.
_LAST_LAYER = {"pool5": "conv5_3", "fc6": "fc6", "relu6": "fc6", "fc7": "fc7", "relu7": "fc7",
               "fc8": "fc8", "prob": "fc8"}


def _check_endpoint(endpoint):
    if endpoint not in ENDPOINTS:
        raise ValueError("layer=%r; expected one of %s" % (endpoint, ", ".join(ENDPOINTS)))


def layers_for(endpoint):
    """The layers (in order) that `endpoint` depends on."""
    _check_endpoint(endpoint)
    names = [layer.name for layer in LAYERS]
    return LAYERS[:names.index(_LAST_LAYER[endpoint]) + 1]


def feature_size(endpoint):
    """Floats per image at `endpoint` (pool5: 25088; fc6 ... relu7: 4096; fc8, prob: 1000)."""
    last = layers_for(endpoint)[-1]
    if last.is_conv:
        side = IMAGE_SIZE[0] // 2 ** len(CONV_BLOCKS)
        return side * side * last.shape[-1]
    return last.shape[-1]


def preprocess(images, dtype=tf.float32):
    """Caffe preprocessing, in the graph: the host feeds uint8, a quarter of the bytes of float32.

    Args:
      images: uint8 [N, H, W, 3] RGB.
      dtype: compute dtype of the result.

    Returns:
      dtype [N, H, W, 3] BGR with the ImageNet mean subtracted (Keras's
      `preprocess_input(mode="caffe")`, tensorflow-vgg's preprocessing of 0..255 input).
    """
    if images.dtype != tf.uint8:
        raise ValueError("images must be uint8 [N, H, W, 3] RGB; got %s %s" % (images.dtype.name, images.shape))
    bgr = tf.reverse(tf.cast(images, tf.float32), axis=[-1])
    return tf.cast(bgr - tf.constant(BGR_MEAN, tf.float32), dtype)


def vgg16(images, endpoint="fc7", dtype=tf.float32, scope="vgg16"):
    """Builds VGG16 up to `endpoint` under variable scope `scope`.

    Args:
      images: uint8 [N, 224, 224, 3] RGB.
      endpoint: one of ENDPOINTS (tensorflow-vgg names; fc7 is before the ReLU).
      dtype: compute dtype (tf.float32, tf.float16 or tf.bfloat16); the variables are
        created in it, so reduced precision also halves the weights' device memory.
      scope: variable scope of the weights.

    Returns:
      float32 [N, 7, 7, 512] for pool5, [N, 4096] for fc6 ... relu7, [N, 1000] for fc8, prob.
    """
    _check_endpoint(endpoint)
    if images.shape.rank != 4 or tuple(images.shape[1:]) != IMAGE_SIZE + (3,):
        raise ValueError("images must be [N, 224, 224, 3]; got %s" % (images.shape,))
    needed = {layer.name for layer in layers_for(endpoint)}
    endpoints = {}
    with tf1.variable_scope(scope):
        net = preprocess(images, dtype)
        for layer in LAYERS:
            if layer.name not in needed:
                break
            with tf1.variable_scope(layer.name):
                weights = tf1.get_variable("weights", layer.shape, dtype, tf1.zeros_initializer())
                biases = tf1.get_variable("biases", layer.shape[-1:], dtype, tf1.zeros_initializer())
            if layer.is_conv:
                net = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(net, weights, 1, "SAME"), biases), name=layer.name)
                if layer.pool:
                    net = endpoints[layer.pool] = tf.nn.max_pool2d(net, 2, 2, "VALID", name=layer.pool)
            else:
                if net.shape.rank != 2:
                    net = tf.reshape(net, [-1, layer.shape[0]])
                net = tf.nn.bias_add(tf.matmul(net, weights), biases, name=layer.name)
                endpoints[layer.name] = net
                if layer.name == "fc8":
                    endpoints["prob"] = tf.nn.softmax(tf.cast(net, tf.float32), name="prob")
                else:
                    net = endpoints["relu" + layer.name[2:]] = tf.nn.relu(net, name="relu" + layer.name[2:])
        return tf.cast(endpoints[endpoint], tf.float32, name="features")


def variable_values(weights, endpoint="fc7", scope="vgg16"):
    """The arrays of the variables `vgg16(endpoint=endpoint, scope=scope)` creates.

    Args:
      weights: {layer name: (weights, biases)} as `load_weights` returns.
      endpoint: the endpoint the graph was built for (only the layers it needs).
      scope: the variable scope the graph was built under.

    Returns:
      {"vgg16/conv1_1/weights": float32 [3, 3, 3, 64], "vgg16/conv1_1/biases": float32 [64], ...}
    """
    values = {}
    for layer in layers_for(endpoint):
        kernel, biases = weights[layer.name]
        values["%s/%s/weights" % (scope, layer.name)] = kernel
        values["%s/%s/biases" % (scope, layer.name)] = biases
    return values


# ----------------------------------------------------------------------------- weight files

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_NPY_MAGIC = b"\x93NUMPY"


def load_weights(source="imagenet", cache_dir=None):
    """Reads the weights of all 16 layers from a file, checking every name and shape.

    Args:
      source: "imagenet" (Keras's cache file, downloaded if absent), or the path of a
        tensorflow-vgg `vgg16.npy` or a Keras legacy `.h5` file (told apart by content).
      cache_dir: Keras's home folder for "imagenet" (default: $KERAS_HOME or ~/.keras).

    Returns:
      {layer name: (float32 weights, float32 biases)}, e.g. "conv1_1": ([3, 3, 3, 64], [64]).

    Raises:
      WeightsError: the file is missing, unreadable, truncated, of another layout, lacks a
        layer, has a wrong shape, or (npy) holds anything but arrays.
    """
    path = imagenet_weights(cache_dir) if source == "imagenet" else Path(source)
    try:
        with open(path, "rb") as handle:
            magic = handle.read(8)
    except OSError as error:
        raise WeightsError("--weights %s: %s" % (path, error.strerror or error)) from None
    if magic.startswith(_NPY_MAGIC):
        raw = _read_npy(path)
    elif magic == _HDF5_MAGIC:
        raw = _read_h5(path)
    else:
        raise WeightsError("--weights %s is neither a tensorflow-vgg vgg16.npy nor a Keras .h5 weights file" % path)
    return _checked(raw, path)


def _checked(raw, path):
    weights = {}
    for layer in LAYERS:
        if layer.name not in raw:
            raise WeightsError("--weights %s has no layer %s (Keras: %s); it has: %s"
                               % (path, layer.name, layer.keras_name, ", ".join(sorted(raw)) or "nothing"))
        arrays = raw[layer.name]
        if len(arrays) != 2:
            raise WeightsError("--weights %s: layer %s has %d arrays; expected 2 (weights, biases)"
                               % (path, layer.name, len(arrays)))
        pair = []
        for array, expected, what in zip(arrays, (layer.shape, layer.shape[-1:]), ("weights", "biases")):
            if not isinstance(array, np.ndarray) or not np.issubdtype(array.dtype, np.floating):
                raise WeightsError("--weights %s: layer %s %s are %s, not a float array"
                                   % (path, layer.name, what, getattr(array, "dtype", type(array).__name__)))
            if tuple(array.shape) != expected:
                raise WeightsError("--weights %s: layer %s (Keras: %s) %s have shape %s; VGG16 needs %s"
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
                raise WeightsError("--weights %s is an .npy file of format %d.%d; tensorflow-vgg's is 1.0"
                                   % ((path,) + tuple(version)))
            if not dtype.hasobject:
                raise WeightsError("--weights %s is a plain %s array of shape %s, not tensorflow-vgg's "
                                   "{layer: [weights, biases]} dict" % (path, dtype, shape))
            # encoding="latin1": vgg16.npy was pickled by Python 2 (as tensorflow-vgg's own loader assumes).
            content = _ArraysOnlyUnpickler(handle, encoding="latin1").load()
    except WeightsError:
        raise
    except _Refused as error:
        raise WeightsError("--weights %s refused: %s" % (path, error)) from None
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError,
            KeyError) as error:
        raise WeightsError("--weights %s cannot be read as vgg16.npy (truncated or damaged?): %s"
                           % (path, str(error) or type(error).__name__)) from None
    if isinstance(content, np.ndarray) and content.dtype == object and content.shape == ():
        content = content.item()
    if not isinstance(content, dict):
        raise WeightsError("--weights %s holds a %s, not tensorflow-vgg's {layer: [weights, biases]} dict"
                           % (path, type(content).__name__))
    raw = {}
    for name, arrays in content.items():
        if not isinstance(name, str) or not isinstance(arrays, (list, tuple)):
            raise WeightsError("--weights %s: entry %r is not layer name -> [weights, biases]" % (path, name))
        raw[name] = list(arrays)
    return raw


def _attribute_strings(node, name):
    values = node.attrs.get(name)
    if values is None:
        return None
    return [value.decode("utf-8") if isinstance(value, bytes) else str(value) for value in np.atleast_1d(values)]


def _read_h5(path):
    """Keras's legacy HDF5 layout, by layer name; dataset names are read from `weight_names`."""
    import h5py

    try:
        with h5py.File(path, "r") as file:
            root = file["model_weights"] if "model_weights" in file else file  # a whole saved model
            layer_names = _attribute_strings(root, "layer_names")
            if layer_names is None:
                raise WeightsError("--weights %s is an HDF5 file without Keras's 'layer_names' attribute; "
                                   "expected vgg16_weights_tf_dim_ordering_tf_kernels.h5" % path)
            raw = {}
            for layer in LAYERS:
                if layer.keras_name not in layer_names or layer.keras_name not in root:
                    continue  # reported by _checked, with the layers that are there
                group = root[layer.keras_name]
                arrays = [np.asarray(group[weight_name]) for weight_name in _attribute_strings(group, "weight_names") or []]
                if not arrays:
                    continue  # a layer without weights is a missing layer
                # Kernel first, then bias, whatever the datasets are called (kernel:0, W_1:0, ...).
                raw[layer.name] = sorted(arrays, key=lambda array: -array.ndim)
            if not raw:
                raise WeightsError("--weights %s has none of VGG16's layers (it has: %s)"
                                   % (path, ", ".join(layer_names) or "nothing"))
            return raw
    except WeightsError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise WeightsError("--weights %s cannot be read as a Keras .h5 weights file (truncated or damaged?): %s"
                           % (path, str(error).splitlines()[0] if str(error) else type(error).__name__)) from None


def keras_cache_dir():
    """Keras's home folder: $KERAS_HOME, or ~/.keras."""
    return Path(os.environ.get("KERAS_HOME") or Path.home() / ".keras")


def imagenet_weights(cache_dir=None, url=IMAGENET_URL, md5=IMAGENET_MD5):
    """Path of Keras's ImageNet VGG16 file, downloading it into Keras's cache if it is absent.

    The download is checked against Keras's published MD5; a mismatch keeps nothing. The
    file appears in the cache only complete (written beside it, then renamed). An existing
    cache file is used as is, like any file given with --weights (its layers and shapes
    are still checked when it is read).

    Args:
      cache_dir: Keras's home folder (default `keras_cache_dir()`); the file goes in `models/`.
      url: where to download from.
      md5: expected hex MD5 of the file.

    Returns:
      Path of the file.

    Raises:
      WeightsError: offline, an HTTP error, a hash mismatch or a cache that cannot be written.
    """
    target = Path(cache_dir or keras_cache_dir()) / "models" / IMAGENET_FILE
    if target.is_file():
        return target
    log.info("downloading VGG16 ImageNet weights (553 MB) from %s", url)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=IMAGENET_FILE + ".", suffix=".part", dir=target.parent)
    except OSError as error:
        raise WeightsError("cannot write Keras's cache folder %s: %s; pass --weights PATH"
                           % (target.parent, error.strerror or error)) from None
    try:
        digest = hashlib.md5()
        with os.fdopen(descriptor, "wb") as handle:
            try:
                response = urllib.request.urlopen(url, timeout=60)
            except (urllib.error.URLError, OSError) as error:
                reason = getattr(error, "reason", None) or error
                raise WeightsError("cannot download the ImageNet weights from %s (%s): offline? "
                                   "pass --weights PATH to a vgg16.npy or %s" % (url, reason, IMAGENET_FILE)) from None
            with response, _download_progress(response.headers.get("Content-Length")) as progress:
                while True:
                    chunk = response.read(1 << 20)
                    if not chunk:
                        break
                    handle.write(chunk)
                    digest.update(chunk)
                    progress(len(chunk))
            handle.flush()
            os.fsync(handle.fileno())
        if digest.hexdigest() != md5:
            raise WeightsError("the file downloaded from %s has MD5 %s, expected %s; nothing was kept"
                               % (url, digest.hexdigest(), md5))
        os.replace(temporary, target)
        return target
    except OSError as error:
        raise WeightsError("downloading %s into %s failed: %s" % (url, target.parent, error.strerror or error)) from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


class _download_progress:
    """A tqdm bar on stderr when it is a terminal; nothing otherwise."""

    def __init__(self, total):
        self._bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm
            self._bar = tqdm(total=int(total) if total else None, unit="B", unit_scale=True, desc="VGG16 weights")

    def __enter__(self):
        return self._bar.update if self._bar is not None else (lambda count: None)

    def __exit__(self, *exc_info):
        if self._bar is not None:
            self._bar.close()


def _fingerprint(path):
    """Identifies a weights file by content, cheaply: size and a hash of its first and last MiB."""
    digest = hashlib.sha256()
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            digest.update(handle.read(1 << 20))
            handle.seek(max(0, size - (1 << 20)))
            digest.update(handle.read(1 << 20))
    except OSError as error:
        raise WeightsError("--weights %s: %s" % (path, error.strerror or error)) from None
    return "%s (%d bytes, sha256 of ends %s)" % (path.name, size, digest.hexdigest()[:16])


def feature_model(endpoint="fc7", weights="imagenet", precision="fp32", cache_dir=None):
    """VGG16 as the engine's `ModelSpec`.

    Args:
      endpoint: one of ENDPOINTS (default fc7, before the ReLU; relu7 is Keras's fc2).
      weights: "imagenet" or a path (see `load_weights`); read when the engine asks, once.
      precision: "fp32", "fp16" or "bf16": compute dtype on the devices; outputs are float32.
      cache_dir: Keras's home folder for "imagenet".

    Returns:
      parallel.engine.ModelSpec.

    Raises:
      ValueError: an unknown endpoint or precision; WeightsError: a weights path that is not a file.
    """
    _check_endpoint(endpoint)
    if precision not in PRECISIONS:
        raise ValueError("precision=%r; expected one of %s" % (precision, ", ".join(PRECISIONS)))
    if weights == "imagenet":
        identity = "imagenet (Keras %s, md5 %s)" % (IMAGENET_FILE, IMAGENET_MD5)
    else:
        path = Path(weights)
        if not path.is_file():
            raise WeightsError("--weights %s is not a file (pass a vgg16.npy or %s, or 'imagenet')"
                               % (weights, IMAGENET_FILE))
        identity = _fingerprint(path)
    dtype = PRECISIONS[precision]
    return ModelSpec(
        name="vgg16",
        fn=lambda images: vgg16(images, endpoint, dtype),
        image_size=IMAGE_SIZE,
        load_weights=lambda: variable_values(load_weights(weights, cache_dir), endpoint),
        output_name=endpoint,
        settings={"model": "vgg16", "layer": endpoint, "weights": identity, "precision": precision})


# ----------------------------------------------------------------------------- test and benchmark helpers

def random_weights(seed=0):
    """Seeded random weights for every layer (He-normal kernels, small biases), float32.

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
    import h5py

    by_keras_name = {layer.keras_name: layer for layer in LAYERS}
    keras_layers = ["input_1"]
    for block, (_, count) in enumerate(CONV_BLOCKS, start=1):
        keras_layers += ["block%d_conv%d" % (block, index) for index in range(1, count + 1)]
        keras_layers.append("block%d_pool" % block)
    keras_layers += ["flatten", "fc1", "fc2", "predictions"]
    with h5py.File(path, "w") as file:
        file.attrs["layer_names"] = np.array([name.encode() for name in keras_layers])
        file.attrs["backend"] = b"tensorflow"
        file.attrs["keras_version"] = b"2.0.0"
        for keras_name in keras_layers:
            group = file.create_group(keras_name)
            layer = by_keras_name.get(keras_name)
            if layer is None or layer.name not in weights:
                group.attrs["weight_names"] = np.array([], dtype="S1")
                continue
            names = ["%s/kernel:0" % keras_name, "%s/bias:0" % keras_name]
            group.attrs["weight_names"] = np.array([name.encode() for name in names])
            for name, array in zip(names, weights[layer.name]):
                group.create_dataset(name, data=array)
