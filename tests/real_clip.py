"""Where CLIP ViT-B/32's published weights are on this machine, if anywhere, for the tests that mean something
only with them: $CLIP_VIT_B32_WEIGHTS (a folder holding model.safetensors, vocab.json and merges.txt), else the
hub's cache at the pinned commit (what weights="imagenet" reads, never downloaded by a test)."""

import os
from pathlib import Path

ENVIRONMENT = "CLIP_VIT_B32_WEIGHTS"
MISSING = ("CLIP ViT-B/32's published weights are not here: set %s to a folder holding model.safetensors, "
           "vocab.json and merges.txt (openai/clip-vit-base-patch32), or put them in the hub's cache" % ENVIRONMENT)


def real_clip():
    """(weights argument, folder of vocab.json and merges.txt), or None when the weights are not here."""
    if os.environ.get(ENVIRONMENT):
        return os.environ[ENVIRONMENT], Path(os.environ[ENVIRONMENT])
    from models.clip import clip_layers, clip_weights
    from models.hub_download import cache_path
    paths = {name: cache_path(file) for name, file in clip_weights.hub_files(clip_layers.VIT_B32).items()}
    if paths and all(path.is_file() for path in paths.values()):
        return "imagenet", paths["vocab.json"].parent
    return None
