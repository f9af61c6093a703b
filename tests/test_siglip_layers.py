"""SigLIP's sizes: a config.json read as transformers reads it (its defaults filling the published files' sparse
ones), refused in one line naming a field the graph cannot compute; the presets' parameter counts."""

import json

import pytest

from models.files import WeightsError
from models.siglip import siglip_layers
from models.siglip.siglip_layers import config_from_dict, read_config
from models.siglip.siglip_weights import config_dict

# google/siglip-base-patch16-224's config.json as published (the hub, at the pinned commit): transformers'
# defaults give the rest.
PUBLISHED_BASE = {"architectures": ["SiglipModel"], "initializer_factor": 1.0, "model_type": "siglip",
                  "text_config": {"hidden_size": 768, "intermediate_size": 3072, "model_type": "siglip_text_model",
                                  "num_attention_heads": 12, "vocab_size": 32000},
                  "torch_dtype": "float32", "transformers_version": "4.37.0.dev0",
                  "vision_config": {"model_type": "siglip_vision_model", "patch_size": 16}}


def test_a_published_sparse_config_is_its_preset_s_size():
    model = config_from_dict(PUBLISHED_BASE)
    assert siglip_layers.same_size(model, siglip_layers.preset("siglip_base_patch16_224").config)
    assert (model.grid, model.positions, model.context_length, model.vision.activation) == (14, 196, 64, "gelu_tanh")
    assert siglip_layers.parameter_count(model) == 203_155_970


@pytest.mark.parametrize("name", sorted(siglip_layers.PRESETS))
def test_each_preset_has_its_published_parameter_count_and_its_config_reads_back(name):
    """MTEB's model registry's count of each published checkpoint (transformers' num_parameters) is the table's."""
    preset = siglip_layers.preset(name)
    assert siglip_layers.parameter_count(preset.config) == preset.parameters
    assert siglip_layers.same_size(config_from_dict(json.loads(json.dumps(config_dict(preset.config)))),
                                   preset.config)


def test_so400m_at_384_leaves_the_last_pixels_out():
    model = siglip_layers.preset("siglip2_so400m_patch14_384").config
    assert (model.grid, model.positions, model.vision.width, model.vocabulary_size) == (27, 729, 1152, 256000)


@pytest.mark.parametrize("change, message", [
    (lambda data: data.update(model_type="siglip2"), "model_type='siglip2' is not SigLIP's .* NaFlex"),
    (lambda data: data.update(model_type="clip"), "model_type='clip' is not SigLIP's"),
    (lambda data: data["vision_config"].update(hidden_act="relu"), r"vision_config.hidden_act='relu' is not supported"),
    (lambda data: data["text_config"].update(num_attention_heads=7), r"hidden_size=768 is not a multiple of .*=7"),
    (lambda data: data["vision_config"].update(vision_use_head=False), "vision_use_head=False"),
    (lambda data: data["vision_config"].update(num_channels=1), "num_channels=1"),
    (lambda data: data["text_config"].update(projection_size=512), "projection_size=512"),
    (lambda data: data["vision_config"].update(image_size=[224, 256]), "only square images"),
    (lambda data: data["text_config"].update(vocab_size="32000"), r"text_config.vocab_size='32000'"),
])
def test_a_config_the_graph_cannot_compute_is_one_line_naming_the_field(tmp_path, change, message):
    data = json.loads(json.dumps(PUBLISHED_BASE))
    change(data)
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(WeightsError, match=message) as caught:
        read_config(tmp_path)
    assert "\n" not in str(caught.value) and "config.json" in str(caught.value)


def test_a_missing_or_damaged_config_is_one_line(tmp_path):
    with pytest.raises(WeightsError, match="no config.json beside the checkpoint"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(WeightsError, match="is not a readable JSON config"):
        read_config(tmp_path)
    with pytest.raises(ValueError, match="model='siglip_huge'; expected one of siglip_base_patch16_224"):
        siglip_layers.preset("siglip_huge")
