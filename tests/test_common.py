"""models/common.py: every model's graph refuses images of another dtype or size in one line naming what it got,
before it creates a variable."""

import pytest
import tensorflow as tf

from models import common
from models.clip import clip, clip_layers
from models.convnext import convnext
from models.dinov2 import dinov2, dinov2_layers
from models.efficientnet import efficientnet
from models.resnet import resnet
from models.siglip import siglip, siglip_layers
from models import vgg16

tf1 = tf.compat.v1

BUILDERS = {
    "vgg16": (vgg16.vgg16, 224),
    "resnet50": (resnet.resnet50, 224),
    "efficientnet_b0": (efficientnet.efficientnet_b0, 224),
    "convnext_tiny": (convnext.convnext_tiny, 224),
    "dinov2": (lambda images: dinov2.dinov2(images, dinov2_layers.VITS14), 224),
    "clip": (lambda images: clip.image_tower(images, clip_layers.VIT_B32), 224),
    "siglip": (lambda images: siglip.image_tower(images, siglip_layers.PRESETS["siglip_base_patch16_256"].config), 256),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_images_of_another_dtype_or_size_are_refused_naming_them(name):
    build, size = BUILDERS[name]
    with tf.Graph().as_default() as graph:
        with pytest.raises(ValueError, match=r"^images must be \[N, %d, %d, 3\]; got \(None, %d, %d, 3\)$"
                           % (size, size, size + 1, size)):
            build(tf1.placeholder(tf.uint8, [None, size + 1, size, 3]))
        with pytest.raises(ValueError, match=r"^images must be uint8 \[N, H, W, 3\] RGB; got float32 "
                                             r"\(None, %d, %d, 3\)$" % (size, size)):
            build(tf1.placeholder(tf.float32, [None, size, size, 3]))
        assert not graph.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES)


def test_the_checks_pass_what_the_models_take():
    with tf.Graph().as_default():
        images = tf1.placeholder(tf.uint8, [None, 224, 224, 3])
        common.check_uint8_images(images)
        common.check_image_size(images, (224, 224))
        with pytest.raises(ValueError, match=r"got \(None, 224, 224\)"):
            common.check_image_size(tf1.placeholder(tf.uint8, [None, 224, 224]), (224, 224))
