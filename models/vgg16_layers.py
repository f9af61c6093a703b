"""VGG16's layers with weights: the table both the graph (`vgg16.py`) and the weight files
(`weight_files.py`) are built from.

It has no TensorFlow, so that reading, checking and writing weight files does not need it.
"""

import dataclasses

IMAGE_SIZE = (224, 224)

# What a user may ask for (the command line offers these): tensorflow-vgg's endpoint names (fc7 is
# before its ReLU, relu7 after it).
ENDPOINTS = ("pool5", "fc6", "relu6", "fc7", "relu7", "fc8", "prob")
DEFAULT_LAYER = "fc7"

# The table: (output channels, convolutions) per block, then the fully-connected layers.
CONV_BLOCKS = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))
FULLY_CONNECTED = (("fc6", 4096), ("fc7", 4096), ("fc8", 1000))

PARAMETER_COUNT = 138_357_544          # pinned by the tests
PARAMETER_COUNT_TO_FC7 = 134_260_544


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

# The names this model's weight files hold (Keras's .h5 layers, tensorflow-vgg's .npy keys): what tells a file
# of VGG16 from another model's (`registry.looks_like`).
WEIGHT_FILE_NAMES = frozenset(name for layer in LAYERS for name in (layer.name, layer.keras_name))
