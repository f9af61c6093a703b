"""DINOv2 ViT-S/14, facebook/dinov2-small:
the registry's graph and weight-files module of `--model dinov2_vits14` (the model is
`dinov2.py`, its table `dinov2_layers.py`, its files `dinov2_weights.py`).

    python -m models.weight_files random dinov2_vits14.safetensors --model dinov2_vits14
"""

from models import dinov2_weights
from models.dinov2_layers import VITS14 as VARIANT

RANDOM_SUFFIXES = {".safetensors": "Hugging Face's model.safetensors"}  # the layout each suffix is written in


def feature_model(endpoint="class_token", weights="imagenet", precision="fp32", cache_dir=None):
    """`dinov2.feature_model` of this size (imports TensorFlow)."""
    from models import dinov2
    return dinov2.feature_model(VARIANT, endpoint, weights, precision, cache_dir)


def write_random(path, seed=0):
    """Writes seeded random weights of this size to `path` in Hugging Face's model.safetensors layout."""
    dinov2_weights.write_random(path, VARIANT, seed)
