"""DINOv2's table (Oquab et al., "DINOv2: Learning Robust Visual Features without Supervision", 2023): the two
sizes, their endpoints and variables, the checkpoints they come from. No TensorFlow.

    images uint8 [N, 224, 224, 3] RGB (the reader: short side to 256, bicubic, centre 224 crop)
      -> (x / 255 - ImageNet mean) / std, on the device
      -> 14x14 patches -> 16 x 16 = 256 tokens of `width`, class token first, + position embeddings
         (stored for 518 px, 37 x 37 patches; interpolated to 16 x 16 on the host when the weights are read)
      -> `depth` pre-LayerNorm blocks (exact GELU, LayerScale) -> LayerNorm (epsilon 1e-6)
      -> class_token: the class token                                          [N, width]
      -> class_and_patch_mean: [class token, mean of the 256 patch tokens]     [N, 2 * width]

Hugging Face's `Dinov2Model` (facebook/dinov2-small, -base) is the reference: `class_token` is its
`pooler_output`, `class_and_patch_mean` the features DINOv2's linear evaluation takes (`x_norm_clstoken`
concatenated with the mean of `x_norm_patchtokens`).
"""

import dataclasses

from models.vit.vit_layers import TransformerConfig, embedding_variables, size, transformer_variables

IMAGE_SIZE = (224, 224)
PATCH = 14
RESIZE_SHORT_SIDE = 256  # Hugging Face's processor: short side to 256 (bicubic), then the centre 224 x 224
SOURCE_GRID = 37  # the checkpoints' position embeddings: 518 px / 14 = 37 x 37 patches
GRID = IMAGE_SIZE[0] // PATCH  # 16 x 16 patches at 224 px

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
      repo, revision, sha256, file_size: its checkpoint on the Hugging Face hub (model.safetensors), pinned.
      parameter_count: Hugging Face's Dinov2Model's parameters (position embeddings at 518 px, and the mask
        token, which only training uses): 86,580,480 for ViT-B/14, as published. Pinned by the tests.
    """

    name: str
    title: str
    transformer: TransformerConfig
    repo: str
    revision: str
    sha256: str
    file_size: int
    parameter_count: int

    @property
    def width(self):
        return self.transformer.width


def _transformer(width, depth, heads):
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
VARIANTS = {variant.name: variant for variant in (VITS14, VITB14)}


def variables(variant, grid=GRID):
    """((name, shape), ...) of the graph's variables under the model's scope: the embeddings (position
    embeddings for `grid` x `grid` patches), the blocks, and the final LayerNorm."""
    width = variant.width
    return (embedding_variables(width, PATCH, grid * grid) + transformer_variables(variant.transformer)
            + (("layer_norm/gamma", (width,)), ("layer_norm/beta", (width,))))


def checkpoint_parameters(variant):
    """Parameters of the checkpoint that inference reads (position embeddings at 518 px; not the mask token)."""
    return size(variables(variant, SOURCE_GRID))


def feature_size(variant, endpoint):
    """Floats per image at `endpoint`: width for class_token, 2 * width for class_and_patch_mean."""
    return variant.width * (2 if endpoint == "class_and_patch_mean" else 1)
