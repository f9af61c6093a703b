"""open_clip's layout of a CLIP checkpoint renamed into Hugging Face's and back: fused q, k, v split in order, the
projections transposed, CustomTextCLIP's `text.` names read alike, buffers left out. (That open_clip's own code
writes this layout and computes what `--model clip` computes from it: tests/test_clip_config.py.)"""

import numpy as np
import pytest

from models.clip import clip_layers, clip_weights
from models.clip.open_clip_layout import from_open_clip, open_clip_names, to_open_clip
from models.files import WeightsError
from models.safetensors_files import read_tensors, write_tensors
from models.vit.vit_layers import TransformerConfig

SMALL = clip_layers.Config(
    "clip_small", "test/clip-small", patch_size=32,
    vision=TransformerConfig(16, 2, 2, 32, activation="quick_gelu", epsilon=1e-5),
    text=TransformerConfig(8, 2, 2, 16, activation="quick_gelu", epsilon=1e-5), projection=4, vocabulary_size=600)


@pytest.fixture(scope="module")
def weights():
    return clip_weights.random_weights(SMALL, seed=3)


def test_open_clip_s_layout_gives_the_same_arrays(weights, tmp_path):
    path = tmp_path / "open_clip_model.safetensors"
    clip_weights.write_checkpoint(weights, path, layout="open_clip", model=SMALL)
    stored = read_tensors(path)
    assert stored["visual.transformer.resblocks.1.attn.in_proj_weight"].shape == (48, 16)  # q, k, v stacked
    assert stored["visual.proj"].shape == (16, 4) and stored["text_projection"].shape == (8, 4)  # x @ proj
    assert "transformer.resblocks.0.mlp.c_fc.weight" in stored and "ln_final.bias" in stored
    read = clip_weights.load_weights(path, SMALL, ("vision", "text"))
    assert all(np.array_equal(read[name], weights[name]) for name in read) and len(read) == len(weights) - 1
    np.testing.assert_array_equal(  # split back in the order q, k, v
        read["vision_model.encoder.layers.1.self_attn.k_proj.weight"],
        stored["visual.transformer.resblocks.1.attn.in_proj_weight"][16:32])


def test_custom_text_clip_s_names_and_buffers(weights, tmp_path):
    """CustomTextCLIP (open_clip's `custom_text` configs) keeps the text tower under `text.`; the `attn_mask`
    buffers some versions stored are not read."""
    arrays = to_open_clip(weights, SMALL)
    custom = {("text." + name if not name.startswith(("visual.", "logit_scale")) else name): array
              for name, array in arrays.items()}
    custom["text.attn_mask"] = np.zeros((77, 77), np.float32)
    assert "text.transformer.resblocks.1.attn.in_proj_weight" in custom and "text.ln_final.weight" in custom
    path = tmp_path / "open_clip_model.safetensors"
    write_tensors(path, custom)
    read = clip_weights.load_weights(path, SMALL, ("vision", "text"))
    assert all(np.array_equal(read[name], weights[name]) for name in read) and len(read) == len(weights) - 1
    assert "attn_mask" not in from_open_clip(custom, SMALL) and "text.attn_mask" not in from_open_clip(custom, SMALL)
    assert len(open_clip_names(SMALL)) == len(arrays)  # every name of the layout, once


def test_a_fused_projection_that_is_not_three_is_one_line(weights, tmp_path):
    with pytest.raises(WeightsError, match=r"weights=f.safetensors: visual.transformer.resblocks.0.attn.in_proj_weight "
                                           r"has shape \(47, 16\): not q, k and v stacked"):
        from_open_clip({"visual.transformer.resblocks.0.attn.in_proj_weight": np.zeros((47, 16), np.float32)}, SMALL,
                       "f.safetensors")
