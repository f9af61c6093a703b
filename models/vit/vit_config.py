"""A checkpoint's own config, read field by field: the JSON file beside its weights (Hugging Face's config.json,
open_clip's open_clip_config.json), from which a family builds the size it computes. No TensorFlow.

    config = read_config(folder / "config.json")              # a Section: the file's top-level object
    vision = config.section("vision_config")
    patch = vision.integer("patch_size")                        # 14
    tower = hf_transformer(vision)                              # a vit_layers.TransformerConfig
    vision.expect("num_channels", (3,), 3, "images are RGB")    # a value the code cannot run is refused

Every field is read by name, with the default its publisher's code has when the file leaves it out. A field the
code cannot run (an unknown activation, a text tower it lacks, an option it does not compute) is refused with
one line naming the file, the field (dotted, "vision_config.hidden_act") and its value, and saying why:

    ConfigError: clip-l14/config.json: vision_config.hidden_act="gelu_fast": an activation clip does not run
    (it runs gelu, quick_gelu, silu, swish, gelu_pytorch_tanh, gelu_new)

Each family reads its own file with these pieces (models/clip/clip_config.py, models/dinov2/dinov2_config.py,
models/siglip/siglip_layers.py).
"""

import json
import math

from models.vit.vit_layers import TransformerConfig

CONFIG_FILE = "config.json"  # Hugging Face's, beside model.safetensors

# transformers' names of activations (its ACT2FN) -> models.vit's. "gelu_pytorch_tanh" (SigLIP's) and "gelu_new"
# are one function, GELU's tanh approximation.
HF_ACTIVATIONS = {"gelu": "gelu", "quick_gelu": "quick_gelu", "silu": "silu", "swish": "silu",
                  "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh"}

_REQUIRED = object()


def hf_activation(name):
    """transformers' name of models.vit's activation `name` (the first HF_ACTIVATIONS gives it), as a config.json
    written for a checkpoint holds it: "gelu_tanh" -> "gelu_pytorch_tanh"."""
    return next(theirs for theirs, ours in HF_ACTIVATIONS.items() if ours == name)


class ConfigError(ValueError):
    """A config file that cannot be read, or a field of it the code cannot run: one line naming the file and
    the field."""


class Section:
    """A JSON object of a config file (the file itself, or one of its objects), read field by field.

    Args:
      values: the object, a dict.
      path: the file, for messages.
      prefix: the object's own name in the file ("vision_config."), for messages.
      family: the family reading it ("clip"), for messages.
    """

    def __init__(self, values, path, prefix="", family="the model"):
        self.values, self.path, self.prefix, self.family = values, path, prefix, family

    def field(self, name):
        """The field's name as the file has it: "vision_config.hidden_size"."""
        return self.prefix + name

    def refuse(self, name, why):
        """ConfigError: "<file>: <field>=<value>: <why>" (the value as JSON, or "absent")."""
        value = json.dumps(self.values[name]) if name in self.values else "absent"
        if len(value) > 80:  # an object of many fields: its beginning names it well enough
            value = value[:77] + "..."
        return ConfigError("%s: %s=%s: %s" % (self.path, self.field(name), value, why))

    def __contains__(self, name):
        return name in self.values

    def get(self, name, default=_REQUIRED):
        """The field's value as it is, or `default` when the file leaves it out (ConfigError without one)."""
        if name in self.values and self.values[name] is not None:
            return self.values[name]
        if default is _REQUIRED:
            raise self.refuse(name, "%s needs it" % self.family)
        return default

    def integer(self, name, default=_REQUIRED):
        """A positive integer (a float with no fraction, as some files write them, is taken as one)."""
        value = self.get(name, default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.refuse(name, "expected a positive integer")
        return value

    def number(self, name, default=_REQUIRED):
        """A finite number, as a float."""
        value = self.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.refuse(name, "expected a number")
        return float(value)

    def flag(self, name, default=_REQUIRED):
        """true or false."""
        value = self.get(name, default)
        if not isinstance(value, bool):
            raise self.refuse(name, "expected true or false")
        return value

    def square(self, name, default=_REQUIRED):
        """A side in pixels: an integer, or [height, width] of equal sides (the code runs square images)."""
        value = self.get(name, default)
        if isinstance(value, (list, tuple)):
            if len(value) != 2 or value[0] != value[1]:
                raise self.refuse(name, "%s runs square images and patches" % self.family)
            value = value[0]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.refuse(name, "expected a positive integer, or two equal ones")
        return value

    def section(self, name, default=_REQUIRED):
        """The object `name` as a Section (an absent one is `default`, a dict, when given)."""
        value = self.get(name, default)
        if not isinstance(value, dict):
            raise self.refuse(name, "expected an object")
        return Section(value, self.path, self.field(name) + ".", self.family)

    def activation(self, name, default=_REQUIRED):
        """models.vit's name of the activation the field names in transformers' words ("gelu", "quick_gelu")."""
        value = self.get(name, default)
        if value not in HF_ACTIVATIONS:
            raise self.refuse(name, "an activation %s does not run (it runs %s)" % (self.family,
                                                                                   ", ".join(HF_ACTIVATIONS)))
        return HF_ACTIVATIONS[value]

    def expect(self, name, allowed, default, why):
        """The field's value, or ConfigError saying `why` when it is not one of `allowed` (values the code runs)."""
        value = self.get(name, default)
        if value not in allowed:
            raise self.refuse(name, why)
        return value

    def only(self, known, why):
        """ConfigError naming the first field that is not in `known` (the fields the code reads or knows to
        change nothing it computes): a field the publisher's code knows and this code does not."""
        for name in self.values:
            if name not in known:
                raise self.refuse(name, why)


def read_config(path, family="the model"):
    """The top-level object of a config file, as a Section.

    Args:
      path: a JSON file (pathlib.Path).
      family: the family reading it, for messages.

    Raises:
      ConfigError: the file is missing, unreadable, not JSON, not an object, or timm's (one line naming it).
    """
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError("%s: %s" % (path, error.strerror or error)) from None
    except ValueError as error:  # json.JSONDecodeError and UnicodeDecodeError
        raise ConfigError("%s is not JSON: %s" % (path, str(error).splitlines()[0])) from None
    if not isinstance(values, dict):
        raise ConfigError("%s is not a JSON object" % path)
    if is_timm_config(values):
        other = " or open_clip's (open_clip_model.safetensors and open_clip_config.json)" if family == "clip" else ""
        raise ConfigError("%s is timm's config (architecture %s), not transformers': --model %s reads a checkpoint "
                          "in transformers' layout (config.json with a model_type)%s; pass the repository or "
                          "folder of those weights in it" % (path, json.dumps(values["architecture"]), family, other))
    return Section(values, path, "", family)


def is_timm_config(values):
    """Whether a config file's object is timm's (its hub repositories' config.json: architecture, pretrained_cfg,
    no model_type): a vision tower in timm's own names (blocks.0.attn.qkv.weight, ...), which no family reads."""
    return "model_type" not in values and isinstance(values.get("architecture"), str) and "pretrained_cfg" in values


def hf_transformer(section, layer_scale=False, **defaults):
    """A transformer's size from a Hugging Face config's object of it (CLIP's vision_config, SigLIP's
    text_config): hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, hidden_act,
    layer_norm_eps.

    Args:
      section: the Section.
      layer_scale: the blocks scale their branches (not a field of these configs: the family knows it).
      **defaults: the publisher's defaults of fields the file may leave out (hidden_act="quick_gelu", ...).

    Returns:
      a vit_layers.TransformerConfig.

    Raises:
      ConfigError: a field missing (without a default), of the wrong type, an unknown activation, or a width
        that is not a multiple of the heads.
    """
    def value(read, name):
        return read(name, defaults[name]) if name in defaults else read(name)

    width, heads = value(section.integer, "hidden_size"), value(section.integer, "num_attention_heads")
    if width % heads:
        raise section.refuse("num_attention_heads", "hidden_size=%d is not a multiple of it" % width)
    return TransformerConfig(width, value(section.integer, "num_hidden_layers"), heads,
                             value(section.integer, "intermediate_size"), value(section.activation, "hidden_act"),
                             layer_scale=layer_scale,
                             epsilon=value(section.number, "layer_norm_eps"))
