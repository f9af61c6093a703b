"""SigLIP's towers against transformers' SiglipModel (and SigLIP 2's Siglip2Model) and keras-hub's SigLIPBackbone on
the same weights, written offline in the publisher's layout; the engine's devices, precision and command line.

The references' checkpoints are written by transformers itself (`SiglipModel(config).save_pretrained`, seeded, in a
process of its own, the parity tests' one PyTorch child: tests/torch_references.py): the
base sizes' widths (768, 12 heads, MLP 3072, patch 16 at 224 px) with 2 blocks instead of 12, and So400m's (1152,
16 heads, MLP 4304, patch 14 at 384 px: a 27 x 27 grid, the last 6 pixels left out) with 2 blocks instead of 27,
so that the whole file takes seconds; a vocabulary of 2,000 tokens. The code of every size is the same, with other
numbers (tests/test_siglip_layers.py pins the published sizes' parameter counts).
"""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import run_inference
from models.files import WeightsError
from models.siglip import siglip, siglip_layers, siglip_weights
from parallel import engine
from parallel.devices import resolve_devices
from parallel.output import read_record
from partition_graphs import CrossingRecorder
from siglip_files import VOCABULARY, write_small
from torch_references import assert_parity, run_references

tf1 = tf.compat.v1
TOLERANCE = 1e-5  # of the largest reference value

BASE = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=2, num_attention_heads=12)
SO400M = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=2, num_attention_heads=16)


def references(requests, seed=0):
    """transformers' SiglipModels saved with save_pretrained, and their features, computed in the one PyTorch child
    of the parity tests (tests/torch_references.py): for each (folder, vision sizes, text sizes, images, ids,
    siglip2) {"pooled", "text"} (and, with siglip2, Siglip2Model's on the same weights: {"siglip2_pooled",
    "siglip2_text"})."""
    jobs = []
    for folder, vision, text, images, ids, siglip2 in requests:
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        np.save(folder.parent / (folder.name + "-images.npy"), images)
        np.save(folder.parent / (folder.name + "-ids.npy"), ids)
        jobs.append({"kind": "siglip", "folder": str(folder), "seed": seed, "siglip2": siglip2, "vision": vision,
                     "text": dict(text, vocab_size=VOCABULARY),
                     "images": str(folder.parent / (folder.name + "-images.npy")),
                     "token_ids": str(folder.parent / (folder.name + "-ids.npy"))})
    return run_references(jobs, Path(requests[0][0]).parent)


def token_ids(rows=4, seed=1):
    """int32 [rows, 64]: random tokens of 3 to 60, the end token 1, padding 1 (SigLIP's rows)."""
    rng = np.random.default_rng(seed)
    ids = np.ones((rows, 64), np.int32)
    for row, length in enumerate(np.linspace(3, 60, rows).astype(int)):
        ids[row, :length] = rng.integers(3, VOCABULARY, length)
    return ids


def pixels(images):
    """SiglipImageProcessor's normalisation of uint8 images: float32 (x / 255 - 0.5) / 0.5."""
    return ((images.astype(np.float32) / 255 - np.float32(0.5)) / np.float32(0.5))


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


def ours_on(folder, images, ids):
    """Our image tower's pooled features and text tower's embeddings, from the folder's config.json and weights."""
    model = siglip_layers.read_config(folder)
    weights = siglip_weights.load_weights(folder / "model.safetensors", model, ("vision", "text"))
    pooled = run_graph(lambda inputs: siglip.image_tower(inputs, model, "pooled"),
                       siglip.vision_variable_values(weights, model), images)
    text = run_graph(lambda inputs: siglip.text_tower(inputs, model), siglip.text_variable_values(weights, model), ids)
    return pooled, text


def unit(rows):
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def resized(photographs, side):
    from PIL import Image
    return np.stack([np.asarray(Image.fromarray(image).resize((side, side), Image.Resampling.BICUBIC))
                     for image in photographs])


@pytest.fixture(scope="module")
def written(tmp_path_factory, photographs):
    """Two SigLIPs saved by transformers, and their references' features: the base sizes (2 blocks) with
    SiglipModel's and Siglip2Model's; So400m's (2 blocks, patch 14 at 384 px) with SiglipModel's. Each on two
    photographs, one pair for the spread guard (the parity is row by row), and the token ids of 4 and 3 rows."""
    folder = tmp_path_factory.mktemp("siglip")
    base = (folder / "base", dict(BASE, image_size=224, patch_size=16), BASE, resized(photographs[:2], 224),
            token_ids(), True)
    so400m = (folder / "so400m", dict(SO400M, image_size=384, patch_size=14), SO400M, resized(photographs[:2], 384),
              token_ids(3), False)
    return {name: (request[0], request[3], request[4], features) for name, request, features in zip(
        ("base", "so400m"), (base, so400m), references([base, so400m]))}


@pytest.fixture(scope="module")
def base(written):
    return written["base"]


@pytest.fixture(scope="module")
def ours_base(base):
    """Our towers' (pooled, text) on the base checkpoint, computed once for the three references it is compared
    with."""
    folder, images, ids, _ = base
    return ours_on(folder, images, ids)


def test_the_towers_equal_transformers_siglip_model(base, ours_base):
    folder, images, ids, features = base
    assert json.loads((folder / "config.json").read_text())["model_type"] == "siglip"
    ours_pooled, ours_text = ours_base
    assert_parity(ours_pooled, features["pooled"])
    assert_parity(ours_text, unit(features["text"]))
    np.testing.assert_allclose(np.linalg.norm(ours_text, axis=1), 1, rtol=1e-6)


def test_the_towers_equal_siglip2_model_on_the_same_weights(base, ours_base):
    """SigLIP 2's fixed-resolution checkpoints are SiglipModel's (their config.json: model_type "siglip"); the same
    weights in transformers' Siglip2Model (the NaFlex class: a linear patch embedding over flattened patches, the
    position embeddings resized to the grid, here the grid they were stored for) give the same embeddings."""
    _, _, _, features = base
    ours_pooled, ours_text = ours_base
    assert_parity(ours_pooled, features["siglip2_pooled"])
    assert_parity(ours_text, unit(features["siglip2_text"]))


def test_so400m_s_sizes_equal_transformers_patch_14_at_384_pixels(written):
    """So400m's widths, patch 14 at 384 px: 27 x 27 patches, the last 6 rows and columns left out as PyTorch's
    convolution leaves them."""
    folder, images, ids, features = written["so400m"]
    config = siglip_layers.read_config(folder)
    assert (config.grid, config.vision.width, config.vision.mlp_width) == (27, 1152, 4304)
    ours_pooled, ours_text = ours_on(folder, images, ids)
    assert_parity(ours_pooled, features["pooled"])
    assert_parity(ours_text, unit(features["text"]))


def keras_hub_siglip(model, weights):
    """keras-hub's SigLIPBackbone of `model`'s sizes holding `weights` ({transformers' name: array}); keras-hub has
    no converter of transformers' SigLIP: the arrays are mapped here."""
    from keras_hub.models import SigLIPBackbone, SigLIPTextEncoder, SigLIPVisionEncoder
    vision_config, text_config = model.vision, model.text
    vision = SigLIPVisionEncoder(model.patch_size, vision_config.width, vision_config.depth, vision_config.heads,
                                 vision_config.mlp_width, image_shape=(model.image_size,) * 2 + (3,))
    text = SigLIPTextEncoder(model.vocabulary_size, text_config.width, text_config.width, text_config.depth,
                             text_config.heads, text_config.mlp_width, max_sequence_length=model.context_length,
                             projection_dim=model.projection)
    backbone = SigLIPBackbone(vision, text)

    def layer_norm(layer, name):
        layer.gamma.assign(weights[name + ".weight"])
        layer.beta.assign(weights[name + ".bias"])

    def dense(layer, name):
        layer.kernel.assign(weights[name + ".weight"].T)
        layer.bias.assign(weights[name + ".bias"])

    def attention(layer, q, k, v, out, config):
        depth = config.width // config.heads
        for part, (kernel, bias) in zip((layer._query_dense, layer._key_dense, layer._value_dense), (q, k, v)):
            part.kernel.assign(kernel.T.reshape(config.width, config.heads, depth))
            part.bias.assign(bias.reshape(config.heads, depth))
        layer._output_dense.kernel.assign(out[0].T.reshape(config.heads, depth, config.width))
        layer._output_dense.bias.assign(out[1])

    def blocks(layers, prefix, config):
        for index, block in enumerate(layers):
            name = "%s.encoder.layers.%d." % (prefix, index)
            layer_norm(block.layer_norm1, name + "layer_norm1")
            layer_norm(block.layer_norm2, name + "layer_norm2")
            dense(block.mlp.fc1, name + "mlp.fc1")
            dense(block.mlp.fc2, name + "mlp.fc2")
            attention(block.self_attn, *[(weights[name + "self_attn.%s_proj.weight" % part],
                                          weights[name + "self_attn.%s_proj.bias" % part])
                                         for part in ("q", "k", "v", "out")], config)

    embedding = vision.embedding
    embedding.patch_embedding.kernel.assign(
        weights["vision_model.embeddings.patch_embedding.weight"].transpose(2, 3, 1, 0))
    embedding.patch_embedding.bias.assign(weights["vision_model.embeddings.patch_embedding.bias"])
    embedding.position_embedding.embeddings.assign(weights["vision_model.embeddings.position_embedding.weight"])
    blocks(vision.encoder_layers, "vision_model", vision_config)
    layer_norm(vision.post_layer_norm, "vision_model.post_layernorm")
    head, width = vision.head, vision_config.width
    head.probe.assign(weights["vision_model.head.probe"])
    packed = weights["vision_model.head.attention.in_proj_weight"]
    bias = weights["vision_model.head.attention.in_proj_bias"]
    attention(head.attention, *[(packed[i * width:(i + 1) * width], bias[i * width:(i + 1) * width]) for i in range(3)],
              (weights["vision_model.head.attention.out_proj.weight"],
               weights["vision_model.head.attention.out_proj.bias"]), vision_config)
    layer_norm(head.layer_norm, "vision_model.head.layernorm")
    dense(head.mlp.fc1, "vision_model.head.mlp.fc1")
    dense(head.mlp.fc2, "vision_model.head.mlp.fc2")
    text.embedding.token_embedding.embeddings.assign(weights["text_model.embeddings.token_embedding.weight"])
    text.embedding.position_embedding.embeddings.assign(weights["text_model.embeddings.position_embedding.weight"])
    blocks(text.encoder_layers, "text_model", text_config)
    layer_norm(text.post_layer_norm, "text_model.final_layer_norm")
    dense(text.head, "text_model.head")
    return backbone


def test_the_towers_equal_keras_hub_s_siglip_backbone(base, ours_base):
    folder, images, ids, _ = base
    model = siglip_layers.read_config(folder)
    weights = siglip_weights.load_weights(folder / "model.safetensors", model, ("vision", "text"))
    backbone = keras_hub_siglip(model, weights)
    pooled = np.asarray(backbone.vision_encoder({"images": pixels(images)}))
    text = np.asarray(backbone.text_encoder({"token_ids": ids}))
    ours_pooled, ours_text = ours_base
    assert_parity(ours_pooled, pooled)
    assert_parity(ours_text, unit(text))


def test_the_graph_of_siglip2_b16_has_the_checkpoint_s_parameters_and_no_weight_is_a_constant(graph):
    """Its real widths and 2 of its 12 blocks a tower, built, never run: its variables are the table's, whose count at
    12 blocks tests/test_siglip_layers.py pins at MTEB's count of the published checkpoint (the blocks are a loop the
    code runs as many times as the config says)."""
    model = siglip_layers.preset("siglip2_base_patch16_256").config
    model = dataclasses.replace(model, vision=dataclasses.replace(model.vision, depth=2),
                                text=dataclasses.replace(model.text, depth=2))
    embedding = siglip.image_tower(tf1.placeholder(tf.uint8, [None, 256, 256, 3]), model)
    text = siglip.text_tower(tf1.placeholder(tf.int32, [None, 64]), model)
    assert embedding.shape.as_list() == text.shape.as_list() == [None, 768]
    parameters = sum(variable.shape.num_elements() for variable in tf1.global_variables())
    assert parameters == siglip_layers.parameter_count(model) - 2  # but logit_scale and logit_bias
    # 2 blocks' nodes a tower; one 768 x 768 matrix is 2.4 MB (1.5 GB of weights at the real depth): none is in it.
    assert graph.as_graph_def().ByteSize() < 1_000_000


# ----------------------------------------------------------------------------- through the engine

@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A small SigLIP 2 checkpoint folder of our writer (config.json, model.safetensors, Gemma's tokenizer)."""
    return write_small(tmp_path_factory.mktemp("small") / "siglip2", siglip2=True)


def test_three_devices_give_one_device_s_features_and_no_weight_crosses_devices(folder, photographs):
    images = resized(photographs, 32)
    spec = siglip.ImageModel("siglip").feature_model(weights=str(folder))
    with engine.DeviceRunner(spec, resolve_devices(devices="cpu:0", gpu_count=0), 2) as runner:
        one = runner.run(images)
    with engine.DeviceRunner(spec, resolve_devices(devices="cpu:0,cpu:1,cpu:2", gpu_count=0), 2) as runner:
        recorder = runner.session.run = CrossingRecorder(runner.session)
        three = runner.run(images)
    assert one.shape == (5, 32) and np.abs(three - one).max() <= TOLERANCE
    np.testing.assert_allclose(np.linalg.norm(one, axis=1), 1, rtol=1e-5)
    allowed = {placeholder.op.name for placeholder in runner.placeholders} | {out.op.name for out in runner.outputs}
    assert recorder.sources <= allowed, "crossed between devices: %s" % sorted(recorder.sources - allowed)


def command_line(images, output, weights, *flags):
    """run_inference's `--model siglip` of `images` into `output` on one device, batch 2: its exit status."""
    return run_inference.main(["--images", str(images), "--output", str(output), "--model", "siglip", "--weights",
                               str(weights), "--devices", "cpu:0", "--batch-size", "2", "--quiet", *map(str, flags)])


@pytest.fixture(scope="module")
def cut_images(tmp_path_factory, photographs):
    """The photographs cut to five widths (not square: the reader stretches them), as PNG files in a folder."""
    from PIL import Image
    images = tmp_path_factory.mktemp("cut") / "images"
    images.mkdir()
    for index, image in enumerate(photographs):
        Image.fromarray(image[:, : image.shape[1] // 2 + 20 * index]).save(images / ("%d.png" % index))
    return images


@pytest.fixture(scope="module")
def folder_output(folder, cut_images, tmp_path_factory):
    """The command line's output of `cut_images` with the small folder's weights, in fp32: the reference the
    runs in bf16, from a Parquet dataset and from the hub are compared with."""
    output = tmp_path_factory.mktemp("folder-run") / "fp32.npy"
    assert command_line(cut_images, output, folder) == 0
    return output


def test_the_command_line_stretches_the_whole_image_and_bf16_stays_close(folder, cut_images, folder_output,
                                                                          tmp_path):
    """`--model siglip --weights FOLDER` takes its size from config.json; the reader resizes the whole image
    (SiglipImageProcessor's rule, the model's default --resize), bicubic; bf16 within a cosine of 0.999."""
    from PIL import Image
    assert command_line(cut_images, tmp_path / "bf16.npy", folder, "--precision", "bf16") == 0
    settings = read_record(folder_output)["settings"]
    assert settings["model"] == "siglip" and settings["resize"] == "stretch" and settings["layer"] == "embedding"
    assert "vision 32x2" in settings["size"] and settings["resize_filter"] == "bicubic"
    paths = Path(str(folder_output) + ".paths.csv").read_text().split()[1:]
    loaded = [np.asarray(Image.open(cut_images / path).convert("RGB").resize((32, 32), Image.Resampling.BICUBIC))
              for path in paths]
    model = siglip_layers.read_config(folder)
    weights = siglip_weights.load_weights(folder / "model.safetensors", model)
    expected = run_graph(lambda inputs: siglip.image_tower(inputs, model),
                         siglip.vision_variable_values(weights, model), np.stack(loaded))
    fp32, bf16 = np.load(folder_output), np.load(tmp_path / "bf16.npy")
    np.testing.assert_allclose(fp32, expected, atol=1e-5)
    assert (fp32 * bf16).sum(axis=1).min() >= 0.999


def test_weights_that_are_not_the_model_s_are_one_line(folder, tmp_path):
    with pytest.raises(WeightsError, match="reads its size from a checkpoint; pass --weights FOLDER"):
        siglip.ImageModel("siglip").feature_model(weights="imagenet")
    with pytest.raises(WeightsError, match="is not siglip2_base_patch16_256's size"):
        siglip.ImageModel("siglip2_base_patch16_256").feature_model(weights=str(folder))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(WeightsError, match="is a folder without model.safetensors"):
        siglip.ImageModel("siglip").feature_model(weights=str(empty))
    (empty / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    with pytest.raises(WeightsError, match="no config.json beside the checkpoint"):
        siglip.ImageModel("siglip").feature_model(weights=str(empty))


def test_a_parquet_dataset_gives_the_folder_s_features_bit_for_bit(folder, cut_images, folder_output, tmp_path):
    """The same images as files and as an img2dataset Parquet file: the same rows (SigLIP through the readers of
    datasets, with its whole-image resize)."""
    from dataset_files import write_files
    parquet = write_files("img2dataset", cut_images, tmp_path / "parquet", per_file=3)
    assert command_line("%s/*.parquet" % (tmp_path / "parquet"), tmp_path / "parquet.npy", folder) == 0
    rows = {"folder": np.load(folder_output), "parquet": np.load(tmp_path / "parquet.npy")}
    assert len(parquet) == 2 and rows["folder"].shape == rows["parquet"].shape == (5, 32)
    sort = [np.lexsort(features.T) for features in (rows["folder"], rows["parquet"])]
    np.testing.assert_array_equal(rows["folder"][sort[0]], rows["parquet"][sort[1]])


def test_a_caption_score_is_the_cosine_of_the_towers_alone_and_siglip_s_probability_is_beside_it(folder, tmp_path):
    """`--model siglip --text-column caption`: each row's caption embedded by SigLIP's text tower on the job's devices
    (its TextSpec) is the host tower's embedding; its score is the cosine with the image's row; its probability is
    sigmoid(exp(logit_scale) * cosine + logit_bias) of the checkpoint's two scalars."""
    from dataset_files import write_files
    from models.text_queries import TextEmbedder
    from parallel.inputs.tars import MEMBERS_SUFFIX, read_index
    from parallel.output.text_rows import TEXT_SUFFIX, read_rows
    from text_jobs import write_images
    write_files("img2dataset", write_images(tmp_path / "images"), tmp_path / "parquet", per_file=3)
    output = tmp_path / "feats.npy"
    assert run_inference.main(["--images", "%s/*.parquet" % (tmp_path / "parquet"), "--output", str(output),
                               "--model", "siglip", "--weights", str(folder), "--text-column", "caption",
                               "--devices", "cpu:0", "--quiet"]) == 0
    rows = read_rows(str(output) + TEXT_SUFFIX)
    entries = read_index(str(output) + MEMBERS_SUFFIX)
    assert rows.keys == [entry.key for entry in entries] == (tmp_path / "feats.npy.paths.csv").read_text().split()[1:]
    with TextEmbedder("siglip", weights=str(folder)) as embedder:  # the text tower alone, on the host
        text = embedder.text([entry.kept[0] for entry in entries])
    images = np.load(output)  # the image tower's rows, unit length
    assert len(rows.keys) == 6 and rows.errors == [None] * 6
    np.testing.assert_allclose(rows.embeddings, text, atol=1e-6)
    np.testing.assert_allclose(rows.scores, np.sum(images * text, axis=1), atol=1e-6)
    scalars = siglip_weights.load_weights(folder / "model.safetensors", siglip_layers.read_config(folder), ("logits",))
    scale, bias = (float(scalars[name].reshape(())) for name in ("logit_scale", "logit_bias"))
    logit = np.exp(scale) * rows.scores.astype(np.float64) + bias
    np.testing.assert_allclose(rows.probabilities, 1 / (1 + np.exp(-logit)), rtol=1e-6)


def test_the_command_line_reads_an_hf_checkpoint_s_size_from_its_config(folder, cut_images, folder_output, tmp_path,
                                                                        fake_hub):
    """`--model siglip --weights hf://ORG/NAME@COMMIT`: its config.json fetched with the weights, the size read from
    it: the folder's features bit for bit; the output's settings name the hub's checkpoint and the size."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    for path in folder.iterdir():
        fake_hub.add("owner/siglip2-small", commit, path.name, path.read_bytes(), lfs=path.suffix == ".safetensors")
    assert command_line(cut_images, tmp_path / "hub.npy", "hf://owner/siglip2-small@" + commit) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "hub.npy"), np.load(folder_output))
    settings = read_record(tmp_path / "hub.npy")["settings"]
    assert settings["weights"].startswith("hub owner/siglip2-small@%s model.safetensors" % commit)
    assert settings["size"] == read_record(folder_output)["settings"]["size"]
