"""A checkpoint's config read field by field: values, the publisher's defaults, and every refusal one line naming the
file and the field."""

import json

import pytest

from models.vit.vit_config import ConfigError, Section, hf_activation, hf_transformer, read_config
from models.vit.vit_layers import TransformerConfig


def config_file(tmp_path, values, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(values) if not isinstance(values, str) else values)
    return path


def test_fields_are_read_with_the_publisher_s_defaults(tmp_path):
    config = read_config(config_file(tmp_path, {"vision_config": {"hidden_size": 1024, "image_size": [336, 336],
                                                                  "layer_norm_eps": 1e-06, "ratio": 4.0,
                                                                  "num_hidden_layers": 24.0, "on": False}}))
    vision = config.section("vision_config")
    assert (vision.integer("hidden_size"), vision.integer("patch_size", 14), vision.square("image_size")) == (
        1024, 14, 336)
    assert vision.number("layer_norm_eps") == 1e-6 and vision.integer("num_hidden_layers") == 24  # 24.0 is 24
    assert vision.flag("on") is False and vision.get("absent", "default") == "default"
    assert "hidden_size" in vision and "absent" not in vision and vision.field("ratio") == "vision_config.ratio"
    assert config.section("text_config", {}).values == {}


@pytest.mark.parametrize("values, read, message", [
    ({"width": "wide"}, lambda c: c.integer("width"), 'width="wide": expected a positive integer'),
    ({"width": 0}, lambda c: c.integer("width"), "width=0: expected a positive integer"),
    ({"width": True}, lambda c: c.integer("width"), "width=true: expected a positive integer"),
    ({}, lambda c: c.integer("width"), "width=absent: clip needs it"),
    ({"size": [224, 336]}, lambda c: c.square("size"), r"size=\[224, 336\]: clip runs square images and patches"),
    ({"eps": "small"}, lambda c: c.number("eps"), 'eps="small": expected a number'),
    ({"on": 1}, lambda c: c.flag("on"), "on=1: expected true or false"),
    ({"tower": [1]}, lambda c: c.section("tower"), r"tower=\[1\]: expected an object"),
    ({"hidden_act": "gelu_fast"}, lambda c: c.activation("hidden_act"),
     'hidden_act="gelu_fast": an activation clip does not run \\(it runs gelu, quick_gelu, silu, swish, '
     'gelu_pytorch_tanh, gelu_new\\)'),
    ({"num_channels": 4}, lambda c: c.expect("num_channels", (3,), 3, "RGB only"), "num_channels=4: RGB only"),
    ({"known": 1, "novel": 2}, lambda c: c.only(("known",), "unknown here"), "novel=2: unknown here"),
])
def test_a_field_the_code_cannot_run_is_one_line_naming_the_file_and_the_field(tmp_path, values, read, message):
    path = config_file(tmp_path, {"outer": values})
    with pytest.raises(ConfigError, match=r"^%s: outer\.%s$" % (str(path).replace(".", r"\."), message)) as refused:
        read(read_config(path, "clip").section("outer"))
    assert "\n" not in str(refused.value)


def test_a_file_that_is_not_a_json_object_is_one_line_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="missing.json: No such file"):
        read_config(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match="bad.json is not JSON: Expecting property name"):
        read_config(config_file(tmp_path, "{'single': quotes}", "bad.json"))
    with pytest.raises(ConfigError, match="list.json is not a JSON object"):
        read_config(config_file(tmp_path, [1, 2], "list.json"))
    assert issubclass(ConfigError, ValueError)  # the command line's one line and exit status 2


def test_timm_s_config_is_refused_naming_its_architecture_and_a_model_type_is_read_as_ever(tmp_path):
    timm = {"architecture": "vit_base_patch16_siglip_224", "num_classes": 0, "pretrained_cfg": {"tag": "webli"}}
    with pytest.raises(ConfigError, match=r"timm.json is timm's config \(architecture \"vit_base_patch16_siglip_224\"\), "
                                          r"not transformers': --model siglip reads .*; pass the repository"):
        read_config(config_file(tmp_path, timm, "timm.json"), "siglip")
    with pytest.raises(ConfigError, match=r"--model clip reads .*\(config.json with a model_type\) or open_clip's"):
        read_config(config_file(tmp_path, timm, "timm.json"), "clip")
    assert read_config(config_file(tmp_path, dict(timm, model_type="siglip"), "hf.json"), "siglip").get(
        "model_type") == "siglip"


def test_a_hugging_face_tower_is_a_transformer_config(tmp_path):
    section = Section({"hidden_size": 1280, "num_hidden_layers": 32, "num_attention_heads": 16,
                       "intermediate_size": 5120, "hidden_act": "gelu", "layer_norm_eps": 1e-5}, tmp_path / "c.json")
    assert hf_transformer(section) == TransformerConfig(1280, 32, 16, 5120, "gelu", epsilon=1e-5)
    defaults = Section({"hidden_size": 384, "num_hidden_layers": 12, "num_attention_heads": 6,
                        "intermediate_size": 1536}, tmp_path / "c.json")
    assert hf_transformer(defaults, layer_scale=True, hidden_act="quick_gelu", layer_norm_eps=1e-6) == (
        TransformerConfig(384, 12, 6, 1536, "quick_gelu", layer_scale=True, epsilon=1e-6))
    with pytest.raises(ConfigError, match="num_attention_heads=7: hidden_size=384 is not a multiple of it"):
        hf_transformer(Section(dict(defaults.values, num_attention_heads=7), tmp_path / "c.json"),
                       hidden_act="gelu", layer_norm_eps=1e-6)


def test_siglip_s_activation_is_gelu_s_tanh_approximation_and_is_written_back_by_transformers_name(tmp_path):
    """One reader for CLIP, SigLIP and DINOv2: transformers' "gelu_pytorch_tanh" (and "gelu_new", the same function)
    is models.vit's "gelu_tanh"; a config written for a checkpoint names it as transformers does."""
    for name in ("gelu_pytorch_tanh", "gelu_new"):
        section = Section({"hidden_act": name}, tmp_path / "c.json", family="siglip")
        assert section.activation("hidden_act") == "gelu_tanh"
    assert [hf_activation(name) for name in ("gelu", "quick_gelu", "gelu_tanh", "silu")] == [
        "gelu", "quick_gelu", "gelu_pytorch_tanh", "silu"]
