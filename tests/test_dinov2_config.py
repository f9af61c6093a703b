"""DINOv2 at any size from its checkpoint's config.json: the config read (with and without registers, SwiGLU), and
`--model dinov2` against transformers' own code on seeded random weights it wrote in its own layout:
Dinov2Model at L/14's size, Dinov2WithRegistersModel at g/14's (registers, SwiGLU, antialiased position
embeddings); the position embeddings' antialiased resize against PyTorch's itself.

The references have each size's real width, heads, MLP (SwiGLU for g/14), patch, registers and position grid (518
px), with 2 blocks instead of 24 or 40: the depth is a loop the code runs as many times as the config says
(test_the_config_s_fields_make_the_variant).
"""

import dataclasses
import json

import numpy as np
import pytest

from models import registry
from models.dinov2 import dinov2, dinov2_config, dinov2_layers, dinov2_weights
from models.files import WeightsError
from models.vit.vit_config import ConfigError
from models.vit.vit_layers import TransformerConfig
from parallel import engine
from parallel.devices import resolve_devices
from torch_references import run_references

TOLERANCE = 1e-5  # of the largest reference value
REFERENCES = {  # name: Dinov2Config / Dinov2WithRegistersConfig arguments
    "l14": {"hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 2, "image_size": 518,
            "patch_size": 14},
    "g14_registers": {"model_type": "dinov2_with_registers", "hidden_size": 1536, "num_attention_heads": 24,
                      "num_hidden_layers": 2, "use_swiglu_ffn": True, "num_register_tokens": 4, "image_size": 518,
                      "patch_size": 14},
}


@pytest.fixture(scope="module")
def compared(photographs):
    """The photographs the parity is checked on: two, one pair for the spread guard (the parity is row by row; each
    row costs both models' blocks at L/14's and g/14's widths)."""
    return photographs[:2]


@pytest.fixture(scope="module")
def references(tmp_path_factory, compared):
    """{name: (folder, {output: array})}, and the position table resized by PyTorch with and without antialias."""
    folder = tmp_path_factory.mktemp("dinov2_references")
    np.save(folder / "images.npy", compared)
    np.save(folder / "table.npy", np.random.default_rng(0).standard_normal((1, 6, 37, 37)))
    jobs = [dict(kind="dinov2", config=config, folder=str(folder / name), seed=index, images=str(folder / "images.npy"))
            for index, (name, config) in enumerate(REFERENCES.items())]
    jobs += [dict(kind="interpolate", table=str(folder / "table.npy"), size=[16, 16], antialias=antialias)
             for antialias in (True, False)]
    results = run_references(jobs, folder)
    outputs = {name: (folder / name, result) for name, result in zip(REFERENCES, results)}
    outputs["resized"] = np.load(folder / "table.npy"), results[-2]["resized"], results[-1]["resized"]
    return outputs


def run_family(folder, images, layer):
    spec = registry.feature_model("dinov2", layer=layer, weights=str(folder))
    with engine.DeviceRunner(spec, resolve_devices(devices="cpu:0", gpu_count=0), per_device_batch=5) as runner:
        return runner.run(images), spec


@pytest.mark.parametrize("name", list(REFERENCES))
def test_each_endpoint_equals_transformers_model_at_l14_and_g14_with_registers(references, compared, name):
    """class_and_patch_mean is class_token's features, then the patch mean: one run checks both."""
    folder, expected = references[name]
    ours, spec = run_family(folder, compared, "class_and_patch_mean")
    width, count = REFERENCES[name]["hidden_size"], len(compared)
    assert ours.shape == (count, 2 * width) and spec.settings["model"] == "dinov2"
    for layer, features in (("class_token", ours[:, :width]), ("class_and_patch_mean", ours)):
        assert features.shape == expected[layer].shape
        scale = np.abs(expected[layer]).max()
        assert np.abs(features - expected[layer]).max() <= TOLERANCE * scale
        spread = min(np.abs(expected[layer][i] - expected[layer][j]).max() for i in range(count)
                     for j in range(i + 1, count))
        assert spread >= 100 * TOLERANCE * scale, (spread, scale)
    registers = "4 registers, positions 37 x 37 resized (torch_antialias)" if "registers" in name else "0 registers"
    assert registers in spec.settings["architecture"]


def test_the_registers_position_embeddings_are_resized_as_pytorch_antialiases(references):
    """Dinov2WithRegistersModel resizes with F.interpolate(..., antialias=True): `method="torch_antialias"` is it,
    and differs from the plain bicubic (Dinov2Model's, `method="torch"`), which is PyTorch's too."""
    table, antialiased, plain = references["resized"]
    grid = table[0].transpose(1, 2, 0).reshape(37 * 37, 6)
    for method, theirs in (("torch_antialias", antialiased), ("torch", plain)):
        ours = dinov2_weights.interpolate_positions(np.concatenate([np.zeros((1, 6)), grid]), 16, method)[1:]
        np.testing.assert_allclose(ours, theirs[0].transpose(1, 2, 0).reshape(256, 6), atol=1e-5)
    assert np.abs(antialiased - plain).max() > 0.1
    np.testing.assert_allclose(dinov2_weights.resize_matrix(37, 16, "torch_antialias").sum(1), 1, atol=1e-12)


def test_transformers_config_json_is_read_as_the_size_it_describes(references):
    large = dinov2_config.read_hf_config(references["l14"][0] / "config.json")
    assert large.transformer == TransformerConfig(1024, 2, 16, 4096, "gelu", layer_scale=True, epsilon=1e-6)
    assert (large.registers, large.source_grid, large.interpolation, large.title) == (0, 37, "torch",
                                                                                      "DINOv2 ViT-L/14")
    giant = dinov2_config.read_hf_config(references["g14_registers"][0] / "config.json")
    assert giant.transformer == TransformerConfig(1536, 2, 24, 4096, "silu", layer_scale=True, epsilon=1e-6,
                                                  gated=True)
    assert (giant.registers, giant.interpolation, giant.title) == (4, "torch_antialias",
                                                                   "DINOv2 ViT-g/14 with registers")
    with pytest.raises(ConfigError, match=r"config.json: its transformer is .*, where dinov2_vitl14 has "
                                          r"TransformerConfig\(width=1024, depth=24"):
        registry.feature_model("dinov2_vitl14", weights=str(references["l14"][0]))


def test_the_config_s_fields_make_the_variant(tmp_path):
    path = tmp_path / "config.json"
    for preset in dinov2_layers.VARIANTS.values():  # what the random command writes is read back as the preset
        path.write_text(json.dumps(dinov2_config.hf_config(preset)))
        read = dinov2_config.read_hf_config(path, preset.name)
        assert read.transformer == preset.transformer and read.parameter_count == preset.parameter_count
        assert (read.registers, read.source_grid, read.patch, read.interpolation, read.title) == (
            preset.registers, preset.source_grid, preset.patch, preset.interpolation, preset.title)
    path.write_text(json.dumps({"model_type": "dinov2", "hidden_size": 64, "num_attention_heads": 4,
                                "num_hidden_layers": 3, "mlp_ratio": 2}))
    small = dinov2_config.read_hf_config(path)
    assert small.transformer == TransformerConfig(64, 3, 4, 128, "gelu", layer_scale=True, epsilon=1e-6)
    assert [name for name, _ in dinov2_layers.variables(small) if name.endswith("layer_norm_1/gamma")] == [
        "block_%d/layer_norm_1/gamma" % index for index in range(3)]
    assert small.source_grid == 16  # transformers' default image_size, 224
    for values, message in (({"model_type": "vit"}, 'model_type="vit": not a DINOv2 checkpoint\'s config'),
                            ({}, "model_type=absent: dinov2 needs it"),
                            ({"model_type": "dinov2", "qkv_bias": False}, "qkv_bias=false: dinov2 runs attention "
                                                                          "projections with biases"),
                            ({"model_type": "dinov2", "hidden_act": "relu"}, 'hidden_act="relu": an activation dinov2 '
                                                                             'does not run'),
                            ({"model_type": "dinov2", "patch_size": 15}, "patch_size=15: dinov2 cuts 224 px images"),
                            ({"model_type": "dinov2", "hidden_size": 100, "num_attention_heads": 3},
                             "num_attention_heads=3: hidden_size=100 is not a multiple of it")):
        path.write_text(json.dumps(values))
        with pytest.raises(ConfigError, match=message) as refused:
            dinov2_config.read_hf_config(path)
        assert str(refused.value).startswith(str(path) + ": ")


def test_the_family_and_unpinned_presets_need_a_folder(tmp_path):
    dinov2_weights.write_random(tmp_path / "model.safetensors", dinov2_layers.VITS14)
    with pytest.raises(WeightsError, match="model.safetensors: no config.json beside it: --model dinov2 reads"):
        registry.feature_model("dinov2", weights=str(tmp_path))
    with pytest.raises(WeightsError, match="weights=imagenet: --model dinov2 reads its size from the checkpoint's"):
        registry.feature_model("dinov2")
    with pytest.raises(WeightsError, match="weights=imagenet: no pinned commit of facebook/dinov2-with-registers-giant "
                                           "is known; pass hf://facebook/dinov2-with-registers-giant@COMMIT or "
                                           "weights=FOLDER"):
        registry.feature_model("dinov2_vitg14_reg")
    # A preset reads a file without a config at its own size; the random command's folder has one.
    assert registry.feature_model("dinov2_vits14", weights=str(tmp_path)).name == "dinov2_vits14"
    registry.weight_files("dinov2").write_random(tmp_path / "folder", seed=1)
    assert sorted(path.name for path in (tmp_path / "folder").iterdir()) == ["config.json", "model.safetensors"]
    spec = dinov2.FAMILY_MODEL.feature_model(weights=str(tmp_path / "folder"))
    assert spec.settings["architecture"].endswith("width 384, 12 blocks, 6 heads, MLP 1536, gelu, LayerScale, "
                                                  "LayerNorm epsilon 1e-06")


def test_the_family_s_hub_checkpoint_is_fetched_at_once_with_its_config_and_read_at_its_size(fake_hub, tmp_path):
    """--model dinov2 --weights hf://ORG/NAME@COMMIT reads the size from the commit's config.json, fetched with the
    weights when the model is named; a preset's hub checkpoint is fetched when read, and checked against it then."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    small = dataclasses.replace(dinov2_layers.VITS14_REG, name="dinov2",
                                transformer=TransformerConfig(32, 1, 2, 128, layer_scale=True))
    dinov2_weights.write_random_folder(tmp_path / "registers", small)
    for path in (tmp_path / "registers").iterdir():
        fake_hub.add("owner/dino-reg", commit, path.name, path.read_bytes(), lfs=path.suffix == ".safetensors")
    spec = dinov2.FAMILY_MODEL.feature_model(weights="hf://owner/dino-reg@%s" % commit)
    assert fake_hub.requests and spec.settings["architecture"] == dinov2_config.read_hf_config(
        tmp_path / "registers" / "config.json").describe()
    local = dinov2.FAMILY_MODEL.feature_model(weights=str(tmp_path / "registers"))
    assert spec.settings["architecture"] == local.settings["architecture"] and spec.files == ()
    assert sorted(spec.load_weights()) == sorted(local.load_weights())
    preset = registry.feature_model("dinov2_vitl14_reg", weights="hf://owner/dino-reg@%s" % commit)
    with pytest.raises(ConfigError, match=r"config.json: its transformer is .*, where dinov2_vitl14_reg has .*: pass "
                                          r"--model dinov2 to read the size from the config"):
        preset.load_weights()
    fake_hub.add("owner/bare", commit, "model.safetensors", (tmp_path / "registers" / "model.safetensors").read_bytes())
    with pytest.raises(WeightsError, match="model.safetensors: no config.json beside it: --model dinov2 reads"):
        dinov2.FAMILY_MODEL.feature_model(weights="hf://owner/bare@%s" % commit)
    # timm's repository of the same weights (its own names, its own config.json): refused in one line naming it.
    fake_hub.add("timm/dino", commit, "model.safetensors", (tmp_path / "registers" / "model.safetensors").read_bytes())
    fake_hub.add("timm/dino", commit, "config.json", json.dumps({
        "architecture": "vit_small_patch14_reg4_dinov2", "num_classes": 0, "pretrained_cfg": {"tag": "lvd142m"}}).encode(),
        lfs=False)
    with pytest.raises(ConfigError, match=r"^\S+/config.json is timm's config \(architecture "
                                          r"\"vit_small_patch14_reg4_dinov2\"\), not transformers': --model dinov2 "
                                          r"reads a checkpoint in transformers' layout \(config.json with a "
                                          r"model_type\); pass the repository or folder of those weights in it$"):
        dinov2.FAMILY_MODEL.feature_model(weights="hf://timm/dino@%s" % commit)
