"""SigLIP and SigLIP 2 (fixed resolution) from raw TensorFlow ops: the image tower as the engine's model, and the text
tower (its own Graph and Session) for search by text; any size (`siglip_layers.Config`, read from the checkpoint's
config.json or a preset's), equal to transformers' `SiglipModel` and keras-hub's `SigLIPBackbone` on the same weights.

    images uint8 [N, S, S, 3] RGB (the reader resized the whole image to S x S, bicubic, as SiglipImageProcessor)
      -> x / 255, then (x - 0.5) / 0.5, on the device
      -> patch embedding (with bias), position embeddings, pre-LN blocks (GELU's tanh approximation), post-LayerNorm
      -> attention-pooling head                                                   = pooled    [N, W]
      -> L2-normalised                                                            = embedding [N, W]
    token ids int32 [N, L] -> token + position embeddings -> pre-LN blocks (no mask) -> the last position
      -> final LayerNorm -> head (dense with bias) -> L2-normalised                             [N, W]

How it is computed: `models.vit.vit`'s blocks, LayerNorms and attention-pooling head (LayerNorms and softmaxes in
float32 whatever the precision). The text tower pools the LAST position, as SigLIP was trained (big_vision) and as
transformers and keras-hub compute it: a sentence padded to 64 tokens is read at its padding, and every position
attends to every other (no mask), so the padding is part of the sentence's embedding and the tower always runs on
all L positions.

Variables are `<scope>/vision/...` and `<scope>/text/...` (`models.vit.vit`'s names under them, e.g.
"siglip/vision/block_0/attention/query/kernel", "siglip/vision/head/probe"), created with
`tf.compat.v1.get_variable` so that the engine's placement gives every device its own copy; their values are loaded
from host arrays (`vision_variable_values`, `text_variable_values`), never embedded in the graph.
"""

import numpy as np
import tensorflow as tf

from models.common import check_endpoint, check_image_size, check_uint8_images, compute_dtype
from models.siglip import siglip_layers
from models.siglip.siglip_layers import ENDPOINTS, FAMILY, PRESETS
from models.siglip.siglip_tokenizer import Tokenizer
from models.siglip.siglip_weights import Checkpoint, load_weights, logits
from models.text_tower import HostTextTower
from models.vit import vit
from parallel.model import ModelSpec, TextSpec

tf1 = tf.compat.v1

# SiglipImageProcessor: the whole image resized to S x S (bicubic, aspect not kept), x / 255, (x - 0.5) / 0.5.
RGB_MEAN = RGB_STD = (0.5, 0.5, 0.5)
RESIZE_FILTER, RESIZE_MODE = "bicubic", "stretch"
PREPROCESSING = "the whole image to %dx%d (bicubic); (RGB / 255 - 0.5) / 0.5"


# ----------------------------------------------------------------------------- the graph

def preprocess(images, dtype=tf.float32):
    """SigLIP's normalisation, in the graph: the host feeds uint8.

    Args:
      images: uint8 [N, H, W, 3] RGB.
      dtype: compute dtype of the result.

    Returns:
      dtype [N, H, W, 3]: (images / 255 - 0.5) / 0.5, computed in float32 as transformers' processor computes it.
    """
    check_uint8_images(images)
    pixels = tf.cast(images, tf.float32) * (1.0 / 255.0)
    return tf.cast((pixels - tf.constant(RGB_MEAN, tf.float32)) / tf.constant(RGB_STD, tf.float32), dtype)


def image_tower(images, model, endpoint="embedding", dtype=tf.float32, scope=None):
    """Builds the image tower up to `endpoint` under variable scope `scope` (default: the model's name).

    Args:
      images: uint8 [N, S, S, 3] RGB, S = model.image_size.
      model: a siglip_layers.Config.
      endpoint: one of ENDPOINTS.
      dtype: compute dtype (tf.float32, tf.float16 or tf.bfloat16); the variables are created in it (the
        LayerNorms' in float32).
      scope: variable scope of the weights.

    Returns:
      float32 [N, W]: the pooling head's output (pooled), or it L2-normalised (embedding).
    """
    check_endpoint(endpoint, ENDPOINTS)
    check_image_size(images, (model.image_size, model.image_size))
    width, side = model.vision.width, model.grid * model.patch_size
    with tf1.variable_scope(scope or model.name), tf1.variable_scope("vision"):
        pixels = preprocess(images, dtype)
        if side != model.image_size:  # patch 14 at 384 px: the convolution leaves the last rows and columns out
            pixels = pixels[:, :side, :side]
        net = vit.positions(vit.patch_embedding(pixels, model.patch_size, width, bias=True))
        net = vit.transformer(net, model.vision)
        net = vit.layer_norm(net, *vit.layer_norm_variables("post_layer_norm", width), model.vision.epsilon)
        with tf1.variable_scope("head"):
            net = vit.attention_pooling(net, model.vision)
        net = tf.cast(net, tf.float32)
        if endpoint == "embedding":
            net = tf.math.l2_normalize(net, axis=-1)
        return tf.identity(net, name="features")


def text_tower(token_ids, model, dtype=tf.float32, scope=None):
    """Builds the text tower under variable scope `scope` (default: the model's name).

    Args:
      token_ids: int32 [N, L], L = model.context_length: the tokens, the end token, padding (`siglip_tokenizer`).
      model: a siglip_layers.Config.
      dtype: compute dtype; the variables are created in it (the LayerNorms' in float32).
      scope: variable scope of the weights.

    Returns:
      float32 [N, W], unit length: the text embedding, in the image tower's space.
    """
    if token_ids.shape.rank != 2 or token_ids.shape[1] != model.context_length:
        raise ValueError("token_ids must be [N, %d]; got %s" % (model.context_length, token_ids.shape))
    width = model.text.width
    with tf1.variable_scope(scope or model.name, reuse=tf1.AUTO_REUSE), tf1.variable_scope("text"):
        tokens = tf1.get_variable("token_embedding", (model.vocabulary_size, width), dtype, tf1.zeros_initializer())
        net = vit.transformer(vit.positions(tf.gather(tokens, token_ids)), model.text)
        # Only the last position is used, and a LayerNorm is per position: take it first.
        net = vit.layer_norm(net[:, -1], *vit.layer_norm_variables("final_layer_norm", width), model.text.epsilon)
        net = vit.dense(net, "head", width, model.projection)
        return tf.identity(tf.math.l2_normalize(tf.cast(net, tf.float32), axis=-1), name="embedding")


# ----------------------------------------------------------------------------- the weights

def _layer_norm_values(weights, source, target):
    return {target + "/gamma": weights[source + ".weight"], target + "/beta": weights[source + ".bias"]}


def _dense_values(weights, source, target):
    """A linear layer: PyTorch's [out, in] weight transposed to the kernel [in, out], and its bias."""
    return {target + "/kernel": weights[source + ".weight"].T, target + "/bias": weights[source + ".bias"]}


def _block_values(weights, source, target):
    """One block's variables (`models.vit.vit_layers.block_variables`) from transformers' arrays under `source`."""
    values = {}
    for ours, theirs in (("attention/query", "self_attn.q_proj"), ("attention/key", "self_attn.k_proj"),
                         ("attention/value", "self_attn.v_proj"), ("attention/output", "self_attn.out_proj"),
                         ("mlp/fc1", "mlp.fc1"), ("mlp/fc2", "mlp.fc2")):
        values.update(_dense_values(weights, source + theirs, target + ours))
    values.update(_layer_norm_values(weights, source + "layer_norm1", target + "layer_norm_1"))
    values.update(_layer_norm_values(weights, source + "layer_norm2", target + "layer_norm_2"))
    return values


def _head_values(weights, source, target, width):
    """The attention-pooling head (`models.vit.vit_layers.attention_pooling_variables`): nn.MultiheadAttention's
    in_proj_weight [3W, W] and in_proj_bias [3W] hold the query's, key's and value's projections in that order."""
    values = {target + "probe": weights[source + "probe"].reshape(width)}
    packed, bias = weights[source + "attention.in_proj_weight"], weights[source + "attention.in_proj_bias"]
    for index, name in enumerate(("query", "key", "value")):
        rows = slice(index * width, (index + 1) * width)
        values[target + "attention/%s/kernel" % name] = packed[rows].T
        values[target + "attention/%s/bias" % name] = bias[rows]
    values.update(_dense_values(weights, source + "attention.out_proj", target + "attention/output"))
    values.update(_layer_norm_values(weights, source + "layernorm", target + "layer_norm"))
    values.update(_dense_values(weights, source + "mlp.fc1", target + "mlp/fc1"))
    values.update(_dense_values(weights, source + "mlp.fc2", target + "mlp/fc2"))
    return values


def _float32(values):
    return {name: np.ascontiguousarray(array, np.float32) for name, array in values.items()}


def vision_variable_values(weights, model, scope=None):
    """The arrays of the variables `image_tower(model=model, scope=scope)` creates (both endpoints need the same).

    Args:
      weights: {transformers' name: array} as `siglip_weights.load_weights(..., towers=("vision",))` returns.
      model: the siglip_layers.Config.
      scope: the variable scope the graph was built under (default: the model's name).

    Returns:
      {"<scope>/vision/patch_embedding/kernel": float32 [P, P, 3, W], ...}.
    """
    prefix, source = "%s/vision/" % (scope or model.name), "vision_model."
    values = {prefix + "patch_embedding/kernel": weights[source + "embeddings.patch_embedding.weight"].transpose(
                  2, 3, 1, 0),
              prefix + "patch_embedding/bias": weights[source + "embeddings.patch_embedding.bias"],
              prefix + "position_embedding": weights[source + "embeddings.position_embedding.weight"]}
    for index in range(model.vision.depth):
        values.update(_block_values(weights, "%sencoder.layers.%d." % (source, index), "%sblock_%d/" % (prefix, index)))
    values.update(_layer_norm_values(weights, source + "post_layernorm", prefix + "post_layer_norm"))
    values.update(_head_values(weights, source + "head.", prefix + "head/", model.vision.width))
    return _float32(values)


def text_variable_values(weights, model, scope=None):
    """The arrays of the variables `text_tower(model=model, scope=scope)` creates, from {transformers' name: array}
    as `siglip_weights.load_weights(..., towers=("text",))` returns."""
    prefix, source = "%s/text/" % (scope or model.name), "text_model."
    values = {prefix + "token_embedding": weights[source + "embeddings.token_embedding.weight"],
              prefix + "position_embedding": weights[source + "embeddings.position_embedding.weight"]}
    for index in range(model.text.depth):
        values.update(_block_values(weights, "%sencoder.layers.%d." % (source, index), "%sblock_%d/" % (prefix, index)))
    values.update(_layer_norm_values(weights, source + "final_layer_norm", prefix + "final_layer_norm"))
    values.update(_dense_values(weights, source + "head", prefix + "head"))
    return _float32(values)


# ----------------------------------------------------------------------------- the image model

class ImageModel:
    """The image tower of `siglip` (its size from the checkpoint) or of a preset, for the registry
    (`models.siglip.siglip:siglip2_base_patch16_256`): `feature_model`."""

    def __init__(self, name):
        if name != FAMILY:
            siglip_layers.preset(name)  # ValueError for an unknown name
        self.name = name

    def feature_model(self, endpoint="embedding", weights="imagenet", precision="fp32", cache_dir=None):
        """The image tower as the engine's `ModelSpec`.

        Args:
          endpoint: one of ENDPOINTS (default embedding: the pooling head's output, unit length).
          weights: "imagenet" (a preset's published checkpoint, from the hub at a pinned commit),
            "hf://ORG/NAME@COMMIT" (a checkpoint of the hub at a commit; for `siglip` fetched now with its config.json,
            the size read from it) or a folder in transformers' layout (config.json, model.safetensors); read once,
            when the engine asks.
          precision: one of PRECISION_NAMES; outputs are float32 either way.
          cache_dir: the hub's cache folder for "imagenet" (default: huggingface_hub's).

        Returns:
          parallel.model.ModelSpec, whose reader resizes the whole image to S x S (bicubic) unless the job says
          --resize crop.

        Raises:
          ValueError: an unknown endpoint or precision; WeightsError: weights that are not a SigLIP checkpoint, or
            a config.json this code cannot compute (one line naming the field).
        """
        check_endpoint(endpoint, ENDPOINTS)
        dtype = compute_dtype(precision)
        source = Checkpoint(weights, self.name, cache_dir)
        model = source.model

        def read_weights():
            return vision_variable_values(load_weights(source.path(), model, ("vision",)), model)

        return ModelSpec(
            name=model.name,
            fn=lambda images: image_tower(images, model, endpoint, dtype),
            image_size=(model.image_size, model.image_size),
            load_weights=read_weights,
            output_name=endpoint,
            settings={"model": self.name, "layer": endpoint, "weights": source.identity, "precision": precision,
                      "preprocessing": PREPROCESSING % (model.image_size, model.image_size),
                      "size": model.describe()},
            files=source.files,
            resize_filter=RESIZE_FILTER,
            resize_mode=RESIZE_MODE,
            text=self._text_model(source, dtype) if endpoint == "embedding" else None)

    @staticmethod
    def _text_model(source, dtype):
        """The text tower as the engine's TextSpec, in the `embedding` layer's space, with SigLIP's probability:
        the weights, logits and tokenizer files of `source` (a Checkpoint), each read when first asked."""
        model, tokenizer, scale_and_bias = source.model, [], []  # read where used (a Ray actor's: pickled empty)

        def tokenize(sentences):
            tokenizer[:] = tokenizer or [Tokenizer.from_folder(source.tokenizer_folder(), model.context_length)]
            return tokenizer[0].encode(sentences)

        def probability(cosines):
            """sigmoid(exp(logit_scale) * cosine + logit_bias), float64 of the shape of `cosines`."""
            scale_and_bias[:] = scale_and_bias or [logits(load_weights(source.path(), model, ("logits",)))]
            scale, bias = scale_and_bias[0]
            logit = np.exp(scale) * np.asarray(cosines, np.float64) + bias
            return 0.5 * (1.0 + np.tanh(0.5 * logit))  # the sigmoid, without overflow for any logit

        # One length: every position attends to every other, so a sentence's padding is part of it (module docstring).
        return TextSpec(model.name, lambda token_ids: text_tower(token_ids, model, dtype), model.context_length,
                        tokenize, lambda: text_variable_values(load_weights(source.path(), model, ("text",)), model),
                        probability=probability)


def __getattr__(name):
    """The registry's objects, one per name: `siglip` and each preset (PEP 562: made when the registry asks)."""
    if name == FAMILY or name in PRESETS:
        return ImageModel(name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


# ----------------------------------------------------------------------------- the text tower

class TextTower(HostTextTower):
    """SigLIP's text tower in a Graph and Session of its own, for search by text.

        with TextTower("siglip", weights="siglip-folder") as tower:
            embeddings = tower.embed(token_ids)        # float32 [N, W], unit length
            tower.probability(cosines)                 # SigLIP's sigmoid(exp(logit_scale) * cosine + logit_bias)

    It builds the image model's text tower (`ImageModel._text_model`, the TextSpec a job runs on its devices) in a
    Graph of its own.

    Attributes:
      context_length: the token ids' length (64; the checkpoint's max_position_embeddings).
      tokenizer_folder: the folder of the tokenizer's files that came with the weights.
      identity: the weights' identity, as the image tower's settings record it.
    """

    def __init__(self, model_name, weights="imagenet", precision="fp32", cache_dir=None):
        """
        Args:
          model_name: "siglip" or a preset's name.
          weights: as `ImageModel.feature_model`'s.
          precision: one of PRECISION_NAMES.
          cache_dir: the hub's cache folder for "imagenet".

        Raises:
          ValueError: an unknown model or precision; WeightsError: weights that cannot be read, or no tokenizer
            files beside them.
        """
        source = Checkpoint(weights, ImageModel(model_name).name, cache_dir)
        spec = ImageModel._text_model(source, compute_dtype(precision))  # the engine runs it too
        super().__init__(spec, source.model, source.identity, source.tokenizer_folder())

    def probability(self, cosines):
        """SigLIP's probability that an image and a sentence go together, from their cosine: float64
        sigmoid(exp(logit_scale) * cosine + logit_bias), the shape of `cosines`."""
        return self._spec.probability(cosines)
