"""VGG16 (Simonyan & Zisserman, 2014) from raw TensorFlow ops, built from a table.

    images uint8 [N, 224, 224, 3] RGB
      -> preprocess (on the device): float, RGB -> BGR, minus the Caffe mean (B 103.939, G 116.779, R 123.68)
      -> conv1_1 conv1_2 pool1 -> conv2_1 conv2_2 pool2 -> conv3_1..3 pool3 -> conv4_1..3 pool4 -> conv5_1..3 pool5
      -> fc6 relu6 -> fc7 relu7 -> fc8 prob

Endpoints carry tensorflow-vgg's names. "fc7" means different things in different tools:
here, as in tensorflow-vgg (`vgg.fc7`), `fc7` is the PRE-activation of the second
fully-connected layer and `relu7` the value after the ReLU, which is what Caffe's in-place
"fc7" blob and Keras's `fc2` layer give. No dropout: this is inference.

Variables are `vgg16/<layer>/weights` and `vgg16/<layer>/biases` (tensorflow-vgg's layer
names, from the table in `vgg16_layers.py`), created with `tf.compat.v1.get_variable` so
that the engine's placement strategy gives every device its own copy; their values are
loaded from host arrays, never embedded in the graph. Only the layers up to the requested
endpoint are built and loaded. The weights are read by `weight_files.py` (tensorflow-vgg's
vgg16.npy, Keras's h5), and "imagenet" is fetched by `imagenet_download.py`.
"""

import tensorflow as tf

from models.common import Weights, check_endpoint, check_image_size, check_uint8_images, compute_dtype
from models.imagenet_download import VGG16_FILE
from models.vgg16_layers import CONV_BLOCKS, ENDPOINTS, IMAGE_SIZE, LAYERS
from models.weight_files import load_weights
from parallel.model import ModelSpec

tf1 = tf.compat.v1

BGR_MEAN = (103.939, 116.779, 123.68)

# The last layer with weights each endpoint needs.
_LAST_LAYER = {"pool5": "conv5_3", "fc6": "fc6", "relu6": "fc6", "fc7": "fc7", "relu7": "fc7",
               "fc8": "fc8", "prob": "fc8"}


def _check_endpoint(endpoint):
    check_endpoint(endpoint, ENDPOINTS)


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
    check_uint8_images(images)
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
    check_image_size(images, IMAGE_SIZE)
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
      weights: {layer name: (weights, biases)} as `weight_files.load_weights` returns.
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


def feature_model(endpoint="fc7", weights="imagenet", precision="fp32", cache_dir=None):
    """VGG16 as the engine's `ModelSpec`.

    Args:
      endpoint: one of ENDPOINTS (default fc7, before the ReLU; relu7 is Keras's fc2).
      weights: "imagenet" (Keras's cache file, downloaded if absent) or the path of a vgg16.npy or
        .h5 file (see `weight_files.load_weights`); read when the engine asks, once.
      precision: the arithmetic on the devices; outputs are float32 either way. "fp32": IEEE
        float32 everywhere (TF32 off, so features agree across GPU generations and with a CPU);
        "tf32": float32 whose matmuls and convolutions run as TF32 on Ampere and newer GPUs
        (faster, about 1e-3 relative differences; identical to fp32 on a CPU); "fp16", "bf16".
        Recorded in the settings, so an output is never resumed with another precision.
      cache_dir: Keras's home folder for "imagenet" (default: $KERAS_HOME or ~/.keras).

    Returns:
      parallel.model.ModelSpec.

    Raises:
      ValueError: an unknown endpoint or precision; WeightsError: a weights path that is not a file.
    """
    _check_endpoint(endpoint)
    dtype = compute_dtype(precision)
    source = Weights(weights, VGG16_FILE, "a vgg16.npy or %s" % VGG16_FILE.name, cache_dir)

    def read_weights():
        return variable_values(load_weights(source.path()), endpoint)

    return ModelSpec(
        name="vgg16",
        fn=lambda images: vgg16(images, endpoint, dtype),
        image_size=IMAGE_SIZE,
        load_weights=read_weights,
        output_name=endpoint,
        settings={"model": "vgg16", "layer": endpoint, "weights": source.identity, "precision": precision},
        files=source.files)
