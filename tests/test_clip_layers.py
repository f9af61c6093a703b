"""CLIP's table: the published checkpoints' parameters, pinned, and the sizes the endpoints give."""

import pytest

from models.clip import clip_layers
from models.vit import vit_layers


@pytest.mark.parametrize("name, parameters, positions", [("clip_vit_b32", 151_277_313, 50),
                                                         ("clip_vit_b16", 149_620_737, 197)])
def test_the_table_has_the_published_checkpoints_parameters(name, parameters, positions):
    """Hugging Face's CLIPModel counts 151,277,313 (openai/clip-vit-base-patch32) and 149,620,737 (-patch16)."""
    model = clip_layers.config(name)
    assert vit_layers.size(clip_layers.parameters(model)) == clip_layers.PARAMETER_COUNT[name] == parameters
    assert model.positions == positions
    text = vit_layers.size(clip_layers.text_parameters(model))
    assert text == 63_165_952 + 512 * 512  # the same text tower in both, and its projection
    names = [name for name, _ in clip_layers.parameters(model)]
    # vision: 3 embeddings, pre-LayerNorm (2), 12 blocks of 16 arrays, post-LayerNorm (2), projection; text: 2
    # embeddings, 12 blocks, final LayerNorm (2), projection; logit_scale.
    assert len(names) == len(set(names)) == (5 + 12 * 16 + 3) + (2 + 12 * 16 + 3) + 1


@pytest.mark.parametrize("name, parameters, positions", [("clip_vit_l14", 427_616_513, 257),
                                                         ("clip_vit_l14_336", 427_944_193, 577)])
def test_the_large_presets_have_transformers_counts(name, parameters, positions):
    """transformers 5.24's CLIPModel counts 427,616,513 and 427,944,193 parameters for the configs of
    openai/clip-vit-large-patch14 and -patch14-336 (QuickGELU: the count does not depend on it)."""
    model = clip_layers.config(name)
    assert vit_layers.size(clip_layers.parameters(model)) == clip_layers.PARAMETER_COUNT[name] == parameters
    assert model.positions == positions and model.feature_size("embedding") == 768


def test_the_endpoints_sizes_and_unknown_names():
    assert [clip_layers.VIT_B32.feature_size(endpoint) for endpoint in clip_layers.ENDPOINTS] == [768, 512]
    assert clip_layers.DEFAULT_LAYER == "embedding" and clip_layers.VIT_B16.grid == 14
    with pytest.raises(ValueError, match="layer='fc7'; expected one of pooled, embedding"):
        clip_layers.VIT_B32.feature_size("fc7")
    with pytest.raises(ValueError, match="model='clip_vit_h14'; expected one of clip, clip_vit_b32, clip_vit_b16, "
                                         "clip_vit_l14, clip_vit_l14_336"):
        clip_layers.config("clip_vit_h14")
    assert clip_layers.config("clip") is None  # the family: the size is the checkpoint's config's


def test_the_end_token_is_the_largest_id():
    """The text tower finds the end token as the ids' argmax (as OpenAI's code does): it must be the largest."""
    assert clip_layers.END_OF_TEXT == clip_layers.VOCABULARY_SIZE - 1 > clip_layers.START_OF_TEXT
