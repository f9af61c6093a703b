"""ConvNeXt-Tiny's layers with weights: the table both the graph (`convnext.py`) and the weight files
(`convnext_weights.py`) are built from.

It has no TensorFlow, so that reading, checking and writing weight files does not need it.

    stem: 4x4 stride-4 convolution 3 -> 96, LayerNorm                                      [N, 56, 56, 96]
    stage 0: 3 blocks of 96 | downsampling 0: LayerNorm, 2x2 stride-2 convolution -> 192   [N, 28, 28, 192]
    stage 1: 3 blocks of 192 | downsampling 1 -> 384                                        [N, 14, 14, 384]
    stage 2: 9 blocks of 384 | downsampling 2 -> 768                                        [N, 7, 7, 768]
    stage 3: 3 blocks of 768                                                                [N, 7, 7, 768]
    head: global average pool, LayerNorm (avg_pool), dense 768 -> 1000 (logits), softmax (predictions)

A block: x + layer_scale * pointwise_2(gelu(pointwise_1(layernorm(depthwise_7x7(x))))), pointwise_1
widening the channels 4x and pointwise_2 narrowing them back.
"""

import dataclasses

IMAGE_SIZE = (224, 224)

# What a user may ask for (the command line offers these).
#   stage_3:     the last block's output, [7, 7, 768] flattened in NHWC order, before any normalization;
#   avg_pool:    its global average, then the head's LayerNorm: the pooled features users take;
#   logits:      the ImageNet classifier's output before its softmax; predictions: after it.
ENDPOINTS = ("stage_3", "avg_pool", "logits", "predictions")
DEFAULT_LAYER = "avg_pool"

DEPTHS = (3, 3, 9, 3)        # blocks per stage
WIDTHS = (96, 192, 384, 768)  # channels per stage
CLASSES = 1000
LAYER_NORM_EPSILON = 1e-6     # every LayerNorm of the model, as in Keras and the original
KERAS_PREFIX = "convnext_tiny"  # Keras's model name, the prefix of its layer names

PARAMETER_COUNT = 28_589_128        # pinned by the tests: Keras's ConvNeXtTiny(include_top=True)
PARAMETER_COUNT_NOTOP = 27_820_128  # and include_top=False (the notop file: no head dense layer)


@dataclasses.dataclass(frozen=True)
class Layer:
    """One Keras layer with weights, as Keras's legacy `.h5` files store it (one group per layer).

    Attributes:
      name: ours, also the variable scope under the model's ("stage_0/block_0/depthwise_conv").
      keras_name: the layer's group in Keras's files ("convnext_tiny_stage_0_block_0_depthwise_conv").
      arrays: ((weight name, shape), ...) in the order Keras stores them (its legacy order).
      top: only in the full file (the classifier), not in the notop one.
    """

    name: str
    keras_name: str
    arrays: tuple
    top: bool = False

    @property
    def size(self):
        """Parameters of the layer."""
        total = 0
        for _, shape in self.arrays:
            count = 1
            for dimension in shape:
                count *= dimension
            total += count
        return total


def _layer_norm(width):
    return (("gamma", (width,)), ("beta", (width,)))


def _dense(inputs, outputs):
    return (("kernel", (inputs, outputs)), ("bias", (outputs,)))


def _build_table():
    prefix = KERAS_PREFIX
    layers = [Layer("stem", prefix + "_stem",
                    (("conv/kernel", (4, 4, 3, WIDTHS[0])), ("conv/bias", (WIDTHS[0],)))
                    + tuple(("layernorm/" + name, shape) for name, shape in _layer_norm(WIDTHS[0])))]
    for stage, (depth, width) in enumerate(zip(DEPTHS, WIDTHS)):
        if stage:
            previous = WIDTHS[stage - 1]
            layers.append(Layer(
                "downsampling_%d" % (stage - 1), "%s_downsampling_block_%d" % (prefix, stage - 1),
                tuple(("layernorm/" + name, shape) for name, shape in _layer_norm(previous))
                + (("conv/kernel", (2, 2, previous, width)), ("conv/bias", (width,)))))
        for block in range(depth):
            name, keras_name = "stage_%d/block_%d/" % (stage, block), "%s_stage_%d_block_%d_" % (prefix, stage, block)
            layers += [
                # Keras's grouped Conv2D (groups=width) keeps the depthwise kernel as [7, 7, 1, width].
                Layer(name + "depthwise_conv", keras_name + "depthwise_conv",
                      (("kernel", (7, 7, 1, width)), ("bias", (width,)))),
                Layer(name + "layernorm", keras_name + "layernorm", _layer_norm(width)),
                Layer(name + "pointwise_conv_1", keras_name + "pointwise_conv_1", _dense(width, 4 * width)),
                Layer(name + "pointwise_conv_2", keras_name + "pointwise_conv_2", _dense(4 * width, width)),
                Layer(name + "layer_scale", keras_name + "layer_scale", (("gamma", (width,)),)),
            ]
    # The head's LayerNorm. In the full file it is convnext_tiny_head_layernorm; in the notop file the
    # LayerNorm Keras puts after the pooling has no name of its own ("layer_normalization", or
    # "layer_normalization_<n>" in a session that made several): it is found as the file's last layer.
    layers.append(Layer("head/layernorm", prefix + "_head_layernorm", _layer_norm(WIDTHS[-1])))
    layers.append(Layer("head/dense", prefix + "_head_dense", _dense(WIDTHS[-1], CLASSES), top=True))
    return tuple(layers)


LAYERS = _build_table()
BODY = LAYERS[:-2]          # stem, stages, downsampling: what every endpoint needs
HEAD_LAYER_NORM, HEAD_DENSE = LAYERS[-2:]
# The layers with weights in this model's files (the full one's): what tells a file of ConvNeXt-Tiny from another
# model's (`registry.looks_like`).
WEIGHT_FILE_NAMES = frozenset(layer.keras_name for layer in LAYERS)
