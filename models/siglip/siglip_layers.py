"""SigLIP and SigLIP 2 (the fixed-resolution checkpoints): any size, read from the checkpoint's config.json, and the
sizes users know by name (the presets). The table the graph (`siglip.py`) and the weight files (`siglip_weights.py`)
are built from; no TensorFlow.

    image tower, uint8 [N, S, S, 3] RGB (the whole image resized to S x S, bicubic)
      -> x / 127.5 - 1; patches of P x P (a P-stride convolution with bias)                   [N, G*G, W]
      -> + position embeddings (no class token)
      -> pre-LN transformer blocks (GELU's tanh approximation), post-LayerNorm
      -> attention-pooling head (a learnt probe attends over the patches; LayerNorm, MLP)
                                                                                   = pooled    [N, W]
      -> L2-normalised                                                             = embedding [N, W]
    text tower, int32 [N, L] token ids (the tokens, the end token, padding to L: 64)
      -> token + position embeddings -> pre-LN blocks, attention over every position (no mask)
      -> final LayerNorm; the LAST position (padding for a short sentence, as trained) -> head (dense, bias)
      -> L2-normalised                                                                         [N, W]
    score of an image and a sentence: cosine; SigLIP's probability sigmoid(exp(logit_scale) * cosine + logit_bias)

G = S // P (27 for patch 14 at 384 px: the last 6 rows and columns are left out, as PyTorch's
convolution leaves them). Every LayerNorm has epsilon 1e-6. The parameters are named as transformers'
`SiglipModel` names them in `model.safetensors` (SigLIP 2's fixed-resolution checkpoints are SiglipModel's too:
their config.json says `"model_type": "siglip"`; transformers' Siglip2Model is the NaFlex variant, which is not
supported here).

A config.json is read as transformers reads it: a field it lacks takes SiglipTextConfig's or SiglipVisionConfig's
default (the published files are sparse: google/siglip-base-patch16-224's names only the text tower's sizes and the
vision tower's patch). A field whose value the graph cannot compute is refused in one line naming it.
"""

import dataclasses
from pathlib import Path

from models.files import WeightsError
from models.vit.vit_config import ConfigError, Section, hf_transformer, read_config as read_config_file
from models.vit.vit_layers import TransformerConfig, hf_block_parameters, hf_text_encoder_parameters

# What a user may ask for of the image tower.
#   pooled:    the attention-pooling head's output (transformers' pooler_output, get_image_features);
#   embedding: the same, L2-normalised: in the text tower's space, compared with a sentence by cosine.
ENDPOINTS = ("pooled", "embedding")
DEFAULT_LAYER = "embedding"

CONFIG_FILE = "config.json"
LAYER_NORM_EPSILON = 1e-6

# transformers' defaults of a tower's fields a config.json may leave out (SiglipTextConfig, SiglipVisionConfig, the
# same for both towers); the others' defaults are where they are read (vocab_size 32000, max_position_embeddings 64,
# image_size 224, patch_size 16, projection_size the text tower's width).
TEXT_DEFAULTS = VISION_DEFAULTS = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                                   "num_attention_heads": 12, "hidden_act": "gelu_pytorch_tanh",
                                   "layer_norm_eps": 1e-6}


@dataclasses.dataclass(frozen=True)
class Config:
    """One SigLIP model's size.

    Attributes:
      name: the registry's name ("siglip" for a size read from a checkpoint, or a preset's name).
      vision, text: the two transformers (`models.vit.vit_layers.TransformerConfig`).
      patch_size: side of the image tower's patches (14, 16 or 32).
      image_size: side of the input images (224, 256, 384, 512).
      vocabulary_size: the text tower's token embeddings (32,000 SigLIP's English, 250,000 its multilingual,
        256,000 SigLIP 2's Gemma vocabulary).
      context_length: the text tower's positions (64; 16 for siglip-so400m-patch14-224): every sentence is
        padded to it.
      projection: the text head's output, the embedding's size: the image tower's width.
    """

    name: str
    vision: TransformerConfig
    text: TransformerConfig
    patch_size: int
    image_size: int
    vocabulary_size: int
    context_length: int
    projection: int

    def __post_init__(self):
        if self.image_size < self.patch_size:
            raise WeightsError("image_size=%d is smaller than patch_size=%d" % (self.image_size, self.patch_size))
        if self.projection != self.vision.width:
            raise WeightsError("text_config.projection_size=%d: the text embedding must have the image tower's width "
                               "(%d) to be compared with it" % (self.projection, self.vision.width))

    @property
    def grid(self):
        """Patches per side: S // P. Where P does not divide S (patch 14 at 384 px: 27 patches of 378 pixels) the
        convolution, as PyTorch's of stride P without padding, leaves the last S % P rows and columns out."""
        return self.image_size // self.patch_size

    @property
    def positions(self):
        """The image tower's tokens: the G*G patches (no class token)."""
        return self.grid * self.grid

    def feature_size(self, endpoint):
        """Floats per image at `endpoint`: the image tower's width for both."""
        if endpoint not in ENDPOINTS:
            raise ValueError("layer=%r; expected one of %s" % (endpoint, ", ".join(ENDPOINTS)))
        return self.vision.width

    def describe(self):
        """The size in one line, recorded in an output's settings ("vision 768x12 (12 heads, MLP 3072), patch 16,
        224 px; text 768x12 (12 heads, MLP 3072), 32000 tokens, 64 positions")."""
        def tower(config):
            return "%dx%d (%d heads, MLP %d, %s)" % (config.width, config.depth, config.heads, config.mlp_width,
                                                     config.activation)
        return "vision %s, patch %d, %d px; text %s, %d tokens, %d positions" % (
            tower(self.vision), self.patch_size, self.image_size, tower(self.text), self.vocabulary_size,
            self.context_length)


# ----------------------------------------------------------------------------- config.json

def config_from_dict(data, name="siglip", where=CONFIG_FILE):
    """The Config a config.json's content describes, as transformers' SiglipConfig reads it, field by field through
    `models.vit.vit_config` (the reader CLIP's and DINOv2's configs go through).

    Args:
      data: the parsed config.json ({"model_type": "siglip", "text_config": {...}, "vision_config": {...}}).
      name: the registry's name the Config is given.
      where: the file, for messages.

    Raises:
      ConfigError: one line naming the file and the field that cannot be computed: another model_type (SigLIP 2's
        NaFlex "siglip2", CLIP's ...), an activation the blocks lack, a vision tower without its pooling head, a
        channel count other than 3, sizes that do not divide or do not fit together.
    """
    if not isinstance(data, dict):
        raise ConfigError("%s holds a JSON %s, not a model's config" % (where, type(data).__name__))
    config = Section(data, where, "", FAMILY)
    model_type = config.get("model_type", None)
    if model_type != "siglip":
        raise config.refuse("model_type", "SigLIP 2's NaFlex checkpoints (variable resolution) are not supported, "
                                          "its fixed-resolution ones (model_type 'siglip') are"
                            if model_type == "siglip2" else "not SigLIP's config ('siglip'; pass the --model of "
                                                            "its family)")
    text, vision = config.section("text_config", {}), config.section("vision_config", {})
    vision.expect("num_channels", (3,), 3, "siglip runs RGB images")
    vision.expect("vision_use_head", (True,), True, "the image embedding is the attention-pooling head's output, "
                                                    "which this checkpoint lacks")
    text_tower = hf_transformer(text, **TEXT_DEFAULTS)
    try:
        return Config(name, hf_transformer(vision, **VISION_DEFAULTS), text_tower,
                      patch_size=vision.square("patch_size", 16), image_size=vision.square("image_size", 224),
                      vocabulary_size=text.integer("vocab_size", 32000),
                      context_length=text.integer("max_position_embeddings", 64),
                      projection=text.integer("projection_size", text_tower.width))
    except WeightsError as error:  # sizes that do not fit together
        raise ConfigError("%s: %s" % (where, error)) from None


def read_config(path, name="siglip"):
    """The Config of a checkpoint's config.json (`path`: the file, or the folder holding it).

    Raises:
      WeightsError: no such file; ConfigError: not JSON, or a config `config_from_dict` refuses (one line naming
        the file).
    """
    path = Path(path)
    if path.is_dir():
        path = path / CONFIG_FILE
    if not path.is_file():
        raise WeightsError("weights=%s: no %s beside the checkpoint (SigLIP's size is read from it)"
                           % (path.parent, CONFIG_FILE))
    section = read_config_file(path, FAMILY)
    return config_from_dict(section.values, name, str(path))


# ----------------------------------------------------------------------------- the checkpoint's names and shapes

def vision_parameters(model):
    """The image tower's parameters: ((transformers' name, shape), ...), PyTorch's layouts ([out, in] for a linear
    layer, [out, in, P, P] for the patch convolution; the head's nn.MultiheadAttention packs q, k, v in
    in_proj_weight [3W, W])."""
    width, hidden = model.vision.width, model.vision.mlp_width
    prefix = "vision_model."
    parameters = [(prefix + "embeddings.patch_embedding.weight", (width, 3, model.patch_size, model.patch_size)),
                  (prefix + "embeddings.patch_embedding.bias", (width,)),
                  (prefix + "embeddings.position_embedding.weight", (model.positions, width))]
    for index in range(model.vision.depth):
        parameters += hf_block_parameters("%sencoder.layers.%d." % (prefix, index), width, hidden)
    head = prefix + "head."
    parameters += [(prefix + "post_layernorm.weight", (width,)), (prefix + "post_layernorm.bias", (width,)),
                   (head + "probe", (1, 1, width)),
                   (head + "attention.in_proj_weight", (3 * width, width)),
                   (head + "attention.in_proj_bias", (3 * width,)),
                   (head + "attention.out_proj.weight", (width, width)), (head + "attention.out_proj.bias", (width,)),
                   (head + "layernorm.weight", (width,)), (head + "layernorm.bias", (width,)),
                   (head + "mlp.fc1.weight", (hidden, width)), (head + "mlp.fc1.bias", (hidden,)),
                   (head + "mlp.fc2.weight", (width, hidden)), (head + "mlp.fc2.bias", (width,))]
    return tuple(parameters)


def text_parameters(model):
    """The text tower's parameters: ((transformers' name, shape), ...), as `vision_parameters`."""
    return tuple(hf_text_encoder_parameters(model.vocabulary_size, model.context_length, model.text) + [
        ("text_model.head.weight", (model.projection, model.text.width)),
        ("text_model.head.bias", (model.projection,))])


# SigLIP's score of an image and a sentence: sigmoid(exp(logit_scale) * cosine + logit_bias). In the file, [1] each.
LOGITS = (("logit_scale", (1,)), ("logit_bias", (1,)))


def parameters(model):
    """Every parameter of the checkpoint: the image tower's, the text tower's, then logit_scale and logit_bias."""
    return vision_parameters(model) + text_parameters(model) + LOGITS


def parameter_count(model):
    """The checkpoint's parameters, as transformers counts them (`SiglipModel.num_parameters()`)."""
    total = 0
    for _, shape in parameters(model):
        count = 1
        for dimension in shape:
            count *= dimension
        total += count
    return total


# ----------------------------------------------------------------------------- the presets

def _tower(width, depth, heads, mlp_width):
    return TransformerConfig(width, depth, heads, mlp_width, activation="gelu_tanh", epsilon=LAYER_NORM_EPSILON)


# The towers of the published sizes (transformers' conversion scripts, big_vision's configs).
TOWERS = {"base": _tower(768, 12, 12, 3072), "large": _tower(1024, 24, 16, 4096),
          "so400m": _tower(1152, 27, 16, 4304), "giant-opt": _tower(1536, 40, 16, 6144)}
VOCABULARIES = {"siglip": 32000, "multilingual": 250000, "siglip2": 256000}


@dataclasses.dataclass(frozen=True)
class Preset:
    """A published checkpoint users know by name: its size and where it is.

    Attributes:
      config: its Config (named as the registry names it: "siglip2_base_patch16_256").
      hub_repo: its Hugging Face repository ("google/siglip2-base-patch16-256").
      revision: the commit its files are read at (the one MTEB's model registry pins).
      parameters: transformers' count of its parameters (MTEB's n_parameters), which the tests check the Config
        against.
    """

    config: Config
    hub_repo: str
    revision: str
    parameters: int

    @property
    def title(self):
        """The size as people write it: "SigLIP B/16 at 224", "SigLIP 2 So400m/14 at 384"."""
        name = self.hub_repo.split("/")[1]
        size = name.split("-")[1]
        size = {"base": "B", "large": "L", "so400m": "So400m", "giant": "g-opt"}[size]
        suffix = " multilingual" if name.endswith(("multilingual", "i18n")) else ""
        return "SigLIP%s %s/%d at %d%s" % (" 2" if self.siglip2 else "", size, self.config.patch_size,
                                            self.config.image_size, suffix)

    @property
    def siglip2(self):
        """Whether it is SigLIP 2 (Gemma's tokenizer, multilingual) rather than SigLIP."""
        return self.hub_repo.startswith("google/siglip2-")


def _preset(repo, revision, count, text=None, context_length=64):
    """The preset of a google/ repository named "<family>-<size>-patch<P>-<S>[-suffix]"."""
    name = repo.split("/")[1]
    family, rest = name.split("-", 1)
    size = "giant-opt" if rest.startswith("giant-opt") else rest.split("-")[0]
    parts = rest[len(size) + 1:].split("-")  # "patch16", "256", and a suffix ("multilingual", "i18n") or none
    patch, image = int(parts[0][len("patch"):]), int(parts[1])
    vocabulary = VOCABULARIES["siglip2" if family == "siglip2" else
                               "multilingual" if name.endswith(("multilingual", "i18n")) else "siglip"]
    vision = TOWERS[size]
    text = text or (TOWERS["so400m"] if size == "giant-opt" else vision)
    config = Config(name.replace("-", "_"), vision, text, patch_size=patch, image_size=image,
                    vocabulary_size=vocabulary, context_length=context_length, projection=vision.width)
    return Preset(config, repo, revision, count)


# The fixed-resolution checkpoints of google/ on the hub, at the commits MTEB's model registry pins
# (embeddings-benchmark/mteb, mteb/models/model_implementations/siglip_models.py), with its parameter counts.
PRESETS = {preset.config.name: preset for preset in (
    _preset("google/siglip-base-patch16-224", "7fd15f0689c79d79e38b1c2e2e2370a7bf2761ed", 203155970),
    _preset("google/siglip-base-patch16-256", "b078df89e446d623010d890864d4207fe6399f61", 203202050),
    _preset("google/siglip-base-patch16-384", "41aec1c83b32e0a6fca20ad88ba058aa5b5ea394", 203447810),
    _preset("google/siglip-base-patch16-512", "753a949581523b60257d93e18391e8c27f72eb22", 203791874),
    _preset("google/siglip-base-patch16-256-multilingual", "8952a4eafcde3cb7ab46b1dd629b33f8784ca9c6", 370626050),
    _preset("google/siglip-large-patch16-256", "d0da9f876e7d66b4e250cd2450c3ba2ce735e447", 652150786),
    _preset("google/siglip-large-patch16-384", "ce005573a40965dfd21fd937fbdeeebf2439fc35", 652478466),
    _preset("google/siglip-so400m-patch14-224", "d04cf29fca7b6374f74d8bea1969314492266b5e", 877360306,
            context_length=16),
    _preset("google/siglip-so400m-patch14-384", "9fdffc58afc957d1a03a25b10dba0329ab15c2a3", 877960498),
    _preset("google/siglip-so400m-patch16-256-i18n", "365d321c0cfdea96bc28e3a29787a11a062681a1", 1128758962),
    _preset("google/siglip2-base-patch16-224", "75de2d55ec2d0b4efc50b3e9ad70dba96a7b2fa2", 375187970),
    _preset("google/siglip2-base-patch16-256", "3f9f96cb90da5dbc758b01813f2f6f1aee24c1ab", 375234050),
    _preset("google/siglip2-base-patch16-384", "f775b65a79762255128c981547af89addcfe0f88", 375479810),
    _preset("google/siglip2-base-patch16-512", "a89f5c5093f902bf39d3cd4d81d2c09867f0724b", 375823874),
    _preset("google/siglip2-base-patch32-256", "94dffa8cb1179de3e03f091dbc3917e5d5a9ae84", 376856066),
    _preset("google/siglip2-large-patch16-256", "787800c8990e6f058423089178e718139608408c", 881526786),
    _preset("google/siglip2-large-patch16-384", "1b426889ea62b5a72bf9839009a1b184bfc9c178", 881854466),
    _preset("google/siglip2-large-patch16-512", "49488218e80259885f3be61d7a9455faf833b7a8", 882313218),
    _preset("google/siglip2-so400m-patch14-224", "78e403963a4f6a3640d07803284752326fdf4edf", 1135463602),
    _preset("google/siglip2-so400m-patch14-384", "e8e487298228002f3d8a82e0cd5c8ea9c567f57f", 1136008498),
    _preset("google/siglip2-so400m-patch16-256", "e8708ab72d125807e45b36fb7d4e0aacbb59f379", 1135670962),
    _preset("google/siglip2-so400m-patch16-384", "dd658faac399427308559e2c3ac1e99cbe43845d", 1136039602),
    _preset("google/siglip2-so400m-patch16-512", "ceea1cba8130d8271436da4828633198c176a775", 1136555698),
    _preset("google/siglip2-giant-opt-patch16-256", "46d7129e1aa1527cc5a44d86fb35250df3abf0aa", 1871393906),
    _preset("google/siglip2-giant-opt-patch16-384", "a713301b217d38485fb2204c808367d10bc3cc40", 1871885426),
)}
FAMILY = "siglip"  # the registry's name of a size read from the checkpoint (--model siglip --weights FOLDER)


def preset(name):
    """The Preset of `name`; ValueError naming the presets there are for any other name."""
    try:
        return PRESETS[name]
    except (KeyError, TypeError):
        raise ValueError("model=%r; expected one of %s" % (name, ", ".join(PRESETS))) from None


def same_size(one, other):
    """Whether two Configs compute the same function (their names aside)."""
    return dataclasses.replace(one, name="") == dataclasses.replace(other, name="")
