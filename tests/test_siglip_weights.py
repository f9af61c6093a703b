"""SigLIP's weight files: transformers' model.safetensors read and checked against config.json's sizes; random
folders written in the publisher's layout (the `random` command); what "imagenet" means for a preset."""

import json

import numpy as np
import pytest

from models import weight_files
from models.files import WeightsError
from models.safetensors_files import read_tensors, write_tensors
from models.siglip import siglip_layers, siglip_weights
from models.siglip.siglip_tokenizer import Tokenizer
from siglip_files import small_config, write_small


def test_a_checkpoint_is_read_and_checked_against_its_config(tmp_path):
    folder = write_small(tmp_path / "small", siglip2=False)
    model = siglip_layers.read_config(folder)
    weights = siglip_weights.load_weights(folder / "model.safetensors", model, ("vision", "text", "logits"))
    assert set(weights) == {name for name, _ in siglip_layers.parameters(model)}
    assert siglip_weights.logits(weights) == pytest.approx((np.log(10.0), -10.0))
    tensors = read_tensors(folder / "model.safetensors")
    wider = small_config(width=48, heads=4)
    with pytest.raises(WeightsError, match=r"vision_model.* has shape \(32, 3, 8, 8\); its config.json says "
                                           r"\(48, 3, 8, 8\)"):
        siglip_weights.load_weights(folder / "model.safetensors", wider)
    del tensors["vision_model.head.probe"]
    write_tensors(tmp_path / "damaged.safetensors", tensors)
    with pytest.raises(WeightsError, match="has no array vision_model.head.probe"):
        siglip_weights.load_weights(tmp_path / "damaged.safetensors", model)


def test_the_random_command_writes_a_folder_in_transformers_layout(tmp_path, monkeypatch):
    """The command of a preset; made small here (the same code) so that it takes a second, not 1.5 GB."""
    small = siglip_layers.Preset(small_config("siglip2_base_patch16_256"), "google/siglip2-base-patch16-256",
                                 "0" * 40, 0)
    monkeypatch.setitem(siglip_layers.PRESETS, "siglip2_base_patch16_256", small)
    assert weight_files.main(["random", str(tmp_path / "random"), "--model", "siglip2_base_patch16_256"]) == 0
    names = sorted(path.name for path in (tmp_path / "random").iterdir())
    assert names == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert json.loads((tmp_path / "random" / "config.json").read_text())["model_type"] == "siglip"
    assert siglip_layers.same_size(siglip_layers.read_config(tmp_path / "random"), small.config)
    assert Tokenizer.from_folder(tmp_path / "random").siglip2


def test_siglip_alone_has_no_random_weights_and_imagenet_is_a_preset_s(tmp_path, capsys):
    assert weight_files.main(["random", str(tmp_path / "other"), "--model", "siglip"]) == 2
    assert "model=siglip takes its size from a checkpoint's config.json" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()
    checkpoint = siglip_weights.Checkpoint("imagenet", "siglip2_base_patch16_256")
    assert checkpoint.identity.startswith("hub google/siglip2-base-patch16-256@"
                                          "3f9f96cb90da5dbc758b01813f2f6f1aee24c1ab")
    files = siglip_weights.hub_files(siglip_layers.preset("siglip_base_patch16_224"))
    assert sorted(files) == ["config.json", "model.safetensors", "spiece.model", "tokenizer_config.json"]
    assert {file.revision for file in files.values()} == {"7fd15f0689c79d79e38b1c2e2e2370a7bf2761ed"}


def test_the_family_s_hub_checkpoint_is_fetched_at_once_with_its_config_and_read_at_its_size(fake_hub, tmp_path):
    """--model siglip --weights hf://ORG/NAME@COMMIT: the commit's config.json comes with the weights when the model
    is named (the size is read from it, as from a folder's), its tokenizer files beside them; a named size's hub
    checkpoint is fetched when read, and checked against its config then."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = write_small(tmp_path / "published", siglip2=True)
    for path in folder.iterdir():
        fake_hub.add("owner/siglip", commit, path.name, path.read_bytes(), lfs=path.suffix == ".safetensors")
    checkpoint = siglip_weights.Checkpoint("hf://owner/siglip@%s" % commit, "siglip")
    assert fake_hub.requests and siglip_layers.same_size(checkpoint.model, small_config())
    assert checkpoint.files == () and checkpoint.identity.startswith("hub owner/siglip@%s model.safetensors" % commit)
    assert checkpoint.path().read_bytes() == (folder / "model.safetensors").read_bytes()
    assert checkpoint.tokenizer_folder() == checkpoint.path().parent
    assert Tokenizer.from_folder(checkpoint.tokenizer_folder()).siglip2
    named = siglip_weights.Checkpoint("hf://owner/siglip@%s" % commit, "siglip2_base_patch16_256")
    with pytest.raises(WeightsError, match=r"weights=hf://owner/siglip@%s: its config.json is not "
                                           r"siglip2_base_patch16_256's size" % commit):
        named.path()
    fake_hub.add("owner/clip", commit, "model.safetensors", b"weights")
    fake_hub.add("owner/clip", commit, "config.json", json.dumps({"model_type": "clip"}).encode(), lfs=False)
    with pytest.raises(WeightsError, match=r"is a clip checkpoint \(its config's model_type\), not a siglip one: pass "
                                           r"--model clip, which reads its size from the config"):
        siglip_weights.Checkpoint("hf://owner/clip@%s" % commit, "siglip")
    with pytest.raises(WeightsError, match="weights=hf://owner/siglip@main: 'main' is a branch or a tag"):
        siglip_weights.Checkpoint("hf://owner/siglip@main", "siglip")
