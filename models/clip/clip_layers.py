"""CLIP (Radford et al., "Learning Transferable Visual Models From Natural Language Supervision", 2021) at any size:
the table the graph (`clip.py`) and the weight files (`clip_weights.py`) are built from. A size is a `Config`: the
presets below (OpenAI's ViT-B/32, B/16, L/14, L/14 at 336 px), or one read from a checkpoint's own config
(`clip_config.py`: Hugging Face's config.json, open_clip's open_clip_config.json: LAION's H/14, bigG, ...).

It has no TensorFlow, so that reading, checking and writing weight files does not need it.

    image tower, uint8 [N, 224, 224, 3] RGB
      -> (x / 255 - OpenAI mean) / std; patches of P x P (a P-stride convolution, no bias)     [N, G*G, 768]
      -> class token first, + position embeddings, pre-LayerNorm                              [N, 1+G*G, 768]
      -> 12 pre-LN transformer blocks (12 heads, MLP 3072, QuickGELU)
      -> the class token, post-LayerNorm                                         = pooled     [N, 768]
      -> visual projection (no bias), L2-normalised                              = embedding  [N, 512]
    text tower, int32 [N, 77] token ids (start, tokens, end, zeros)
      -> token + position embeddings                                                          [N, 77, 512]
      -> 12 pre-LN transformer blocks (8 heads, MLP 2048, QuickGELU), causal attention
      -> final LayerNorm; the end token's position (the ids' argmax)                          [N, 512]
      -> text projection (no bias), L2-normalised                                             [N, 512]

G = 224 / P (7 for B/32, 14 for B/16); the sizes above are B/32's and B/16's, other sizes have their own widths,
depths, heads, image size and activation (LAION's checkpoints: the exact GELU). Every LayerNorm has epsilon 1e-5
(PyTorch's default, which OpenAI's and Hugging Face's CLIP use; a config may say otherwise). The parameters are
named as Hugging Face's `CLIPModel` names them in `model.safetensors`; `PARAMETER_COUNT` pins their total, as the
published checkpoints have it.
"""

import dataclasses

from models.vit.vit_layers import TransformerConfig, describe, hf_block_parameters, hf_text_encoder_parameters

# What a user may ask for of the image tower (the command line offers these).
#   pooled:    the class token after the post-LayerNorm, before the projection (768 floats);
#   embedding: the projected class token, L2-normalised: CLIP's image embedding, in the text tower's space.
ENDPOINTS = ("pooled", "embedding")
DEFAULT_LAYER = "embedding"

IMAGE_SIZE = (224, 224)
LAYER_NORM_EPSILON = 1e-5
VOCABULARY_SIZE = 49408  # CLIP's BPE vocabulary: 256 bytes, 256 bytes + "</w>", 48,894 merges, 2 specials
CONTEXT_LENGTH = 77
START_OF_TEXT, END_OF_TEXT = 49406, 49407  # the last two ids: the end token is the largest id
FAMILY = "clip"  # the registry's name of the family: its size read from the checkpoint's config

# OpenAI's preprocessing (CLIP's `_transform`, Hugging Face's CLIPImageProcessor, open_clip's default): on 0..1.
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


# OpenAI's two transformers (QuickGELU, PyTorch's LayerNorm epsilon), as `models.vit.vit` builds them.
VISION = TransformerConfig(768, 12, 12, 3072, activation="quick_gelu", epsilon=LAYER_NORM_EPSILON)
TEXT = TransformerConfig(512, 12, 8, 2048, activation="quick_gelu", epsilon=LAYER_NORM_EPSILON)


@dataclasses.dataclass(frozen=True)
class Config:
    """One CLIP model.

    Attributes:
      name: the registry's name ("clip_vit_b32"; "clip" for a size read from a checkpoint's config).
      hub_repo: the Hugging Face repository of its checkpoint ("openai/clip-vit-base-patch32"; "" if none).
      patch_size: side of the image tower's patches (32 or 16).
      vision, text: the two transformers (`models.vit.vit_layers.TransformerConfig`: QuickGELU, epsilon 1e-5).
      projection: width of the shared embedding space (512).
      image_size: side of the input images (224): the reader resizes the short side to it and cuts the centre.
      vocabulary_size, context_length: the text tower's token ids and positions.
      mean, std: the normalisation of the pixels on 0..1, per RGB channel (OpenAI's).
      resize_filter: the reader's filter ("bicubic").
    """

    name: str
    hub_repo: str
    patch_size: int
    vision: TransformerConfig = VISION
    text: TransformerConfig = TEXT
    projection: int = 512
    image_size: int = IMAGE_SIZE[0]
    vocabulary_size: int = VOCABULARY_SIZE
    context_length: int = CONTEXT_LENGTH
    mean: tuple = OPENAI_MEAN
    std: tuple = OPENAI_STD
    resize_filter: str = "bicubic"

    @property
    def grid(self):
        """Patches per side: 7 for B/32, 14 for B/16."""
        return self.image_size // self.patch_size

    @property
    def positions(self):
        """Image tower positions: the class token and the G*G patches."""
        return 1 + self.grid * self.grid

    def feature_size(self, endpoint):
        """Floats per image at `endpoint` (pooled: the vision width, 768; embedding: the projection, 512)."""
        if endpoint not in ENDPOINTS:
            raise ValueError("layer=%r; expected one of %s" % (endpoint, ", ".join(ENDPOINTS)))
        return self.vision.width if endpoint == "pooled" else self.projection

    @property
    def preprocessing(self):
        """The reader's resize and the device's normalisation, in words (a job's settings record them)."""
        side = self.image_size
        mean = "OpenAI mean " if tuple(self.mean) == OPENAI_MEAN else "mean "
        return "short side to %d (%s), centre %dx%d; (RGB / 255 - %s%s) / std %s" % (
            side, self.resize_filter, side, side, mean, ", ".join(map(str, self.mean)),
            ", ".join(map(str, self.std)))

    def describe(self):
        """The architecture in words, for a job's settings where the size was read from a config."""
        return "image %d px, patches %d; vision: %s; text: %s, %d ids, %d positions; embedding %d" % (
            self.image_size, self.patch_size, describe(self.vision), describe(self.text), self.vocabulary_size,
            self.context_length, self.projection)


VIT_B32 = Config("clip_vit_b32", "openai/clip-vit-base-patch32", patch_size=32)
VIT_B16 = Config("clip_vit_b16", "openai/clip-vit-base-patch16", patch_size=16)
# OpenAI's ViT-L/14, at 224 and 336 px (their config.json: QuickGELU, epsilon 1e-5, 77 positions).
_L14_VISION = TransformerConfig(1024, 24, 16, 4096, activation="quick_gelu", epsilon=LAYER_NORM_EPSILON)
_L14_TEXT = TransformerConfig(768, 12, 12, 3072, activation="quick_gelu", epsilon=LAYER_NORM_EPSILON)
VIT_L14 = Config("clip_vit_l14", "openai/clip-vit-large-patch14", 14, _L14_VISION, _L14_TEXT, projection=768)
VIT_L14_336 = Config("clip_vit_l14_336", "openai/clip-vit-large-patch14-336", 14, _L14_VISION, _L14_TEXT,
                     projection=768, image_size=336)
CONFIGS = {config.name: config for config in (VIT_B32, VIT_B16, VIT_L14, VIT_L14_336)}

# Pinned by the tests: the total of the published checkpoints' parameters (both towers, both projections and
# logit_scale), as Hugging Face's CLIPModel counts them.
PARAMETER_COUNT = {"clip_vit_b32": 151_277_313, "clip_vit_b16": 149_620_737, "clip_vit_l14": 427_616_513,
                   "clip_vit_l14_336": 427_944_193}


def config(name):
    """The Config of preset `name`, or None for the family (FAMILY: the size is the checkpoint's); ValueError
    naming the CLIP models there are for any other name."""
    if name == FAMILY:
        return None
    try:
        return CONFIGS[name]
    except (KeyError, TypeError):
        raise ValueError("model=%r; expected one of %s" % (name, ", ".join((FAMILY,) + tuple(CONFIGS)))) from None


def vision_parameters(model):
    """The image tower's parameters: ((Hugging Face name, shape), ...), PyTorch's layouts ([out, in] for a
    linear layer's weight, [out, in, P, P] for the patch convolution), in the order of the checkpoint's model.

    Args:
      model: a Config.
    """
    width = model.vision.width
    prefix = "vision_model."
    parameters = [(prefix + "embeddings.class_embedding", (width,)),
                  (prefix + "embeddings.patch_embedding.weight", (width, 3, model.patch_size, model.patch_size)),
                  (prefix + "embeddings.position_embedding.weight", (model.positions, width)),
                  # Hugging Face's spelling: "pre_layrnorm".
                  (prefix + "pre_layrnorm.weight", (width,)), (prefix + "pre_layrnorm.bias", (width,))]
    for index in range(model.vision.depth):
        parameters += hf_block_parameters("%sencoder.layers.%d." % (prefix, index), width, model.vision.mlp_width)
    parameters += [(prefix + "post_layernorm.weight", (width,)), (prefix + "post_layernorm.bias", (width,)),
                   ("visual_projection.weight", (model.projection, width))]
    return tuple(parameters)


def text_parameters(model):
    """The text tower's parameters: ((Hugging Face name, shape), ...), as `vision_parameters`."""
    return tuple(hf_text_encoder_parameters(model.vocabulary_size, model.context_length, model.text) + [
        ("text_projection.weight", (model.projection, model.text.width))])


LOGIT_SCALE = ("logit_scale", ())  # the contrastive loss's temperature (log): in the file, used by neither tower


def parameters(model):
    """Every parameter of the checkpoint: the image tower's, the text tower's, then logit_scale."""
    return vision_parameters(model) + text_parameters(model) + (LOGIT_SCALE,)

