"""DINOv2 at any size (S/14, B/14, L/14, g/14, with or without registers) from raw TensorFlow ops, built from a
`dinov2_layers.Variant` (a preset, or the checkpoint's config.json read by `dinov2_config.py`) with `vit.py`'s
pieces, equal to keras-hub's `DINOV2Backbone` and Hugging Face's `Dinov2Model` and `Dinov2WithRegistersModel` on
the same weights.

    images uint8 [N, 224, 224, 3] RGB (the reader resized the short side to 256, bicubic, and cut the centre)
      -> (x / 255 - ImageNet mean) / std                                        on the device, float32
      -> patch_embedding (14x14, stride 14) -> class token, + position_embedding  [N, 257, width]
      -> the R register tokens after the class token (with registers: R = 4)    [N, 257 + R, width]
      -> depth blocks: pre-LayerNorm (epsilon 1e-6), multi-head attention, exact GELU MLP (4 x width; g/14:
         SwiGLU), LayerScale
      -> layer_norm                                                               [N, 257 + R, width]
      -> class_token: token 0 [N, width]; class_and_patch_mean: [token 0, mean of the 256 patch tokens]
         [N, 2 * width]

The position embeddings are a [257, width] variable: the checkpoint's 37 x 37 grid (518 px) is interpolated to
16 x 16 once, on the host, when the weights are read (`dinov2_weights.interpolate_positions`), never in the
replicated graph.

Variables are `<model>/<name>` with the names of `vit_layers` ("dinov2_vits14/block_0/attention/query/kernel",
"dinov2_vits14/layer_norm/gamma"), created with `tf.compat.v1.get_variable` so that every device gets its own
copy; their values come from host arrays (`load_weights`), never graph constants.
"""

from pathlib import Path

import tensorflow as tf

from models.common import HubWeights, check_endpoint, check_image_size, check_uint8_images, compute_dtype
from models.dinov2 import dinov2_config, dinov2_layers
from models.dinov2.dinov2_layers import ENDPOINTS, FAMILY, IMAGE_SIZE, RESIZE_SHORT_SIDE, feature_size
from models.dinov2.dinov2_weights import load_weights, resolve
from models.files import WeightsError, fingerprint
from models.hub_checkpoint import hub_checkpoint, is_hub_weights
from models.hub_download import HubFile
from models.registry import layout_of_file
from models.vit import vit
from parallel.model import ModelSpec

tf1 = tf.compat.v1

# Hugging Face's processor (BitImageProcessor of facebook/dinov2-*): rescale 1/255, then ImageNet's mean and std.
RGB_MEAN = (0.485, 0.456, 0.406)
RGB_STD = (0.229, 0.224, 0.225)
PREPROCESSING = ("short side to 256 (bicubic), centre 224x224 crop; on the device: (RGB / 255 - ImageNet mean "
                 "0.485, 0.456, 0.406) / std 0.229, 0.224, 0.225")


def hub_file(variant):
    """The HubFile of `variant`'s checkpoint: model.safetensors at the pinned commit, checked by SHA-256."""
    return HubFile(variant.repo, variant.revision, "model.safetensors", variant.sha256,
                   what="%s weights (%d MB)" % (variant.title, round(variant.file_size / 1e6)),
                   random_command="python -m models.weight_files random %s.safetensors --model %s"
                   % (variant.name, variant.name))


def preprocess(images, dtype=tf.float32):
    """DINOv2's normalisation, in the graph: the host feeds uint8.

    Args:
      images: uint8 [N, H, W, 3] RGB.
      dtype: compute dtype of the result.

    Returns:
      dtype [N, H, W, 3]: (images / 255 - RGB_MEAN) / RGB_STD, computed in float32.
    """
    check_uint8_images(images)
    mean = tf.constant([255 * value for value in RGB_MEAN], tf.float32)
    scale = tf.constant([1 / (255 * value) for value in RGB_STD], tf.float32)
    return tf.cast((tf.cast(images, tf.float32) - mean) * scale, dtype)


def dinov2(images, variant, endpoint="class_token", dtype=tf.float32, scope=None):
    """Builds DINOv2 under variable scope `scope` (default: the variant's name).

    Args:
      images: uint8 [N, 224, 224, 3] RGB.
      variant: a dinov2_layers.Variant.
      endpoint: one of ENDPOINTS.
      dtype: compute dtype (tf.float32, tf.float16 or tf.bfloat16); LayerNorms and the softmax run in float32.
      scope: variable scope of the weights.

    Returns:
      float32 [N, width] for class_token, [N, 2 * width] for class_and_patch_mean.
    """
    check_endpoint(endpoint, ENDPOINTS)
    check_image_size(images, IMAGE_SIZE)
    with tf1.variable_scope(scope or variant.name):
        tokens = vit.patch_embedding(preprocess(images, dtype), variant.patch, variant.width)
        tokens = vit.register_tokens(vit.class_token_and_positions(tokens), variant.registers)
        tokens = vit.transformer(tokens, variant.transformer)
        gamma, beta = vit.layer_norm_variables("layer_norm", variant.width)
        tokens = vit.layer_norm(tokens, gamma, beta, variant.transformer.epsilon)
        features = tokens[:, 0]
        if endpoint == "class_and_patch_mean":
            # The mean in float32: 256 bfloat16 additions would lose the mean's last bits. The registers are not in it.
            patch_mean = tf.reduce_mean(tf.cast(tokens[:, 1 + variant.registers:], tf.float32), axis=1)
            features = tf.concat([tf.cast(features, tf.float32), patch_mean], axis=1)
        return tf.cast(features, tf.float32, name="features")


def feature_model(variant, endpoint="class_token", weights="imagenet", precision="fp32", cache_dir=None):
    """DINOv2 as the engine's `ModelSpec`.

    Args:
      variant: a preset's dinov2_layers.Variant, or None: the family (FAMILY, "dinov2"), whose size the
        checkpoint's config.json gives.
      endpoint: one of ENDPOINTS (default class_token: width floats).
      weights: "imagenet" or "hub" (the pinned Hugging Face checkpoint, from the hub's cache or downloaded into
        it), "hf://ORG/NAME@COMMIT" (another commit's, its config.json a DINOv2's), or a path: a model.safetensors in
        Hugging Face's layout, or a folder holding one (and its config.json: checked against a preset's size, the
        family's size). The family's hub checkpoint is fetched at once, with its config.json; the others' weights
        are read when the engine asks, once.
      precision: one of PRECISION_NAMES; outputs are float32 either way.
      cache_dir: the hub's cache folder for "imagenet" (default: huggingface_hub's).

    Returns:
      parallel.model.ModelSpec, whose reader resizes the short side to 256 with a bicubic filter and cuts the
      centre 224 x 224. The family's settings record the architecture its config gave ("architecture").

    Raises:
      ValueError: an unknown endpoint or precision; WeightsError: a path that is neither a file nor a folder
        holding model.safetensors, "imagenet" without a pinned checkpoint; ConfigError: a config the code cannot
        run, or of another size than the preset's (one line naming the field).
    """
    check_endpoint(endpoint, ENDPOINTS)
    dtype = compute_dtype(precision)
    family = variant is None
    source, variant = _weights(variant, weights, cache_dir)
    settings = {"model": variant.name, "layer": endpoint, "weights": source.identity, "precision": precision,
                "preprocessing": PREPROCESSING}
    if family:  # the size is the checkpoint's: a job's identity holds it
        settings["architecture"] = variant.describe()
    return ModelSpec(
        name=variant.name,
        fn=lambda images: dinov2(images, variant, endpoint, dtype),
        image_size=IMAGE_SIZE,
        load_weights=lambda: load_weights(_checked_path(source, variant), variant),
        output_name=endpoint,
        settings=settings,
        files=source.files,
        resize_filter="bicubic",
        resize_short_side=RESIZE_SHORT_SIDE)


class _LocalWeights:
    """A checkpoint given as a path (a model.safetensors, or a folder holding one), identified by its content."""

    def __init__(self, weights):
        self._path = resolve(weights)
        if not self._path.is_file():
            raise WeightsError("weights=%s is not a file (pass a model.safetensors, or a folder holding one and its "
                               "config.json)" % weights)
        if layout_of_file(self._path):  # an .npy, an .h5: said now, not as a safetensors header's length
            raise WeightsError("weights=%s is not a safetensors file: %s" % (weights, layout_of_file(self._path)))
        self.identity, self.files = fingerprint(self._path), (str(self._path),)

    def path(self):
        return self._path


def _named_hub_file(variant, weights):
    """The HubFile of model.safetensors at the commit "hf://ORG/NAME@COMMIT" names, for a model without a pinned
    commit (the family, or a preset of none)."""
    name = FAMILY if variant is None else variant.name
    checkpoint = hub_checkpoint(weights, "DINOv2 %s checkpoint's" % name)
    return HubFile(checkpoint.repo, checkpoint.revision, "model.safetensors", None, checkpoint.what,
                   "python -m models.weight_files random dinov2-random --model %s" % name)


def _weights(variant, weights, cache_dir):
    """(source, Variant): the weights argument as a source (`path()`, `identity`, `files`): the pinned hub file,
    an hf:// checkpoint's, or a path; and the Variant it is read as: the preset's (checked against the config.json
    beside a path now, beside a hub checkpoint's file when it is read: `_checked_path`), or the family's size that
    config gives (`dinov2_config.sized`), the family's hub checkpoint fetched now to read it."""
    pinned = variant is not None and variant.revision is not None
    if weights in HubWeights.PRETRAINED and not pinned:
        if variant is None:
            raise WeightsError("weights=%s: --model %s reads its size from the checkpoint's config; pass "
                               "hf://ORG/NAME@COMMIT or a checkpoint's folder as published (model.safetensors and "
                               "config.json), or a preset's --model (%s)"
                               % (weights, FAMILY, ", ".join(dinov2_layers.VARIANTS)))
        raise WeightsError("weights=%s: no pinned commit of %s is known; pass hf://%s@COMMIT or weights=FOLDER (its "
                           "files: hf download %s --local-dir FOLDER)"
                           % (weights, variant.repo, variant.repo, variant.repo))
    if pinned or is_hub_weights(weights):
        file = hub_file(variant) if pinned else _named_hub_file(variant, weights)
        expected = "a %s model.safetensors, or a folder holding one" % (variant.title if variant else "DINOv2")
        source = HubWeights(weights, file, expected, cache_dir, FAMILY)
        if source.imagenet or (variant is not None and is_hub_weights(weights)):
            return source, variant  # fetched when the engine reads it
    else:
        source = _LocalWeights(weights)
    return source, dinov2_config.sized(Path(source.path()), variant)


def _checked_path(source, variant):
    """The checkpoint `source` reads, once its config.json (where there is one beside it) is checked to describe
    `variant`: a preset's hub checkpoint is fetched only now."""
    path = Path(source.path())
    dinov2_config.sized(path, variant)
    return path


class SizedModel:
    """One DINOv2 size for the registry (`models.dinov2.dinov2:VITS14`): `feature_model` of that variant (None: the
    family, its size the checkpoint's config.json's)."""

    def __init__(self, variant):
        self.variant = variant

    def feature_model(self, endpoint="class_token", weights="imagenet", precision="fp32", cache_dir=None):
        """`feature_model` of this size (see there)."""
        return feature_model(self.variant, endpoint, weights, precision, cache_dir)


FAMILY_MODEL = SizedModel(None)
VITS14 = SizedModel(dinov2_layers.VITS14)
VITB14 = SizedModel(dinov2_layers.VITB14)
VITL14 = SizedModel(dinov2_layers.VITL14)
VITG14 = SizedModel(dinov2_layers.VITG14)
VITS14_REG = SizedModel(dinov2_layers.VITS14_REG)
VITB14_REG = SizedModel(dinov2_layers.VITB14_REG)
VITL14_REG = SizedModel(dinov2_layers.VITL14_REG)
VITG14_REG = SizedModel(dinov2_layers.VITG14_REG)


def feature_sizes(variant):
    """{endpoint: floats per image}."""
    return {endpoint: feature_size(variant, endpoint) for endpoint in ENDPOINTS}
