"""ConvNeXt-Tiny (Liu et al., "A ConvNet for the 2020s", 2022) from raw TensorFlow ops, built from the table in
`convnext_layers.py`, equal to `keras.applications.ConvNeXtTiny` on the same weights.

    images uint8 [N, 224, 224, 3] RGB
      -> preprocess (on the device, as Keras's model does inside itself): (x - ImageNet mean) / std, on 0..255
      -> stem: 4x4 stride-4 convolution, LayerNorm
      -> stage 0 (3 blocks of 96) -> downsampling -> stage 1 (3 x 192) -> downsampling
      -> stage 2 (9 x 384) -> downsampling -> stage 3 (3 x 768)                       = stage_3  [N, 7, 7, 768]
      -> global average pool, LayerNorm                                              = avg_pool [N, 768]
      -> dense 768 -> 1000 = logits -> softmax = predictions

A block is x + gamma * pointwise_2(gelu(pointwise_1(layernorm(depthwise_7x7(x))))), with gamma Keras's
LayerScale (a weight per channel), the exact GELU (erf, as Keras's "gelu"), every LayerNorm with epsilon
1e-6, and stochastic depth absent (it is the identity at inference). A downsampling is a LayerNorm and a 2x2
stride-2 convolution.

How it is computed, for speed on CPUs and GPUs alike: channels-last throughout; the 7x7 depthwise convolutions
are `tf.nn.depthwise_conv2d` (Keras's grouped Conv2D runs through XLA on CPUs); the pointwise convolutions are
plain matmuls on [N * H * W, C] (bias and GELU beside them, which oneDNN fuses); the LayerNorms are
`tf.nn.moments` + `tf.nn.batch_normalization` over the channels, computed in float32 whatever the precision
(a float16 variance of activations in the hundreds overflows).

Variables are `convnext_tiny/<layer>/<weight>` (the table's names: "convnext_tiny/stage_0/block_0/
depthwise_conv/kernel"), created with `tf.compat.v1.get_variable` so that the engine's placement strategy
gives every device its own copy; their values are loaded from host arrays, never embedded in the graph.
Only the layers the requested endpoint needs are built and loaded.

Which Keras output each endpoint equals:
- `avg_pool` from the full file (what "imagenet" reads for it) is the output of `ConvNeXtTiny(include_top=True)`'s
  layer `convnext_tiny_head_layernorm`: the global average pool, then the classifier's own, trained LayerNorm.
  From the notop file (given as a path) it is `ConvNeXtTiny(include_top=False, pooling="avg")`'s output: the
  same pool, then the LayerNorm Keras adds after it, whose weights in Keras's notop file were never trained
  (gamma 1, beta 0: see docs/models.md).
- `stage_3` is the input of that LayerNorm before the pooling (the last block's output);
- `logits` is `ConvNeXtTiny(classifier_activation=None)`'s output, `predictions` the default softmax one.
"""

import tensorflow as tf

from models.common import Weights, check_endpoint, check_image_size, check_uint8_images, compute_dtype
from models.convnext.convnext_layers import (BODY, CLASSES, DEPTHS, ENDPOINTS, HEAD_DENSE, HEAD_LAYER_NORM, IMAGE_SIZE,
                                             LAYER_NORM_EPSILON, WIDTHS)
from models.convnext.convnext_weights import FULL_FILE, NOTOP_FILE, load_weights
from models.imagenet_download import KERAS_APPLICATIONS, KerasFile
from parallel.model import ModelSpec

tf1 = tf.compat.v1

NAME = "convnext_tiny"

# Keras's Normalization layer inside the model (PreStem): ImageNet's mean and standard deviation on 0..255.
RGB_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
RGB_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
PREPROCESSING = "inside the model: (RGB 0..255 - ImageNet mean 123.675, 116.28, 103.53) / std 58.395, 57.12, 57.375"


# Keras's files (keras/src/applications/convnext.py: BASE_WEIGHTS_PATH, WEIGHTS_HASHES["convnext_tiny"]).
_CONVNEXT_WEIGHTS = KERAS_APPLICATIONS + "convnext/"
_RANDOM_COMMAND = "python -m models.weight_files random convnext_tiny.h5 --model convnext_tiny"
FULL_KERAS_FILE = KerasFile(
    name=FULL_FILE, url=_CONVNEXT_WEIGHTS + FULL_FILE,
    digest="8ae6e78ce2933352b1ef4008e6dd2f17bc40771563877d156bc6426c7cf503ff",
    what="ConvNeXt-Tiny ImageNet weights with the classifier (28.6 M parameters)", random_command=_RANDOM_COMMAND)
NOTOP_KERAS_FILE = KerasFile(
    name=NOTOP_FILE, url=_CONVNEXT_WEIGHTS + NOTOP_FILE,
    digest="d547c096cabd03329d7be5562c5e14798aa39ed24b474157cef5e85ab9e49ef1",
    what="ConvNeXt-Tiny ImageNet weights without the classifier (27.8 M parameters)", random_command=_RANDOM_COMMAND)

_NEEDS_TOP = ("logits", "predictions")
_NEEDS_TRAINED_HEAD_NORM = ("avg_pool",) + _NEEDS_TOP  # Keras's notop file has the head LayerNorm untrained


def _check_endpoint(endpoint):
    check_endpoint(endpoint, ENDPOINTS)


def layers_for(endpoint):
    """The layers (in order) that `endpoint` depends on."""
    _check_endpoint(endpoint)
    if endpoint == "stage_3":
        return BODY
    return BODY + ((HEAD_LAYER_NORM,) if endpoint == "avg_pool" else (HEAD_LAYER_NORM, HEAD_DENSE))


def keras_file_for(endpoint):
    """The Keras file "imagenet" means for `endpoint`: the full one for every endpoint after the head's LayerNorm
    (avg_pool too: the notop file's LayerNorm is untrained, gamma 1 and beta 0), the notop one for stage_3."""
    _check_endpoint(endpoint)
    return FULL_KERAS_FILE if endpoint in _NEEDS_TRAINED_HEAD_NORM else NOTOP_KERAS_FILE


def feature_size(endpoint):
    """Floats per image at `endpoint` (stage_3: 37,632; avg_pool: 768; logits, predictions: 1000)."""
    _check_endpoint(endpoint)
    side = IMAGE_SIZE[0] // 32  # the stem's stride 4, then three downsamplings of 2
    return {"stage_3": side * side * WIDTHS[-1], "avg_pool": WIDTHS[-1], "logits": CLASSES,
            "predictions": CLASSES}[endpoint]


def preprocess(images, dtype=tf.float32):
    """Keras's ConvNeXt preprocessing (its `Normalization` layer), in the graph: the host feeds uint8.

    Args:
      images: uint8 [N, H, W, 3] RGB.
      dtype: compute dtype of the result.

    Returns:
      dtype [N, H, W, 3]: (images - RGB_MEAN) / RGB_STD, computed in float32.
    """
    check_uint8_images(images)
    pixels = tf.cast(images, tf.float32)
    return tf.cast((pixels - tf.constant(RGB_MEAN, tf.float32)) / tf.constant(RGB_STD, tf.float32), dtype)


def layer_norm(inputs, gamma, beta):
    """LayerNorm over the last axis, epsilon 1e-6, computed in float32.

    Args:
      inputs: [..., C] of the compute dtype.
      gamma, beta: [C].

    Returns:
      [..., C] of the inputs' dtype: (inputs - mean) / sqrt(variance + 1e-6) * gamma + beta.
    """
    dtype = inputs.dtype
    values, gamma, beta = (tensor if tensor.dtype == tf.float32 else tf.cast(tensor, tf.float32)
                           for tensor in (inputs, gamma, beta))
    mean, variance = tf.nn.moments(values, axes=[-1], keepdims=True)
    normalized = tf.nn.batch_normalization(values, mean, variance, beta, gamma, LAYER_NORM_EPSILON)
    return normalized if dtype == tf.float32 else tf.cast(normalized, dtype)


def _variables(layer, dtype):
    """The variables of `layer` under the current variable scope, in the table's order."""
    with tf1.variable_scope(layer.name):
        return [tf1.get_variable(name, _variable_shape(layer, name, shape), dtype, tf1.zeros_initializer())
                for name, shape in layer.arrays]


def _variable_shape(layer, name, shape):
    """The variable's shape: the table's, except a depthwise kernel: Keras's [7, 7, 1, C] is depthwise_conv2d's
    [7, 7, C, 1] (the same values in the same order)."""
    if layer.name.endswith("depthwise_conv") and name == "kernel":
        return shape[:2] + (shape[3], shape[2])
    return shape


def _block(net, layer_variables, width):
    """One ConvNeXt block on [N, H, W, width]: depthwise 7x7, LayerNorm, pointwise x4, GELU, pointwise, scale, add."""
    (depthwise, depthwise_bias), (gamma, beta), (kernel_1, bias_1), (kernel_2, bias_2), (scale,) = layer_variables
    branch = tf.nn.bias_add(tf.nn.depthwise_conv2d(net, depthwise, [1, 1, 1, 1], "SAME"), depthwise_bias)
    shape = tf.shape(branch)
    rows = layer_norm(tf.reshape(branch, [-1, width]), gamma, beta)  # pointwise convolutions as matmuls
    rows = tf.nn.gelu(tf.nn.bias_add(tf.matmul(rows, kernel_1), bias_1), approximate=False)
    rows = tf.nn.bias_add(tf.matmul(rows, kernel_2), bias_2) * scale
    return net + tf.reshape(rows, shape)


def convnext_tiny(images, endpoint="avg_pool", dtype=tf.float32, scope=NAME):
    """Builds ConvNeXt-Tiny up to `endpoint` under variable scope `scope`.

    Args:
      images: uint8 [N, 224, 224, 3] RGB.
      endpoint: one of ENDPOINTS.
      dtype: compute dtype (tf.float32, tf.float16 or tf.bfloat16); the variables are created in it.
      scope: variable scope of the weights.

    Returns:
      float32 [N, 7, 7, 768] for stage_3, [N, 768] for avg_pool, [N, 1000] for logits and predictions.
    """
    _check_endpoint(endpoint)
    check_image_size(images, IMAGE_SIZE)
    with tf1.variable_scope(scope):
        net = preprocess(images, dtype)
        variables = {layer.name: _variables(layer, dtype) for layer in layers_for(endpoint)}
        kernel, bias, gamma, beta = variables["stem"]
        net = layer_norm(tf.nn.bias_add(tf.nn.conv2d(net, kernel, 4, "VALID"), bias), gamma, beta)
        for stage, width in enumerate(WIDTHS):
            if stage:
                gamma, beta, kernel, bias = variables["downsampling_%d" % (stage - 1)]
                net = tf.nn.bias_add(tf.nn.conv2d(layer_norm(net, gamma, beta), kernel, 2, "VALID"), bias)
            for block in range(DEPTHS[stage]):
                prefix = "stage_%d/block_%d/" % (stage, block)
                net = _block(net, [variables[prefix + part] for part in (
                    "depthwise_conv", "layernorm", "pointwise_conv_1", "pointwise_conv_2", "layer_scale")], width)
        if endpoint != "stage_3":
            net = layer_norm(tf.reduce_mean(net, axis=[1, 2]), *variables[HEAD_LAYER_NORM.name])
        if endpoint in _NEEDS_TOP:
            kernel, bias = variables[HEAD_DENSE.name]
            net = tf.nn.bias_add(tf.matmul(net, kernel), bias)
            if endpoint == "predictions":
                net = tf.nn.softmax(tf.cast(net, tf.float32))
        return tf.cast(net, tf.float32, name="features")


def variable_values(weights, endpoint="avg_pool", scope=NAME):
    """The arrays of the variables `convnext_tiny(endpoint=endpoint, scope=scope)` creates.

    Args:
      weights: {layer name: arrays} as `convnext_weights.load_weights` returns.
      endpoint: the endpoint the graph was built for (only the layers it needs).
      scope: the variable scope the graph was built under.

    Returns:
      {"convnext_tiny/stem/conv/kernel": float32 [4, 4, 3, 96], ...}; depthwise kernels as [7, 7, C, 1].
    """
    values = {}
    for layer in layers_for(endpoint):
        for (name, shape), array in zip(layer.arrays, weights[layer.name]):
            values["%s/%s/%s" % (scope, layer.name, name)] = array.reshape(_variable_shape(layer, name, shape))
    return values


def feature_model(endpoint="avg_pool", weights="imagenet", precision="fp32", cache_dir=None):
    """ConvNeXt-Tiny as the engine's `ModelSpec`.

    Args:
      endpoint: one of ENDPOINTS (default avg_pool: global average pool + LayerNorm, 768 floats).
      weights: "imagenet" (Keras's cache file, downloaded if absent: convnext_tiny.h5, whose head LayerNorm is
        trained, or convnext_tiny_notop.h5 for stage_3, which needs no head) or the path of a file in their
        layout; read when the engine asks, once.
      precision: one of PRECISION_NAMES (see `models.vgg16.feature_model`); outputs are float32 either way.
      cache_dir: Keras's home folder for "imagenet" (default: $KERAS_HOME or ~/.keras).

    Returns:
      parallel.model.ModelSpec.

    Raises:
      ValueError: an unknown endpoint or precision; WeightsError: a weights path that is not a file.
    """
    _check_endpoint(endpoint)
    dtype = compute_dtype(precision)
    source = Weights(weights, keras_file_for(endpoint), "%s or %s" % (NOTOP_FILE, FULL_FILE), cache_dir)

    def read_weights():
        return variable_values(load_weights(source.path(), with_top=endpoint in _NEEDS_TOP), endpoint)

    return ModelSpec(
        name=NAME,
        fn=lambda images: convnext_tiny(images, endpoint, dtype),
        image_size=IMAGE_SIZE,
        load_weights=read_weights,
        output_name=endpoint,
        settings={"model": NAME, "layer": endpoint, "weights": source.identity, "precision": precision,
                  "preprocessing": PREPROCESSING},
        files=source.files)
