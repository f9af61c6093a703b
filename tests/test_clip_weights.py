"""CLIP's weight files: Hugging Face's safetensors layout read and checked (open_clip's: test_open_clip_layout.py),
the random command's folder with its config.json, and the weights argument's hub checkpoints (imagenet's pinned
commits, hf://: a preset's fetched when first read, the family's at once with its config) from a hub on loopback."""

import dataclasses
import json
import stat

import numpy as np
import pytest

from models import weight_files
from models.clip import clip_config, clip_layers, clip_weights
from models.clip.clip_tokenizer import Tokenizer, write_test_vocabulary
from models.files import WeightsError
from models.vit.vit_config import ConfigError
from models.safetensors_files import read_tensors, write_tensors
from models.vit.vit_layers import TransformerConfig
from parallel.output.durable import new_file_mode

SMALL = clip_layers.Config(
    "clip_small", "test/clip-small", patch_size=32,
    vision=TransformerConfig(16, 2, 2, 32, activation="quick_gelu", epsilon=1e-5),
    text=TransformerConfig(8, 2, 2, 16, activation="quick_gelu", epsilon=1e-5), projection=4, vocabulary_size=600)


@pytest.fixture(scope="module")
def weights():
    return clip_weights.random_weights(SMALL, seed=3)


def test_hugging_face_s_layout_is_read_back_with_its_position_ids_left_out(weights, tmp_path):
    path = tmp_path / "model.safetensors"
    clip_weights.write_checkpoint(weights, path, model=SMALL)
    stored = read_tensors(path)
    assert stored["text_model.embeddings.position_ids"].tolist() == [list(range(77))]
    assert stored["vision_model.embeddings.position_ids"].dtype == np.int64
    both = clip_weights.load_weights(path, SMALL, ("vision", "text"))
    assert sorted(both) == sorted(name for name, _ in clip_layers.parameters(SMALL) if name != "logit_scale")
    assert all(np.array_equal(both[name], weights[name]) for name in both)
    vision = clip_weights.load_weights(path, SMALL)
    assert sorted(vision) == sorted(name for name, _ in clip_layers.vision_parameters(SMALL))


def test_a_missing_array_a_wrong_shape_or_another_file_is_one_line_naming_it(weights, tmp_path):
    missing = tmp_path / "missing.safetensors"
    write_tensors(missing, {name: array for name, array in weights.items()
                            if "vision_model.encoder.layers.1.mlp.fc2" not in name})
    with pytest.raises(WeightsError, match=r"missing.safetensors has no array vision_model.encoder.layers.1.mlp.fc2"
                                           r".weight: it has 76 of clip_small's 78 arrays"):
        clip_weights.load_weights(missing, SMALL)
    assert len(clip_weights.load_weights(missing, SMALL, ("text",))) == 37  # the text tower needs none of them
    wrong = tmp_path / "wrong.safetensors"
    write_tensors(wrong, dict(weights, **{"visual_projection.weight": np.zeros((5, 16), np.float32)}))
    with pytest.raises(WeightsError, match=r"visual_projection.weight has shape \(5, 16\); clip_small needs \(4, 16\)"):
        clip_weights.load_weights(wrong, SMALL)
    integers = tmp_path / "integers.safetensors"
    write_tensors(integers, dict(weights, **{"logit_scale": np.int32(1), "text_projection.weight": np.zeros(
        (4, 8), np.int32)}))
    with pytest.raises(WeightsError, match="text_projection.weight is int32, not floats"):
        clip_weights.load_weights(integers, SMALL, ("text",))
    fused = tmp_path / "fused.safetensors"
    write_tensors(fused, {"visual.conv1.weight": weights["vision_model.embeddings.patch_embedding.weight"],
                          "visual.transformer.resblocks.0.attn.in_proj_weight": np.zeros((47, 16), np.float32)})
    with pytest.raises(WeightsError, match=r"in_proj_weight has shape \(47, 16\): not q, k and v stacked"):
        clip_weights.load_weights(fused, SMALL)
    text = tmp_path / "not.safetensors"
    text.write_text("not weights")
    with pytest.raises(WeightsError, match="not.safetensors"):
        clip_weights.load_weights(text, SMALL)
    with pytest.raises(ValueError, match="towers=\\('image',\\)"):
        clip_weights.load_weights(missing, SMALL, ("image",))


def test_logit_scale_is_written_a_scalar_as_published_and_read_as_one_in_either_shape(weights, tmp_path):
    """transformers' CLIPModel.from_pretrained refuses a logit_scale of shape [1], which the random command wrote
    (np.ascontiguousarray gives every array a dimension): the published files have [], open_clip's too."""
    from safetensors import safe_open

    clip_weights.RandomFiles(SMALL).write_random(tmp_path / "random.safetensors")
    clip_weights.write_checkpoint(weights, tmp_path / "open_clip.safetensors", layout="open_clip", model=SMALL)
    for name in ("random.safetensors", "open_clip.safetensors"):
        with safe_open(tmp_path / name, framework="numpy") as file:
            assert file.get_slice("logit_scale").get_shape() == [], name
            assert file.get_tensor("logit_scale").shape == (), name
    for shape in ((), (1,)):
        path = tmp_path / ("logit_scale_%d.safetensors" % len(shape))
        write_tensors(path, dict(weights, logit_scale=np.full(shape, np.log(100.0), np.float32)))
        assert read_tensors(path)["logit_scale"].shape == shape  # written as given
        read = clip_weights.load_weights(path, SMALL, ("vision", "logit_scale"))
        assert read["logit_scale"].shape == () and read["logit_scale"] == np.float32(np.log(100.0))
        assert len(read) == len(clip_layers.vision_parameters(SMALL)) + 1
    write_tensors(tmp_path / "two.safetensors", dict(weights, logit_scale=np.ones(2, np.float32)))
    with pytest.raises(WeightsError, match=r"logit_scale has shape \(2,\); clip_small needs \(\)"):
        clip_weights.load_weights(tmp_path / "two.safetensors", SMALL, ("logit_scale",))


def test_the_random_command_writes_a_folder_as_the_published_checkpoint_s(tmp_path, capsys, monkeypatch):
    """model.safetensors of ViT-B/32 has the byte size of the published file (605,157,884 bytes, as a public
    listing of huggingface_hub's cache gives it for openai/clip-vit-base-patch32 at c237dc49): the same
    names, shapes, dtypes and position_ids buffers, or the header's length would differ. (Zeros instead of
    random values, which test_clip.py's folder has: the layout is what is checked here, faster.)"""
    monkeypatch.setattr(clip_weights, "random_weights", lambda model, seed: {
        name: np.zeros(shape, np.float32) for name, shape in clip_layers.parameters(model)})
    folder = tmp_path / "clip-random"
    assert weight_files.main(["random", str(folder), "--model", "clip_vit_b32", "--seed", "1"]) == 0
    assert "RANDOM clip_vit_b32 weights (seed 1) in Hugging Face's folder" in capsys.readouterr().err
    names = ["config.json", "merges.txt", "model.safetensors", "tokenizer.json", "vocab.json"]
    assert sorted(path.name for path in folder.iterdir()) == names
    assert (folder / "model.safetensors").stat().st_size == 605_157_884
    # Readable as the tokenizer's files beside it are (0o644 under the usual umask): the library wrote it 0o600.
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in folder.iterdir()} == dict.fromkeys(
        names, new_file_mode())
    # Its config.json describes the preset: the family reads the folder at B/32's size.
    assert clip_config.read_hf_config(folder / "config.json", "clip_vit_b32",
                                      "openai/clip-vit-base-patch32") == clip_layers.VIT_B32
    tokenizer = Tokenizer.from_folder(folder)
    ids = tokenizer.encode(["a photo of a dog"])
    assert ids.shape == (1, 77) and ids[0].argmax() == np.count_nonzero(ids[0]) - 1  # the end token: the largest
    assert weight_files.main(["random", str(folder), "--model", "clip_vit_b32"]) == 2  # never replaced
    assert weight_files.main(["random", str(tmp_path / "clip.h5"), "--model", "clip_vit_b16"]) == 2
    assert "must end in no extension (Hugging Face's folder" in capsys.readouterr().err
    assert not (tmp_path / "clip.h5").exists()


def test_a_random_file_alone_and_a_failed_folder_leaves_nothing(tmp_path, monkeypatch):
    small = clip_weights.RandomFiles(SMALL)
    small.write_random(tmp_path / "small.safetensors", seed=0)
    assert len(read_tensors(tmp_path / "small.safetensors")) == len(clip_layers.parameters(SMALL)) + 2

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("models.clip.clip_tokenizer.write_test_vocabulary", full_disk)
    with pytest.raises(OSError, match="No space left"):
        small.write_random(tmp_path / "folder")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["small.safetensors"]


# ----------------------------------------------------------------------------- the weights argument: the hub's

COMMIT = "0123456789abcdef0123456789abcdef01234567"
B16_COMMIT = "57c216476eefef5ab752ec549e440a49ae4ae5f3"


def publish(hub, repo, commit, folder, config=None):
    """Serves a checkpoint's folder at `commit`: model.safetensors in LFS, the tokenizer's files (and config.json
    of `config`) in git, as the hub keeps them."""
    for path in folder.iterdir():
        hub.add(repo, commit, path.name, path.read_bytes(), lfs=path.suffix == ".safetensors")
    if config is not None:
        hub.add(repo, commit, "config.json", json.dumps(config).encode(), lfs=False)


def publish_small(hub, weights, folder):
    """Serves SMALL's checkpoint (`weights`), its config.json and the tests' tokenizer files as owner/clip@COMMIT;
    returns the folder written."""
    folder.mkdir()
    clip_weights.write_checkpoint(weights, folder / "model.safetensors", model=SMALL)
    write_test_vocabulary(folder)
    publish(hub, "owner/clip", COMMIT, folder, clip_config.hf_config(SMALL))
    return folder


def test_a_hub_checkpoint_is_named_now_and_fetched_with_its_tokenizer_files_when_first_read(fake_hub, weights,
                                                                                            tmp_path):
    folder = publish_small(fake_hub, weights, tmp_path / "published")
    source = clip_weights.Checkpoint("hf://owner/clip@%s" % COMMIT, SMALL)
    assert source.identity == "hub owner/clip@%s model.safetensors, sha256 from the hub's X-Linked-Etag" % COMMIT
    assert source.files == () and fake_hub.requests == []  # nothing asked until the weights are read
    path = source.path()
    assert path.name == "model.safetensors" and path.read_bytes() == (folder / "model.safetensors").read_bytes()
    assert sorted(child.name for child in path.parent.iterdir()) == [
        "config.json", "merges.txt", "model.safetensors", "tokenizer.json", "vocab.json"]
    assert source.tokenizer_folder() == path.parent
    np.testing.assert_array_equal(Tokenizer.from_folder(path.parent).encode(["a dog"]),
                                  Tokenizer.from_folder(folder).encode(["a dog"]))
    loaded = clip_weights.load_weights(path, SMALL, ("vision", "text"))
    assert all(np.array_equal(loaded[name], weights[name]) for name in loaded)


def test_b16_s_imagenet_is_the_commit_mteb_pins_and_a_pickle_there_is_refused_in_one_line(fake_hub, tmp_path,
                                                                                          monkeypatch):
    fake_hub.add("openai/clip-vit-base-patch16", B16_COMMIT, "pytorch_model.bin", b"\x80\x02 a pickle")
    fake_hub.add("openai/clip-vit-base-patch16", B16_COMMIT, "vocab.json", b"{}", lfs=False)
    source = clip_weights.Checkpoint("imagenet", clip_layers.VIT_B16)
    assert source.identity == ("hub openai/clip-vit-base-patch16@%s model.safetensors, sha256 from the hub's "
                               "X-Linked-Etag" % B16_COMMIT)
    with pytest.raises(WeightsError, match=r"hf://openai/clip-vit-base-patch16@%s has no model.safetensors or "
                                           r"open_clip_model.safetensors, only pytorch_model.bin: a pickle, which "
                                           r"can run code when it is read and is never read here" % B16_COMMIT
                       ) as error:
        source.path()
    assert "\n" not in str(error.value) and "GET" not in [method for method, *_ in fake_hub.requests]
    # If the commit holds model.safetensors (not known here: no network), that is what "imagenet" reads.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "another-home"))  # the first cache knows the commit lacks it
    fake_hub.add("openai/clip-vit-base-patch16", B16_COMMIT, "model.safetensors", b"safetensors bytes")
    assert clip_weights.Checkpoint("imagenet", clip_layers.VIT_B16).path().read_bytes() == b"safetensors bytes"


def test_a_hub_checkpoint_of_another_family_or_without_a_commit_is_one_line(fake_hub, tmp_path):
    folder = tmp_path / "dinov2"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    publish(fake_hub, "facebook/dinov2-small", COMMIT, folder, {"model_type": "dinov2"})
    with pytest.raises(WeightsError, match=r"weights=hf://facebook/dinov2-small@%s is a dinov2 checkpoint \(its "
                                           r"config's model_type\), not a clip one: pass --model dinov2, which reads "
                                           r"its size from the config" % COMMIT):
        clip_weights.Checkpoint("hf://facebook/dinov2-small@%s" % COMMIT, SMALL).path()
    with pytest.raises(WeightsError, match=r"weights=hf://openai/clip-vit-large-patch14 names no commit"):
        clip_weights.Checkpoint("hf://openai/clip-vit-large-patch14", SMALL)
    with pytest.raises(WeightsError, match=r"weights=imagenet: no commit of clip_small is pinned here; pass "
                                           r"hf://test/clip-small@COMMIT, or a downloaded folder"):
        clip_weights.Checkpoint("imagenet", SMALL)


def test_the_family_s_hub_checkpoint_is_fetched_at_once_with_its_config_and_read_at_its_size(fake_hub, weights,
                                                                                              tmp_path):
    """--model clip --weights hf://ORG/NAME@COMMIT: the size is the config's, so the config comes with the weights
    when the model is named, as a folder's is read; open_clip's files alike (its config's GELU); a preset's hub
    checkpoint is checked against its config when read."""
    folder = publish_small(fake_hub, weights, tmp_path / "published")
    source = clip_weights.Checkpoint("hf://owner/clip@%s" % COMMIT, None)
    assert fake_hub.requests and dataclasses.replace(source.model, name=SMALL.name, hub_repo=SMALL.hub_repo) == SMALL
    assert source.model.name == "clip" and source.path().parent == source.tokenizer_folder()
    assert clip_weights.load_weights(source.path(), source.model).keys() == clip_weights.load_weights(
        folder / "model.safetensors", SMALL).keys()
    other = dataclasses.replace(SMALL, projection=8)
    with pytest.raises(ConfigError, match=r"config.json: its projection is 4, where clip_small has 8: pass --model "
                                          r"clip to read the size from the config"):
        clip_weights.Checkpoint("hf://owner/clip@%s" % COMMIT, other).path()
    laion = tmp_path / "laion"
    laion.mkdir()
    gelu = dataclasses.replace(SMALL, vision=dataclasses.replace(SMALL.vision, activation="gelu"),
                               text=dataclasses.replace(SMALL.text, activation="gelu"))
    clip_weights.write_checkpoint(weights, laion / "open_clip_model.safetensors", "open_clip", gelu)
    (laion / "open_clip_config.json").write_text(json.dumps({"model_cfg": {
        "embed_dim": 4, "vision_cfg": {"image_size": 224, "layers": 2, "width": 16, "head_width": 8, "mlp_ratio": 2,
                                       "patch_size": 32},
        "text_cfg": {"context_length": 77, "vocab_size": 600, "width": 8, "heads": 2, "layers": 2, "mlp_ratio": 2}}}))
    publish(fake_hub, "laion/small", COMMIT, laion)
    source = clip_weights.Checkpoint("hf://laion/small@%s" % COMMIT, None)
    assert source.path().name == "open_clip_model.safetensors" and source.model.vision.activation == "gelu"
    assert (source.model.vision, source.model.projection) == (gelu.vision, 4)
    fake_hub.add("owner/bare", COMMIT, "model.safetensors", (folder / "model.safetensors").read_bytes())
    with pytest.raises(WeightsError, match=r"model.safetensors: no config.json beside it: --model clip reads the size "
                                           r"from the checkpoint's config"):
        clip_weights.Checkpoint("hf://owner/bare@%s" % COMMIT, None)
