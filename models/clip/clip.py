"""CLIP at any size (OpenAI's B/32, B/16, L/14; open_clip's LAION checkpoints) from raw TensorFlow ops: the image
tower as the engine's model, and the text tower (its own Graph and Session) for search by text; built from a
`clip_layers.Config` (a preset, or the checkpoint's config read by `clip_config.py`), equal to Hugging Face's
`CLIPModel`, open_clip's `CLIP` and keras-hub's `CLIPBackbone` on the same weights. B/32's sizes:

    images uint8 [N, 224, 224, 3] RGB (the reader resized the short side to 224, bicubic, and cropped the centre)
      -> (x / 255 - mean) / std (OpenAI's, or the config's), on the device
      -> patch embedding, class token, position embeddings, pre-LayerNorm, 12 pre-LN blocks (QuickGELU)
      -> class token, post-LayerNorm                                          = pooled    [N, 768]
      -> visual projection, L2-normalised                                     = embedding [N, 512]
    token ids int32 [N, 77] -> token + position embeddings -> 12 causal pre-LN blocks -> final LayerNorm
      -> the end token's position -> text projection, L2-normalised                      [N, 512]

How it is computed: the transformer blocks are `models.vit.vit`'s (LayerNorms and the attention's softmax in
float32 whatever the precision), the image tower's last one for the class token alone (`class_token_block`).
The end token is found as the ids' argmax, as OpenAI's `encode_text`, Hugging Face (for these checkpoints,
whose config has the legacy eos_token_id 2) and keras-hub all do: CLIP's end-of-text id, 49407, is the
largest id, so the argmax is its first occurrence.

Variables are `<model>/vision/...` and `<model>/text/...` (`models.vit.vit`'s names under them, e.g.
"clip_vit_b32/vision/block_0/attention/query/kernel"), created with `tf.compat.v1.get_variable` so that the
engine's placement strategy gives every device its own copy; their values are loaded from host arrays
(`vision_variable_values`, `text_variable_values`), never embedded in the graph.
"""

import numpy as np
import tensorflow as tf

from models.clip import clip_layers
from models.clip.clip_layers import ENDPOINTS
from models.clip.clip_tokenizer import Tokenizer
from models.clip.clip_weights import Checkpoint, load_weights
from models.common import check_endpoint, check_image_size, check_uint8_images, compute_dtype
from models.text_tower import HostTextTower
from models.vit import vit
from parallel.model import ModelSpec, TextSpec

tf1 = tf.compat.v1

# OpenAI's preprocessing (CLIP's `_transform`, Hugging Face's CLIPImageProcessor): on 0..1. A model's own are
# its Config's (an open_clip checkpoint's config may give others), and its Config's `preprocessing` words them.
RGB_MEAN, RGB_STD = clip_layers.OPENAI_MEAN, clip_layers.OPENAI_STD

# The lengths the text tower is built for (and the context length): most queries are a few words, and a
# causal tower computes the same end token's embedding on the first L positions as on all 77, in a fraction
# of the time.
TEXT_LENGTHS = (8, 16, 24, 32, 48)


# ----------------------------------------------------------------------------- the graph

def preprocess(images, dtype=tf.float32, mean=RGB_MEAN, std=RGB_STD):
    """The normalisation (OpenAI's by default), in the graph: the host feeds uint8.

    Args:
      images: uint8 [N, H, W, 3] RGB.
      dtype: compute dtype of the result.
      mean, std: per RGB channel, on 0..1 (a Config's `mean` and `std`).

    Returns:
      dtype [N, H, W, 3]: (images / 255 - mean) / std, computed in float32.
    """
    check_uint8_images(images)
    pixels = tf.cast(images, tf.float32) * (1.0 / 255.0)
    return tf.cast((pixels - tf.constant(mean, tf.float32)) / tf.constant(std, tf.float32), dtype)


def causal_mask(length):
    """The text tower's additive attention mask: 0 where a position may attend (itself and those before it),
    -1e9 after it (the softmax, in float32, gives those 0). float32 [length, length], made by ops, not stored."""
    allowed = tf.linalg.band_part(tf.ones([length, length], tf.float32), -1, 0)
    return (allowed - 1.0) * 1e9


def image_tower(images, model=clip_layers.VIT_B32, endpoint="embedding", dtype=tf.float32, scope=None):
    """Builds the image tower up to `endpoint` under variable scope `scope` (default: the model's name).

    Args:
      images: uint8 [N, S, S, 3] RGB, S the model's image_size (224).
      model: a clip_layers.Config.
      endpoint: one of ENDPOINTS.
      dtype: compute dtype (tf.float32, tf.float16 or tf.bfloat16); the variables are created in it (the
        LayerNorms' in float32).
      scope: variable scope of the weights.

    Returns:
      float32 [N, vision width] for pooled (768), [N, projection] (512, unit length) for embedding.
    """
    check_endpoint(endpoint, ENDPOINTS)
    check_image_size(images, (model.image_size, model.image_size))
    width, epsilon = model.vision.width, model.vision.epsilon
    with tf1.variable_scope(scope or model.name), tf1.variable_scope("vision"):
        net = vit.patch_embedding(preprocess(images, dtype, model.mean, model.std), model.patch_size, width, bias=False)
        net = vit.class_token_and_positions(net)
        net = vit.layer_norm(net, *vit.layer_norm_variables("pre_layer_norm", width), epsilon)
        last = model.vision.depth - 1
        net = vit.transformer(net, model.vision, depth=last)
        with tf1.variable_scope("block_%d" % last):
            net = class_token_block(net, model.vision)
        net = vit.layer_norm(net, *vit.layer_norm_variables("post_layer_norm", width), epsilon)
        if endpoint == "embedding":
            net = _projected(net, width, model.projection)
        return tf.cast(net, tf.float32, name="features")


def _dense(rows, name, inputs, outputs):
    """rows [M, inputs] @ <name>/kernel + <name>/bias: `models.vit.vit`'s dense layer and names."""
    with tf1.variable_scope(name):
        kernel = tf1.get_variable("kernel", [inputs, outputs], rows.dtype, tf1.zeros_initializer())
        bias = tf1.get_variable("bias", [outputs], rows.dtype, tf1.zeros_initializer())
    return tf.nn.bias_add(tf.matmul(rows, kernel), bias)


def class_token_block(tokens, config):
    """`models.vit.vit.block` for the class token's output alone, with the same variables: only the class token
    leaves the image tower, so the last block needs one query, one attention row and one MLP row per image
    instead of 1 + G*G (an eighth of the tower's work for B/32 saved: the keys and values remain).

    Args:
      tokens: [N, T, width] of the compute dtype, the class token first.
      config: the vision tower's TransformerConfig (no LayerScale).

    Returns:
      [N, width]: the block's output at the class token, equal to `models.vit.vit.block(tokens, config)[:, 0]`.
    """
    width, heads, count = config.width, config.heads, tokens.shape[1]
    depth = width // heads
    normalized = vit.layer_norm(tokens, *vit.layer_norm_variables("layer_norm_1", width), config.epsilon)
    rows = tf.reshape(normalized, [-1, width])
    with tf1.variable_scope("attention"):
        query = tf.reshape(_dense(normalized[:, 0], "query", width, width), [-1, heads, 1, depth])

        def split(name):  # [N * T, width] -> [N, heads, T, depth]
            return tf.transpose(tf.reshape(_dense(rows, name, width, width), [-1, count, heads, depth]), [0, 2, 1, 3])

        key, value = split("key"), split("value")
        scores = tf.matmul(query, key, transpose_b=True) * tf.constant(depth ** -0.5, tokens.dtype)  # [N, H, 1, T]
        weights = tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32), axis=-1), tokens.dtype)
        mixed = tf.reshape(tf.matmul(weights, value), [-1, width])
        token = tokens[:, 0] + _dense(mixed, "output", width, width)
    hidden = vit.layer_norm(token, *vit.layer_norm_variables("layer_norm_2", width), config.epsilon)
    with tf1.variable_scope("mlp"):
        hidden = vit.activation(_dense(hidden, "fc1", width, config.mlp_width), config.activation)
        return token + _dense(hidden, "fc2", config.mlp_width, width)


def _projected(net, width, projection):
    """net [N, width] times projection/kernel [width, projection] (no bias), L2-normalised in float32."""
    kernel = tf1.get_variable("projection/kernel", (width, projection), net.dtype, tf1.zeros_initializer())
    return tf.math.l2_normalize(tf.cast(tf.matmul(net, kernel), tf.float32), axis=-1)


def text_tower(token_ids, model=clip_layers.VIT_B32, dtype=tf.float32, scope=None):
    """Builds the text tower under variable scope `scope` (default: the model's name).

    Args:
      token_ids: int32 [N, L]: the start token, the tokens, the end token, zeros; L is 77 (the context length),
        or fewer where every row's end token is within the first L positions: the attention is causal, so
        positions after the end token change nothing the tower returns (`TextTower` runs each row on the
        shortest of a few lengths that holds its end token).
      model: a clip_layers.Config.
      dtype: compute dtype; the variables are created in it (the LayerNorms' in float32).
      scope: variable scope of the weights.

    Returns:
      float32 [N, projection] (512), unit length: the text embedding, in the image tower's space.
    """
    length = token_ids.shape[1] if token_ids.shape.rank == 2 else None
    if length is None or length > model.context_length:
        raise ValueError("token_ids must be [N, L], L at most %d; got %s" % (model.context_length, token_ids.shape))
    width = model.text.width
    with tf1.variable_scope(scope or model.name, reuse=tf1.AUTO_REUSE), tf1.variable_scope("text"):
        tokens = tf1.get_variable("token_embedding", (model.vocabulary_size, width), dtype,
                                  tf1.zeros_initializer())
        positions = tf1.get_variable("position_embedding", (model.context_length, width), dtype,
                                     tf1.zeros_initializer())
        net = vit.transformer(tf.gather(tokens, token_ids) + positions[:length], model.text,
                              mask=causal_mask(length))
        # Only the end token's position is used, and a LayerNorm is per position: take it first.
        ends = tf.argmax(token_ids, axis=1, output_type=tf.int32)
        net = vit.layer_norm(tf.gather(net, ends, batch_dims=1),
                             *vit.layer_norm_variables("final_layer_norm", width), model.text.epsilon)
        return tf.identity(_projected(net, width, model.projection), name="embedding")


# ----------------------------------------------------------------------------- the weights

def _block_values(weights, source, target):
    """One block's variables (`models.vit.vit_layers.block_variables`) from Hugging Face's arrays under `source`:
    kernels transposed from PyTorch's [out, in] to [in, out]."""
    values = {}
    for ours, theirs in (("attention/query", "self_attn.q_proj"), ("attention/key", "self_attn.k_proj"),
                         ("attention/value", "self_attn.v_proj"), ("attention/output", "self_attn.out_proj"),
                         ("mlp/fc1", "mlp.fc1"), ("mlp/fc2", "mlp.fc2")):
        values[target + ours + "/kernel"] = weights[source + theirs + ".weight"].T
        values[target + ours + "/bias"] = weights[source + theirs + ".bias"]
    for ours, theirs in (("layer_norm_1", "layer_norm1"), ("layer_norm_2", "layer_norm2")):
        values.update(_layer_norm_values(weights, source + theirs, target + ours))
    return values


def _layer_norm_values(weights, source, target):
    return {target + "/gamma": weights[source + ".weight"], target + "/beta": weights[source + ".bias"]}


def vision_variable_values(weights, model=clip_layers.VIT_B32, endpoint="embedding", scope=None):
    """The arrays of the variables `image_tower(model=model, endpoint=endpoint, scope=scope)` creates.

    Args:
      weights: {Hugging Face name: array} as `clip_weights.load_weights(..., towers=("vision",))` returns.
      model: the clip_layers.Config.
      endpoint: the endpoint the graph was built for (the projection only for "embedding").
      scope: the variable scope the graph was built under (default: the model's name).

    Returns:
      {"clip_vit_b32/vision/patch_embedding/kernel": float32 [32, 32, 3, 768], ...}: `models.vit.vit_layers`'
      names under <scope>/vision, and pre_layer_norm, post_layer_norm, projection/kernel [768, 512].
    """
    prefix, source = "%s/vision/" % (scope or model.name), "vision_model."
    values = {
        prefix + "patch_embedding/kernel": weights[source + "embeddings.patch_embedding.weight"].transpose(2, 3, 1, 0),
        prefix + "class_token": weights[source + "embeddings.class_embedding"],
        prefix + "position_embedding": weights[source + "embeddings.position_embedding.weight"],
    }
    values.update(_layer_norm_values(weights, source + "pre_layrnorm", prefix + "pre_layer_norm"))
    for index in range(model.vision.depth):
        values.update(_block_values(weights, "%sencoder.layers.%d." % (source, index), "%sblock_%d/" % (prefix, index)))
    values.update(_layer_norm_values(weights, source + "post_layernorm", prefix + "post_layer_norm"))
    if endpoint == "embedding":
        values[prefix + "projection/kernel"] = weights["visual_projection.weight"].T
    return {name: np.ascontiguousarray(array, np.float32) for name, array in values.items()}


def text_variable_values(weights, model=clip_layers.VIT_B32, scope=None):
    """The arrays of the variables `text_tower(model=model, scope=scope)` creates, from {Hugging Face name:
    array} as `clip_weights.load_weights(..., towers=("text",))` returns."""
    prefix, source = "%s/text/" % (scope or model.name), "text_model."
    values = {prefix + "token_embedding": weights[source + "embeddings.token_embedding.weight"],
              prefix + "position_embedding": weights[source + "embeddings.position_embedding.weight"]}
    for index in range(model.text.depth):
        values.update(_block_values(weights, "%sencoder.layers.%d." % (source, index), "%sblock_%d/" % (prefix, index)))
    values.update(_layer_norm_values(weights, source + "final_layer_norm", prefix + "final_layer_norm"))
    values[prefix + "projection/kernel"] = weights["text_projection.weight"].T
    return {name: np.ascontiguousarray(array, np.float32) for name, array in values.items()}


# ----------------------------------------------------------------------------- the image model

class ImageModel:
    """One CLIP model's image tower for the registry (`models.clip.clip:VIT_B32`): `feature_model`.

    Args:
      model: a preset's clip_layers.Config, or None: the family (`FAMILY`, "clip"), whose size, activation and
        preprocessing are those of the checkpoint's own config (config.json, open_clip_config.json).
    """

    def __init__(self, model):
        self.model = model

    def feature_model(self, endpoint="embedding", weights="imagenet", precision="fp32", cache_dir=None):
        """The image tower as the engine's `ModelSpec`.

        Args:
          endpoint: one of ENDPOINTS (default embedding: the projected class token, unit length, 512 floats).
          weights: "imagenet" (the published checkpoint from the hub, at a pinned commit), a folder holding
            model.safetensors and config.json (or open_clip_model.safetensors and open_clip_config.json), or a
            .safetensors file (its config beside it); read once, when the engine asks.
          precision: one of PRECISION_NAMES; outputs are float32 either way.
          cache_dir: the hub's cache folder for "imagenet" (default: huggingface_hub's).

        Returns:
          parallel.model.ModelSpec, whose reader resizes the short side to the image size (224; bicubic) and
          crops the centre. The family's settings record the architecture its config gave ("architecture").

        Raises:
          ValueError: an unknown endpoint or precision; WeightsError: a weights path that is not a checkpoint;
            ConfigError: a config the code cannot run (one line naming the field).
        """
        check_endpoint(endpoint, ENDPOINTS)
        dtype = compute_dtype(precision)
        source = Checkpoint(weights, self.model, cache_dir)
        model = source.model
        settings = {"model": model.name, "layer": endpoint, "weights": source.identity, "precision": precision,
                    "preprocessing": model.preprocessing}
        if self.model is None:  # the size is the checkpoint's: a job's identity holds it
            settings["architecture"] = model.describe()

        def read_weights():
            return vision_variable_values(load_weights(source.path(), model, ("vision",)), model, endpoint)

        return ModelSpec(
            name=model.name,
            fn=lambda images: image_tower(images, model, endpoint, dtype),
            image_size=(model.image_size, model.image_size),
            load_weights=read_weights,
            output_name=endpoint,
            settings=settings,
            files=source.files,
            resize_filter=model.resize_filter,
            resize_short_side=model.image_size,
            text=self._text_model(source, dtype) if endpoint == "embedding" else None)

    def _text_model(self, source, dtype):
        """The text tower as the engine's TextSpec, in the `embedding` layer's space: the weights and tokenizer files
        of `source` (a Checkpoint), read when first asked."""
        model, tokenizer = source.model, []  # read on first use, where it is used (a Ray actor's: pickled empty)

        def tokenize(sentences):
            tokenizer[:] = tokenizer or [Tokenizer.from_folder(source.tokenizer_folder(), model.context_length)]
            return tokenizer[0].encode(sentences)

        lengths = tuple(length for length in TEXT_LENGTHS if length < model.context_length) + (model.context_length,)
        return TextSpec(model.name, lambda token_ids: text_tower(token_ids, model, dtype), model.context_length,
                        tokenize, lambda: text_variable_values(load_weights(source.path(), model, ("text",)), model),
                        lengths, used_positions=lambda ids: np.asarray(ids).argmax(axis=1) + 1)  # up to its end token


FAMILY = ImageModel(None)
VIT_B32 = ImageModel(clip_layers.VIT_B32)
VIT_B16 = ImageModel(clip_layers.VIT_B16)
VIT_L14 = ImageModel(clip_layers.VIT_L14)
VIT_L14_336 = ImageModel(clip_layers.VIT_L14_336)


# ----------------------------------------------------------------------------- the text tower

class TextTower(HostTextTower):
    """CLIP's text tower in a Graph and Session of its own, for search by text.

        with TextTower("clip_vit_b32", weights="clip-random") as tower:
            embeddings = tower.embed(token_ids)        # float32 [N, 512], unit length

    Attributes:
      context_length: the token ids' length (77).
      tokenizer_folder: the folder of the tokenizer's files that came with the weights (tokenizer.json, or vocab.json
        and merges.txt: models.clip.clip_tokenizer reads either).
      identity: the weights' identity, as the image tower's settings record it.
    """

    def __init__(self, model_name, weights="imagenet", precision="fp32", cache_dir=None):
        """
        Args:
          model_name: a preset ("clip_vit_b32", ...) or the family ("clip": the size the weights' config gives).
          weights: as `ImageModel.feature_model`'s.
          precision: one of PRECISION_NAMES.
          cache_dir: the hub's cache folder for "imagenet".

        Raises:
          ValueError: an unknown model or precision; WeightsError: weights that cannot be read, or no tokenizer
            files beside them.
        """
        source = Checkpoint(weights, clip_layers.config(model_name), cache_dir)
        spec = ImageModel(source.model)._text_model(source, compute_dtype(precision))  # the engine runs it too
        super().__init__(spec, source.model, source.identity, source.tokenizer_folder())
