"""ResNet50's layers with weights: the table both the graph (`resnet.py`) and the weight files
(`resnet_weights.py`) are built from.

Every name is the Keras layer name of `keras.applications.ResNet50` (`conv1_conv`, `conv2_block1_1_conv`,
`conv2_block1_1_bn`, ..., `conv5_block3_out`, `avg_pool`, `predictions`), which is also how Keras's weight
files name their layer groups. It has no TensorFlow, so that reading, checking and writing weight files
does not need it.
"""

import dataclasses

IMAGE_SIZE = (224, 224)

# What a user may ask for (the command line offers these), by Keras's layer names: the last residual
# block's output (7x7x2048, flattened in NHWC order), its global average (Keras's `pooling="avg"`), and
# the ImageNet class probabilities (the softmax of the `predictions` layer).
ENDPOINTS = ("conv5_block3_out", "avg_pool", "predictions")
DEFAULT_LAYER = "avg_pool"
TOP_ENDPOINTS = ("predictions",)  # the endpoints that need the file with the top (the `predictions` layer)

BATCH_NORM_EPSILON = 1.001e-5  # keras.applications.resnet: every BatchNormalization

# The table: (stage, bottleneck width, blocks, stride of its first block); each block's output has
# 4 x width channels. The stride is on the first 1x1 convolution of the block (and on its shortcut), as in
# Keras's ResNet v1 (not on the 3x3 of "v1.5").
STAGES = (("conv2", 64, 3, 1), ("conv3", 128, 4, 2), ("conv4", 256, 6, 2), ("conv5", 512, 3, 2))
CLASSES = 1000

PARAMETER_COUNT = 25_636_712          # Keras's count_params(), batch-norm statistics included; pinned by the tests
PARAMETER_COUNT_NOTOP = 23_587_712    # without `predictions`
FOLDED_PARAMETER_COUNT = 25_530_472   # the graph's variables: batch norms folded into the convolutions before them


@dataclasses.dataclass(frozen=True)
class Conv:
    """A convolution and the batch norm after it.

    name: Keras's convolution layer ("conv2_block1_1_conv"); its weights are `kernel` [kh, kw, in, out]
      and `bias` [out].
    batch_norm: Keras's batch-norm layer ("conv2_block1_1_bn"): `gamma`, `beta`, `moving_mean`,
      `moving_variance`, each [out].
    shape: the kernel's shape.
    stride: its stride (both axes).
    """

    name: str
    batch_norm: str
    shape: tuple
    stride: int = 1


@dataclasses.dataclass(frozen=True)
class Block:
    """A bottleneck residual block: 1x1 -> 3x3 -> 1x1, added to its input or to a 1x1 shortcut.

    name: "conv2_block1"; its output is Keras's layer "<name>_out".
    convs: the three convolutions of the residual branch, `_1`, `_2`, `_3`.
    shortcut: the projection `_0` of the first block of a stage; None adds the block's input as it is.
    """

    name: str
    convs: tuple
    shortcut: Conv = None

    @property
    def output(self):
        return self.name + "_out"


STEM = Conv("conv1_conv", "conv1_bn", (7, 7, 3, 64), stride=2)
PREDICTIONS = ("predictions", (2048, CLASSES))  # Keras's Dense layer: kernel [2048, 1000], bias [1000]


def _build_blocks():
    blocks, channels = [], STEM.shape[-1]
    for stage, width, count, first_stride in STAGES:
        for index in range(1, count + 1):
            name = "%s_block%d" % (stage, index)
            stride = first_stride if index == 1 else 1

            def conv(part, shape, conv_stride=1):
                return Conv("%s_%s_conv" % (name, part), "%s_%s_bn" % (name, part), shape, conv_stride)

            convs = (conv(1, (1, 1, channels, width), stride), conv(2, (3, 3, width, width)),
                     conv(3, (1, 1, width, 4 * width)))
            shortcut = conv(0, (1, 1, channels, 4 * width), stride) if index == 1 else None
            blocks.append(Block(name, convs, shortcut))
            channels = 4 * width
    return tuple(blocks)


BLOCKS = _build_blocks()
CONVS = (STEM,) + tuple(conv for block in BLOCKS for conv in ((block.shortcut,) if block.shortcut else ())
                        + block.convs)
OUTPUT_SIDE = IMAGE_SIZE[0] // 32  # 7: the stem's stride 2, the max-pool's 2, three stages' 2
OUTPUT_CHANNELS = BLOCKS[-1].convs[-1].shape[-1]  # 2048


def keras_layer_names(include_top=True):
    """Every layer of `keras.applications.ResNet50(include_top=...)`, in Keras's order (`model.layers`).

    Keras reads a legacy .h5 weights file by this order (its layers with weights, one after another),
    so a file written in it loads into Keras's own model.
    """
    names = ["input_layer", "conv1_pad", "conv1_conv", "conv1_bn", "conv1_relu", "pool1_pad", "pool1_pool"]
    for block in BLOCKS:
        first, second, third = block.convs
        names += [first.name, first.batch_norm, block.name + "_1_relu",
                  second.name, second.batch_norm, block.name + "_2_relu"]
        if block.shortcut:
            names += [block.shortcut.name, third.name, block.shortcut.batch_norm, third.batch_norm]
        else:
            names += [third.name, third.batch_norm]
        names += [block.name + "_add", block.output]
    if include_top:
        names += ["avg_pool", PREDICTIONS[0]]
    return names


def weight_shapes(include_top=True):
    """{Keras layer name: ((weight name, shape), ...)} of every layer with weights, in Keras's legacy order.

    Convolutions: kernel, bias; batch norms: gamma, beta, moving_mean, moving_variance; `predictions`
    (with include_top): kernel [2048, 1000], bias [1000].
    """
    shapes = {}
    for conv in CONVS:
        out = conv.shape[-1]
        shapes[conv.name] = (("kernel", conv.shape), ("bias", (out,)))
        shapes[conv.batch_norm] = tuple((name, (out,)) for name in ("gamma", "beta", "moving_mean", "moving_variance"))
    if include_top:
        name, shape = PREDICTIONS
        shapes[name] = (("kernel", shape), ("bias", shape[-1:]))
    return shapes


# The layers with weights in this model's files (the full one's): what tells a file of ResNet50 from another
# model's (`registry.looks_like`).
WEIGHT_FILE_NAMES = frozenset(weight_shapes(include_top=True))
