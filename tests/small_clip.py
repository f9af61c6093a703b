"""A CLIP of the real layout and small sizes, under ViT-B/32's name, for the tests of search by text.

    with small_clip(tmp_path / "clip") as folder:   # model.safetensors, tokenizer.json, vocab.json, merges.txt
        text_embedding("clip_vit_b32", ["a dog"], weights=str(folder))   # float32 [1, 16]

While the context is open, `models.clip.clip_layers.config("clip_vit_b32")` (what `models.clip.clip.TextTower` builds)
is SMALL: the same code computes with 32-wide blocks and a 16-dimension space, in well under a second, where
ViT-B/32's 605 MB take about 25 s to write and load. Its token ids are the tests' vocabulary's (4,514).
"""

import contextlib
from pathlib import Path

import pytest

from models.clip import clip_layers, clip_weights
from models.clip.clip_tokenizer import write_test_vocabulary
from models.vit.vit_layers import TransformerConfig

SMALL = clip_layers.Config(
    "clip_vit_b32", "openai/clip-vit-base-patch32", patch_size=32,
    vision=TransformerConfig(64, 2, 4, 128, activation="quick_gelu", epsilon=clip_layers.LAYER_NORM_EPSILON),
    text=TransformerConfig(32, 2, 2, 64, activation="quick_gelu", epsilon=clip_layers.LAYER_NORM_EPSILON),
    projection=16, vocabulary_size=4514)


def write_small_clip(folder, seed=0):
    """Writes SMALL's seeded random checkpoint (Hugging Face's layout) and the tests' tokenizer files."""
    folder = Path(folder)
    folder.mkdir(parents=True)
    clip_weights.write_checkpoint(clip_weights.random_weights(SMALL, seed), folder / clip_weights.HF_FILE,
                                  model=SMALL)
    write_test_vocabulary(folder)
    return folder


@contextlib.contextmanager
def small_clip(folder, seed=0):
    """Writes SMALL into `folder` and makes it ViT-B/32's configuration until the context closes."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(clip_layers.CONFIGS, "clip_vit_b32", SMALL)
        yield write_small_clip(folder, seed)
