"""SigLIP's sizes: a config.json read as transformers reads it (its defaults filling the published files' sparse
ones), through the config reader CLIP and DINOv2 share, refused in one line naming a field the graph cannot compute;
the presets' parameter counts."""

import json

import pytest

from models.files import WeightsError
from models.vit.vit_config import ConfigError
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
    (lambda data: data.update(model_type="siglip2"), 'model_type="siglip2": SigLIP 2\'s NaFlex checkpoints'),
    (lambda data: data.update(model_type="clip"), 'model_type="clip": not SigLIP\'s config'),
    (lambda data: data["vision_config"].update(hidden_act="relu"),
     r'vision_config.hidden_act="relu": an activation siglip does not run \(it runs gelu, .*gelu_pytorch_tanh'),
    (lambda data: data["text_config"].update(num_attention_heads=7),
     r"text_config.num_attention_heads=7: hidden_size=768 is not a multiple of it"),
    (lambda data: data["vision_config"].update(vision_use_head=False), "vision_config.vision_use_head=false: the "
                                                                       "image embedding is the attention-pooling"),
    (lambda data: data["vision_config"].update(num_channels=1), "vision_config.num_channels=1: siglip runs RGB"),
    (lambda data: data["text_config"].update(projection_size=512), "projection_size=512"),
    (lambda data: data["vision_config"].update(image_size=[224, 256]),
     r"vision_config.image_size=\[224, 256\]: siglip runs square images"),
    (lambda data: data["text_config"].update(vocab_size="32000"),
     r'text_config.vocab_size="32000": expected a positive integer'),
])
def test_a_config_the_graph_cannot_compute_is_one_line_naming_the_field(tmp_path, change, message):
    """Read through models/vit/vit_config.py, as CLIP's and DINOv2's configs are: the file, the field, its value."""
    data = json.loads(json.dumps(PUBLISHED_BASE))
    change(data)
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message) as caught:
        read_config(tmp_path)
    assert "\n" not in str(caught.value) and str(caught.value).startswith(str(tmp_path / "config.json"))


def test_a_missing_or_damaged_config_is_one_line(tmp_path):
    with pytest.raises(WeightsError, match="no config.json beside the checkpoint"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ConfigError, match="config.json is not JSON"):
        read_config(tmp_path)
    with pytest.raises(ValueError, match="model='siglip_huge'; expected one of siglip_base_patch16_224"):
        siglip_layers.preset("siglip_huge")
