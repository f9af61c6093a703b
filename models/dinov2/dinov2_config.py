"""A DINOv2 checkpoint's size, read from its own config.json (Hugging Face's `Dinov2Config`, or
`Dinov2WithRegistersConfig` for facebook/dinov2-with-registers-*), and written for random folders. No TensorFlow.

    variant = read_hf_config(folder / "config.json")      # a dinov2_layers.Variant named "dinov2"

The fields read: model_type ("dinov2", or "dinov2_with_registers" with num_register_tokens), hidden_size,
num_hidden_layers, num_attention_heads, mlp_ratio, hidden_act, layer_norm_eps, image_size and patch_size (the
grid of the position embeddings: 518 / 14 = 37), use_swiglu_ffn (g/14's SwiGLU MLP: fused gate and values, the
hidden width two thirds of mlp_ratio x width, rounded up to a multiple of 8, SiLU), num_channels (3) and qkv_bias
(true). A field the file leaves out has transformers' default; the others (dropout, layerscale_value,
drop_path_rate, ...) change nothing computed at inference. The checkpoints with registers resize their position
embeddings with antialiasing, as Hugging Face's Dinov2WithRegistersModel does.
"""

import dataclasses

from models.dinov2 import dinov2_layers
from models.dinov2.dinov2_layers import FAMILY, IMAGE_SIZE, Variant, swiglu_width
from models.files import WeightsError
from models.vit.vit_config import CONFIG_FILE, ConfigError, read_config
from models.vit.vit_layers import TransformerConfig, size

MODEL_TYPES = {"dinov2": 0, "dinov2_with_registers": 4}  # and their default register tokens
_SIZES = {384: "ViT-S", 768: "ViT-B", 1024: "ViT-L", 1536: "ViT-g"}


def read_hf_config(path, name=FAMILY):
    """The Variant a Hugging Face DINOv2 config.json describes.

    Raises:
      ConfigError: the file cannot be read, is another model's (model_type), or has a field the code cannot run
        (one line naming it).
    """
    config = read_config(path, FAMILY)
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise config.refuse("model_type", "not a DINOv2 checkpoint's config (%s; pass the --model of its family)"
                            % " or ".join(MODEL_TYPES))
    config.expect("num_channels", (3,), 3, "dinov2 runs RGB images")
    config.expect("qkv_bias", (True,), True, "dinov2 runs attention projections with biases")
    width, heads = config.integer("hidden_size", 768), config.integer("num_attention_heads", 12)
    if width % heads:
        raise config.refuse("num_attention_heads", "hidden_size=%d is not a multiple of it" % width)
    depth, ratio, epsilon = (config.integer("num_hidden_layers", 12), config.number("mlp_ratio", 4),
                             config.number("layer_norm_eps", 1e-6))
    if config.flag("use_swiglu_ffn", False):  # SiLU gate, whatever hidden_act says (transformers' Dinov2SwiGLUFFN)
        transformer = TransformerConfig(width, depth, heads, swiglu_width(width, ratio), "silu", layer_scale=True,
                                        epsilon=epsilon, gated=True)
    else:
        transformer = TransformerConfig(width, depth, heads, int(width * ratio),
                                        config.activation("hidden_act", "gelu"), layer_scale=True, epsilon=epsilon)
    patch = config.square("patch_size", 14 if model_type == "dinov2" else 16)
    if IMAGE_SIZE[0] % patch:
        raise config.refuse("patch_size", "dinov2 cuts 224 px images into patches: it must divide 224")
    image_size = config.square("image_size", 224)
    registers = 0
    if model_type == "dinov2_with_registers":
        registers = config.integer("num_register_tokens", MODEL_TYPES[model_type])
    title = "DINOv2 %s/%d%s" % (_SIZES.get(width, "ViT"), patch, " with registers" if registers else "")
    variant = Variant(name, title, transformer, "", None, None, None, 0, registers=registers,
                      source_grid=image_size // patch, patch=patch,
                      interpolation="torch_antialias" if model_type == "dinov2_with_registers" else "torch")
    # Hugging Face's count: the checkpoint's arrays and the mask token.
    return dataclasses.replace(variant, parameter_count=size(dinov2_layers.variables(variant, variant.source_grid))
                               + width)


def hf_config(variant):
    """The config.json of `variant` as Hugging Face's Dinov2Model (or Dinov2WithRegistersModel) writes it: the
    fields `read_hf_config` reads."""
    transformer = variant.transformer
    config = {"architectures": ["Dinov2WithRegistersModel" if variant.interpolation == "torch_antialias"
                                else "Dinov2Model"],
              "model_type": "dinov2_with_registers" if variant.interpolation == "torch_antialias" else "dinov2",
              "hidden_size": transformer.width, "num_hidden_layers": transformer.depth,
              "num_attention_heads": transformer.heads, "mlp_ratio": 4 if transformer.gated else
              transformer.mlp_width / transformer.width, "hidden_act": "gelu" if transformer.gated else
              transformer.activation, "layer_norm_eps": transformer.epsilon,
              "image_size": variant.source_grid * variant.patch, "patch_size": variant.patch, "num_channels": 3,
              "qkv_bias": True, "use_swiglu_ffn": transformer.gated, "layerscale_value": 1.0}
    if variant.interpolation == "torch_antialias":
        config["num_register_tokens"] = variant.registers
    return config


def sized(path, variant):
    """The Variant of checkpoint `path` (a pathlib.Path): its config.json's, beside it; checked against the preset
    `variant`, or the preset where there is none.

    Raises:
      WeightsError: the family (variant None) without a config.json beside the file.
      ConfigError: a config the code cannot run; another size than the preset's (one line naming the field, and
        how to read the size instead).
    """
    config_path = path.parent / CONFIG_FILE
    if not config_path.is_file():
        if variant is None:
            raise WeightsError("weights=%s: no %s beside it: --model %s reads the size from the checkpoint's config "
                              "(pass its folder as published, or a preset's --model: %s)"
                              % (path, CONFIG_FILE, FAMILY, ", ".join(dinov2_layers.VARIANTS)))
        return variant
    read = read_hf_config(config_path)
    if variant is None:
        return read
    for field in ("transformer", "registers", "source_grid", "patch", "interpolation"):
        ours, theirs = getattr(variant, field), getattr(read, field)
        if ours != theirs:
            raise ConfigError("%s: its %s is %s, where %s has %s: pass --model %s to read the size from the config"
                              % (config_path, field, theirs, variant.name, ours, FAMILY))
    return variant
