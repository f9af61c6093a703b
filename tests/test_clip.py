"""CLIP's towers: the graph against keras-hub's CLIPBackbone on the same weights, the text tower, the weights
argument, the engine's devices, precision and static ranks."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import run_inference
from models.clip import clip, clip_layers, clip_weights
from models.clip.clip_tokenizer import Tokenizer
from models.files import WeightsError
from models.vit.vit_layers import TransformerConfig
from outputs import job_outputs
from parallel import engine
from parallel.devices import resolve_devices
from keras_hub_clip import keras_hub_clip
from partition_graphs import CrossingRecorder
import small_clip

tf1 = tf.compat.v1
TOLERANCE = 1e-5  # of the largest reference value

# A CLIP of the real layout, small enough for keras-hub's reference to be built in a second: the parity of the
# real sizes is the same code with other numbers (its graph is built in test_the_graph_...; tests/test_clip_config.py
# compares L/14's and H/14's widths with transformers' and open_clip's own code). With OpenAI's QuickGELU, and
# with the exact GELU of LAION's checkpoints (GELU_SMALL).
SMALL = clip_layers.Config(
    "clip_small", "test/clip-small", patch_size=32,
    vision=TransformerConfig(64, 2, 4, 128, activation="quick_gelu", epsilon=clip_layers.LAYER_NORM_EPSILON),
    text=TransformerConfig(32, 2, 2, 64, activation="quick_gelu", epsilon=clip_layers.LAYER_NORM_EPSILON),
    projection=16)
GELU_SMALL = dataclasses.replace(SMALL, vision=dataclasses.replace(SMALL.vision, activation="gelu"),
                                 text=dataclasses.replace(SMALL.text, activation="gelu"))


def token_ids(lengths, seed=1, vocabulary=clip_layers.END_OF_TEXT + 1):
    """int32 [len(lengths), 77]: the start token, `length` random ids below it, the end token, zeros; the start
    and end tokens are the vocabulary's last two ids, as in CLIP's."""
    start, end = vocabulary - 2, vocabulary - 1
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), clip_layers.CONTEXT_LENGTH), np.int32)
    for row, length in enumerate(lengths):
        ids[row, 0] = start
        ids[row, 1:length + 1] = rng.integers(1, start, length)
        ids[row, length + 1] = end
    return ids


# ----------------------------------------------------------------------------- keras-hub's reference

def unit(rows):
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def reference_images(backbone, images):
    """keras-hub's {endpoint: features} of uint8 images, normalised as its CLIPImageConverter does."""
    pixels = (images.astype(np.float32) / 255 - np.float32(clip.RGB_MEAN)) / np.float32(clip.RGB_STD)
    pooled = np.asarray(backbone.vision_pooler(backbone.vision_encoder({"images": pixels})))
    return {"pooled": pooled, "embedding": unit(np.asarray(backbone.vision_projection(pooled)))}


@pytest.fixture(scope="module")
def small_weights():
    return clip_weights.random_weights(SMALL, seed=0)


def keras_hub_outputs(model, weights, photographs):
    """keras-hub's image features of the photographs and text embeddings of four sequences (3 to 75 tokens)."""
    backbone = keras_hub_clip(model, weights)
    ids = token_ids((3, 10, 40, 75))
    outputs = reference_images(backbone, photographs)
    outputs["text"] = unit(np.asarray(backbone.get_text_embeddings(ids)))
    outputs["token_ids"] = ids
    return outputs


@pytest.fixture(scope="module")
def reference(small_weights, photographs):
    return keras_hub_outputs(SMALL, small_weights, photographs)


def run_graph(build, values, feed):
    """Builds `build(input)` in a graph of its own, loads `values` and runs it on `feed`."""
    with tf.Graph().as_default():
        inputs = tf1.placeholder(tf.as_dtype(feed.dtype), (None,) + feed.shape[1:])
        output = build(inputs)
        variables = {variable.op.name: variable for variable in tf1.global_variables()}
        assert sorted(variables) == sorted(values)
        with tf1.Session() as session:
            for name, variable in variables.items():
                variable.load(values[name], session)
            return session.run(output, {inputs: feed})


def assert_parity(ours, expected):
    """Within TOLERANCE of the largest reference value, and the rows differ far beyond it."""
    assert ours.shape == expected.shape
    scale = np.abs(expected).max()
    assert np.abs(ours - expected).max() <= TOLERANCE * scale
    # Random weights could make this pass for nothing: different inputs differ far beyond the tolerance.
    spread = min(np.abs(expected[i] - expected[j]).max() for i in range(len(expected))
                 for j in range(i + 1, len(expected)))
    assert spread >= 100 * TOLERANCE * scale, (spread, scale)


@pytest.mark.parametrize("endpoint", clip_layers.ENDPOINTS)
def test_the_image_tower_equals_keras_hub_s_at_each_endpoint(small_weights, reference, photographs, endpoint):
    values = clip.vision_variable_values(small_weights, SMALL, endpoint)
    ours = run_graph(lambda images: clip.image_tower(images, SMALL, endpoint), values, photographs)
    assert ours.shape == (5, SMALL.feature_size(endpoint))
    assert_parity(ours, reference[endpoint])


def test_the_text_tower_equals_keras_hub_s(small_weights, reference):
    ours = run_graph(lambda ids: clip.text_tower(ids, SMALL), clip.text_variable_values(small_weights, SMALL),
                     reference["token_ids"])
    assert_parity(ours, reference["text"])
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1, rtol=1e-6)


def test_both_towers_with_the_exact_gelu_equal_keras_hub_s(small_weights, photographs):
    """LAION's checkpoints' activation: the same weights, GELU in both towers' MLPs (keras-hub's CLIPBackbone built
    with "gelu"), features different from QuickGELU's."""
    expected = keras_hub_outputs(GELU_SMALL, small_weights, photographs)
    values = clip.vision_variable_values(small_weights, GELU_SMALL, "embedding")
    ours = run_graph(lambda images: clip.image_tower(images, GELU_SMALL, "embedding"), values, photographs)
    assert_parity(ours, expected["embedding"])
    text = run_graph(lambda ids: clip.text_tower(ids, GELU_SMALL), clip.text_variable_values(small_weights, GELU_SMALL),
                     expected["token_ids"])
    assert_parity(text, expected["text"])
    quick = run_graph(lambda images: clip.image_tower(images, SMALL, "embedding"), values, photographs)
    assert np.abs(quick - ours).max() > 100 * TOLERANCE  # the activation matters: QuickGELU is not GELU


def test_the_text_tower_pools_the_end_token_and_sees_nothing_after_it(small_weights):
    """The causal mask: what follows the end token (here, other ids in place of the padding) changes nothing."""
    ids = token_ids((5, 5))
    ids[1] = ids[0]
    ids[1, 7:] = np.arange(1, 71)  # after the end token at position 6
    values = clip.text_variable_values(small_weights, SMALL)
    first, second = run_graph(lambda inputs: clip.text_tower(inputs, SMALL), values, ids)
    np.testing.assert_allclose(first, second, atol=1e-6)
    moved = ids.copy()
    moved[1, 3] += 1  # before it: a different sentence
    assert np.abs(np.subtract(*run_graph(lambda inputs: clip.text_tower(inputs, SMALL), values, moved))).max() > 1e-3
    # So the tower on the first 16 positions gives what it gives on all 77 (TextTower's shorter lengths).
    cropped = run_graph(lambda inputs: clip.text_tower(inputs, SMALL), values, ids[:, :16])
    np.testing.assert_allclose(cropped, np.stack([first, second]), atol=1e-6)


def test_preprocessing_is_openai_s_mean_and_std(graph):
    pixels = np.array([[[[0, 128, 255]]]], np.uint8)
    with tf1.Session(graph=graph) as session:
        ours = session.run(clip.preprocess(tf.constant(pixels)))
    expected = (np.array([0, 128, 255]) / 255 - np.array(clip.RGB_MEAN)) / np.array(clip.RGB_STD)
    np.testing.assert_allclose(ours.ravel(), expected, rtol=1e-6)


# ----------------------------------------------------------------------------- through the engine

@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Seeded random weights in Hugging Face's layout, with the tests' tokenizer files, of a small CLIP that is
    ViT-B/32 for this module: the engine, the command line and the text tower run the code of the real sizes
    with other numbers (whose graph test_the_graph_... builds; test_clip_weights.py pins their file) in a
    fraction of the time that writing and loading 605 MB take."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(clip_layers.CONFIGS, "clip_vit_b32", small_clip.SMALL)
        patch.setattr(clip.VIT_B32, "model", small_clip.SMALL)
        yield small_clip.write_small_clip(tmp_path_factory.mktemp("clip") / "clip-random")


EMBEDDING = small_clip.SMALL.projection  # the small CLIP's embedding size (ViT-B/32's: 512)


def run_model(weights, images, endpoint="embedding", precision="fp32", devices="cpu:0"):
    """Features of the module's ViT-B/32 through the engine's DeviceRunner, 2 images per device."""
    spec = clip.VIT_B32.feature_model(endpoint, str(weights), precision)
    with engine.DeviceRunner(spec, resolve_devices(devices=devices, gpu_count=0), per_device_batch=2) as runner:
        return runner.run(images)


def test_the_graph_has_the_checkpoint_s_parameters_and_no_weight_is_a_constant(graph):
    """ViT-B/32's graph at its real widths and 2 of its 12 blocks a tower, built, never run: its variables are the
    table's, whose count at 12 blocks tests/test_clip_layers.py pins at the published one (the blocks are a loop the
    code runs as many times as the config says; ViT-B/16's is the same code with patches of 16)."""
    model = clip_layers.VIT_B32
    model = dataclasses.replace(model, vision=dataclasses.replace(model.vision, depth=2),
                                text=dataclasses.replace(model.text, depth=2))
    images = tf1.placeholder(tf.uint8, [None, 224, 224, 3])
    embedding = clip.image_tower(images, model, "embedding")
    text = clip.text_tower(tf1.placeholder(tf.int32, [None, 77]), model)
    assert embedding.shape.as_list() == text.shape.as_list() == [None, 512]
    parameters = sum(variable.shape.num_elements() for variable in tf1.global_variables())
    table = sum(int(np.prod(shape)) for _, shape in clip_layers.parameters(model))
    assert parameters == table - 1  # all but logit_scale, which neither uses
    # Its ops only: the weights (one 768 x 768 matrix is 2.4 MB; 605 MB at the real depth) are nowhere in it.
    assert graph.as_graph_def().ByteSize() < 1_000_000


def test_three_devices_give_one_device_s_features_and_no_weight_crosses_devices(folder, photographs):
    one = run_model(folder, photographs)
    spec = clip.VIT_B32.feature_model(weights=str(folder))
    with engine.DeviceRunner(spec, resolve_devices(devices="cpu:0,cpu:1,cpu:2", gpu_count=0), 2) as runner:
        recorder = runner.session.run = CrossingRecorder(runner.session)
        three = runner.run(photographs)
    assert one.shape == (5, EMBEDDING) and np.abs(three - one).max() <= TOLERANCE
    np.testing.assert_allclose(np.linalg.norm(one, axis=1), 1, rtol=1e-5)
    allowed = {placeholder.op.name for placeholder in runner.placeholders} | {out.op.name for out in runner.outputs}
    assert recorder.sources, "three devices must at least exchange their inputs and outputs"
    assert recorder.sources <= allowed, "crossed between devices: %s" % sorted(recorder.sources - allowed)


def make_images(folder, count=5):
    rng = np.random.default_rng(1)
    folder.mkdir()
    for index in range(count):
        image = np.clip(rng.normal(128, 60, (40 + 7 * index, 60, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(image).save(folder / ("%d.png" % index))
    return folder


def cli(images, output, weights, *flags):
    status = run_inference.main([str(flag) for flag in ("--images", images, "--output", output, "--model",
                                                        "clip_vit_b32", "--weights", weights, "--devices", "cpu:0",
                                                        "--batch-size", "2", "--quiet", *flags)])
    assert status == 0


def test_cli_one_and_three_static_ranks_give_the_same_bytes_and_bf16_stays_close(folder, tmp_path):
    images = make_images(tmp_path / "images")
    single = tmp_path / "one" / "features.npy"
    cli(images, single, folder, "--distributed", "static", "--rank", "0", "--world-size", "1", "--shard-size", "2")
    three = tmp_path / "three" / "features.npy"
    for rank in range(3):
        cli(images, three, folder, "--distributed", "static", "--rank", rank, "--world-size", "3",
            "--shard-size", "2")
    assert job_outputs(three) == job_outputs(single)
    reduced = tmp_path / "bf16" / "features.npy"
    cli(images, reduced, folder, "--precision", "bf16")
    reference, bf16 = np.load(single), np.load(reduced)
    assert reference.shape == bf16.shape == (5, EMBEDDING)
    cosine = (reference * bf16).sum(1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(bf16, axis=1)
    assert cosine.min() >= 0.999, cosine  # VGG16's documented bound (docs/gpus.md)
    assert not np.array_equal(reference, bf16)  # it really computed in bf16


def test_the_text_tower_reads_the_folder_and_its_tokenizer_files(folder):
    """Its graph is the one the parity test checks; here: its weights, the folder, the checks of the ids, bf16."""
    ids = token_ids((4, 12, 75), seed=2, vocabulary=small_clip.SMALL.vocabulary_size)
    with clip.TextTower("clip_vit_b32", weights=str(folder)) as tower:
        assert (tower.context_length, tower.tokenizer_folder) == (77, folder)
        assert tower.identity.startswith("model.safetensors (%d bytes" % (folder / "model.safetensors").stat().st_size)
        embeddings = tower.embed(ids)  # rows on the first 8, 16 and all 77 positions
        one_by_one = np.concatenate([tower.embed(ids[row:row + 1]) for row in range(3)])
        assert tower.embed(np.zeros((0, 77), np.int32)).shape == (0, EMBEDDING)
        with pytest.raises(ValueError, match=r"token_ids must be \[N, 77\]; got shape \(2, 76\)"):
            tower.embed(np.zeros((2, 76), np.int32))
        vocabulary = small_clip.SMALL.vocabulary_size
        with pytest.raises(ValueError, match="got %d .. %d" % (vocabulary, vocabulary)):
            tower.embed(np.full((1, 77), vocabulary))
    assert embeddings.shape == (3, EMBEDDING) and embeddings.dtype == np.float32
    np.testing.assert_allclose(one_by_one, embeddings, atol=1e-6)  # each row back in its place
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1, rtol=1e-5)
    assert min(np.abs(embeddings[i] - embeddings[j]).max() for i, j in ((0, 1), (0, 2), (1, 2))) > 1e-2
    with clip.TextTower("clip_vit_b32", weights=str(folder), precision="bf16") as tower:
        reduced = tower.embed(ids[:2])
    cosine = (reduced * embeddings[:2]).sum(1)
    assert cosine.min() >= 0.999 and not np.array_equal(reduced, embeddings[:2]), cosine


# ----------------------------------------------------------------------------- the weights argument

def test_settings_name_the_model_its_weights_and_preprocessing(folder):
    spec = clip.VIT_B32.feature_model("pooled", str(folder), "bf16")
    assert (spec.name, spec.output_name, spec.image_size, spec.resize_filter, spec.resize_short_side) == (
        "clip_vit_b32", "pooled", (224, 224), "bicubic", 224)
    assert spec.files == (str(folder / "model.safetensors"),)
    assert spec.settings["weights"].startswith("model.safetensors (%d bytes, sha256 of ends "
                                               % (folder / "model.safetensors").stat().st_size)
    assert spec.settings["model"] == "clip_vit_b32" and spec.settings["precision"] == "bf16"
    assert "bicubic" in spec.settings["preprocessing"] and "0.26862954" in spec.settings["preprocessing"]
    file = clip.VIT_B32.feature_model(weights=str(folder / "model.safetensors"))
    assert file.settings["weights"] == spec.settings["weights"] and file.output_name == "embedding"
    hub = clip.VIT_B32.feature_model()  # "imagenet": only named here, downloaded when the engine asks
    assert hub.settings["weights"] == ("hub openai/clip-vit-base-patch32@c237dc49a33fc61debc9276459120b7eac67e7ef "
                                       "model.safetensors, sha256 from the hub's X-Linked-Etag")
    assert hub.files == ()
    named = clip.VIT_B32.feature_model(weights="hf://openai/clip-vit-base-patch32@"
                                               "c237dc49a33fc61debc9276459120b7eac67e7ef")
    assert named.settings["weights"] == hub.settings["weights"]  # the same commit, by either name
    assert clip.VIT_B16.feature_model().settings["weights"] == (
        "hub openai/clip-vit-base-patch16@57c216476eefef5ab752ec549e440a49ae4ae5f3 model.safetensors, sha256 from "
        "the hub's X-Linked-Etag")  # the commit MTEB's table pins


def test_the_embedding_s_text_tower_is_the_host_tower_s_and_travels_to_a_ray_actor(folder):
    """ModelSpec.text: what the engine runs for captions and labels; a Ray actor receives it pickled (cloudpickle),
    its tokenizer read already or not. CLIP's pooled layer is not in the text tower's space: none."""
    import pickle
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    spec = clip.VIT_B32.feature_model("embedding", str(folder)).text
    assert clip.VIT_B32.feature_model("pooled", str(folder)).text is None
    assert (spec.context_length, spec.lengths, spec.probability) == (77, clip.TEXT_LENGTHS + (77,), None)
    sentences = ["a dog", "two cats on a red sofa in the sun, " * 3]
    with clip.TextTower("clip_vit_b32", weights=str(folder)) as tower:
        ids = Tokenizer.from_folder(tower.tokenizer_folder).encode(sentences)
    assert np.array_equal(spec.tokenize(sentences), ids) and spec.used_positions(ids).tolist() == [
        list(row).index(ids.max()) + 1 for row in ids]  # up to the end token, the largest id
    for sent in (clip.VIT_B32.feature_model("embedding", str(folder)).text, spec):  # a tokenizer unread, and read
        assert np.array_equal(pickle.loads(cloudpickle.dumps(sent)).tokenize(sentences), ids)


def test_bad_weights_and_arguments_are_one_line_naming_them(folder, tmp_path, graph):
    with pytest.raises(WeightsError, match="nowhere is neither a file nor a folder"):
        clip.VIT_B32.feature_model(weights="nowhere")
    with pytest.raises(WeightsError, match="is a folder without model.safetensors or open_clip_model.safetensors"):
        clip.VIT_B32.feature_model(weights=str(tmp_path))
    with pytest.raises(WeightsError, match=r"weights=hf://openai/clip-vit-base-patch16@main: 'main' is a branch or a "
                                           r"tag"):
        clip.VIT_B16.feature_model(weights="hf://openai/clip-vit-base-patch16@main")
    with pytest.raises(WeightsError, match=r"class_embedding has shape \(64,\); clip_vit_b16 needs \(768,\) \(a "
                                           r"checkpoint of another CLIP model\?\)"):
        clip.VIT_B16.feature_model(weights=str(folder)).load_weights()
    with pytest.raises(ValueError, match="layer='fc7'"):
        clip.VIT_B32.feature_model("fc7", str(folder))
    with pytest.raises(ValueError, match="precision='fp8'"):
        clip.VIT_B32.feature_model(weights=str(folder), precision="fp8")
    with pytest.raises(ValueError, match="model='clip_vit_h14'"):
        clip.TextTower("clip_vit_h14", weights=str(folder))
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "model.safetensors").symlink_to(folder / "model.safetensors")
    with pytest.raises(WeightsError, match="no tokenizer.json, nor vocab.json and merges.txt, beside it"):
        clip.TextTower("clip_vit_b32", weights=str(alone / "model.safetensors"))
    with pytest.raises(ValueError, match=r"images must be \[N, 224, 224, 3\]"):
        clip.image_tower(tf1.placeholder(tf.uint8, [None, 96, 96, 3]))
    with pytest.raises(ValueError, match="images must be uint8"):
        clip.image_tower(tf1.placeholder(tf.float32, [None, 224, 224, 3]))
