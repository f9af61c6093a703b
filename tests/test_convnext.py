"""ConvNeXt-Tiny: the graph against keras.applications.ConvNeXtTiny on the same files, the endpoints, the engine's
devices, precision and static ranks."""

import h5py
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import run_inference
from arrays import assert_same_array
from endpoints import every_endpoint
from models.convnext import convnext, convnext_layers
from models.convnext.convnext_weights import load_weights, random_weights, save_h5
from models.files import WeightsError
from outputs import job_outputs
from parallel import engine
from parallel.devices import resolve_devices
from partition_graphs import CrossingRecorder

tf1 = tf.compat.v1
TOLERANCE = 1e-5  # of the largest reference value
KERAS_IMAGES = 2  # photographs compared with Keras (its ConvNeXt costs half a CPU-second a photograph)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Seeded random weights (seed 0) in the layouts of Keras's two files."""
    folder = tmp_path_factory.mktemp("convnext_tiny")
    weights = random_weights(0)
    paths = {"full": folder / "convnext_tiny.h5", "notop": folder / "convnext_tiny_notop.h5"}
    save_h5(weights, paths["full"], include_top=True)
    save_h5(weights, paths["notop"], include_top=False)
    return paths


@pytest.fixture(scope="module")
def keras_outputs(files, photographs):
    """Keras's outputs on the first KERAS_IMAGES photographs, each model loaded by Keras from our file of its
    layout.

    stage_3 (head_gap's input), head_layernorm, logits: ConvNeXtTiny(include_top=True) on the full file;
    avg_pool: ConvNeXtTiny(include_top=False, pooling="avg") on the notop file, its own pooling and LayerNorm
    applied to the full model's stage_3, its body's weights checked equal to the full model's first (a Keras call
    costs about half a CPU-second a photograph: one call, not one a model).
    """
    import keras

    pixels = photographs.astype(np.float32)  # the model preprocesses inside: 0..255 RGB
    notop = keras.applications.ConvNeXtTiny(weights=None, include_top=False, pooling="avg")
    notop.load_weights(str(files["notop"]))
    full = keras.applications.ConvNeXtTiny(weights=None, classifier_activation=None)
    full.load_weights(str(files["full"]))
    *body, pooling, layer_norm = notop.layers
    assert [type(layer).__name__ for layer in (pooling, layer_norm)] == ["GlobalAveragePooling2D",
                                                                         "LayerNormalization"]
    for layer in (layer for layer in body if layer.weights):  # the full model up to stage_3, the same weights
        for mine, theirs in zip(layer.weights, full.get_layer(layer.name).weights, strict=True):
            assert_same_array(np.asarray(mine), np.asarray(theirs), layer.name)
    outputs = [full.get_layer("convnext_tiny_head_gap").input, full.get_layer("convnext_tiny_head_layernorm").output,
               full.output]
    # Called, not predict(): the same layers in inference mode, without tracing a predict function.
    stage_3, head_layernorm, logits = keras.Model(full.input, outputs)(pixels[:KERAS_IMAGES], training=False)
    avg_pool = layer_norm(pooling(stage_3), training=False)
    return {"avg_pool": np.asarray(avg_pool), "stage_3": np.asarray(stage_3),
            "head_layernorm": np.asarray(head_layernorm), "logits": np.asarray(logits)}


@pytest.fixture(scope="module")
def notop_features(files, photographs):
    """Our avg_pool from the notop file on the photographs, fp32, one device."""
    return run_model(files["notop"], photographs)


@pytest.fixture(scope="module")
def full_features(files, photographs):
    """Our features from the full file at every endpoint, of the first KERAS_IMAGES photographs, fp32, in one run."""
    specs = {endpoint: convnext.feature_model(endpoint, str(files["full"]))
             for endpoint in ("predictions", "logits", "avg_pool", "stage_3")}
    return every_endpoint(specs, photographs[:KERAS_IMAGES])


def run_model(path, images, endpoint="avg_pool", precision="fp32", num_devices=1):
    """Features through the engine's DeviceRunner on `num_devices` logical CPU devices, 2 images per device."""
    spec = convnext.feature_model(endpoint, str(path), precision)
    devices = resolve_devices(devices=",".join("cpu:%d" % i for i in range(num_devices)), gpu_count=0)
    with engine.DeviceRunner(spec, devices, per_device_batch=2) as runner:
        return runner.run(images)


def relative_difference(ours, reference):
    return np.abs(ours - reference).max() / np.abs(reference).max()


# ----------------------------------------------------------------------------- parity with Keras

def test_avg_pool_equals_keras_notop_pooling_avg_on_the_photographs(notop_features, keras_outputs):
    reference, ours = keras_outputs["avg_pool"], notop_features[:KERAS_IMAGES]
    assert notop_features.shape == (5, 768)
    assert relative_difference(ours, reference) <= TOLERANCE
    # Random weights could make this pass for nothing: the photographs' features differ far beyond the tolerance.
    scale = np.abs(reference).max()
    spread = min(np.abs(reference[i] - reference[j]).max() for i in range(KERAS_IMAGES)
                 for j in range(i + 1, KERAS_IMAGES))
    assert spread >= 100 * TOLERANCE * scale, (spread, scale)


@pytest.mark.parametrize("endpoint, reference", [("avg_pool", "head_layernorm"), ("stage_3", "stage_3"),
                                                 ("logits", "logits")])
def test_from_the_full_file_each_endpoint_equals_its_keras_output(full_features, keras_outputs, endpoint, reference):
    """avg_pool: the classifier's LayerNorm after the pooling; stage_3: the pooling's input; logits: the classifier
    without its softmax (predictions is their softmax, tested in test_predictions_are_the_softmax_of_the_logits)."""
    expected = keras_outputs[reference].reshape(KERAS_IMAGES, -1)
    ours = full_features[endpoint]
    assert ours.shape[1] == convnext.feature_size(endpoint) == expected.shape[1]
    assert relative_difference(ours, expected) <= TOLERANCE


def test_predictions_are_the_softmax_of_the_logits(full_features):
    logits, predictions = full_features["logits"], full_features["predictions"]  # of the same weights
    np.testing.assert_allclose(predictions, np.exp(logits) / np.exp(logits).sum(1, keepdims=True), rtol=1e-5)
    assert predictions.shape == (KERAS_IMAGES, 1000) and np.abs(predictions.sum(1) - 1).max() < 1e-5


def test_preprocessing_is_keras_s_normalization_layer(graph):
    from keras.src.applications.convnext import PreStem

    pixels = np.random.default_rng(0).integers(0, 256, (2, 5, 4, 3), dtype=np.uint8)
    keras_normalization = PreStem(name="x")(tf.constant(pixels, tf.float32))
    with tf1.Session(graph=graph) as session:
        ours, theirs = session.run([convnext.preprocess(tf.constant(pixels)), keras_normalization])
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6)
    assert np.abs(theirs).max() > 1  # Keras's layer really normalized 0..255 (not an identity)


# ----------------------------------------------------------------------------- the graph

@pytest.mark.parametrize("endpoint, shape, parameters", [
    ("stage_3", [None, 7, 7, 768], convnext_layers.PARAMETER_COUNT_NOTOP - 2 * 768),
    ("avg_pool", [None, 768], convnext_layers.PARAMETER_COUNT_NOTOP),
    ("predictions", [None, 1000], convnext_layers.PARAMETER_COUNT),
])
def test_each_endpoint_builds_only_its_layers_and_no_weight_is_a_constant(graph, endpoint, shape, parameters):
    output = convnext.convnext_tiny(tf1.placeholder(tf.uint8, [None, 224, 224, 3]), endpoint)
    assert output.shape.as_list() == shape and output.dtype == tf.float32
    variables = tf1.global_variables()
    assert sum(variable.shape.num_elements() for variable in variables) == parameters
    assert variables[0].op.name == "convnext_tiny/stem/conv/kernel"
    assert graph.as_graph_def().ByteSize() < 500_000  # 110 MB of weights are nowhere in it


def test_bad_arguments_are_refused_naming_the_value(graph, files):
    images = tf1.placeholder(tf.uint8, [None, 224, 224, 3])
    with pytest.raises(ValueError, match="layer='fc7'"):
        convnext.convnext_tiny(images, endpoint="fc7")
    with pytest.raises(ValueError, match="float32"):
        convnext.convnext_tiny(tf1.placeholder(tf.float32, [None, 224, 224, 3]))
    with pytest.raises(ValueError, match=r"\[N, 224, 224, 3\]"):
        convnext.convnext_tiny(tf1.placeholder(tf.uint8, [None, 100, 100, 3]))
    with pytest.raises(ValueError, match="precision='fp8'"):
        convnext.feature_model(weights="imagenet", precision="fp8")
    with pytest.raises(WeightsError, match="nowhere.h5 is not a file"):
        convnext.feature_model(weights="nowhere.h5")
    with pytest.raises(WeightsError, match="convnext_tiny_notop.h5 has no layer convnext_tiny_head_dense"):
        convnext.feature_model("logits", weights=str(files["notop"])).load_weights()


def test_settings_name_the_model_its_file_and_preprocessing(files):
    notop, pooled, full = (convnext.feature_model(endpoint) for endpoint in ("stage_3", "avg_pool", "predictions"))
    assert "convnext_tiny_notop.h5, sha256 d547c096" in notop.settings["weights"]
    assert "convnext_tiny.h5, sha256 8ae6e78c" in pooled.settings["weights"] == full.settings["weights"]
    spec = convnext.feature_model(weights=str(files["full"]), precision="bf16")
    assert (spec.name, spec.output_name, spec.image_size, spec.files) == (
        "convnext_tiny", "avg_pool", (224, 224), (str(files["full"]),))
    assert spec.settings["model"] == "convnext_tiny" and spec.settings["precision"] == "bf16"
    assert "convnext_tiny.h5 (" in spec.settings["weights"] and "ImageNet mean" in spec.settings["preprocessing"]
    assert convnext.feature_model(weights=str(files["notop"])).settings["weights"] != spec.settings["weights"]


def test_imagenet_avg_pool_reads_the_full_file_s_trained_head_layernorm(files, tmp_path):
    """Keras's notop file holds the LayerNorm after the pooling untrained (gamma 1, beta 0): "imagenet" reads
    avg_pool's from the full file, the classifier's own; stage_3, which needs no head, from the notop file."""
    import shutil

    cache = tmp_path / "models"
    cache.mkdir()
    (cache / "convnext_tiny.h5").symlink_to(files["full"])
    notop = shutil.copy(files["notop"], cache / "convnext_tiny_notop.h5")
    with h5py.File(notop, "r+") as file:  # as in Keras's notop file
        for name, value in (("gamma", 1.0), ("beta", 0.0)):
            dataset = file["layer_normalization"]["layer_normalization/%s:0" % name]
            dataset[...] = np.full(dataset.shape, value, np.float32)
    full = load_weights(files["full"])["head/layernorm"]
    values = convnext.feature_model("avg_pool", weights="imagenet", cache_dir=tmp_path).load_weights()
    np.testing.assert_array_equal(values["convnext_tiny/head/layernorm/gamma"], full[0])
    np.testing.assert_array_equal(values["convnext_tiny/head/layernorm/beta"], full[1])
    assert not np.any(full[0] == 1.0) and not np.any(full[1] == 0.0)  # the notop file's would be told apart
    assert np.all(load_weights(notop)["head/layernorm"][0] == 1.0)
    stage_3 = convnext.feature_model("stage_3", weights="imagenet", cache_dir=tmp_path)
    assert "convnext_tiny_notop.h5" in stage_3.settings["weights"] and not any("head" in name for name in (
        stage_3.load_weights()))


# ----------------------------------------------------------------------------- devices, precision, ranks

def test_two_devices_give_one_device_s_features_and_no_weight_crosses_devices(files, photographs, notop_features):
    """(Five photographs on two devices, two per device: a full step, then one of a single photograph.)"""
    one = notop_features
    spec = convnext.feature_model(weights=str(files["notop"]))
    with engine.DeviceRunner(spec, resolve_devices(devices="cpu:0,cpu:1", gpu_count=0), 2) as runner:
        recorder = runner.session.run = CrossingRecorder(runner.session)
        two = runner.run(photographs)
    assert relative_difference(two, one) <= TOLERANCE
    allowed = {placeholder.op.name for placeholder in runner.placeholders} | {out.op.name for out in runner.outputs}
    assert recorder.sources, "two devices must at least exchange their inputs and outputs"
    assert recorder.sources <= allowed, "crossed between devices: %s" % sorted(recorder.sources - allowed)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_on_gpus_every_op_has_a_gpu_kernel_and_each_replica_its_weights(precision):
    """What --gpus 0,1 builds, checked without GPUs (soft placement is off on GPUs: an op without a GPU
    kernel for its dtype would fail there)."""
    from test_vgg16 import _has_gpu_kernel

    model = convnext.feature_model(endpoint="predictions", weights="imagenet", precision=precision)
    names = resolve_devices(gpus="0,1", gpu_count=2).names
    graph, placement, _, outputs = engine.build_graph(model, names)
    assert [output.device for output in outputs] == list(names)
    kinds = {}  # one op of each type and attributes: the replicas' ops repeat the first one's
    for op in graph.get_operations():
        kinds.setdefault((op.type, str(sorted(op.node_def.attr.items()))), op)
    assert [op.name for op in kinds.values() if not _has_gpu_kernel(op)] == []
    assert len(placement.variables()) == sum(len(layer.arrays) for layer in convnext_layers.LAYERS) and all(
        [copy.device for copy in copies] == list(names) for copies in placement.variables().values())


def make_images(folder, count=5):
    rng = np.random.default_rng(1)
    folder.mkdir()
    for index in range(count):
        image = np.clip(rng.normal(128, 60, (40 + index, 50, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(image).save(folder / ("%d.png" % index))
    return folder


def cli(images, output, weights, *flags):
    status = run_inference.main([str(flag) for flag in ("--images", images, "--output", output, "--model",
                                                        "convnext_tiny", "--weights", weights, "--devices", "cpu:0",
                                                        "--batch-size", "1", "--quiet", *flags)])
    assert status == 0


def test_cli_one_and_two_static_ranks_give_the_same_bytes(files, tmp_path):
    images = make_images(tmp_path / "images", 3)  # shards (steps) of one image: rank 0 of two takes 0 and 2
    single = tmp_path / "one" / "features.npy"
    cli(images, single, files["notop"], "--distributed", "static", "--rank", "0", "--world-size", "1",
        "--shard-size", "1")
    two = tmp_path / "two" / "features.npy"
    for rank in range(2):
        cli(images, two, files["notop"], "--distributed", "static", "--rank", rank, "--world-size", "2",
            "--shard-size", "1")
    assert job_outputs(two) == job_outputs(single) and np.load(single).shape == (3, 768)


@pytest.mark.parametrize("precision, count", [("bf16", 5), ("fp16", 2)])  # fp16 runs through casts on a CPU
def test_reduced_precision_stays_close_to_fp32(files, photographs, notop_features, precision, count):
    reference = notop_features[:count]
    reduced = run_model(files["notop"], photographs[:count], precision=precision)
    assert reduced.dtype == np.float32 and reduced.shape == (count, 768)
    cosine = (reduced * reference).sum(1) / np.linalg.norm(reduced, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.999, cosine  # VGG16's documented bound (docs/gpus.md)
    assert not np.array_equal(reduced, reference)  # it really computed in another precision
