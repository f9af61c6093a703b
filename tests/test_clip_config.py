"""CLIP at any size from its checkpoint's own config: Hugging Face's config.json and open_clip's open_clip_config.json
read (every ViT config open_clip ships: read, or refused in one line naming the field), and `--model clip`
against the publishers' own code on seeded random weights they wrote in their own layouts: transformers'
CLIPModel at L/14's and H/14's sizes with GELU, open_clip's CLIP of LAION's L/14 config, and one with QuickGELU
and its own preprocessing.

The references at L/14 and H/14 have each config's real widths, heads, MLP, patch, projection, image size,
activation and context length, but 2 blocks per tower instead of 24 or 32 (and the tests' 4,514-token vocabulary
instead of 49,408): full-size random weights are gigabytes; the depth is a loop the code runs as many times as the
config says (test_the_depth_and_the_image_size_are_the_config_s), and the vocabulary a table's length.
"""

import importlib.util
import json

import numpy as np
import pytest
import tensorflow as tf

from models import registry
from models.clip import clip, clip_config, clip_layers, clip_weights
from models.clip.clip_tokenizer import write_test_vocabulary
from models.files import WeightsError
from models.text_queries import TextEmbedder
from models.vit.vit_config import ConfigError
from models.vit.vit_layers import TransformerConfig
from parallel import engine
from parallel.devices import resolve_devices
from torch_references import assert_parity, run_references

tf1 = tf.compat.v1
VOCABULARY = 4514  # the tests' BPE vocabulary (models/clip/clip_tokenizer.py): its ids tokenize sentences here
OPEN_CLIP_CONFIGS = importlib.util.find_spec("open_clip").submodule_search_locations[0] + "/model_configs"
OPENAI = {"mean": list(clip_layers.OPENAI_MEAN), "std": list(clip_layers.OPENAI_STD)}


def hf_clip(vision, text, projection, image_size=224, patch=14):
    """CLIPConfig's arguments: towers of (width, heads, MLP), 2 blocks, GELU, the tests' vocabulary."""
    def tower(width, heads, mlp):
        return {"hidden_size": width, "num_attention_heads": heads, "intermediate_size": mlp, "num_hidden_layers": 2,
                "hidden_act": "gelu"}

    return {"vision_config": dict(tower(*vision), image_size=image_size, patch_size=patch),
            "text_config": dict(tower(*text), vocab_size=VOCABULARY, bos_token_id=VOCABULARY - 2,
                                eos_token_id=VOCABULARY - 1),
            "projection_dim": projection}


def open_clip_config(name, preprocess=None, **text):
    """open_clip's own model config `name` (its model_configs/), 2 blocks per tower, as a hub open_clip_config.json."""
    with open("%s/%s.json" % (OPEN_CLIP_CONFIGS, name)) as file:
        model = json.load(file)
    model["vision_cfg"]["layers"] = model["text_cfg"]["layers"] = 2
    model["text_cfg"].update(text)
    return {"model_cfg": model, "preprocess_cfg": preprocess or dict(OPENAI)}


REFERENCES = {  # name: (kind, config)
    "l14": ("clip", hf_clip((1024, 16, 4096), (768, 12, 3072), 768)),
    "h14": ("clip", hf_clip((1280, 16, 5120), (1024, 16, 4096), 1024)),
    "laion_l14": ("open_clip", open_clip_config("ViT-L-14", vocab_size=VOCABULARY)),
    "quick_b32": ("open_clip", open_clip_config("ViT-B-32-quickgelu", {"mean": [0.5, 0.4, 0.3], "std": [0.2, 0.3, 0.25],
                                                                       "interpolation": "bilinear"},
                                                vocab_size=VOCABULARY)),
}


def token_ids(lengths, seed=1):
    """int32 [len(lengths), 77]: start, `length` random ids, end (the vocabulary's last two ids), zeros."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), 77), np.int32)
    for row, length in enumerate(lengths):
        ids[row, 0], ids[row, 1:length + 1], ids[row, length + 1] = VOCABULARY - 2, rng.integers(
            1, VOCABULARY - 2, length), VOCABULARY - 1
    return ids


@pytest.fixture(scope="module")
def compared(photographs):
    """The photographs the parity is checked on: two, one pair for the spread guard (the parity is row by row; each
    row costs both publishers' and our blocks at L/14's and H/14's widths)."""
    return photographs[:2]


@pytest.fixture(scope="module")
def references(tmp_path_factory, compared):
    """{name: (folder, {output: array})}: each publisher's folder, written by its own code, and what it computes."""
    folder = tmp_path_factory.mktemp("clip_references")
    np.save(folder / "images.npy", compared)
    np.save(folder / "token_ids.npy", token_ids((3, 10, 40, 75)))
    jobs = [dict(kind=kind, config=config, folder=str(folder / name), seed=index, images=str(folder / "images.npy"),
                 token_ids=str(folder / "token_ids.npy"), **OPENAI)
            for index, (name, (kind, config)) in enumerate(REFERENCES.items())]
    results = run_references(jobs, folder)
    for name in REFERENCES:
        write_test_vocabulary(folder / name)  # the tokenizer's files a checkpoint's folder has
    return {name: (folder / name, result) for name, result in zip(REFERENCES, results)}


@pytest.fixture(scope="module", autouse=True)
def two_text_lengths():
    """The text towers here built for two lengths, 8 and 77, not six: each length is a graph of its own, and the
    parity's rows run on both (the first on 8 positions, the others on 77); tests/test_clip.py and
    tests/test_devices_text_runner.py run rows on the shorter lengths."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clip, "TEXT_LENGTHS", (8,))
        yield


def run_family(weights, images, layer="embedding"):
    """`--model clip`'s features of `images` through the engine, with the size its weights' config gives."""
    spec = registry.feature_model("clip", layer=layer, weights=str(weights))
    with engine.DeviceRunner(spec, resolve_devices(devices="cpu:0", gpu_count=0), per_device_batch=5) as runner:
        return runner.run(images), spec


# ----------------------------------------------------------------------------- parity with the publishers' code

@pytest.mark.parametrize("name", ["l14", "h14"])
def test_both_towers_equal_transformers_clip_model_at_l14_and_h14_sizes(references, compared, name):
    folder, expected = references[name]
    assert sorted(path.name for path in folder.iterdir()) == ["config.json", "merges.txt", "model.safetensors",
                                                              "tokenizer.json", "vocab.json"]
    for layer in ("pooled", "embedding") if name == "l14" else ("embedding",):
        ours, spec = run_family(folder, compared, layer)
        assert_parity(ours, expected[layer])
    vision = REFERENCES[name][1]["vision_config"]
    assert spec.settings["architecture"].startswith("image 224 px, patches 14; vision: width %d, 2 blocks, %d heads, "
                                                    "MLP %d, gelu" % (vision["hidden_size"],
                                                                      vision["num_attention_heads"],
                                                                      vision["intermediate_size"]))
    with clip.TextTower("clip", weights=str(folder)) as tower:
        assert_parity(tower.embed(token_ids((3, 10, 40, 75))), expected["text"])


def test_open_clip_s_laion_checkpoint_is_read_with_its_config(references, compared):
    folder, expected = references["laion_l14"]
    assert {"open_clip_config.json", "open_clip_model.safetensors"} <= {path.name for path in folder.iterdir()}
    ours, spec = run_family(folder, compared)
    assert_parity(ours, expected["embedding"])
    assert spec.files == (str(folder / "open_clip_model.safetensors"),) and "MLP 4096, gelu" in spec.settings[
        "architecture"]  # LAION's: the exact GELU (open_clip's quick_gelu false)
    with clip.TextTower("clip", weights=str(folder)) as tower:
        assert_parity(tower.embed(token_ids((3, 10, 40, 75))), expected["text"])
    with TextEmbedder("clip", weights=str(folder)) as embedder:  # search by a sentence: the tokenizer, the tower
        sentences = embedder.text(["a photo of a dog", "a red car in the snow"])
    assert sentences.shape == (2, 768) and np.abs(sentences[0] - sentences[1]).max() > 1e-2


def test_open_clip_s_quick_gelu_and_preprocessing_are_the_config_s(references, compared):
    folder, expected = references["quick_b32"]
    ours, spec = run_family(folder, compared)
    assert_parity(ours, expected["embedding"])  # open_clip's preprocessing: (x - its mean) / its std
    assert "quick_gelu" in spec.settings["architecture"] and spec.resize_filter == "bilinear"
    assert spec.settings["preprocessing"] == ("short side to 224 (bilinear), centre 224x224; (RGB / 255 - mean 0.5, "
                                              "0.4, 0.3) / std 0.2, 0.3, 0.25")
    with clip.TextTower("clip", weights=str(folder / "open_clip_model.safetensors")) as tower:
        assert_parity(tower.embed(token_ids((3, 10, 40, 75))), expected["text"])


def test_a_preset_given_a_folder_of_another_size_names_the_field(references):
    folder, _ = references["h14"]
    with pytest.raises(ConfigError, match=r"config.json: its patch_size is 14, where clip_vit_b32 has 32: pass "
                                          r"--model clip to read the size from the config"):
        clip.VIT_B32.feature_model(weights=str(folder))
    quick, _ = references["quick_b32"]
    with pytest.raises(ConfigError, match=r"open_clip_config.json: its vision is \(width 768, depth 2, heads 12, "
                                          r"mlp_width 3072, activation quick_gelu"):
        clip.VIT_B32.feature_model(weights=str(quick))


# ----------------------------------------------------------------------------- the configs

def test_open_clip_s_own_configs_are_read_or_refused_in_one_line_naming_the_field(tmp_path):
    """Every model config open_clip ships: its plain ViT CLIPs read at their sizes, the others (timm, ResNet, Hugging
    Face text towers, other tokenizers, CLIPA, CoCa, LayerScale) refused naming the field."""
    read, refused = {}, {}
    for path in sorted(__import__("pathlib").Path(OPEN_CLIP_CONFIGS).glob("*.json")):
        config = tmp_path / ("%s.json" % path.stem)
        config.write_text(json.dumps({"model_cfg": json.loads(path.read_text())}))
        try:
            read[path.stem] = clip_config.read_open_clip_config(config)
        except ConfigError as error:
            refused[path.stem] = str(error)
    assert read["ViT-B-32"] == clip_layers.Config(
        "clip", "", 32, TransformerConfig(768, 12, 12, 3072, "gelu", epsilon=1e-5),
        TransformerConfig(512, 12, 8, 2048, "gelu", epsilon=1e-5), projection=512)
    assert read["ViT-B-32-quickgelu"].vision.activation == read["ViT-B-32-quickgelu"].text.activation == "quick_gelu"
    h14, big_g = read["ViT-H-14"], read["ViT-bigG-14"]
    assert (h14.vision.heads, h14.vision.mlp_width, h14.text.width, h14.projection) == (16, 5120, 1024, 1024)
    assert (big_g.vision.width, big_g.vision.heads, big_g.vision.mlp_width, big_g.vision.depth) == (1664, 16, 8192, 48)
    assert read["ViT-L-14-336"].image_size == 336 and read["ViT-L-14"].vision.activation == "gelu"
    assert len(read) >= 30 and len(refused) >= 90
    for name, message in refused.items():
        assert "\n" not in message and message.startswith(str(tmp_path / name) + ".json: model_cfg."), message
    assert refused["RN50"].endswith("vision_cfg.layers=[3, 4, 6, 3]: a ResNet image tower, which clip does not run "
                                    "(it runs ViTs)")
    assert "vision_cfg.timm_model_name=" in refused["ViT-B-16-SigLIP"] and "a timm image tower" in refused["EVA02-B-16"]
    assert refused["xlm-roberta-base-ViT-B-32"].endswith('text_cfg.hf_model_name="xlm-roberta-base": a Hugging Face '
                                                         'text tower, which clip lacks (it runs CLIP\'s own)')
    assert refused["ViT-H-14-worldwide"].endswith('text_cfg.hf_tokenizer_name="facebook/xlm-v-base": a tokenizer clip '
                                                  'does not read (it reads CLIP\'s BPE: vocab.json and merges.txt)')
    assert "vision_cfg.ls_init_value=0.0001: LayerScale" in refused["ViT-M-16-alt"]
    assert "vision_cfg.no_ln_pre=true" in refused["ViT-H-14-CLIPA"] and "model_cfg.multimodal_cfg=" in refused[
        "coca_ViT-B-32"]


def test_open_clip_s_preprocessing_is_read_or_refused(tmp_path):
    def read(preprocess):
        path = tmp_path / "open_clip_config.json"
        path.write_text(json.dumps(open_clip_config("ViT-B-32", preprocess)))
        return clip_config.read_open_clip_config(path)

    assert read({}).preprocessing == clip_layers.VIT_B32.preprocessing  # OpenAI's mean and std, bicubic
    for preprocess, message in (({"resize_mode": "squash"}, 'preprocess_cfg.resize_mode="squash": clip resizes the '
                                                            'short side'),
                                ({"mean": [0.5, 0.5]}, r"preprocess_cfg.mean=\[0.5, 0.5\]: expected three numbers"),
                                ({"std": [0.5, 0, 0.5]}, r"preprocess_cfg.std=\[0.5, 0, 0.5\]: expected three"),
                                ({"interpolation": "lanczos"},
                                 'preprocess_cfg.interpolation="lanczos": clip\'s reader'),
                                ({"size": 256}, r"preprocess_cfg.size=256: not the image tower's image_size \(224\)")):
        with pytest.raises(ConfigError, match=message):
            read(preprocess)


def test_hugging_face_s_config_with_transformers_defaults_and_its_older_dicts(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "clip", "text_config": {}, "vision_config": {"patch_size": 16}}))
    assert clip_config.read_hf_config(path, "clip_vit_b16", "openai/clip-vit-base-patch16") == clip_layers.VIT_B16
    # Older conversions keep the towers in *_config_dict, which transformers reads over the others.
    path.write_text(json.dumps({"model_type": "clip", "projection_dim": 768, "text_config": {"hidden_size": 1},
                                "text_config_dict": {"hidden_size": 768, "num_attention_heads": 12,
                                                     "intermediate_size": 3072, "eos_token_id": 2},
                                "vision_config_dict": {"hidden_size": 1024, "num_attention_heads": 16,
                                                       "num_hidden_layers": 24, "intermediate_size": 4096,
                                                       "patch_size": 14, "image_size": 336}}))
    assert clip_config.read_hf_config(path, "clip_vit_l14_336", "openai/clip-vit-large-patch14-336") == (
        clip_layers.VIT_L14_336)
    for preset in clip_layers.CONFIGS.values():  # what the random command writes is read back as the preset
        path.write_text(json.dumps(clip_config.hf_config(preset)))
        assert clip_config.read_hf_config(path, preset.name, preset.hub_repo) == preset
    for values, message in (({"model_type": "siglip"}, 'model_type="siglip": not a CLIP checkpoint\'s config'),
                            ({"vision_config": {"hidden_act": "gelu_fast"}},
                             'vision_config.hidden_act="gelu_fast": an activation clip does not run'),
                            ({"text_config": {"eos_token_id": 7}}, "text_config.eos_token_id=7: clip pools the end "
                                                                   "token as the ids' argmax"),
                            ({"vision_config": {"num_channels": 1}}, "vision_config.num_channels=1: clip runs RGB")):
        path.write_text(json.dumps(dict({"model_type": "clip"}, **values)))
        with pytest.raises(ConfigError, match=message):
            clip_config.read_hf_config(path)


def test_the_depth_and_the_image_size_are_the_config_s(tmp_path, graph):
    """The number of blocks is the config's, in both towers (a loop the code runs as often as it says), and so is
    the image size: the reader's resize and the graph's input."""
    model = clip_layers.Config("clip", "", 14, TransformerConfig(64, 3, 4, 128, "gelu", epsilon=1e-5),
                               TransformerConfig(32, 5, 2, 64, "gelu", epsilon=1e-5), projection=16, image_size=336,
                               vocabulary_size=VOCABULARY)
    clip_weights.write_checkpoint(clip_weights.random_weights(model), tmp_path / "model.safetensors", model=model)
    clip_weights.write_hf_config(tmp_path, model)
    spec = registry.feature_model("clip", weights=str(tmp_path))
    assert (spec.image_size, spec.resize_short_side, spec.name) == ((336, 336), 336, "clip")
    assert spec.settings["preprocessing"].startswith("short side to 336 (bicubic), centre 336x336")
    spec.fn(tf1.placeholder(tf.uint8, [None, 336, 336, 3]))
    with tf1.variable_scope("text_tower"):
        clip.text_tower(tf1.placeholder(tf.int32, [None, 77]), model)
    def blocks(prefix):
        return sorted({name.split("/")[len(prefix.split("/")) - 1] for name in
                       (variable.op.name for variable in tf1.global_variables()) if name.startswith(prefix)})

    assert blocks("clip/vision/block_") == ["block_0", "block_1", "block_2"]
    assert blocks("text_tower/clip/text/block_") == ["block_%d" % index for index in range(5)]
    assert sorted(spec.load_weights()) == sorted(variable.op.name for variable in tf1.global_variables()
                                                 if variable.op.name.startswith("clip/vision/"))


def test_the_family_needs_a_config_beside_its_weights(tmp_path):
    model = clip_layers.VIT_B32
    folder = tmp_path / "no-config"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"not read")
    with pytest.raises(WeightsError, match=r"no-config/model.safetensors: no config.json beside it: --model clip reads "
                                           r"the size from the checkpoint's config"):
        registry.feature_model("clip", weights=str(folder))
    with pytest.raises(WeightsError, match="weights=imagenet: --model clip reads its size from the checkpoint's"):
        registry.feature_model("clip")
    with pytest.raises(WeightsError, match="weights=imagenet: no commit of clip_vit_l14 is pinned here; pass "
                                           "hf://openai/clip-vit-large-patch14@COMMIT, or a downloaded folder"):
        registry.feature_model("clip_vit_l14")
    assert registry.feature_model("clip_vit_b32", weights=str(folder)).name == model.name  # a preset: its own size


def test_open_clip_s_files_beside_timm_s_are_the_ones_read(tmp_path):
    """timm's repositories of CLIP weights (timm/vit_large_patch14_clip_224.openai, ...) hold timm's own
    model.safetensors and config.json beside open_clip's open_clip_model.safetensors and open_clip_config.json:
    the family reads open_clip's; a config.json that is not CLIP's is refused when it is the one read."""
    model = clip_layers.Config("clip", "", 32, TransformerConfig(64, 2, 4, 128, "gelu", epsilon=1e-5),
                               TransformerConfig(32, 2, 2, 64, "gelu", epsilon=1e-5), projection=16)
    clip_weights.write_checkpoint(clip_weights.random_weights(model), tmp_path / "open_clip_model.safetensors",
                                  layout="open_clip", model=model)
    (tmp_path / "open_clip_config.json").write_text(json.dumps({"model_cfg": {
        "embed_dim": 16, "vision_cfg": {"image_size": 224, "layers": 2, "width": 64, "head_width": 16, "mlp_ratio": 2,
                                        "patch_size": 32},
        "text_cfg": {"width": 32, "heads": 2, "layers": 2, "mlp_ratio": 2}}}))
    (tmp_path / "model.safetensors").write_bytes(b"timm's vision tower")
    (tmp_path / "config.json").write_text(json.dumps({"architecture": "vit_base_patch32_clip_224", "num_classes": 512}))
    spec = registry.feature_model("clip", weights=str(tmp_path))
    assert spec.files == (str(tmp_path / "open_clip_model.safetensors"),) and spec.settings["weights"].startswith(
        "open_clip_model.safetensors (")
    with pytest.raises(ConfigError, match="config.json: model_type=absent: not a CLIP checkpoint's config"):
        registry.feature_model("clip", weights=str(tmp_path / "model.safetensors"))


def test_the_command_line_refuses_a_config_it_cannot_run_in_one_line_naming_the_field(tmp_path, capsys):
    import run_inference
    with open("%s/ViT-B-16-SigLIP.json" % OPEN_CLIP_CONFIGS) as file:  # open_clip's own, as a hub folder has it
        (tmp_path / "open_clip_config.json").write_text(json.dumps({"model_cfg": json.load(file)}))
    (tmp_path / "open_clip_model.safetensors").write_bytes(b"never read")
    (tmp_path / "images").mkdir()
    assert run_inference.main(["--model", "clip", "--weights", str(tmp_path), "--images", str(tmp_path / "images"),
                               "--output", str(tmp_path / "out.npy")]) == 2
    error = capsys.readouterr().err
    assert error == ('run_inference: error: %s/open_clip_config.json: model_cfg.vision_cfg.timm_model_name='
                     '"vit_base_patch16_siglip_224": a timm image tower, which clip lacks (it runs open_clip\'s own '
                     'ViT)\n' % tmp_path)
    assert not (tmp_path / "out.npy").exists()
