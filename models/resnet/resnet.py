"""ResNet50 (He et al., 2015) as `keras.applications.ResNet50` computes it, from raw TensorFlow ops and a table.

    images uint8 [N, 224, 224, 3] RGB
      -> preprocess (on the device): float, RGB -> BGR, minus the Caffe mean (as VGG16; Keras's "caffe" mode)
      -> zero-pad 3, conv1 7x7 stride 2 "valid", ReLU -> zero-pad 1, 3x3 max-pool stride 2     [N, 56, 56, 64]
      -> conv2_block1..3 -> conv3_block1..4 -> conv4_block1..6 -> conv5_block1..3              [N, 7, 7, 2048]
         each block: relu(shortcut + conv_3(relu(conv_2(relu(conv_1(x)))))), the shortcut a strided 1x1
         convolution in a stage's first block (Keras's v1 layout: the stride on the first 1x1), else x
      -> conv5_block3_out -> avg_pool (global average) [N, 2048] -> predictions (Dense + softmax) [N, 1000]

Endpoints carry Keras's layer names. Every convolution of Keras's model is followed by a batch norm
(epsilon 1.001e-5); at load time each batch norm is FOLDED into the convolution before it
(kernel * gamma / sqrt(variance + epsilon), and the bias likewise), so the graph runs convolution + bias
(+ add) + ReLU, which TensorFlow fuses into one kernel each, and computes what Keras computes to float32
rounding (tests/test_resnet.py: within 1e-5 of the largest value).

Variables are `resnet50/<Keras conv name>/kernel` and `.../bias` (holding the folded values), and
`resnet50/predictions/kernel`, `.../bias`, created with `tf.compat.v1.get_variable` so that the engine's
placement strategy gives every device its own copy; their values are loaded from host arrays, never
embedded in the graph. The weights are read by `resnet_weights.py` (Keras's .h5 files), and "imagenet"
is fetched into Keras's cache by `imagenet_download.keras_file`.
"""

import numpy as np
import tensorflow as tf

from models.common import Weights, check_endpoint, check_image_size, compute_dtype
from models.imagenet_download import KERAS_APPLICATIONS, KerasFile
from models.resnet.resnet_layers import (BATCH_NORM_EPSILON, BLOCKS, CONVS, ENDPOINTS, IMAGE_SIZE, OUTPUT_CHANNELS,
                                         OUTPUT_SIDE, PREDICTIONS, STEM, TOP_ENDPOINTS)
from models.resnet.resnet_weights import FILE_NAME, NOTOP_FILE_NAME, load_weights
from models.vgg16 import BGR_MEAN, preprocess  # Caffe's preprocessing
from parallel.model import ModelSpec

tf1 = tf.compat.v1

_RANDOM_COMMAND = "python -m models.weight_files random %s --model resnet50"
# Keras's files and hashes: keras/src/applications/resnet.py, WEIGHTS_HASHES["resnet50"].
RESNET50_FILE = KerasFile(
    name=FILE_NAME, url=KERAS_APPLICATIONS + "resnet/" + FILE_NAME,
    digest="2cb95161c43110f7111970584f804107",
    what="ResNet50 ImageNet weights (with the top)", random_command=_RANDOM_COMMAND % FILE_NAME)
RESNET50_NOTOP_FILE = KerasFile(
    name=NOTOP_FILE_NAME, url=KERAS_APPLICATIONS + "resnet/" + NOTOP_FILE_NAME,
    digest="4d473c1dd8becc155b73f8504c6f6626",
    what="ResNet50 ImageNet weights (notop)", random_command=_RANDOM_COMMAND % NOTOP_FILE_NAME)

PREPROCESSING = "caffe: RGB->BGR, minus the ImageNet mean (B %s, G %s, R %s)" % BGR_MEAN


def _check_endpoint(endpoint):
    check_endpoint(endpoint, ENDPOINTS)


def needs_top(endpoint):
    """Whether `endpoint` needs the `predictions` layer, which only the file with the top has."""
    _check_endpoint(endpoint)
    return endpoint in TOP_ENDPOINTS


def keras_file_for(endpoint):
    """The KerasFile "imagenet" means for `endpoint`: the notop file unless it needs the top."""
    return RESNET50_FILE if needs_top(endpoint) else RESNET50_NOTOP_FILE


def feature_size(endpoint):
    """Floats per image at `endpoint` (conv5_block3_out: 100,352; avg_pool: 2,048; predictions: 1,000)."""
    _check_endpoint(endpoint)
    return {"conv5_block3_out": OUTPUT_SIDE * OUTPUT_SIDE * OUTPUT_CHANNELS, "avg_pool": OUTPUT_CHANNELS,
            "predictions": PREDICTIONS[1][1]}[endpoint]


def _conv(net, conv, dtype):
    """`conv` (its batch norm folded in) on `net`: conv2d + bias, [N, H / stride, W / stride, out]."""
    with tf1.variable_scope(conv.name):
        kernel = tf1.get_variable("kernel", conv.shape, dtype, tf1.zeros_initializer())
        bias = tf1.get_variable("bias", conv.shape[-1:], dtype, tf1.zeros_initializer())
    # 3x3: Keras's "same" (stride 1); 1x1: "valid" (the same thing); the stem pads explicitly.
    padding = "SAME" if conv.shape[0] == 3 else "VALID"
    return tf.nn.bias_add(tf.nn.conv2d(net, kernel, conv.stride, padding), bias)


def _pad(net, amount):
    """Keras's ZeroPadding2D(amount): zeros on every side of H and W (TensorFlow's "SAME" pads unevenly)."""
    return tf.pad(net, [[0, 0], [amount, amount], [amount, amount], [0, 0]])


def resnet50(images, endpoint="avg_pool", dtype=tf.float32, scope="resnet50"):
    """Builds ResNet50 up to `endpoint` under variable scope `scope`.

    Args:
      images: uint8 [N, 224, 224, 3] RGB.
      endpoint: one of ENDPOINTS (Keras's layer names).
      dtype: compute dtype (tf.float32, tf.float16 or tf.bfloat16); the variables are created in it.
      scope: variable scope of the weights.

    Returns:
      float32 [N, 7, 7, 2048] for conv5_block3_out, [N, 2048] for avg_pool, [N, 1000] for predictions.
    """
    _check_endpoint(endpoint)
    check_image_size(images, IMAGE_SIZE)
    with tf1.variable_scope(scope):
        net = tf.nn.relu(_conv(_pad(preprocess(images, dtype), 3), STEM, dtype), name="conv1_relu")
        # Zero padding before the max-pool is -inf padding here: the ReLU's outputs are >= 0.
        net = tf.nn.max_pool2d(_pad(net, 1), 3, 2, "VALID", name="pool1_pool")
        for block in BLOCKS:
            shortcut = _conv(net, block.shortcut, dtype) if block.shortcut else net
            first, second, third = block.convs
            branch = tf.nn.relu(_conv(net, first, dtype))
            branch = tf.nn.relu(_conv(branch, second, dtype))
            # AddN, not Add: TensorFlow's remapper fuses convolution + bias + AddN + ReLU into one oneDNN
            # kernel on CPUs (measured: with tf.add it fuses only convolution + bias).
            net = tf.nn.relu(tf.add_n([_conv(branch, third, dtype), shortcut]), name=block.output)
        if endpoint == "conv5_block3_out":
            return tf.cast(net, tf.float32, name="features")
        pooled = tf.reduce_mean(tf.cast(net, tf.float32), axis=[1, 2], name="avg_pool")
        if endpoint == "avg_pool":
            return tf.identity(pooled, name="features")
        name, shape = PREDICTIONS
        with tf1.variable_scope(name):
            kernel = tf1.get_variable("kernel", shape, dtype, tf1.zeros_initializer())
            bias = tf1.get_variable("bias", shape[-1:], dtype, tf1.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(tf.cast(pooled, dtype), kernel), bias)
        return tf.nn.softmax(tf.cast(logits, tf.float32), name="features")


def fold_batch_norm(conv_weights, batch_norm):
    """A convolution's kernel and bias with the batch norm after it folded in (inference: moving statistics).

    Keras computes `(conv(x) + bias - mean) * gamma / sqrt(variance + epsilon) + beta`; the folded
    convolution computes the same as `conv(x, kernel * s) + (bias - mean) * s + beta`, s = gamma /
    sqrt(variance + epsilon), here in float64 and rounded once to float32.

    Args:
      conv_weights: {"kernel": [kh, kw, in, out], "bias": [out]}.
      batch_norm: {"gamma", "beta", "moving_mean", "moving_variance"}: each [out].

    Returns:
      (float32 kernel [kh, kw, in, out], float32 bias [out]).
    """
    scale = batch_norm["gamma"].astype(np.float64) / np.sqrt(
        batch_norm["moving_variance"].astype(np.float64) + BATCH_NORM_EPSILON)
    kernel = conv_weights["kernel"].astype(np.float64) * scale
    bias = (conv_weights["bias"].astype(np.float64) - batch_norm["moving_mean"]) * scale + batch_norm["beta"]
    return kernel.astype(np.float32), bias.astype(np.float32)


def variable_values(weights, endpoint="avg_pool", scope="resnet50"):
    """The arrays of the variables `resnet50(endpoint=endpoint, scope=scope)` creates, batch norms folded.

    Args:
      weights: {Keras layer name: {weight name: array}} as `resnet_weights.load_weights` returns
        (with `predictions` if the endpoint needs it).
      endpoint: the endpoint the graph was built for.
      scope: the variable scope the graph was built under.

    Returns:
      {"resnet50/conv1_conv/kernel": float32 [7, 7, 3, 64], "resnet50/conv1_conv/bias": float32 [64], ...}
    """
    values = {}
    for conv in CONVS:
        kernel, bias = fold_batch_norm(weights[conv.name], weights[conv.batch_norm])
        values["%s/%s/kernel" % (scope, conv.name)] = kernel
        values["%s/%s/bias" % (scope, conv.name)] = bias
    if needs_top(endpoint):
        name = PREDICTIONS[0]
        values["%s/%s/kernel" % (scope, name)] = weights[name]["kernel"]
        values["%s/%s/bias" % (scope, name)] = weights[name]["bias"]
    return values


def feature_model(endpoint="avg_pool", weights="imagenet", precision="fp32", cache_dir=None):
    """ResNet50 as the engine's `ModelSpec`.

    Args:
      endpoint: one of ENDPOINTS (default avg_pool, 2048 floats: Keras's `pooling="avg"`).
      weights: "imagenet" (Keras's cache file, downloaded if absent: the notop file, or the full one for
        predictions) or the path of either .h5 file (see `resnet_weights.load_weights`); read when the
        engine asks, once.
      precision: one of PRECISION_NAMES, as for VGG16; the output is float32 either way.
      cache_dir: Keras's home folder for "imagenet" (default: $KERAS_HOME or ~/.keras).

    Returns:
      parallel.model.ModelSpec.

    Raises:
      ValueError: an unknown endpoint or precision; WeightsError: a weights path that is not a file.
    """
    top = needs_top(endpoint)
    dtype = compute_dtype(precision)
    source = Weights(weights, keras_file_for(endpoint),
                     FILE_NAME if top else "%s or %s" % (NOTOP_FILE_NAME, FILE_NAME), cache_dir)

    def read_weights():
        return variable_values(load_weights(source.path(), include_top=top), endpoint)

    return ModelSpec(
        name="resnet50",
        fn=lambda images: resnet50(images, endpoint, dtype),
        image_size=IMAGE_SIZE,
        load_weights=read_weights,
        output_name=endpoint,
        settings={"model": "resnet50", "layer": endpoint, "weights": source.identity, "precision": precision,
                  "preprocessing": PREPROCESSING},
        files=source.files)
