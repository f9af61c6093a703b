"""EfficientNetB0's layers: the table both the graph (`efficientnet.py`) and the weight files
(`efficientnet_weights.py`) are built from, as Keras's `keras.applications.EfficientNetB0` builds them.

It has no TensorFlow, so that reading, checking and writing weight files does not need it.

    stem: Rescaling(1/255), Normalization (mean, variance from the file) [, Rescaling(1/sqrt(ImageNet std)): Keras's
          weights="imagenet" only], conv 3x3/2 32, batch norm, swish
    16 blocks (MBConv) in 7 groups: [expand 1x1, bn, swish], depthwise kxk/s, bn, swish, squeeze-and-excitation,
          project 1x1, bn [, + input when the shape is kept]
    top: conv 1x1 1280, bn, swish (top_activation) -> global average pool (avg_pool) -> dense 1000, softmax
          (predictions; Keras's dropout before it is the identity at inference)
"""

import dataclasses
import math

IMAGE_SIZE = (224, 224)

# What a user may ask for (the command line offers these): Keras's layer names.
ENDPOINTS = ("top_activation", "avg_pool", "predictions")
DEFAULT_LAYER = "avg_pool"
FEATURE_SIZES = {"top_activation": 7 * 7 * 1280, "avg_pool": 1280, "predictions": 1000}

# Keras's EfficientNet(width_coefficient, depth_coefficient, ...) for B0, and its constants.
WIDTH_COEFFICIENT = 1.0
DEPTH_COEFFICIENT = 1.0
DEPTH_DIVISOR = 8
BATCH_NORM_EPSILON = 1e-3      # Keras's BatchNormalization default, which EfficientNet keeps
NORMALIZATION_EPSILON = 1e-7   # Keras's backend.epsilon(): Normalization divides by max(sqrt(variance), it)
IMAGENET_MEAN_RGB = (0.485, 0.456, 0.406)
# Keras's IMAGENET_STDDEV_RGB. Keras's ImageNet file holds these as the Normalization's *variance*, so for
# weights="imagenet" only Keras adds Rescaling(1 / sqrt(stddev)): (x - mean) / sqrt(std) / sqrt(std).
IMAGENET_STDDEV_RGB = (0.229, 0.224, 0.225)
STEM_FILTERS = 32
TOP_FILTERS = 1280
CLASSES = 1000


@dataclasses.dataclass(frozen=True)
class BlockGroup:
    """One entry of Keras's DEFAULT_BLOCKS_ARGS (id_skip is True in every one)."""

    kernel_size: int
    repeats: int
    filters_in: int
    filters_out: int
    expand_ratio: int
    strides: int
    se_ratio: float


BLOCK_GROUPS = (
    BlockGroup(3, 1, 32, 16, 1, 1, 0.25),
    BlockGroup(3, 2, 16, 24, 6, 2, 0.25),
    BlockGroup(5, 2, 24, 40, 6, 2, 0.25),
    BlockGroup(3, 3, 40, 80, 6, 2, 0.25),
    BlockGroup(5, 3, 80, 112, 6, 1, 0.25),
    BlockGroup(5, 4, 112, 192, 6, 2, 0.25),
    BlockGroup(3, 1, 192, 320, 6, 1, 0.25),
)

PARAMETER_COUNT = 5_330_571         # Keras's count_params() with the top, pinned by the tests
PARAMETER_COUNT_NOTOP = 4_049_571   # include_top=False


def round_filters(filters):
    """Keras's round_filters: `filters` times the width coefficient, to a multiple of DEPTH_DIVISOR."""
    filters *= WIDTH_COEFFICIENT
    rounded = max(DEPTH_DIVISOR, int(filters + DEPTH_DIVISOR / 2) // DEPTH_DIVISOR * DEPTH_DIVISOR)
    if rounded < 0.9 * filters:  # never round down by more than 10%
        rounded += DEPTH_DIVISOR
    return int(rounded)


def round_repeats(repeats):
    """Keras's round_repeats: `repeats` times the depth coefficient, rounded up."""
    return int(math.ceil(DEPTH_COEFFICIENT * repeats))


def correct_pad(size, kernel_size):
    """Keras's imagenet_utils.correct_pad: the zeros (before, after) on each side of a stride-2 convolution.

    Args:
      size: the input's height (= width).
      kernel_size: the convolution's kernel side.

    Returns:
      (before, after): for an even size one zero fewer before than after, (0, 1) for 3x3, (1, 2) for 5x5.
    """
    adjust = 1 - size % 2
    return (kernel_size // 2 - adjust, kernel_size // 2)


def tensorflow_same_padding(size, kernel_size, strides):
    """The zeros (before, after) TensorFlow's "SAME" padding puts on each side (the graph's padding)."""
    output = -(-size // strides)
    total = max((output - 1) * strides + kernel_size - size, 0)
    return (total // 2, total - total // 2)


@dataclasses.dataclass(frozen=True)
class Block:
    """One inverted-residual (MBConv) block, named as Keras names it ("block2a").

    `input_size` is the side of its input; `padding`, (before, after) zeros on each side of the depthwise
    convolution: Keras's correct_pad for stride 2 ("valid" after ZeroPadding2D), "same" padding for stride 1.
    """

    name: str
    kernel_size: int
    strides: int
    filters_in: int
    filters_out: int
    expand_ratio: int
    se_filters: int
    input_size: int

    @property
    def filters(self):
        """Channels of the depthwise convolution: filters_in x expand_ratio."""
        return self.filters_in * self.expand_ratio

    @property
    def expands(self):
        return self.expand_ratio != 1

    @property
    def residual(self):
        """Whether the block adds its input to its output (Keras: id_skip and the shape kept)."""
        return self.strides == 1 and self.filters_in == self.filters_out

    @property
    def padding(self):
        if self.strides == 2:
            return correct_pad(self.input_size, self.kernel_size)
        total = self.kernel_size - 1
        return (total // 2, total - total // 2)

    @property
    def output_size(self):
        before, after = self.padding
        return (self.input_size + before + after - self.kernel_size) // self.strides + 1


STEM_PADDING = correct_pad(IMAGE_SIZE[0], 3)


def _build_blocks():
    blocks, size = [], (IMAGE_SIZE[0] + sum(STEM_PADDING) - 3) // 2 + 1
    for group_index, group in enumerate(BLOCK_GROUPS, start=1):
        filters_in, filters_out = round_filters(group.filters_in), round_filters(group.filters_out)
        for repeat in range(round_repeats(group.repeats)):
            block = Block(name="block%d%s" % (group_index, chr(ord("a") + repeat)), kernel_size=group.kernel_size,
                          strides=group.strides if repeat == 0 else 1,
                          filters_in=filters_in if repeat == 0 else filters_out, filters_out=filters_out,
                          expand_ratio=group.expand_ratio,
                          se_filters=max(1, int((filters_in if repeat == 0 else filters_out) * group.se_ratio)),
                          input_size=size)
            blocks.append(block)
            size = block.output_size
    return tuple(blocks)


BLOCKS = _build_blocks()
TOP_SIZE = BLOCKS[-1].output_size  # 7


@dataclasses.dataclass(frozen=True)
class KerasLayer:
    """One Keras layer with weights: its name, kind and its weights in Keras's order, ((name, shape), ...)."""

    name: str
    kind: str  # "normalization", "conv", "depthwise", "batch_norm", "conv_bias" (SE), "dense"
    weights: tuple

    @property
    def parameter_count(self):
        return sum(math.prod(shape) for _, shape in self.weights)


def _batch_norm(name, channels):
    return KerasLayer(name, "batch_norm", tuple((weight, (channels,)) for weight in
                                                ("gamma", "beta", "moving_mean", "moving_variance")))


def _build_keras_layers():
    layers = [KerasLayer("normalization", "normalization", (("mean", (3,)), ("variance", (3,)), ("count", ()))),
              KerasLayer("stem_conv", "conv", (("kernel", (3, 3, 3, round_filters(STEM_FILTERS))),)),
              _batch_norm("stem_bn", round_filters(STEM_FILTERS))]
    for block in BLOCKS:
        prefix, filters = block.name + "_", block.filters
        if block.expands:
            layers += [KerasLayer(prefix + "expand_conv", "conv", (("kernel", (1, 1, block.filters_in, filters)),)),
                       _batch_norm(prefix + "expand_bn", filters)]
        layers += [
            KerasLayer(prefix + "dwconv", "depthwise",
                       (("depthwise_kernel", (block.kernel_size, block.kernel_size, filters, 1)),)),
            _batch_norm(prefix + "bn", filters),
            KerasLayer(prefix + "se_reduce", "conv_bias",
                       (("kernel", (1, 1, filters, block.se_filters)), ("bias", (block.se_filters,)))),
            KerasLayer(prefix + "se_expand", "conv_bias",
                       (("kernel", (1, 1, block.se_filters, filters)), ("bias", (filters,)))),
            KerasLayer(prefix + "project_conv", "conv", (("kernel", (1, 1, filters, block.filters_out)),)),
            _batch_norm(prefix + "project_bn", block.filters_out)]
    top = round_filters(TOP_FILTERS)
    layers += [KerasLayer("top_conv", "conv", (("kernel", (1, 1, BLOCKS[-1].filters_out, top)),)),
               _batch_norm("top_bn", top),
               KerasLayer("predictions", "dense", (("kernel", (top, CLASSES)), ("bias", (CLASSES,))))]
    return tuple(layers)


# Every Keras layer with weights, in the order of Keras's model.layers (the order Keras's load_weights
# matches an .h5 file's layers by); the notop file holds all but the last.
KERAS_LAYERS = _build_keras_layers()
TOP_LAYERS = ("predictions",)
# The layers with weights in this model's files (the full one's): what tells a file of EfficientNetB0 from another
# model's (`registry.looks_like`).
WEIGHT_FILE_NAMES = frozenset(layer.name for layer in KERAS_LAYERS)


def keras_layers(include_top):
    """The Keras layers with weights of the full file (include_top) or of the notop file."""
    return KERAS_LAYERS if include_top else tuple(layer for layer in KERAS_LAYERS if layer.name not in TOP_LAYERS)


def needs_top(endpoint):
    """Whether `endpoint` needs the layers only the full file holds (predictions)."""
    return endpoint == "predictions"
