"""ResNet50: the table, the endpoints, parity with keras.applications.ResNet50 on the same weights file (batch
norms calibrated on real photographs), devices, precision, and the command line."""

import h5py
import numpy as np
import pytest
import tensorflow as tf

import run_inference
from colour_jobs import make_images
from endpoints import every_endpoint
from models import registry
from models.files import WeightsError
from models.resnet import resnet, resnet_layers, resnet_weights
from outputs import job_outputs, read_output
from parallel import engine
from parallel.devices import resolve_devices
from partition_graphs import CrossingRecorder
from test_vgg16 import _has_gpu_kernel

tf1 = tf.compat.v1
TOLERANCE = 1e-5  # of the largest Keras value (issue 26)


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory, photographs):
    """Keras's ResNet50 with the top, our random file loaded by Keras itself, then its batch norms' moving
    statistics set from real activations: one training-mode pass with momentum 0 over a calibration batch
    (the photographs mirrored) sets every batch norm's mean and variance to those of its input, layer by
    layer. Returns (the Keras model, the file Keras's own legacy writer wrote of it)."""
    import keras
    from keras.src.legacy.saving import legacy_h5_format

    folder = tmp_path_factory.mktemp("resnet50")
    random_file = folder / resnet_weights.FILE_NAME
    resnet_weights.write_random(random_file, seed=0)
    model = keras.applications.ResNet50(weights=None)
    model.load_weights(str(random_file))
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.0
    model(keras.applications.resnet.preprocess_input(photographs[:, :, ::-1].astype(np.float32)), training=True)
    calibrated = folder / "calibrated_by_keras.h5"
    with h5py.File(calibrated, "w") as file:
        legacy_h5_format.save_weights_to_hdf5_group(file, model)
    return model, calibrated


@pytest.fixture(scope="module")
def calibrated_file(keras_model):
    return keras_model[1]


@pytest.fixture(scope="module")
def ours(calibrated_file, photographs):
    """Our features of the photographs from the calibrated file at every endpoint, fp32, one device, in one run."""
    specs = {endpoint: resnet.feature_model(endpoint, weights=str(calibrated_file))
             for endpoint in ("predictions", "avg_pool", "conv5_block3_out")}
    return every_endpoint(specs, photographs)


@pytest.fixture(scope="module")
def avg_pool(ours):
    """The reference of the devices and precision tests."""
    return ours["avg_pool"]


def run_model(path, images, endpoint="avg_pool", precision="fp32", devices="cpu:0", recorder=None):
    """Features of `images` through the engine's runner; `recorder(runner)` may wrap its Session's run."""
    model = resnet.feature_model(endpoint, weights=str(path), precision=precision)
    runner = engine.DeviceRunner(model, resolve_devices(devices=devices, gpu_count=0), per_device_batch=2)
    try:
        if recorder:
            runner.session.run = recorder(runner)
        return runner.run(images)
    finally:
        runner.close()


def test_the_table_is_keras_s_model_and_pins_the_parameter_counts(graph, keras_model):
    import keras

    model, _ = keras_model
    notop = keras.applications.ResNet50(weights=None, include_top=False)
    # Keras numbers its input layers (input_layer, input_layer_1, ...); the rest is the order its reader reads.
    assert resnet_layers.keras_layer_names()[1:] == [layer.name for layer in model.layers][1:]
    assert resnet_layers.keras_layer_names(include_top=False)[1:] == [layer.name for layer in notop.layers][1:]
    for include_top, count in ((True, 25_636_712), (False, 23_587_712)):
        shapes = resnet_layers.weight_shapes(include_top)
        assert sum(np.prod(shape) for weights in shapes.values() for _, shape in weights) == count
    assert model.count_params() == resnet_layers.PARAMETER_COUNT
    assert notop.count_params() == resnet_layers.PARAMETER_COUNT_NOTOP
    assert {layer.name: tuple(tuple(weight.shape) for weight in layer.weights) for layer in model.layers
            if layer.weights} == {layer: tuple(shape for _, shape in weights)
                                  for layer, weights in resnet_layers.weight_shapes().items()}
    resnet.resnet50(tf1.placeholder(tf.uint8, [None, 224, 224, 3]), endpoint="predictions")
    variables = tf1.global_variables(scope="resnet50/")  # not Keras's, made in this graph too
    assert sum(v.shape.num_elements() for v in variables) == resnet_layers.FOLDED_PARAMETER_COUNT == 25_530_472
    assert variables[0].op.name == "resnet50/conv1_conv/kernel" and variables[-1].op.name == "resnet50/predictions/bias"


@pytest.mark.parametrize("endpoint, shape, variables", [
    ("conv5_block3_out", [None, 7, 7, 2048], 106), ("avg_pool", [None, 2048], 106), ("predictions", [None, 1000], 108),
])
def test_each_endpoint_s_shape_and_variables_and_no_weights_in_the_graph(graph, endpoint, shape, variables):
    output = resnet.resnet50(tf1.placeholder(tf.uint8, [None, 224, 224, 3]), endpoint=endpoint)
    assert output.shape.as_list() == shape and output.dtype == tf.float32
    assert len(tf1.global_variables()) == variables  # 53 convolutions (kernel, bias), and the Dense
    assert resnet.feature_size(endpoint) == np.prod(shape[1:])
    assert graph.as_graph_def().ByteSize() < 300_000  # 100 MB of weights are nowhere in it


def test_bad_arguments_are_refused_naming_the_value(graph, tmp_path):
    images = tf1.placeholder(tf.uint8, [None, 224, 224, 3])
    with pytest.raises(ValueError, match="layer='fc7'"):
        resnet.resnet50(images, endpoint="fc7")
    with pytest.raises(ValueError, match="float32"):
        resnet.resnet50(tf1.placeholder(tf.float32, [None, 224, 224, 3]))
    with pytest.raises(ValueError, match=r"\[N, 224, 224, 3\]"):
        resnet.resnet50(tf1.placeholder(tf.uint8, [None, 299, 299, 3]))
    with pytest.raises(ValueError, match="precision='fp8'"):
        resnet.feature_model(precision="fp8")
    with pytest.raises(WeightsError, match="nowhere.h5 is not a file"):
        resnet.feature_model(weights=str(tmp_path / "nowhere.h5"))


def test_equals_keras_on_the_same_weights_file_and_real_photographs(keras_model, photographs, ours):
    """Our reader reads the file Keras wrote; each endpoint within 1e-5 of the largest Keras value, and the
    photographs' features differ from each other by far more than that."""
    import keras

    model, _ = keras_model
    outputs = keras.Model(model.input, [model.get_layer(name).output for name in resnet_layers.ENDPOINTS])
    # Called, not predict(): the same layers in inference mode, without tracing a predict function.
    expected = outputs(keras.applications.resnet.preprocess_input(photographs.astype(np.float32)), training=False)
    for endpoint, reference in zip(resnet_layers.ENDPOINTS, expected):
        reference = np.asarray(reference).reshape(len(photographs), -1)
        largest = np.abs(reference).max()
        assert np.abs(ours[endpoint] - reference).max() <= TOLERANCE * largest, endpoint
        spread = min(np.abs(reference[i] - reference[j]).max()
                     for i in range(len(reference)) for j in range(i + 1, len(reference)))
        assert spread >= 100 * TOLERANCE * largest, (endpoint, spread / largest)


def test_feature_model_settings_name_the_file_layer_and_preprocessing(calibrated_file, tmp_path):
    imagenet = registry.feature_model("resnet50")
    assert (imagenet.name, imagenet.output_name, imagenet.image_size) == ("resnet50", "avg_pool", (224, 224))
    assert imagenet.settings == {
        "model": "resnet50", "layer": "avg_pool", "precision": "fp32", "preprocessing": resnet.PREPROCESSING,
        "weights": "imagenet (Keras resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5, "
                   "md5 4d473c1dd8becc155b73f8504c6f6626)"}
    assert registry.feature_model("resnet50", "predictions").settings["weights"] == (
        "imagenet (Keras resnet50_weights_tf_dim_ordering_tf_kernels.h5, md5 2cb95161c43110f7111970584f804107)")
    assert "B 103.939, G 116.779, R 123.68" in resnet.PREPROCESSING
    by_path = resnet.feature_model(weights=str(calibrated_file))
    assert by_path.settings["weights"].startswith("calibrated_by_keras.h5 (") and by_path.files == (
        str(calibrated_file),)
    notop = tmp_path / "models" / resnet_weights.NOTOP_FILE_NAME  # "imagenet" in Keras's cache: no download
    notop.parent.mkdir()
    resnet_weights.write_random(notop)
    values = resnet.feature_model(weights="imagenet", cache_dir=tmp_path).load_weights()
    assert len(values) == 2 * 53 and values["resnet50/conv1_conv/kernel"].shape == (7, 7, 3, 64)
    with pytest.raises(WeightsError, match="has no layer predictions, which ResNet50 needs .expected "
                                           "resnet50_weights_tf_dim_ordering_tf_kernels.h5"):
        resnet.feature_model("predictions", weights=str(notop)).load_weights()


# ----------------------------------------------------------------------------- devices and precision

def test_two_devices_give_one_device_s_features_and_no_weight_crosses_devices(calibrated_file, photographs, avg_pool):
    """(Five photographs on two devices, two per device: a full step, then one of a single photograph.)"""
    recorders = []

    def record(runner):
        recorders.append((CrossingRecorder(runner.session), runner))
        return recorders[-1][0]

    one = avg_pool
    two = run_model(calibrated_file, photographs, devices="cpu:0,cpu:1", recorder=record)
    np.testing.assert_allclose(two, one, rtol=0, atol=TOLERANCE * np.abs(one).max())
    [(recorder, runner)] = recorders
    allowed = {p.op.name for p in runner.placeholders} | {o.op.name for o in runner.outputs}
    assert recorder.sources, "two devices must at least exchange their inputs and outputs"
    assert recorder.sources <= allowed, "crossed between devices: %s" % sorted(recorder.sources - allowed)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_on_gpus_every_op_is_on_its_replicas_gpu_and_has_a_gpu_kernel(precision):
    model = resnet.feature_model("predictions", precision=precision)
    names = resolve_devices(gpus="0,1", gpu_count=2).names
    graph, placement, _, outputs = engine.build_graph(model, names)
    assert [output.device for output in outputs] == list(names)
    assert [op.name for op in graph.get_operations() if not _has_gpu_kernel(op)] == []
    assert len(placement.variables()) == 2 * 53 + 2 and all(
        [copy.device for copy in copies] == list(names) for copies in placement.variables().values())


# ----------------------------------------------------------------------------- the command line

def test_bf16_stays_close_to_fp32(calibrated_file, photographs, avg_pool):
    reduced = run_model(calibrated_file, photographs, precision="bf16")
    assert reduced.dtype == np.float32 and reduced.shape == avg_pool.shape == (5, 2048)
    cosine = (reduced * avg_pool).sum(1) / np.linalg.norm(reduced, axis=1) / np.linalg.norm(avg_pool, axis=1)
    assert cosine.min() >= 0.999, cosine  # VGG16's bound (docs/gpus.md)
    assert not np.array_equal(reduced, avg_pool)  # it really computed in bf16


def test_cli_one_and_two_static_ranks_give_the_same_bytes(calibrated_file, tmp_path, capsys):
    images = tmp_path / "images"
    make_images(images, 3)  # shards (steps) of one image: rank 0 of two takes 0 and 2

    def run(output, *flags):
        assert run_inference.main([str(flag) for flag in (
            "--images", images, "--output", output, "--model", "resnet50", "--weights", calibrated_file,
            "--devices", "cpu:0", "--batch-size", 1, "--quiet", *flags)]) == 0, capsys.readouterr().err

    static = ("--distributed", "static", "--shard-size", 1)
    run(tmp_path / "one.npy", *static, "--rank", 0, "--world-size", 1)
    for rank in range(2):
        run(tmp_path / "two.npy", *static, "--rank", rank, "--world-size", 2)
    one = job_outputs(tmp_path / "one.npy")
    assert one[""] and one == job_outputs(tmp_path / "two.npy")
    paths, features = read_output(tmp_path / "one.npy", "npy")
    assert len(paths) == 3 and features.shape == (3, 2048)


def test_cli_layers_are_resnet50_s(capsys):
    assert run_inference.parse_args(["--images", "x", "--model", "resnet50"]).layer == "avg_pool"
    with pytest.raises(SystemExit):
        run_inference.parse_args(["--images", "x", "--model", "resnet50", "--layer", "fc7"])
    assert "its layers: conv5_block3_out, avg_pool, predictions" in capsys.readouterr().err
