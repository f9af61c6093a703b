"""A CLIP checkpoint's size, read from its own config: Hugging Face's config.json (beside model.safetensors) or
open_clip's open_clip_config.json (beside open_clip_model.safetensors). No TensorFlow.

    model = read_hf_config(folder / "config.json")               # a clip_layers.Config named "clip"
    model = read_open_clip_config(folder / "open_clip_config.json")

Hugging Face's (`CLIPConfig`): `projection_dim`, and `vision_config` / `text_config` with hidden_size,
num_hidden_layers, num_attention_heads, intermediate_size, hidden_act ("quick_gelu" for OpenAI's checkpoints,
"gelu" for LAION's), layer_norm_eps, image_size, patch_size; the text's vocab_size and max_position_embeddings. A
field the file leaves out has transformers' default (CLIPTextConfig's, CLIPVisionConfig's); older files keep the
towers in `text_config_dict` / `vision_config_dict`, which transformers reads over the others, and so does this.

open_clip's (`{"model_cfg": ..., "preprocess_cfg": ...}`, its CLIPVisionCfg and CLIPTextCfg): `embed_dim`,
`quick_gelu` (false unless said: LAION's checkpoints use the exact GELU, OpenAI's QuickGELU), vision_cfg's
image_size, layers, width, head_width (heads = width / head_width), mlp_ratio, patch_size; text_cfg's
context_length, vocab_size, width, heads, layers, mlp_ratio; preprocess_cfg's mean, std, interpolation (bicubic
or bilinear) and resize_mode ("shortest": the short side to image_size, the centre cut). Every other field of
open_clip's configs is either one that changes nothing computed here (patch_dropout, output_tokens, ...) or is
refused in one line naming it (an attention-pooling head, a timm or Hugging Face tower, LayerScale, ...).

The text tower pools the end token as the ids' argmax (OpenAI's, open_clip's "argmax", and transformers' for an
eos_token_id of 2, or of the vocabulary's last id, which the argmax finds first): another pooling is refused.
"""

import dataclasses
import json

from models.clip import clip_layers
from models.vit.vit_config import ConfigError, Section, hf_activation, hf_transformer, read_config
from models.vit.vit_layers import TransformerConfig

OPEN_CLIP_CONFIG_FILE = "open_clip_config.json"
FAMILY = clip_layers.FAMILY

# transformers' defaults (CLIPTextConfig, CLIPVisionConfig): OpenAI's ViT-B/32.
_HF_TOWER = {"hidden_act": "quick_gelu", "layer_norm_eps": 1e-5}
_HF_VISION = dict(_HF_TOWER, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
_HF_TEXT = dict(_HF_TOWER, hidden_size=512, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8)

# open_clip's fields (CLIPVisionCfg, CLIPTextCfg, the model config): those read, those that change nothing computed
# here, and {field: (the values this code runs, why another is refused)} for the others; any field not named here
# is refused too.
_DEFAULT_BLOCK = ((False,), "an attention variant of open_clip's custom blocks, which clip does not run")
_BLOCKS = {"act_kwargs": ((None, {}), "activation options, which clip does not take"),
           "norm_kwargs": ((None, {}), "LayerNorm options, which clip does not take"),
           "block_type": ((None, "default"), "open_clip's custom blocks, which clip does not run"),
           "ls_init_value": ((None,), "LayerScale in the blocks, which clip's towers do not run"),
           "qk_norm": _DEFAULT_BLOCK, "scaled_cosine_attn": _DEFAULT_BLOCK, "scale_heads": _DEFAULT_BLOCK,
           "scale_attn_inner": _DEFAULT_BLOCK, "scale_attn": _DEFAULT_BLOCK, "scale_fc": _DEFAULT_BLOCK}
_TIMM = ((None,), "a timm image tower, which clip lacks (it runs open_clip's own ViT)")
_VISION_READ = ("image_size", "layers", "width", "head_width", "mlp_ratio", "patch_size")
_VISION_IGNORED = ("patch_dropout", "output_tokens", "timm_model_pretrained", "timm_drop", "timm_drop_path")
_VISION_ONLY = dict(
    _BLOCKS, timm_model_name=_TIMM, timm_pool=(("avg",), _TIMM[1]), timm_proj=(("linear",), _TIMM[1]),
    timm_proj_bias=((False,), _TIMM[1]),
    attentional_pool=((False,), "an attention-pooling head, which clip does not run (it takes the class token)"),
    attn_pooler_queries=((256,), "an attention-pooling head, which clip does not run"),
    attn_pooler_heads=((8,), "an attention-pooling head, which clip does not run"),
    no_ln_pre=((False,), "no LayerNorm before the blocks, which clip does not run"),
    pos_embed_type=(("learnable",), "fixed position embeddings, which clip does not run (it reads learnt ones)"),
    final_ln_after_pool=((False,), "the final LayerNorm after an average pooling, which clip does not run"),
    pool_type=(("tok",), "a pooling other than the class token's, which clip does not run"))
_TEXT_READ = ("context_length", "vocab_size", "width", "heads", "layers", "mlp_ratio")
# pad_id and eos_id matter only to other poolings; final_ln_after_pool changes nothing for one position's LayerNorm.
_TEXT_IGNORED = ("pad_id", "eos_id", "output_tokens", "final_ln_after_pool", "hf_model_pretrained", "hf_proj_type",
                 "hf_pooler_type")
_HF_TEXT_TOWER = ((None,), "a Hugging Face text tower, which clip lacks (it runs CLIP's own)")
_TOKENIZER = ((None, {}), "a tokenizer clip does not read (it reads CLIP's BPE: vocab.json and merges.txt)")
_TEXT_ONLY = dict(
    _BLOCKS, hf_model_name=_HF_TEXT_TOWER, hf_tokenizer_name=_TOKENIZER, tokenizer_mode=_TOKENIZER,
    tokenizer_kwargs=_TOKENIZER, embed_cls=((False,), "a class token in the text tower, which clip does not run"),
    no_causal_mask=((False,), "a text tower without the causal mask, which clip does not run"),
    pool_type=(("argmax",), "a pooling other than the end token's (argmax), which clip does not run"),
    proj_bias=((False,), "a text projection with a bias, which clip does not run"),
    proj_type=(("linear",), "a text projection other than a matrix, which clip does not run"))
_MODEL_READ = ("embed_dim", "quick_gelu", "vision_cfg", "text_cfg", "custom_text")
_MODEL_IGNORED = ("init_logit_scale", "init_logit_bias", "nonscalar_logit_scale", "cast_dtype")


# ----------------------------------------------------------------------------- Hugging Face's config.json

def read_hf_config(path, name=FAMILY, hub_repo=""):
    """The Config a Hugging Face CLIP config.json describes (OpenAI's preprocessing: their processors' on the hub).

    Raises:
      ConfigError: the file cannot be read, is another model's (model_type), or has a field the code cannot run.
    """
    config = read_config(path, FAMILY)
    config.expect("model_type", ("clip",), None, "not a CLIP checkpoint's config (pass the --model of its family)")
    towers = {}
    for tower, defaults in (("vision", _HF_VISION), ("text", _HF_TEXT)):
        values = dict(config.get(tower + "_config", {}) or {})
        values.update(config.get(tower + "_config_dict", {}) or {})  # transformers reads these over the others
        towers[tower] = Section(values, path, tower + "_config.", FAMILY)
    vision, text = towers["vision"], towers["text"]
    vision.expect("num_channels", (3,), 3, "clip runs RGB images")
    vocabulary = text.integer("vocab_size", clip_layers.VOCABULARY_SIZE)
    text.expect("eos_token_id", (2, vocabulary - 1), clip_layers.END_OF_TEXT,
                "clip pools the end token as the ids' argmax: the end token must be the vocabulary's last id "
                "(or the legacy 2, which means the same to transformers)")
    return clip_layers.Config(
        name, hub_repo, vision.square("patch_size", 32), hf_transformer(vision, **_HF_VISION),
        hf_transformer(text, **_HF_TEXT), projection=config.integer("projection_dim", 512),
        image_size=vision.square("image_size", 224), vocabulary_size=vocabulary,
        context_length=text.integer("max_position_embeddings", clip_layers.CONTEXT_LENGTH))


def hf_config(model):
    """The config.json of `model` as Hugging Face's CLIPModel writes it (the fields `read_hf_config` reads)."""
    def tower(config):
        return {"hidden_size": config.width, "num_hidden_layers": config.depth, "num_attention_heads": config.heads,
                "intermediate_size": config.mlp_width, "hidden_act": hf_activation(config.activation),
                "layer_norm_eps": config.epsilon}

    return {"architectures": ["CLIPModel"], "model_type": "clip", "projection_dim": model.projection,
            "text_config": dict(tower(model.text), model_type="clip_text_model", vocab_size=model.vocabulary_size,
                                max_position_embeddings=model.context_length, bos_token_id=model.vocabulary_size - 2,
                                eos_token_id=model.vocabulary_size - 1),
            "vision_config": dict(tower(model.vision), model_type="clip_vision_model", image_size=model.image_size,
                                  patch_size=model.patch_size, num_channels=3)}


# ----------------------------------------------------------------------------- open_clip's open_clip_config.json

def _open_clip_tower(section, width, heads, mlp_ratio, activation):
    layers = section.get("layers", 12)
    if not isinstance(layers, int):  # a list of four: open_clip's ModifiedResNet, not a ViT
        raise section.refuse("layers", "a ResNet image tower, which clip does not run (it runs ViTs)")
    if width % heads:
        raise section.refuse("width", "not a multiple of the heads (%d)" % heads)
    # open_clip's Transformer: mlp_width = int(width * mlp_ratio); LayerNorm of PyTorch's epsilon.
    return TransformerConfig(width, section.integer("layers", 12), heads, int(width * mlp_ratio), activation,
                             epsilon=clip_layers.LAYER_NORM_EPSILON)


def _refuse_unknown(section, read, ignored, only):
    """Refuses a field of `only` whose value is not one it runs, then any field that is not named at all."""
    for name, (allowed, why) in only.items():
        if name in section.values and section.values[name] not in allowed:
            raise section.refuse(name, why)
    section.only(read + ignored + tuple(only), "a field clip does not know (it runs open_clip's plain ViT CLIP)")


def read_open_clip_config(path, name=FAMILY, hub_repo=""):
    """The Config an open_clip_config.json describes, its preprocessing included.

    Raises:
      ConfigError: the file cannot be read, or has a field the code cannot run (one line naming it).
    """
    config = read_config(path, FAMILY)
    model, preprocess = config.section("model_cfg"), config.section("preprocess_cfg", {})
    _refuse_unknown(model, _MODEL_READ, _MODEL_IGNORED, {})
    activation = "quick_gelu" if model.flag("quick_gelu", False) else "gelu"
    vision, text = model.section("vision_cfg"), model.section("text_cfg")
    _refuse_unknown(vision, _VISION_READ, _VISION_IGNORED, _VISION_ONLY)
    _refuse_unknown(text, _TEXT_READ, _TEXT_IGNORED, _TEXT_ONLY)
    width = vision.integer("width", 768)
    vision_tower = _open_clip_tower(vision, width, width // vision.integer("head_width", 64),
                                    vision.number("mlp_ratio", 4.0), activation)
    text_tower = _open_clip_tower(text, text.integer("width", 512), text.integer("heads", 8),
                                  text.number("mlp_ratio", 4.0), activation)
    image_size = vision.square("image_size", 224)
    preprocess.only(("size", "mode", "mean", "std", "interpolation", "resize_mode", "fill_color"),
                    "a preprocessing option clip does not know")
    preprocess.expect("mode", ("RGB",), "RGB", "clip reads RGB images")
    preprocess.expect("resize_mode", ("shortest",), "shortest",
                      "clip resizes the short side to the image size and cuts the centre (open_clip's 'shortest')")
    size = preprocess.square("size", image_size)
    if size != image_size:
        raise preprocess.refuse("size", "not the image tower's image_size (%d)" % image_size)
    mean, std = (_triple(preprocess, key, default) for key, default in (("mean", clip_layers.OPENAI_MEAN),
                                                                         ("std", clip_layers.OPENAI_STD)))
    resize_filter = preprocess.expect("interpolation", ("bicubic", "bilinear"), "bicubic",
                                      "clip's reader resizes with bicubic or bilinear")
    return clip_layers.Config(
        name, hub_repo, vision.square("patch_size", 16), vision_tower, text_tower,
        projection=model.integer("embed_dim"), image_size=image_size,
        vocabulary_size=text.integer("vocab_size", clip_layers.VOCABULARY_SIZE),
        context_length=text.integer("context_length", clip_layers.CONTEXT_LENGTH), mean=mean, std=std,
        resize_filter=resize_filter)


def _triple(section, key, default):
    value = section.get(key, default)
    if not isinstance(value, (list, tuple)) or len(value) != 3 or not all(
            isinstance(item, (int, float)) and not isinstance(item, bool) for item in value) or (
            key == "std" and min(value) <= 0):
        raise section.refuse(key, "expected three numbers, one per RGB channel")
    return tuple(float(item) for item in value)


# ----------------------------------------------------------------------------- a checkpoint's size

def is_hf_clip(folder):
    """Whether `folder`'s config.json is a Hugging Face CLIP's (model_type "clip"): a folder may hold open_clip's
    files beside another library's model.safetensors and config.json (timm's repositories of CLIP weights)."""
    try:
        return json.loads((folder / "config.json").read_text(encoding="utf-8")).get("model_type") == "clip"
    except (OSError, ValueError, AttributeError):
        return False


def checkpoint_config(path, layout):
    """The config file beside a checkpoint: config.json for Hugging Face's layout, open_clip_config.json for
    open_clip's."""
    return path.parent / (OPEN_CLIP_CONFIG_FILE if layout == "open_clip" else "config.json")


def read_checkpoint_config(path, layout):
    """The Config the config beside checkpoint `path` (a pathlib.Path) describes, or None when there is none."""
    config = checkpoint_config(path, layout)
    if not config.is_file():
        return None
    return (read_open_clip_config if layout == "open_clip" else read_hf_config)(config)


def agreeing(preset, read, config_path):
    """`preset`, once checked to be the size `read` from `config_path` describes.

    Raises:
      ConfigError: they differ (one line naming the first field that does, and how to read the size instead).
    """
    fields = [(field.name, getattr(preset, field.name), getattr(read, field.name))
              for field in dataclasses.fields(clip_layers.Config) if field.name not in ("name", "hub_repo")]
    for field, ours, theirs in fields:
        if ours != theirs:
            raise ConfigError("%s: its %s is %s, where %s has %s: pass --model %s to read the size from the config"
                              % (config_path, field, _said(theirs), preset.name, _said(ours), FAMILY))
    return preset


def _said(value):
    if isinstance(value, TransformerConfig):
        return "(%s)" % ", ".join("%s %s" % (field.name, getattr(value, field.name))
                                  for field in dataclasses.fields(value))
    return str(value)
