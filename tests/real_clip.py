"""Where CLIP ViT-B/32's published weights are on this machine, if anywhere, for the tests that mean something
only with them: $CLIP_VIT_B32_WEIGHTS (a folder holding model.safetensors and its tokenizer files), else the hub's
cache at the pinned commit (what weights="imagenet" reads, never downloaded by a test)."""

import os
from pathlib import Path

ENVIRONMENT = "CLIP_VIT_B32_WEIGHTS"
MISSING = ("CLIP ViT-B/32's published weights are not here: set %s to a folder holding model.safetensors and "
           "tokenizer.json, or vocab.json and merges.txt (openai/clip-vit-base-patch32), or put them in the hub's "
           "cache" % ENVIRONMENT)


def real_clip():
    """(weights argument, folder of the tokenizer's files), or None when the weights are not here."""
    if os.environ.get(ENVIRONMENT):
        return os.environ[ENVIRONMENT], Path(os.environ[ENVIRONMENT])
    from models.clip import clip_layers, clip_weights
    from models.hub_download import cache_path
    checkpoint = clip_weights.hub_checkpoint_of(clip_layers.VIT_B32)
    folder = cache_path(checkpoint.file("model.safetensors")).parent
    tokenizer = (folder / "tokenizer.json").is_file() or all(
        (folder / name).is_file() for name in ("vocab.json", "merges.txt"))
    return ("imagenet", folder) if (folder / "model.safetensors").is_file() and tokenizer else None
