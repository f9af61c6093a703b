"""DINOv2: the graph against keras-hub's DINOV2Backbone on the same safetensors file, the position embeddings'
interpolation on its own, the endpoints, the real sizes' parameters, the engine's devices, precision and static
ranks, the settings and the reader's preprocessing."""

import dataclasses
import json

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import run_inference
from models import registry
from models.dinov2 import dinov2, dinov2_config, dinov2_layers, dinov2_weights
from models.dinov2.dinov2_layers import VITB14, VITS14, Variant
from models.vit.vit_layers import TransformerConfig
from outputs import job_outputs
from parallel import engine
from parallel.devices import resolve_devices
from partition_graphs import CrossingRecorder

tf1 = tf.compat.v1
TOLERANCE = 1e-5  # of the largest reference value
# Where the real size is not needed (devices, precision): 2 blocks of 64 channels, the real patches and positions.
SMALL = Variant("dinov2_small", "DINOv2 test size", TransformerConfig(64, 2, 4, 256, layer_scale=True),
                VITS14.repo, VITS14.revision, VITS14.sha256, VITS14.file_size, 0)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """Seeded random ViT-S/14 weights in Hugging Face's layout: a folder with model.safetensors and config.json
    (what keras-hub's converter reads)."""
    folder = tmp_path_factory.mktemp("dinov2-small")
    dinov2_weights.write_random(folder / "model.safetensors", VITS14, seed=0)
    config = {"model_type": "dinov2", "image_size": 518, "patch_size": 14, "num_hidden_layers": 12,
              "hidden_size": 384, "num_attention_heads": 6, "mlp_ratio": 4, "layerscale_value": 1.0,
              "use_swiglu_ffn": False, "hidden_dropout_prob": 0.0, "drop_path_rate": 0.0, "layer_norm_eps": 1e-6}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(scope="module")
def keras_hub_model(checkpoint):
    """keras-hub's DINOV2Backbone for 224 px images, loaded from the file by keras-hub's own converter, and the
    position embeddings keras-hub interpolated itself."""
    from keras_hub.src.models.dinov2.dinov2_backbone import DINOV2Backbone
    from keras_hub.src.utils.transformers import convert_dinov2
    from keras_hub.src.utils.transformers.safetensor_utils import SafetensorLoader

    config = json.loads((checkpoint / "config.json").read_text())
    arguments = convert_dinov2.convert_backbone_config(config)
    arguments.update(image_shape=(224, 224, 3))  # position embeddings stay at 518 px: interpolated to 224
    backbone = DINOV2Backbone(**arguments)
    with SafetensorLoader(str(checkpoint)) as loader:
        convert_dinov2.convert_weights(backbone, loader, config)
    return backbone, np.array(backbone.embeddings.interpolated_position_embeddings.numpy()[0])


@pytest.fixture(scope="module")
def compared(photographs):
    """The photographs the parity with keras-hub is checked on: two, one pair for the spread guard (the parity is
    row by row; each row costs both models' 12 blocks)."""
    return photographs[:2]


@pytest.fixture(scope="module")
def reference(keras_hub_model, checkpoint, compared):
    """keras-hub's outputs on the compared photographs with OUR interpolated position embeddings (PyTorch's bicubic,
    as Hugging Face's Dinov2Model computes them; keras-hub's TensorFlow bicubic differs, see
    test_the_interpolation_is_keras_hub_s_with_its_kernel): the sequence after the final LayerNorm."""
    backbone, _ = keras_hub_model
    ours = dinov2_weights.load_weights(checkpoint, VITS14)["dinov2_vits14/position_embedding"]
    backbone.embeddings.interpolated_position_embeddings.assign(ours[None])
    pixels = (compared / np.float32(255) - np.array(dinov2.RGB_MEAN, np.float32)) / np.array(dinov2.RGB_STD,
                                                                                              np.float32)
    sequence = backbone.predict(pixels.astype(np.float32), verbose=0)
    return {"class_token": sequence[:, 0],
            "class_and_patch_mean": np.concatenate([sequence[:, 0], sequence[:, 1:].mean(1)], axis=1)}


def run_model(path, images, endpoint="class_token", precision="fp32", num_devices=1, variant=VITS14):
    """Features through the engine's DeviceRunner on `num_devices` logical CPU devices, 2 images per device."""
    spec = dinov2.feature_model(variant, endpoint, str(path), precision)
    devices = resolve_devices(devices=",".join("cpu:%d" % i for i in range(num_devices)), gpu_count=0)
    with engine.DeviceRunner(spec, devices, per_device_batch=2) as runner:
        return runner.run(images)


@pytest.fixture(scope="module")
def small(tmp_path_factory, photographs):
    """Random weights of the small test size, and its class tokens on one device."""
    path = tmp_path_factory.mktemp("dinov2-test-size") / "model.safetensors"
    dinov2_weights.write_random(path, SMALL, seed=1)
    return path, run_model(path, photographs, variant=SMALL)


def relative_difference(ours, reference):
    return np.abs(ours - reference).max() / np.abs(reference).max()


# ----------------------------------------------------------------------------- parity with keras-hub

def test_each_endpoint_equals_keras_hub_on_the_photographs(checkpoint, compared, reference):
    """class_and_patch_mean is class_token's features, then the patch mean: one run checks both (the class_token
    endpoint's own output runs in the tests of devices and of the command line)."""
    ours = run_model(checkpoint, compared, "class_and_patch_mean")
    width = dinov2_layers.feature_size(VITS14, "class_token")
    assert ours.shape == (len(compared), dinov2_layers.feature_size(VITS14, "class_and_patch_mean")) == (
        len(compared), 2 * width)
    for endpoint, features in (("class_token", ours[:, :width]), ("class_and_patch_mean", ours)):
        expected = reference[endpoint]
        assert features.shape == expected.shape
        assert relative_difference(features, expected) <= TOLERANCE
        # Random weights could make this pass for nothing: the photographs' features differ far beyond the tolerance.
        scale = np.abs(expected).max()
        spread = min(np.abs(expected[i] - expected[j]).max() for i in range(len(expected))
                     for j in range(i + 1, len(expected)))
        assert spread >= 100 * TOLERANCE * scale, (spread, scale)


def test_the_interpolation_is_keras_hub_s_with_its_kernel(keras_hub_model, checkpoint):
    """The step on its own: the 37 x 37 grid resized to 16 x 16 as keras-hub does on TensorFlow (method
    "keras_hub"); PyTorch's kernel (what Hugging Face's Dinov2Model and the default use) differs from it."""
    _, theirs = keras_hub_model
    table = dinov2_weights.read_tensors(checkpoint / "model.safetensors")["embeddings.position_embeddings"][0]
    keras_hub = dinov2_weights.interpolate_positions(table, 16, "keras_hub")
    assert keras_hub.shape == theirs.shape == (257, 384)
    np.testing.assert_array_equal(keras_hub[0], table[0])  # the class token's is not resized
    assert relative_difference(keras_hub, theirs) <= 1e-6
    torch = dinov2_weights.interpolate_positions(table, 16, "torch")
    assert relative_difference(torch, theirs) > 1e-2  # a = -0.75, clamped: another resize


# ----------------------------------------------------------------------------- the graph and its files

REAL_SIZES = ((VITS14, 384), (VITB14, 768), (dinov2_layers.VITL14, 1024), (dinov2_layers.VITG14_REG, 1536))


def test_the_real_sizes_tables_have_their_published_parameters():
    """Hugging Face's counts of its Dinov2Model (S/14, B/14 as published; L/14) and Dinov2WithRegistersModel (g/14,
    SwiGLU and 4 registers), counted by transformers 5.24 for the hub's configs: the table has every array, and
    the graph's variables (the table's, at 224 px: next test) hold them but the mask token, positions at 16 x 16."""
    for variant, width in REAL_SIZES:
        assert dinov2_layers.checkpoint_parameters(variant) + width == variant.parameter_count  # + the mask token
        assert sum(int(np.prod(shape)) for _, shape in dinov2_layers.variables(variant)) == (
            variant.parameter_count - width - 37 * 37 * width + 16 * 16 * width)


@pytest.mark.parametrize("variant, width, depth", [REAL_SIZES[0] + (12,), REAL_SIZES[-1] + (2,)])
def test_the_real_sizes_have_their_published_parameters_and_no_weight_is_a_constant(graph, variant, width, depth):
    """The graph of S/14 at its real depth, and of g/14 (the code of registers and SwiGLU; B/14's and L/14's are
    S/14's code with other numbers) at its real widths and 2 of its 40 blocks (the blocks are a loop S/14 runs as
    many times as its config says; the previous test pins g/14's table at 40), built, never run: its variables are
    the table's, every one of them."""
    published, variant = variant, dataclasses.replace(variant, transformer=dataclasses.replace(variant.transformer,
                                                                                               depth=depth))
    output = dinov2.dinov2(tf1.placeholder(tf.uint8, [None, 224, 224, 3]), variant, "class_and_patch_mean")
    assert output.shape.as_list() == [None, 2 * width] and output.dtype == tf.float32
    variables = tf1.global_variables()
    table = dinov2_layers.variables(variant)
    assert [(v.op.name, tuple(v.shape.as_list())) for v in variables] == [
        (variant.name + "/" + name, shape) for name, shape in table]
    assert sum(v.shape.num_elements() for v in variables) == sum(int(np.prod(shape)) for _, shape in table)
    if variant == published:  # S/14 whole: its published count
        assert sum(v.shape.num_elements() for v in variables) == (
            variant.parameter_count - width - 37 * 37 * width + 16 * 16 * width)
    # Its ops only, about 40 KB a block and as much around them: the weights (88 MB for S/14; for g/14, 4.5 GB,
    # 9.4 MB for one of its 1536 x 1536 matrices) are nowhere in it.
    assert graph.as_graph_def().ByteSize() < 50_000 * (variant.transformer.depth + 1)


def test_bad_arguments_are_refused_naming_the_value(graph, tmp_path):
    from models.files import WeightsError

    with pytest.raises(WeightsError, match="is a folder without model.safetensors"):
        dinov2.feature_model(VITS14, weights=str(tmp_path))
    with pytest.raises(WeightsError, match="nowhere.safetensors is not a file"):
        dinov2.feature_model(VITS14, weights="nowhere.safetensors")
    with pytest.raises(ValueError, match="layer='fc7'"):
        dinov2.feature_model(VITS14, "fc7")
    with pytest.raises(ValueError, match="precision='fp8'"):
        dinov2.feature_model(VITS14, precision="fp8")
    with pytest.raises(ValueError, match=r"images must be \[N, 224, 224, 3\]"):
        dinov2.dinov2(tf1.placeholder(tf.uint8, [None, 518, 518, 3]), VITS14)


def test_settings_name_the_checkpoint_and_the_reader_s_preprocessing(checkpoint):
    pinned = registry.feature_model("dinov2_vits14")
    assert pinned.settings["weights"] == ("hub facebook/dinov2-small@ed25f3a31f01632728cabb09d1542f84ab7b0056 "
                                          "model.safetensors, sha256 " + VITS14.sha256)
    assert registry.feature_model("dinov2_vits14", weights="hub").settings == pinned.settings
    assert (pinned.resize_filter, pinned.resize_short_side, pinned.image_size) == ("bicubic", 256, (224, 224))
    assert "short side to 256 (bicubic)" in pinned.settings["preprocessing"]
    from_folder = registry.feature_model("dinov2_vits14", "class_and_patch_mean", str(checkpoint), "bf16")
    assert from_folder.files == (str(checkpoint / "model.safetensors"),)
    assert from_folder.settings["layer"] == "class_and_patch_mean" and from_folder.settings["precision"] == "bf16"
    assert "model.safetensors (" in from_folder.settings["weights"]
    assert registry.feature_model("dinov2_vitb14").settings["weights"].endswith(VITB14.sha256)


def test_a_hub_checkpoint_at_a_commit_is_read_and_checked_to_be_a_dinov2(fake_hub, tmp_path):
    pinned = "hf://%s@%s" % (VITS14.repo, VITS14.revision)  # imagenet's commit, by its hf:// name: the same weights
    assert registry.feature_model("dinov2_vits14", weights=pinned).settings == registry.feature_model(
        "dinov2_vits14").settings
    commit = "0123456789abcdef0123456789abcdef01234567"
    path = tmp_path / "model.safetensors"
    dinov2_weights.write_random(path, SMALL, seed=1)
    fake_hub.add("owner/dino", commit, "model.safetensors", path.read_bytes())
    fake_hub.add("owner/dino", commit, "config.json", json.dumps(dinov2_config.hf_config(SMALL)).encode(), lfs=False)
    spec = dinov2.feature_model(SMALL, weights="hf://owner/dino@" + commit)
    assert spec.settings["weights"] == ("hub owner/dino@%s model.safetensors, sha256 from the hub's X-Linked-Etag"
                                        % commit) and spec.files == () and fake_hub.requests == []
    loaded, expected = spec.load_weights(), dinov2_weights.load_weights(path, SMALL)
    assert loaded.keys() == expected.keys() and all(np.array_equal(loaded[name], expected[name]) for name in loaded)
    fake_hub.add("owner/clip", commit, "model.safetensors", path.read_bytes())
    fake_hub.add("owner/clip", commit, "config.json", json.dumps({"model_type": "clip"}).encode(), lfs=False)
    from models.files import WeightsError
    with pytest.raises(WeightsError, match=r"weights=hf://owner/clip@%s is a clip checkpoint \(its config's "
                                           r"model_type\), not a dinov2 one: pass --model clip, which reads its size "
                                           r"from the config" % commit):
        dinov2.feature_model(SMALL, weights="hf://owner/clip@" + commit).load_weights()
    with pytest.raises(WeightsError, match="weights=hf://owner/dino@main: 'main' is a branch or a tag"):
        dinov2.feature_model(SMALL, weights="hf://owner/dino@main")


# ----------------------------------------------------------------------------- devices, precision, ranks

def test_three_devices_give_one_device_s_features_and_no_weight_crosses_devices(small, photographs):
    path, one = small
    spec = dinov2.feature_model(SMALL, weights=str(path))
    with engine.DeviceRunner(spec, resolve_devices(devices="cpu:0,cpu:1,cpu:2", gpu_count=0), 2) as runner:
        recorder = runner.session.run = CrossingRecorder(runner.session)
        three = runner.run(photographs)
    assert one.shape == (len(photographs), SMALL.width)  # the class_token endpoint, the default
    assert relative_difference(three, one) <= TOLERANCE
    allowed = {placeholder.op.name for placeholder in runner.placeholders} | {out.op.name for out in runner.outputs}
    assert recorder.sources, "three devices must at least exchange their inputs and outputs"
    assert recorder.sources <= allowed, "crossed between devices: %s" % sorted(recorder.sources - allowed)


def make_images(folder, count=4):
    rng = np.random.default_rng(1)
    folder.mkdir()
    for index in range(count):
        image = np.clip(rng.normal(128, 60, (40 + index, 50, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(image).save(folder / ("%d.png" % index))
    return folder


def cli(images, output, weights, *flags):
    status = run_inference.main([str(flag) for flag in ("--images", images, "--output", output, "--model",
                                                        "dinov2_vits14", "--weights", weights, "--devices", "cpu:0",
                                                        "--batch-size", "2", "--quiet", *flags)])
    assert status == 0


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precisions_stay_close_to_fp32(small, photographs, precision):
    path, reference = small
    reduced = run_model(path, photographs, precision=precision, variant=SMALL)
    cosine = (reference * reduced).sum(1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(reduced, axis=1)
    assert cosine.min() >= 0.999, cosine  # VGG16's documented bound (docs/gpus.md)
    assert not np.array_equal(reference, reduced)  # it really computed in reduced precision


def test_cli_one_and_three_static_ranks_give_the_same_bytes(small, tmp_path, monkeypatch):
    """`--model dinov2_vits14` being the small test size here (the ranks' bytes do not depend on the size; S/14's
    graph is the parity test's), three images in shards of one: a shard for each of the three ranks."""
    monkeypatch.setattr(dinov2.VITS14, "variant", SMALL)
    path, _ = small
    images = make_images(tmp_path / "images", count=3)
    single = tmp_path / "one" / "features.npy"
    cli(images, single, path, "--distributed", "static", "--rank", "0", "--world-size", "1", "--shard-size", "1")
    three = tmp_path / "three" / "features.npy"
    for rank in range(3):
        cli(images, three, path, "--distributed", "static", "--rank", rank, "--world-size", "3", "--shard-size", "1")
    assert job_outputs(three) == job_outputs(single) and np.load(single).shape == (3, SMALL.width)
