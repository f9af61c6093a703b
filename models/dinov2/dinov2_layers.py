"""DINOv2's table (Oquab et al., "DINOv2: Learning Robust Visual Features without Supervision", 2023): its sizes
(S/14, B/14, L/14, g/14, each with or without registers), their endpoints and variables, the checkpoints they come
from. A size is a `Variant`: the presets below, or one read from a checkpoint's config.json (`dinov2_config.py`).
No TensorFlow.

    images uint8 [N, 224, 224, 3] RGB (the reader: short side to 256, bicubic, centre 224 crop)
      -> (x / 255 - ImageNet mean) / std, on the device
      -> 14x14 patches -> 16 x 16 = 256 tokens of `width`, class token first, + position embeddings
         (stored for 518 px, 37 x 37 patches; interpolated to 16 x 16 on the host when the weights are read)
      -> the register tokens after the class token (checkpoints with registers: 4, no position embeddings)
      -> `depth` pre-LayerNorm blocks (exact GELU MLP, or SwiGLU for g/14; LayerScale) -> LayerNorm (epsilon 1e-6)
      -> class_token: the class token                                          [N, width]
      -> class_and_patch_mean: [class token, mean of the 256 patch tokens]     [N, 2 * width]

Hugging Face's `Dinov2Model` (facebook/dinov2-small, -base, -large, -giant) and `Dinov2WithRegistersModel`
(facebook/dinov2-with-registers-*) are the reference: `class_token` is their `pooler_output`,
`class_and_patch_mean` the features DINOv2's linear evaluation takes (`x_norm_clstoken` concatenated with the mean
of `x_norm_patchtokens`, the registers left out).
"""

import dataclasses

from models.vit.vit_layers import TransformerConfig, describe, embedding_variables, size, transformer_variables

IMAGE_SIZE = (224, 224)
PATCH = 14
RESIZE_SHORT_SIDE = 256  # Hugging Face's processor: short side to 256 (bicubic), then the centre 224 x 224
SOURCE_GRID = 37  # the checkpoints' position embeddings: 518 px / 14 = 37 x 37 patches
GRID = IMAGE_SIZE[0] // PATCH  # 16 x 16 patches at 224 px
FAMILY = "dinov2"  # the registry's name of the family: its size read from the checkpoint's config.json
# How the position embeddings are resized to 16 x 16 (`dinov2_weights.resize_matrix`): PyTorch's bicubic, as
# Hugging Face's Dinov2Model does it; with antialiasing for the checkpoints with registers, as its
# Dinov2WithRegistersModel (and Meta's code for them) does.
INTERPOLATIONS = ("torch", "torch_antialias", "keras_hub")

# What a user may ask for (the command line offers these); both after the final LayerNorm.
ENDPOINTS = ("class_token", "class_and_patch_mean")
DEFAULT_LAYER = "class_token"


@dataclasses.dataclass(frozen=True)
class Variant:
    """One size of DINOv2.

    Attributes:
      name: the model's name (--model) and variable scope.
      title: for messages ("DINOv2 ViT-S/14").
      transformer: its vit_layers.TransformerConfig.
      repo, revision, sha256, file_size: its checkpoint on the Hugging Face hub (model.safetensors), pinned;
        revision None where no commit is pinned here (the weights are then a folder given).
      parameter_count: Hugging Face's Dinov2Model's parameters (position embeddings at 518 px, and the mask
        token, which only training uses): 86,580,480 for ViT-B/14, as published. Pinned by the tests.
      registers: register tokens after the class token (4 in facebook/dinov2-with-registers-*; 0 without).
      source_grid: patches per side of the checkpoint's position embeddings (518 px / 14 = 37).
      patch: the patches' side (14).
      interpolation: how the position embeddings are resized on the host, one of INTERPOLATIONS.
    """

    name: str
    title: str
    transformer: TransformerConfig
    repo: str
    revision: object
    sha256: object
    file_size: object
    parameter_count: int
    registers: int = 0
    source_grid: int = SOURCE_GRID
    patch: int = PATCH
    interpolation: str = "torch"

    @property
    def width(self):
        return self.transformer.width

    @property
    def grid(self):
        """Patches per side of a 224 px image (16)."""
        return IMAGE_SIZE[0] // self.patch

    def describe(self):
        """The architecture in words, for a job's settings where the size was read from a config."""
        return "patches %d, %d registers, positions %d x %d resized (%s); %s" % (
            self.patch, self.registers, self.source_grid, self.source_grid, self.interpolation,
            describe(self.transformer))


def swiglu_width(width, mlp_ratio=4):
    """The hidden width of DINOv2's SwiGLU MLP (Meta's SwiGLUFFNFused, Hugging Face's Dinov2SwiGLUFFN): two thirds
    of int(width * mlp_ratio), rounded up to a multiple of 8 (4096 for g/14's 1536)."""
    return (int(int(width * mlp_ratio) * 2 / 3) + 7) // 8 * 8


def _transformer(width, depth, heads, swiglu=False):
    if swiglu:
        return TransformerConfig(width, depth, heads, swiglu_width(width), "silu", layer_scale=True, epsilon=1e-6,
                                 gated=True)
    return TransformerConfig(width, depth, heads, 4 * width, "gelu", layer_scale=True, epsilon=1e-6)


# The revisions: the commits of facebook/dinov2-small and -base that MTEB's model registry pins
# (embeddings-benchmark/mteb, docs/overview/available_models/image.md), which many projects pin too; the
# SHA-256s and sizes of their model.safetensors: as published by several independent projects pinning the same
# revision (found with the find_string tool; docs/models.md).
VITS14 = Variant("dinov2_vits14", "DINOv2 ViT-S/14", _transformer(384, 12, 6), "facebook/dinov2-small",
                 "ed25f3a31f01632728cabb09d1542f84ab7b0056",
                 "ae1e99fcefd534ed978cdeb8326f08030c96e28b7a81ffcbc98a857c84d14be1", 88_249_960, 22_056_576)
VITB14 = Variant("dinov2_vitb14", "DINOv2 ViT-B/14", _transformer(768, 12, 12), "facebook/dinov2-base",
                 "f9e44c814b77203eaa57a6bdbbd535f21ede1415",
                 "d73036b56966966d07975d696bde331762f37297e2f095de8cea0040c3aa0841", 346_345_912, 86_580_480)
# The other sizes, and the checkpoints with registers: no commit of theirs is pinned here (the weights are a folder
# given); their parameter counts are Hugging Face's Dinov2Model's and Dinov2WithRegistersModel's, as counted by
# transformers 5.24 for their configs (the hub's config.json of each).
VITL14 = Variant("dinov2_vitl14", "DINOv2 ViT-L/14", _transformer(1024, 24, 16), "facebook/dinov2-large", None, None,
                 None, 304_368_640)
VITG14 = Variant("dinov2_vitg14", "DINOv2 ViT-g/14", _transformer(1536, 40, 24, swiglu=True), "facebook/dinov2-giant",
                 None, None, None, 1_136_480_768)


def _with_registers(variant, parameter_count):
    size = variant.title.split()[-1]
    return Variant(variant.name + "_reg", "DINOv2 %s with registers" % size, variant.transformer,
                   "facebook/dinov2-with-registers-" + variant.repo.split("-")[-1], None, None, None, parameter_count,
                   registers=4, interpolation="torch_antialias")


VITS14_REG = _with_registers(VITS14, 22_058_112)
VITB14_REG = _with_registers(VITB14, 86_583_552)
VITL14_REG = _with_registers(VITL14, 304_372_736)
VITG14_REG = _with_registers(VITG14, 1_136_486_912)
VARIANTS = {variant.name: variant for variant in (VITS14, VITB14, VITL14, VITG14, VITS14_REG, VITB14_REG, VITL14_REG,
                                                  VITG14_REG)}


def variables(variant, grid=None):
    """((name, shape), ...) of the graph's variables under the model's scope: the embeddings (position
    embeddings for `grid` x `grid` patches, default the variant's 16; the register tokens), the blocks, and the
    final LayerNorm."""
    width, grid = variant.width, grid or variant.grid
    return (embedding_variables(width, variant.patch, grid * grid, registers=variant.registers)
            + transformer_variables(variant.transformer)
            + (("layer_norm/gamma", (width,)), ("layer_norm/beta", (width,))))


def checkpoint_parameters(variant):
    """Parameters of the checkpoint that inference reads (position embeddings at 518 px; not the mask token)."""
    return size(variables(variant, variant.source_grid))


def feature_size(variant, endpoint):
    """Floats per image at `endpoint`: width for class_token, 2 * width for class_and_patch_mean."""
    return variant.width * (2 if endpoint == "class_and_patch_mean" else 1)
