"""EfficientNetB0: the graph, parity with keras.applications.EfficientNetB0 on the same file (by path and as
"imagenet"), devices, precision, and the command line with static ranks."""

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import run_inference
from endpoints import every_endpoint
from models.efficientnet import efficientnet as model
from models.efficientnet import efficientnet_weights as files
from models.files import WeightsError
from outputs import job_outputs
from parallel.devices import DeviceRunner, resolve_devices
from partition_graphs import CrossingRecorder

tf1 = tf.compat.v1
TOLERANCE = 1e-5  # of the largest reference value
COUNT_TO_TOP = 3_986_549  # the variables up to top_conv (batch norms folded): see the test of the endpoints


def calibrated(reference, images, path):
    """Sets the batch-norm statistics of Keras model `reference` to the real means and variances of each
    layer's activations on `images`, and writes its weights to `path` with Keras's own legacy .h5 writer."""
    import h5py
    import keras
    from keras.src.legacy.saving import legacy_h5_format

    # One pass in training mode normalizes every layer with its batch statistics; with momentum 0 those
    # become the moving statistics (drop-connect and dropout off, so that nothing else changes).
    for layer in reference.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.0
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    reference(images.astype(np.float32), training=True)
    with h5py.File(path, "w") as file:
        legacy_h5_format.save_weights_to_hdf5_group(file, reference)
    return path


def keras_outputs(reference, names, images):
    import keras

    # Called, not predict(): the same layers in inference mode, without tracing a predict function (about a CPU-second).
    outputs = keras.Model(reference.input, [reference.get_layer(name).output for name in names])(
        images.astype(np.float32), training=False)
    return [np.asarray(output) for output in (outputs if len(names) > 1 else [outputs])]


@pytest.fixture(scope="module")
def random_file(tmp_path_factory):
    """Random weights whose Normalization is the ImageNet mean and variance: computed as Keras's weights=PATH."""
    path = tmp_path_factory.mktemp("efficientnet_b0") / "random.h5"
    files.write_random(path, seed=0, imagenet_normalization=False)
    return path


@pytest.fixture(scope="module")
def keras_files(photographs, random_file):
    """Seeded random weights, calibrated on the photographs by Keras and written by Keras (`calibrated`), and
    Keras's features of the photographs: {"path": the full .h5 file, "avg_pool", "top_activation",
    "predictions": Keras's outputs}."""
    import keras

    reference = keras.applications.EfficientNetB0(weights=None)
    reference.load_weights(str(random_file))
    path = calibrated(reference, photographs, random_file.parent / "efficientnetb0.h5")
    names = ("avg_pool", "top_activation", "predictions")
    return dict(zip(names, keras_outputs(reference, names, photographs)), path=path)


@pytest.fixture(scope="module")
def ours(keras_files, photographs):
    """Our features of the photographs from Keras's file at every endpoint, fp32, one device, in one run."""
    specs = {endpoint: model.feature_model(endpoint, weights=str(keras_files["path"]))
             for endpoint in ("predictions", "avg_pool", "top_activation")}
    return every_endpoint(specs, photographs)


@pytest.fixture(scope="module")
def avg_pool(ours):
    """Compared with Keras's, and the reference of the devices and precision tests."""
    return ours["avg_pool"]


def features(spec, images, num_devices=1, recorder=None):
    devices = resolve_devices(devices=",".join("cpu:%d" % index for index in range(num_devices)), gpu_count=0)
    with DeviceRunner(spec, devices, per_device_batch=2) as runner:
        if recorder is not None:
            runner.session.run = recorder(runner.session)
        return runner.run(images)


def relative_difference(ours, reference):
    return np.abs(ours - reference).max() / np.abs(reference).max()


# ----------------------------------------------------------------------------- the graph

@pytest.mark.parametrize("endpoint, shape, last_variable", [
    ("top_activation", [None, 7, 7, 1280], "efficientnet_b0/top_conv/bias"),
    ("avg_pool", [None, 1280], "efficientnet_b0/top_conv/bias"),
    ("predictions", [None, 1000], "efficientnet_b0/predictions/bias"),
])
def test_each_endpoint_builds_what_it_needs_and_no_weights_in_the_graph(graph, endpoint, shape, last_variable):
    output = model.efficientnet_b0(tf1.placeholder(tf.uint8, [None, 224, 224, 3]), endpoint=endpoint)
    assert output.shape.as_list() == shape and output.dtype == tf.float32
    variables = tf1.global_variables()
    assert variables[-1].op.name == last_variable and model.feature_size(endpoint) == np.prod(shape[1:])
    # Keras's 4,049,571 parameters up to top_bn, less the Normalization's 7 and 3 of the 4 per batch-norm channel
    # (folded into the kernel and a bias), plus the preprocessing's 9; predictions adds 1,281,000.
    count = sum(variable.shape.num_elements() for variable in variables)
    assert count == COUNT_TO_TOP + (1_281_000 if endpoint == "predictions" else 0)
    assert graph.as_graph_def().ByteSize() < 400_000  # 16 MB of weights are nowhere in it


def test_bad_arguments_are_refused_naming_the_value(graph):
    images = tf1.placeholder(tf.uint8, [None, 224, 224, 3])
    with pytest.raises(ValueError, match="layer='fc7'"):
        model.efficientnet_b0(images, endpoint="fc7")
    with pytest.raises(ValueError, match="float32"):
        model.efficientnet_b0(tf1.placeholder(tf.float32, [None, 224, 224, 3]))
    with pytest.raises(ValueError, match=r"\[N, 224, 224, 3\]"):
        model.efficientnet_b0(tf1.placeholder(tf.uint8, [None, 240, 240, 3]))
    with pytest.raises(ValueError, match="precision='fp8'"):
        model.feature_model(precision="fp8")
    with pytest.raises(WeightsError, match="nowhere.h5 is not a file"):
        model.feature_model(weights="nowhere.h5")


# ----------------------------------------------------------------------------- parity with Keras

def test_avg_pool_equals_keras_on_a_file_keras_wrote(keras_files, avg_pool):
    ours = avg_pool
    expected = keras_files["avg_pool"]
    assert relative_difference(ours, expected) <= TOLERANCE
    # Calibrated batch norms: the features depend on the photograph, far beyond the tolerance.
    spread = min(np.abs(expected[i] - expected[j]).max() for i in range(len(expected)) for j in range(i))
    assert spread >= 100 * TOLERANCE * np.abs(expected).max()


@pytest.mark.parametrize("endpoint", ["top_activation", "predictions"])
def test_the_other_endpoints_equal_keras(keras_files, photographs, ours, endpoint):
    assert ours[endpoint].shape[1] == model.feature_size(endpoint)
    assert relative_difference(ours[endpoint], keras_files[endpoint].reshape(len(photographs), -1)) <= TOLERANCE


def test_a_file_with_keras_s_imagenet_normalization_is_keras_s_weights_imagenet_by_name_or_path(
        photographs, tmp_path, monkeypatch):
    """Keras divides by sqrt(std) once more for weights="imagenet" only (its files hold the std as variance);
    here such a file gets that Rescaling however it is given, and the file's mean and variance count.
    (Two photographs: the Rescaling changes every feature.)"""
    import keras
    from keras.src.utils import file_utils

    two = photographs[:2]
    like_imagenet = tmp_path / "like-imagenet.h5"
    files.write_random(like_imagenet, seed=0)  # the Normalization of Keras's ImageNet files
    monkeypatch.setattr(file_utils, "get_file", lambda *args, **kwargs: str(like_imagenet))
    reference = keras.applications.EfficientNetB0(weights="imagenet")  # reads the random file
    (tmp_path / "models").mkdir()
    cached = calibrated(reference, two, tmp_path / "models" / model.NOTOP_FILE.name)  # notop: a subset
    [expected] = keras_outputs(reference, ["avg_pool"], two)
    spec = model.feature_model("avg_pool", weights="imagenet", cache_dir=tmp_path)
    assert spec.settings["weights"] == model.NOTOP_FILE.identity
    assert relative_difference(features(spec, two), expected) <= TOLERANCE
    by_path = features(model.feature_model("avg_pool", weights=str(cached)), two)
    assert relative_difference(by_path, expected) <= TOLERANCE  # the same file by path: the same features
    [keras_by_path] = keras_outputs(keras.applications.EfficientNetB0(weights=str(cached)), ["avg_pool"], two)
    assert relative_difference(by_path, keras_by_path) > 0.1  # Keras's weights=PATH leaves the Rescaling out


# ----------------------------------------------------------------------------- the engine's model

def test_feature_model_settings_name_the_file_and_the_preprocessing(keras_files):
    by_path = model.feature_model("avg_pool", weights=str(keras_files["path"]), precision="bf16")
    assert by_path.settings == {"model": "efficientnet_b0", "layer": "avg_pool",
                                "weights": by_path.settings["weights"], "precision": "bf16",
                                "preprocessing": model.PREPROCESSING}
    assert by_path.settings["weights"].startswith("efficientnetb0.h5 (") and by_path.files == (
        str(keras_files["path"]),)
    assert model.feature_model("predictions").settings["weights"] == (
        "imagenet (Keras efficientnetb0.h5, md5 902e53a9f72be733fc0bcb005b3ebbac)")
    assert model.feature_model().settings["weights"] == (
        "imagenet (Keras efficientnetb0_notop.h5, md5 50bc09e76180e00e4465e1a485ddc09d)")


def test_features_do_not_depend_on_the_number_of_devices_and_no_weight_crosses(keras_files, photographs,
                                                                               avg_pool):
    spec = model.feature_model("avg_pool", weights=str(keras_files["path"]))
    devices = resolve_devices(devices="cpu:0,cpu:1", gpu_count=0)  # 5 photographs: 2 + 2, then 1
    with DeviceRunner(spec, devices, per_device_batch=2) as runner:
        recorder = runner.session.run = CrossingRecorder(runner.session)
        two = runner.run(photographs)
        allowed = {op.op.name for op in runner.placeholders} | {output.op.name for output in runner.outputs}
    assert recorder.sources and recorder.sources <= allowed, sorted(recorder.sources - allowed)
    np.testing.assert_allclose(two, avg_pool, rtol=0, atol=1e-6 * np.abs(two).max())


@pytest.mark.parametrize("precision", ["bf16"])
def test_reduced_precision_stays_close_to_fp32(keras_files, photographs, avg_pool, precision):
    """bf16 (fp16 is for GPUs: on a CPU it runs through float32 casts)."""
    reference = avg_pool
    reduced = features(model.feature_model(weights=str(keras_files["path"]), precision=precision), photographs)
    cosine = (reduced * reference).sum(1) / np.linalg.norm(reduced, axis=1) / np.linalg.norm(reference, axis=1)
    assert reduced.dtype == np.float32 and cosine.min() >= 0.999, cosine  # VGG16's documented bound
    assert not np.array_equal(reduced, reference)


# ----------------------------------------------------------------------------- the command line

def test_one_static_rank_and_two_give_the_same_bytes(keras_files, tmp_path):
    rng, images = np.random.default_rng(0), tmp_path / "images"
    images.mkdir()
    for index in range(3):  # shards (steps) of one image: rank 0 of two takes 0 and 2
        Image.fromarray(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)).save(images / ("%d.png" % index))
    outputs = {}
    for world_size in (1, 2):
        output = tmp_path / str(world_size) / "features.npy"
        for rank in range(world_size):
            assert run_inference.main([
                "--images", str(images), "--model", "efficientnet_b0", "--weights", str(keras_files["path"]),
                "--output", str(output), "--devices", "cpu:0", "--batch-size", "1", "--quiet",
                "--distributed", "static", "--rank", str(rank), "--world-size", str(world_size),
                "--shard-size", "1"]) == 0
        outputs[world_size] = job_outputs(output)
    assert outputs[1] == outputs[2] and np.load(tmp_path / "1" / "features.npy").shape == (3, 1280)
