"""The models the command line and the Python API know by name, and what each is made of.

Nothing here imports TensorFlow or a model: the command line checks `--model` and `--layer` from each
model's table module (which has no TensorFlow either), and the model's graph module is imported only
when its `ModelSpec` is built.

    from models import registry
    spec = registry.feature_model("vgg16", layer="fc7", weights="vgg16.npy")   # a parallel.model.ModelSpec

Each model is three modules:
- its table (`layers`): ENDPOINTS, the names `--layer` takes, and DEFAULT_LAYER; for a model whose files are
  read by layer name (Keras's .h5), WEIGHT_FILE_NAMES, the names that tell its files from others' (`looks_like`);
- its graph (`graph`): `feature_model(endpoint, weights, precision, cache_dir) -> ModelSpec`;
- its weight files (`weights`): the `random` command's RANDOM_SUFFIXES {".h5": "layout name"} and
  `write_random(path, seed)`; for a model read from a safetensors checkpoint, `tensors()`, its tensors' names
  and shapes, that tell its checkpoints from others' (`what_weights_are`: the line refusing another model's
  weights names the model they are for, or says what the file is).
Where one module serves several models of a family (CLIP's and DINOv2's sizes, SigLIP's presets), the graph and the
weight files are named "module:object": the object in that module offers what the module would
("models.clip.clip:VIT_B32" has `feature_model`). A family's modules are its folder's, models/<family>/
(`<family>.py`, `<family>_layers.py`, `<family>_weights.py`: docs/layout.md); VGG16's are flat in models/.

A family's own name (`clip`, `dinov2`, `siglip`: FAMILIES) is the family at any size: its size, activation and
preprocessing are read from the checkpoint's config beside the weights (`--weights FOLDER` or
`hf://ORG/NAME@COMMIT`: Hugging Face's config.json, open_clip's open_clip_config.json), so that a size needs no
entry and no code. The other names are a family and a size (presets: `clip_vit_l14`, `dinov2_vitg14_reg`,
`siglip2_base_patch16_256`, ...), with pinned weights where a commit is known (`--weights imagenet`), a folder or
an hf:// checkpoint otherwise.
"""

import dataclasses
import importlib

from models.siglip.siglip_layers import FAMILY as SIGLIP, PRESETS as SIGLIP_PRESETS  # a table: no TensorFlow

# SigLIP's published sizes named on the command line (each with its pinned checkpoint): those the issue and the
# peers name. The table holds the other published sizes too (models.siglip.siglip_layers.PRESETS); any of them,
# and any size at all, runs as `--model siglip --weights FOLDER`.
SIGLIP_NAMED = ("siglip_base_patch16_224", "siglip_so400m_patch14_384", "siglip2_base_patch16_224",
                "siglip2_base_patch16_256", "siglip2_large_patch16_256", "siglip2_so400m_patch14_384")

# The arithmetic on the devices, the same for every model: fp32 is IEEE float32 everywhere, tf32 float32
# whose matmuls and convolutions may round to a 10-bit mantissa (Ampere and newer GPUs), fp16 and bf16.
PRECISION_NAMES = ("fp32", "tf32", "fp16", "bf16")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One model: its name and the modules that make it (see the module docstring)."""

    name: str
    layers: str
    graph: str
    weights: str
    summary: str

    @property
    def title(self):
        """The model's name in messages: the summary's first words ("ResNet50", "DINOv2 ViT-S/14")."""
        return self.summary.split(" (")[0]


ENTRIES = (
    Entry("vgg16", "models.vgg16_layers", "models.vgg16", "models.weight_files",
          "VGG16 (2014), 224x224, Caffe preprocessing, fc7: 4096 floats"),
    Entry("resnet50", "models.resnet.resnet_layers", "models.resnet.resnet", "models.resnet.resnet_weights",
          "ResNet50 (2015), 224x224, Caffe preprocessing, avg_pool: 2048 floats"),
    Entry("efficientnet_b0", "models.efficientnet.efficientnet_layers", "models.efficientnet.efficientnet",
          "models.efficientnet.efficientnet_weights",
          "EfficientNetB0 (2019), 224x224, preprocessing inside the model, avg_pool: 1280 floats"),
    Entry("convnext_tiny", "models.convnext.convnext_layers", "models.convnext.convnext",
          "models.convnext.convnext_weights",
          "ConvNeXt-Tiny (2022), 224x224, preprocessing inside the model, avg_pool: 768 floats"),
    Entry("dinov2", "models.dinov2.dinov2_layers", "models.dinov2.dinov2:FAMILY_MODEL",
          "models.dinov2.dinov2_weights:VITS14_FILES",
          "DINOv2 (any size, with or without registers: the size of --weights FOLDER's or hf:// checkpoint's "
          "config.json), short side "
          "256 bicubic, centre 224, class_token: its width's floats"),
    Entry("dinov2_vits14", "models.dinov2.dinov2_layers", "models.dinov2.dinov2:VITS14",
          "models.dinov2.dinov2_weights:VITS14_FILES",
          "DINOv2 ViT-S/14 (2023), short side 256 bicubic, centre 224, class_token: 384 floats"),
    Entry("dinov2_vitb14", "models.dinov2.dinov2_layers", "models.dinov2.dinov2:VITB14",
          "models.dinov2.dinov2_weights:VITB14_FILES",
          "DINOv2 ViT-B/14 (2023), short side 256 bicubic, centre 224, class_token: 768 floats"),
    Entry("dinov2_vitl14", "models.dinov2.dinov2_layers", "models.dinov2.dinov2:VITL14",
          "models.dinov2.dinov2_weights:VITL14_FILES",
          "DINOv2 ViT-L/14 (2023), short side 256 bicubic, centre 224, class_token: 1024 floats; --weights FOLDER "
          "or hf://ORG/NAME@COMMIT"),
    Entry("dinov2_vitg14", "models.dinov2.dinov2_layers", "models.dinov2.dinov2:VITG14",
          "models.dinov2.dinov2_weights:VITG14_FILES",
          "DINOv2 ViT-g/14 (2023, SwiGLU), short side 256 bicubic, centre 224, class_token: 1536 floats; "
          "--weights FOLDER or hf://ORG/NAME@COMMIT"),
    Entry("dinov2_vits14_reg", "models.dinov2.dinov2_layers", "models.dinov2.dinov2:VITS14_REG",
          "models.dinov2.dinov2_weights:VITS14_REG_FILES",
          "DINOv2 ViT-S/14 with registers (2023), short side 256 bicubic, centre 224, class_token: 384 floats; "
          "--weights FOLDER or hf://ORG/NAME@COMMIT"),
    Entry("dinov2_vitb14_reg", "models.dinov2.dinov2_layers", "models.dinov2.dinov2:VITB14_REG",
          "models.dinov2.dinov2_weights:VITB14_REG_FILES",
          "DINOv2 ViT-B/14 with registers (2023), short side 256 bicubic, centre 224, class_token: 768 floats; "
          "--weights FOLDER or hf://ORG/NAME@COMMIT"),
    Entry("dinov2_vitl14_reg", "models.dinov2.dinov2_layers", "models.dinov2.dinov2:VITL14_REG",
          "models.dinov2.dinov2_weights:VITL14_REG_FILES",
          "DINOv2 ViT-L/14 with registers (2023), short side 256 bicubic, centre 224, class_token: 1024 floats; "
          "--weights FOLDER or hf://ORG/NAME@COMMIT"),
    Entry("dinov2_vitg14_reg", "models.dinov2.dinov2_layers", "models.dinov2.dinov2:VITG14_REG",
          "models.dinov2.dinov2_weights:VITG14_REG_FILES",
          "DINOv2 ViT-g/14 with registers (2023, SwiGLU), short side 256 bicubic, centre 224, class_token: 1536 "
          "floats; --weights FOLDER or hf://ORG/NAME@COMMIT"),
    Entry("clip", "models.clip.clip_layers", "models.clip.clip:FAMILY", "models.clip.clip_weights:VIT_B32",
          "CLIP (any size, OpenAI's and open_clip's LAION checkpoints: the size, activation and preprocessing of "
          "--weights FOLDER's (or hf:// checkpoint's) config.json or open_clip_config.json), embedding: its "
          "projection's floats, in the text tower's space"),
    Entry("clip_vit_b32", "models.clip.clip_layers", "models.clip.clip:VIT_B32", "models.clip.clip_weights:VIT_B32",
          "CLIP ViT-B/32 (OpenAI, 2021), 224x224 bicubic, embedding: 512 floats, in the text tower's space"),
    Entry("clip_vit_b16", "models.clip.clip_layers", "models.clip.clip:VIT_B16", "models.clip.clip_weights:VIT_B16",
          "CLIP ViT-B/16 (OpenAI, 2021), 224x224 bicubic, embedding: 512 floats, in the text tower's space"),
    Entry("clip_vit_l14", "models.clip.clip_layers", "models.clip.clip:VIT_L14", "models.clip.clip_weights:VIT_L14",
          "CLIP ViT-L/14 (OpenAI, 2021), 224x224 bicubic, embedding: 768 floats, in the text tower's space; "
          "--weights FOLDER or hf://ORG/NAME@COMMIT"),
    Entry("clip_vit_l14_336", "models.clip.clip_layers", "models.clip.clip:VIT_L14_336",
          "models.clip.clip_weights:VIT_L14_336",
          "CLIP ViT-L/14 at 336 px (OpenAI, 2021), 336x336 bicubic, embedding: 768 floats, in the text tower's "
          "space; --weights FOLDER or hf://ORG/NAME@COMMIT"),
    Entry(SIGLIP, "models.siglip.siglip_layers", "models.siglip.siglip:siglip", "models.siglip.siglip_weights:siglip",
          "SigLIP or SigLIP 2 (2023, 2025) of the size its --weights FOLDER's (or hf:// checkpoint's) config.json "
          "gives, the whole image bicubic, embedding: in the text tower's space"),
) + tuple(
    Entry(name, "models.siglip.siglip_layers", "models.siglip.siglip:" + name, "models.siglip.siglip_weights:" + name,
          "%s (%s, %s), %dx%d bicubic (the whole image), embedding: %d floats, in the text tower's space" % (
              preset.title, "2025" if preset.siglip2 else "2023", preset.hub_repo, preset.config.image_size,
              preset.config.image_size, preset.config.vision.width))
    for name, preset in SIGLIP_PRESETS.items() if name in SIGLIP_NAMED)
_BY_NAME = {entry.name: entry for entry in ENTRIES}
FAMILIES = ("dinov2", "clip", SIGLIP)  # the names of a family at any size, read from the checkpoint's config
NAMES = tuple(_BY_NAME)
DEFAULT_MODEL = "vgg16"


def _load(target):
    """The module `target` names, or the object in it for "module:object"."""
    module, _, name = target.partition(":")
    module = importlib.import_module(module)
    return getattr(module, name) if name else module


def entry(name):
    """The Entry of model `name`; ValueError naming the models there are for any other name."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError("model=%r; expected one of %s" % (name, ", ".join(NAMES))) from None


def layers(name):
    """The endpoint names model `name` offers, in order (its table's ENDPOINTS)."""
    return tuple(importlib.import_module(entry(name).layers).ENDPOINTS)


def default_layer(name):
    """The layer written when none is asked for (VGG16: fc7)."""
    return importlib.import_module(entry(name).layers).DEFAULT_LAYER


def check_layer(name, layer):
    """`layer`, or the model's default for None; ValueError naming the model's layers for any other name."""
    if layer is None:
        return default_layer(name)
    offered = layers(name)
    if layer not in offered:
        raise ValueError("layer=%r is not a layer of %s; expected one of %s" % (layer, name, ", ".join(offered)))
    return layer


def feature_model(name=DEFAULT_MODEL, layer=None, weights="imagenet", precision="fp32", cache_dir=None):
    """Model `name` as the engine's `parallel.model.ModelSpec` (imports TensorFlow).

    Args:
      name: one of NAMES.
      layer: one of `layers(name)`; None is the model's default layer.
      weights: "imagenet" (the model's published pretrained checkpoint: Keras's file, in Keras's cache or
        downloaded into it; for DINOv2 and CLIP the pinned Hugging Face checkpoint, in the hub's cache or
        downloaded into it by huggingface_hub); for DINOv2, CLIP and SigLIP "hf://ORG/NAME@COMMIT", another of
        the hub's checkpoints at a commit (fetched at once, with its config, for the families clip, dinov2 and
        siglip); or a path; which files each model reads is in docs/models.md.
      precision: one of PRECISION_NAMES.
      cache_dir: Keras's home folder for "imagenet" (default: $KERAS_HOME or ~/.keras); for DINOv2 and CLIP the
        hub's cache folder (default: huggingface_hub's, $HF_HUB_CACHE, else $HF_HOME/hub, else
        ~/.cache/huggingface/hub).

    Raises:
      ValueError: an unknown model, layer or precision; WeightsError: a weights path that is not a file.
    """
    endpoint = check_layer(name, layer)
    return _load(entry(name).graph).feature_model(endpoint=endpoint, weights=weights, precision=precision,
                                                  cache_dir=cache_dir)


def weight_files(name):
    """What writes model `name`'s random weight files (a module, or an object): RANDOM_SUFFIXES, write_random."""
    return _load(entry(name).weights)


def looks_like(names, model):
    """Whose weights file holds these names, said in the message refusing a file that model `model` cannot read.

    A file is another model's when more than half of its names are that model's WEIGHT_FILE_NAMES (the table's)
    and no other model has as many of them: a ResNet50 file given to VGG16 shares one layer name with VGG16's
    files (`predictions`), and all 107 with ResNet50's.

    Args:
      names: the file's names: its layers with weights (a Keras .h5 file) or its keys (tensorflow-vgg's .npy).
      model: the model that refuses the file: its name or its title ("vgg16" or "VGG16").

    Returns:
      "; it looks like a ResNet50 weights file: pass --model resnet50" (a clause ending the refusal's line), or
      "" when the file looks like no one model's, or like `model`'s own (damaged, or the notop file where the
      full one is needed).
    """
    names = set(names)
    counts = {entry: len(names.intersection(getattr(importlib.import_module(entry.layers), "WEIGHT_FILE_NAMES", ())))
              for entry in ENTRIES}
    most = max(counts.values())
    owners = [entry for entry, count in counts.items() if count == most]
    if 2 * most <= len(names) or len(owners) > 1 or model in (owners[0].name, owners[0].title):
        return ""
    return "; it looks like a%s %s weights file: pass --model %s" % (
        "n" if owners[0].title[0] in "AEIOU" else "", owners[0].title, owners[0].name)


def models_reading(suffix):
    """The names of the models whose weight files include the layout of `suffix` (".npy": vgg16; ".h5": vgg16,
    resnet50, efficientnet_b0, convnext_tiny), in the registry's order."""
    return tuple(entry.name for entry in ENTRIES if suffix in weight_files(entry.name).RANDOM_SUFFIXES)


def layout_of_file(path):
    """What the weights file at `path` is, by its magic number, for the line refusing it: "it is a NumPy .npy file
    (--model vgg16 reads those)", "it is a zip archive (as PyTorch's .pt and .bin checkpoints are)"; "" when its
    first bytes say nothing (or it cannot be read)."""
    from models.files import WeightsError, layout_of, read_magic
    try:
        layout = layout_of(read_magic(path))
    except WeightsError:
        return ""
    if layout is None:
        return ""
    what, suffix = layout
    names = models_reading(suffix) if suffix else ()
    return "it is %s%s" % (what, " (--model %s read%s those)" % (" or ".join(names), "" if len(names) > 1 else "s")
                           if names else "")


def holder(path):
    """The Entry of the model whose checkpoint the safetensors file at `path` is: the one whose checkpoint's
    tensors (its weight files' `tensors()`: CLIP's and DINOv2's, in Hugging Face's names) are all in the file's
    header with their shapes; None for any other file, or one that cannot be read."""
    from models.safetensors_files import tensor_shapes
    shapes = tensor_shapes(path)
    if not shapes:
        return None
    for entry in ENTRIES:
        if entry.name in FAMILIES:  # its tensors are a preset's: the preset is named
            continue
        files = weight_files(entry.name)
        if hasattr(files, "tensors") and all(shapes.get(name) == shape for name, shape in files.tensors().items()):
            return entry
    return None


CHECKPOINT_FILES = ("model.safetensors", "open_clip_model.safetensors")  # a checkpoint's names in its folder


def what_weights_are(path, model=None):
    """What the weights file or folder at `path` is, for the line refusing it as model `model`'s (its name):
    "it holds CLIP ViT-B/32 weights (model.safetensors): pass --model clip_vit_b32" (a checkpoint of another model
    here, or a folder holding one), else `layout_of_file`'s; "" when nothing is known of it."""
    from pathlib import Path
    path = Path(path)
    if not path.is_dir() and layout_of_file(path):
        return layout_of_file(path)
    files = [path / name for name in CHECKPOINT_FILES if (path / name).is_file()] if path.is_dir() else [path]
    for file in files:
        owner = holder(file)
        if owner is not None and owner.name != model:
            return "it holds %s weights%s: pass --model %s" % (
                owner.title, " (%s)" % file.name if file != path else "", owner.name)
    return _family_of_config(path if path.is_dir() else path.parent, model)


def _family_of_config(folder, model):
    """"it holds a DINOv2 checkpoint (its config.json's model_type dinov2_with_registers): pass --model dinov2" for
    a folder whose config names a family here (of a size no preset has), unless `model` is of that family; ""."""
    from models.files import MODEL_TYPES, WeightsError, checkpoint_model_type
    try:
        found = checkpoint_model_type(folder)
    except WeightsError:
        return ""
    family = MODEL_TYPES.get(found)
    if family is None or (model or "").startswith(family):  # the family's own name, or one of its presets
        return ""
    said = "open_clip_config.json" if found == "open_clip" else "its config.json's model_type %s" % found
    return "it holds a %s checkpoint (%s): pass --model %s, which reads its size from it" % (
        _BY_NAME[family].title, said, family)


def what_else(path, model=None):
    """"; " and `what_weights_are(path, model)`, the clause ending a line that refuses the weights at `path`; or ""."""
    what = what_weights_are(path, model)
    return "; " + what if what else ""
