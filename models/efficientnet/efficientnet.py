"""EfficientNetB0 (Tan & Le, 2019) from raw TensorFlow ops, built from the table in `efficientnet_layers.py`,
equal to Keras's `keras.applications.EfficientNetB0` on the same weights.

    images uint8 [N, 224, 224, 3] RGB
      -> preprocess (on the device, inside the model as Keras does): Rescaling(1/255), Normalization (the
         file's mean and variance) and, for a file holding Keras's ImageNet Normalization, Rescaling(1/sqrt(ImageNet
         std))
      -> stem_conv 3x3/2 (32), swish -> 16 MBConv blocks (block1a ... block7a) -> top_conv 1x1 (1280), swish
         = top_activation [N, 7, 7, 1280] -> global average pool = avg_pool [N, 1280]
         -> predictions dense (1000), softmax (Keras's top_dropout is the identity at inference)

Each batch norm (epsilon 1e-3) is folded into the convolution before it when the weights are loaded
(kernel * gamma / sqrt(variance + epsilon), and a bias), so a block is: [expand 1x1 conv, swish],
depthwise conv, swish, squeeze-and-excitation (mean, dense + swish, dense + sigmoid, multiply), project
1x1 conv [+ the block's input]. Stride-2 convolutions take Keras's `correct_pad` zeros (one fewer before than
after), as Keras's ZeroPadding2D + "valid" do: on these sizes that is TensorFlow's "SAME" padding.

Variables are `efficientnet_b0/<Keras layer>/kernel` and `.../bias` (the folded convolutions, the SE and
predictions dense layers) and `efficientnet_b0/preprocess/mean`, `divisor` and `rescale` [3], created with
`tf.compat.v1.get_variable` so that the engine's placement strategy gives every device its own copy;
their values are loaded from host arrays, never embedded in the graph. Only what the requested endpoint
needs is built and loaded.

Weights: "imagenet" is Keras's `efficientnetb0_notop.h5` (or `efficientnetb0.h5` for predictions). Keras's
ImageNet files store the ImageNet standard deviations where their Normalization's variance should be, and
Keras's EfficientNetB0(weights="imagenet") makes up for it with an extra Rescaling(1/sqrt(std)), which
EfficientNetB0(weights=PATH) does not add. Here the file's content decides, not how it was named: a file
whose Normalization holds exactly those values (Keras's ImageNet files, and every model fine-tuned from them
and saved) is computed with the extra Rescaling, as Keras's weights="imagenet"; any other file as Keras's
weights=PATH. So the ImageNet file given by path, or a copy of it offline, gives the features of "imagenet".
"""

import numpy as np
import tensorflow as tf

from models.common import Weights, check_endpoint, check_image_size, check_uint8_images, compute_dtype
from models.efficientnet.efficientnet_layers import (BATCH_NORM_EPSILON, BLOCKS, ENDPOINTS, FEATURE_SIZES, IMAGE_SIZE,
                                                     IMAGENET_STDDEV_RGB, NORMALIZATION_EPSILON, needs_top)
from models.efficientnet.efficientnet_weights import load_weights, looks_like_keras_imagenet_file
from models.imagenet_download import KerasFile
from parallel.model import ModelSpec

tf1 = tf.compat.v1

NAME = "efficientnet_b0"
KERAS_WEIGHTS = "https://storage.googleapis.com/keras-applications/"  # Keras's efficientnet BASE_WEIGHTS_PATH
_RANDOM_COMMAND = "python -m models.weight_files random efficientnet_b0-random.h5 --model efficientnet_b0"
NOTOP_FILE = KerasFile(
    name="efficientnetb0_notop.h5", url=KERAS_WEIGHTS + "efficientnetb0_notop.h5",
    digest="50bc09e76180e00e4465e1a485ddc09d",  # Keras's WEIGHTS_HASHES["b0"][1]
    what="EfficientNetB0 ImageNet weights (notop)", random_command=_RANDOM_COMMAND)
FULL_FILE = KerasFile(
    name="efficientnetb0.h5", url=KERAS_WEIGHTS + "efficientnetb0.h5",
    digest="902e53a9f72be733fc0bcb005b3ebbac",  # Keras's WEIGHTS_HASHES["b0"][0]
    what="EfficientNetB0 ImageNet weights (with the top)", random_command=_RANDOM_COMMAND)


PREPROCESSING = ("Keras EfficientNet: x/255, Normalization (the file's mean, variance), and Rescaling "
                 "1/sqrt(ImageNet std) when the file holds Keras's ImageNet Normalization")


def keras_file_for(endpoint):
    """The KerasFile "imagenet" means for `endpoint`: the full file for predictions, else the notop one."""
    return FULL_FILE if needs_top(endpoint) else NOTOP_FILE


def _check_endpoint(endpoint):
    check_endpoint(endpoint, ENDPOINTS)


def feature_size(endpoint):
    """Floats per image at `endpoint` (top_activation: 62720; avg_pool: 1280; predictions: 1000)."""
    _check_endpoint(endpoint)
    return FEATURE_SIZES[endpoint]


# ----------------------------------------------------------------------------- the graph

def _variables(name, kernel_shape, dtype, channels=None):
    """The kernel and the bias [channels] (default: the kernel's last dimension) of layer `name`."""
    with tf1.variable_scope(name):
        kernel = tf1.get_variable("kernel", kernel_shape, dtype, tf1.zeros_initializer())
        bias = tf1.get_variable("bias", [channels or kernel_shape[-1]], dtype, tf1.zeros_initializer())
    return kernel, bias


def _swish(net):
    """x * sigmoid(x), Keras's swish. Written out, TensorFlow's CPU graph optimizer makes it one swish op;
    tf.nn.silu's gradient wrapper (IdentityN) keeps it three."""
    return net * tf.sigmoid(net)


def _conv(net, name, kernel_shape, dtype, strides=1):
    """A convolution with its batch norm folded in; "SAME" is Keras's padding (see `efficientnet_b0`)."""
    kernel, bias = _variables(name, kernel_shape, dtype)
    return tf.nn.bias_add(tf.nn.conv2d(net, kernel, strides, "SAME"), bias)


def _block(net, block, dtype):
    """One MBConv block: [N, size, size, filters_in] -> [N, output_size, output_size, filters_out]."""
    inputs, prefix = net, block.name + "_"
    if block.expands:
        net = _swish(_conv(net, prefix + "expand_conv", (1, 1, block.filters_in, block.filters), dtype))
    kernel, bias = _variables(prefix + "dwconv", (block.kernel_size, block.kernel_size, block.filters, 1), dtype,
                              channels=block.filters)
    net = tf.nn.depthwise_conv2d(net, kernel, [1, block.strides, block.strides, 1], "SAME")
    net = _swish(tf.nn.bias_add(net, bias))
    # Squeeze and excitation: Keras's 1x1 convolutions of a [N, 1, 1, C] tensor are these matrix products.
    squeezed = tf.reduce_mean(net, axis=[1, 2])
    kernel, bias = _variables(prefix + "se_reduce", (block.filters, block.se_filters), dtype)
    squeezed = _swish(tf.nn.bias_add(tf.matmul(squeezed, kernel), bias))
    kernel, bias = _variables(prefix + "se_expand", (block.se_filters, block.filters), dtype)
    excitation = tf.sigmoid(tf.nn.bias_add(tf.matmul(squeezed, kernel), bias))
    net = net * excitation[:, None, None, :]
    net = _conv(net, prefix + "project_conv", (1, 1, block.filters, block.filters_out), dtype)
    if block.residual:
        net = net + inputs  # Keras's drop-connect before it is the identity at inference
    return tf.identity(net, name=block.name)


def preprocess(images, dtype=tf.float32):
    """Keras EfficientNet's preprocessing, in the graph, op for op as Keras's layers compute it.

    Args:
      images: uint8 [N, H, W, 3] RGB.
      dtype: compute dtype of the result.

    Returns:
      dtype [N, H, W, 3]: ((images * (1/255)) - mean) / divisor * rescale, in float32 (the same roundings
      as Keras's Rescaling, Normalization and, for "imagenet", second Rescaling), with the variables
      `preprocess/mean`, `preprocess/divisor` (max(sqrt(variance), 1e-7)) and `preprocess/rescale`
      [3] loaded from the weights file's Normalization (see `variable_values`).
    """
    check_uint8_images(images)
    with tf1.variable_scope("preprocess"):
        mean, divisor, rescale = (tf1.get_variable(name, [3], tf.float32, tf1.zeros_initializer())
                                  for name in ("mean", "divisor", "rescale"))
    net = tf.cast(images, tf.float32) * np.float32(1.0 / 255.0)
    return tf.cast((net - mean) / divisor * rescale, dtype)


def efficientnet_b0(images, endpoint="avg_pool", dtype=tf.float32, scope=NAME):
    """Builds EfficientNetB0 up to `endpoint` under variable scope `scope`.

    Args:
      images: uint8 [N, 224, 224, 3] RGB.
      endpoint: one of ENDPOINTS (Keras's layer names).
      dtype: compute dtype (tf.float32, tf.float16 or tf.bfloat16); the variables are created in it
        (the preprocessing's two in float32).
      scope: variable scope of the weights.

    Returns:
      float32 [N, 7, 7, 1280] for top_activation, [N, 1280] for avg_pool, [N, 1000] for predictions.

    Every convolution pads "SAME": on the even sizes of this network TensorFlow's SAME padding puts the
    zeros where Keras's do (its correct_pad before stride 2, (0, 1) for 3x3, (1, 2) for 5x5; "same" for
    stride 1), which the tests check from the table; it also lets TensorFlow fuse the depthwise
    convolution with its bias and activation, which it cannot with explicit padding.
    """
    _check_endpoint(endpoint)
    check_image_size(images, IMAGE_SIZE)
    with tf1.variable_scope(scope):
        net = preprocess(images, dtype)
        net = _swish(_conv(net, "stem_conv", (3, 3, 3, BLOCKS[0].filters_in), dtype, strides=2))
        for block in BLOCKS:
            net = _block(net, block, dtype)
        net = _swish(_conv(net, "top_conv", (1, 1, BLOCKS[-1].filters_out, FEATURE_SIZES["avg_pool"]), dtype))
        net = tf.identity(net, name="top_activation")
        if endpoint != "top_activation":
            net = tf.reduce_mean(net, axis=[1, 2], name="avg_pool")
        if endpoint == "predictions":
            kernel, bias = _variables("predictions", (FEATURE_SIZES["avg_pool"], FEATURE_SIZES["predictions"]),
                                      dtype)
            net = tf.nn.softmax(tf.cast(tf.nn.bias_add(tf.matmul(net, kernel), bias), tf.float32), name="predictions")
        return tf.cast(net, tf.float32, name="features")


# ----------------------------------------------------------------------------- the weights

def _folded(kernel, batch_norm, depthwise=False):
    """A convolution's kernel [..., C] (a depthwise one: [k, k, C, 1]) and the batch norm after it, as one
    kernel and bias: kernel * gamma / sqrt(variance + epsilon), beta - mean * gamma / sqrt(variance + epsilon)."""
    scale = batch_norm["gamma"].astype(np.float64) / np.sqrt(batch_norm["moving_variance"].astype(np.float64)
                                                              + BATCH_NORM_EPSILON)
    folded = kernel * (scale[:, None] if depthwise else scale)
    bias = batch_norm["beta"] - batch_norm["moving_mean"] * scale
    return folded.astype(np.float32), bias.astype(np.float32)


def variable_values(weights, endpoint="avg_pool", imagenet_rescaling=False, scope=NAME):
    """The arrays of the variables `efficientnet_b0(endpoint=endpoint, scope=scope)` creates.

    Args:
      weights: {Keras layer name: {weight name: array}} as `efficientnet_weights.load_weights` returns
        (with the predictions layer if endpoint is predictions).
      endpoint: the endpoint the graph was built for.
      imagenet_rescaling: whether to divide the normalized input by sqrt(IMAGENET_STDDEV_RGB) too, as
        Keras's EfficientNetB0(weights="imagenet") does (and EfficientNetB0(weights=PATH) does not).
      scope: the variable scope the graph was built under.

    Returns:
      {"efficientnet_b0/preprocess/mean": float32 [3], ..., "efficientnet_b0/stem_conv/kernel": float32
      [3, 3, 3, 32] (batch norm folded in), "efficientnet_b0/stem_conv/bias": [32], ...}
    """
    _check_endpoint(endpoint)
    values = {}

    def put(name, kernel, bias):
        values["%s/%s/kernel" % (scope, name)] = np.ascontiguousarray(kernel, dtype=np.float32)
        values["%s/%s/bias" % (scope, name)] = np.ascontiguousarray(bias, dtype=np.float32)

    normalization = weights["normalization"]
    values[scope + "/preprocess/mean"] = normalization["mean"].astype(np.float32)
    values[scope + "/preprocess/divisor"] = np.maximum(np.sqrt(normalization["variance"].astype(np.float32)),
                                                       np.float32(NORMALIZATION_EPSILON))
    values[scope + "/preprocess/rescale"] = np.array(
        [1.0 / np.sqrt(stddev) for stddev in IMAGENET_STDDEV_RGB] if imagenet_rescaling else [1.0] * 3, np.float32)
    put("stem_conv", *_folded(weights["stem_conv"]["kernel"], weights["stem_bn"]))
    for block in BLOCKS:
        prefix = block.name + "_"
        if block.expands:
            put(prefix + "expand_conv",
                *_folded(weights[prefix + "expand_conv"]["kernel"], weights[prefix + "expand_bn"]))
        put(prefix + "dwconv", *_folded(weights[prefix + "dwconv"]["depthwise_kernel"], weights[prefix + "bn"],
                                        depthwise=True))
        for name in ("se_reduce", "se_expand"):
            layer = weights[prefix + name]
            put(prefix + name, layer["kernel"][0, 0], layer["bias"])
        put(prefix + "project_conv",
            *_folded(weights[prefix + "project_conv"]["kernel"], weights[prefix + "project_bn"]))
    put("top_conv", *_folded(weights["top_conv"]["kernel"], weights["top_bn"]))
    if needs_top(endpoint):
        put("predictions", weights["predictions"]["kernel"], weights["predictions"]["bias"])
    return values


def feature_model(endpoint="avg_pool", weights="imagenet", precision="fp32", cache_dir=None):
    """EfficientNetB0 as the engine's `ModelSpec`.

    Args:
      endpoint: one of ENDPOINTS (default avg_pool, 1280 floats).
      weights: "imagenet" (Keras's cache file, downloaded if absent: efficientnetb0_notop.h5, or
        efficientnetb0.h5 for predictions) or the path of a Keras .h5 file; a file holding Keras's ImageNet
        Normalization is computed as Keras's weights="imagenet", any other as weights=PATH (see the module
        docstring).
      precision: one of PRECISION_NAMES (see `models.vgg16.feature_model`); outputs are float32 either way.
      cache_dir: Keras's home folder for "imagenet" (default: $KERAS_HOME or ~/.keras).

    Returns:
      parallel.model.ModelSpec.

    Raises:
      ValueError: an unknown endpoint or precision; WeightsError: a weights path that is not a file.
    """
    _check_endpoint(endpoint)
    dtype = compute_dtype(precision)
    file = keras_file_for(endpoint)
    source = Weights(weights, file, "a Keras EfficientNetB0 .h5 such as %s" % file.name, cache_dir)

    def read_weights():
        values = load_weights(source.path(), include_top=needs_top(endpoint))
        return variable_values(values, endpoint, imagenet_rescaling=looks_like_keras_imagenet_file(values))

    return ModelSpec(
        name=NAME,
        fn=lambda images: efficientnet_b0(images, endpoint, dtype),
        image_size=IMAGE_SIZE,
        load_weights=read_weights,
        output_name=endpoint,
        settings={"model": NAME, "layer": endpoint, "weights": source.identity, "precision": precision,
                  "preprocessing": PREPROCESSING},
        files=source.files)
