"""VGG16: the table, the endpoints, Keras equivalence, the model the engine runs, devices and precision."""

import functools
import re

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from tensorflow.python.framework import kernels

from models import vgg16, vgg16_layers, weight_files
from models.common import compute_dtype
from parallel import engine
from parallel.devices import resolve_devices
from parallel.model import ModelSpec

tf1 = tf.compat.v1


@pytest.fixture(scope="module")
def images():
    """Three 224x224 RGB images: smooth gradients plus noise, so that features differ per image."""
    rng = np.random.default_rng(3)
    ramp = np.linspace(0, 255, 224, dtype=np.float32)
    batch = []
    for index in range(3):
        base = np.stack([ramp[None, :] * np.ones((224, 1)), ramp[:, None] * np.ones((1, 224)),
                         np.full((224, 224), 60.0 * index)], axis=-1)
        batch.append(np.clip(base + rng.normal(0, 30, base.shape), 0, 255))
    return np.stack(batch).astype(np.uint8)


@pytest.fixture(scope="module")
def fc7(seeded_weights, images):
    """fc7 of `images` with the seeded weights, fp32, one device: the reference of the tests below."""
    return run_model(seeded_weights, images, "fc7")


def run_model(weights, images, endpoint="fc7", precision="fp32", num_devices=1):
    model = ModelSpec(
        name="vgg16", fn=lambda batch: vgg16.vgg16(batch, endpoint, compute_dtype(precision)),
        image_size=vgg16.IMAGE_SIZE, load_weights=lambda: vgg16.variable_values(weights, endpoint),
        output_name=endpoint, settings={"precision": precision})
    devices = resolve_devices(devices=",".join("cpu:%d" % i for i in range(num_devices)), gpu_count=0)
    runner = engine.DeviceRunner(model, devices, per_device_batch=2)
    try:
        return runner.run(images)
    finally:
        runner.close()


def test_the_table_pins_the_parameter_count_and_the_names(graph):
    count = sum(np.prod(layer.shape) + layer.shape[-1] for layer in vgg16.LAYERS)
    assert count == vgg16_layers.PARAMETER_COUNT == 138_357_544
    vgg16.vgg16(tf1.placeholder(tf.uint8, [None, 224, 224, 3]), endpoint="fc7")
    variables = tf1.global_variables()
    assert sum(v.shape.num_elements() for v in variables) == vgg16_layers.PARAMETER_COUNT_TO_FC7 == 134_260_544
    assert variables[0].op.name == "vgg16/conv1_1/weights" and variables[-1].op.name == "vgg16/fc7/biases"
    assert [layer.keras_name for layer in vgg16.LAYERS][-3:] == ["fc1", "fc2", "predictions"]


@pytest.mark.parametrize("endpoint, shape, last_layer", [
    ("pool5", [None, 7, 7, 512], "conv5_3"), ("fc6", [None, 4096], "fc6"), ("relu6", [None, 4096], "fc6"),
    ("fc7", [None, 4096], "fc7"), ("relu7", [None, 4096], "fc7"), ("fc8", [None, 1000], "fc8"),
    ("prob", [None, 1000], "fc8"),
])
def test_each_endpoint_builds_only_the_layers_it_needs(graph, endpoint, shape, last_layer):
    output = vgg16.vgg16(tf1.placeholder(tf.uint8, [None, 224, 224, 3]), endpoint=endpoint)
    assert output.shape.as_list() == shape and output.dtype == tf.float32
    assert tf1.global_variables()[-1].op.name == "vgg16/%s/biases" % last_layer
    assert vgg16.feature_size(endpoint) == np.prod(shape[1:])
    assert graph.as_graph_def().ByteSize() < 200_000  # no weights in the graph


def test_bad_arguments_are_refused_naming_the_value(graph):
    images = tf1.placeholder(tf.uint8, [None, 224, 224, 3])
    with pytest.raises(ValueError, match="layer='fc9'"):
        vgg16.vgg16(images, endpoint="fc9")
    with pytest.raises(ValueError, match="float32"):
        vgg16.vgg16(tf1.placeholder(tf.float32, [None, 224, 224, 3]))
    with pytest.raises(ValueError, match=r"\[N, 224, 224, 3\]"):
        vgg16.vgg16(tf1.placeholder(tf.uint8, [None, 100, 100, 3]))
    with pytest.raises(ValueError, match="precision='fp8'"):
        vgg16.feature_model(weights="imagenet", precision="fp8")


def test_preprocessing_is_keras_caffe_preprocessing(graph):
    from keras.applications.vgg16 import preprocess_input

    pixels = np.random.default_rng(0).integers(0, 256, (2, 5, 4, 3), dtype=np.uint8)
    with tf1.Session(graph=graph) as session:
        ours = session.run(vgg16.preprocess(tf.constant(pixels)))
    np.testing.assert_allclose(ours, preprocess_input(pixels.astype(np.float32)), atol=1e-4)


def test_relu7_equals_keras_fc2_given_the_same_h5_weights(seeded_files, images, fc7):
    import keras

    reference = keras.applications.VGG16(weights=None)
    reference.load_weights(str(seeded_files["h5"]))  # Keras itself reads our legacy layout
    fc2 = keras.Model(reference.input, reference.get_layer("fc2").output)
    # Called, not predict(): the same layers in inference mode, without tracing a predict function.
    expected = np.asarray(fc2(keras.applications.vgg16.preprocess_input(images.astype(np.float32)), training=False))
    weights = weight_files.load_weights(seeded_files["h5"])
    relu7 = run_model(weights, images, "relu7")
    assert np.abs(relu7 - expected).max() / np.abs(expected).max() <= 1e-4
    assert (expected > 0).mean() > 0.1  # the comparison is not of zeros
    # fc7 (of the seeded weights this file holds: test_weight_files.py) is the pre-activation: negative where
    # relu7 is 0.
    assert (fc7 < 0).any()
    np.testing.assert_array_equal(np.maximum(fc7, 0), relu7)


def test_feature_model_is_an_engine_model(seeded_files):
    spec = vgg16.feature_model(endpoint="relu7", weights=str(seeded_files["npy"]))
    assert (spec.output_name, spec.image_size, spec.settings["layer"]) == ("relu7", (224, 224), "relu7")
    assert "vgg16.npy" in spec.settings["weights"]
    assert vgg16.feature_model(weights=str(seeded_files["h5"])).settings["weights"] != spec.settings["weights"]
    with pytest.raises(weight_files.WeightsError, match="nowhere.npy is not a file"):
        vgg16.feature_model(weights="nowhere.npy")


# ----------------------------------------------------------------------------- devices and precision

def test_features_do_not_depend_on_the_number_of_devices(seeded_weights, images, fc7):
    one = fc7
    three = run_model(seeded_weights, images, "fc7", num_devices=3)
    np.testing.assert_allclose(three, one, rtol=1e-5, atol=1e-5 * np.abs(one).max())


@functools.lru_cache(maxsize=None)
def _registered_kernels(op_type):
    """The kernels TensorFlow registers for ops of type `op_type` (parsed once per type: a graph has thousands
    of ops of a few dozen types)."""
    return kernels.get_registered_kernels_for_op(op_type).kernel


def _has_gpu_kernel(op):
    """Whether TensorFlow registers a GPU kernel (or a device-independent one) for `op`'s types."""
    for kernel in _registered_kernels(op.type):
        if kernel.device_type in ("GPU", "DEFAULT") and all(
                op.node_def.attr[constraint.name].type in constraint.allowed_values.list.type
                for constraint in kernel.constraint if constraint.allowed_values.list.type):
            return True
    return False


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_on_gpus_every_op_runs_on_its_replicas_gpu_and_has_a_gpu_kernel(precision):
    """What --gpus 0,1,2 builds, checked without GPUs: soft placement is off, so an op on the wrong
    device, or without a GPU kernel for its dtype, would fail (or be copied) on a real GPU box. The weights'
    placeholders (load_weights/) are the host's: each replica's variables start from them, once."""
    model = vgg16.feature_model(endpoint="prob", weights="imagenet", precision=precision)
    names = resolve_devices(gpus="0,1,2", gpu_count=3).names
    graph, placement, _, outputs = engine.build_graph(model, names)
    assert [output.device for output in outputs] == list(names)

    def device_of(op):
        """The device the placer gives `op`: its own, else that of the variable it reads (a resource's
        readers are placed with it), else that of the op it is colocated with."""
        if op.device:
            return op.device
        resources = [tensor.op for tensor in op.inputs if tensor.dtype == tf.resource]
        if resources:
            return device_of(resources[0])
        [group] = op.colocation_groups()
        colocated = graph.get_operation_by_name(group.decode()[len("loc:@"):])
        return colocated.device if colocated is not op else ""

    replica_of = re.compile(r"^(?:parallel|replica)_(\d+)/")
    operations = graph.get_operations()
    fed = [op for op in operations if op.name.startswith("load_weights/")]
    assert len(fed) == 2 * 16 and {(op.type, op.device) for op in fed} == {("Placeholder", "/device:CPU:0")}
    for op in operations:
        match = replica_of.match(op.name)
        if op not in fed:
            assert device_of(op) == names[int(match.group(1)) if match else 0], (op.name, device_of(op))
    assert [op.name for op in operations if not _has_gpu_kernel(op)] == []
    assert len(placement.variables()) == 2 * 16 and all(
        [copy.device for copy in copies] == list(names) for copies in placement.variables().values())


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_stays_close_to_fp32(seeded_weights, images, fc7, precision):
    reference = fc7
    reduced = run_model(seeded_weights, images, "fc7", precision=precision)
    assert reduced.dtype == np.float32
    cosine = (reduced * reference).sum(1) / np.linalg.norm(reduced, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.999, cosine
    assert not np.array_equal(reduced, reference)  # it really computed in another precision


@pytest.fixture
def tensor_float_32():
    """Puts the process-global TF32 flag back as it was after the test."""
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    yield
    tf.config.experimental.enable_tensor_float_32_execution(before)


def test_fp32_turns_tf32_off_tf32_allows_it_and_on_a_cpu_they_are_identical(tmp_path, seeded_files, images,
                                                                             tensor_float_32):
    """TensorFlow allows TF32 by default; the engine sets what the model's precision says before its Session.
    (pool5: the engine sets the flag whatever the endpoint, and fc6 and fc7's 120 M weights need not be loaded.)"""
    files = []
    for index, image in enumerate(images):
        files.append(tmp_path / ("%d.png" % index))
        Image.fromarray(image).save(files[-1])
    features = {}
    for precision, allowed in (("tf32", True), ("fp32", False)):  # the flag set the other way before each
        tf.config.experimental.enable_tensor_float_32_execution(not allowed)
        model = vgg16.feature_model("pool5", weights=str(seeded_files["npy"]), precision=precision)
        assert model.settings["precision"] == precision  # recorded: an fp32 output is not resumed with tf32
        paths, features[precision] = engine.extract(model, files, devices="cpu:0", per_device_batch=1)
        assert tf.config.experimental.tensor_float_32_execution_enabled() is allowed, precision
        assert len(paths) == len(images)
    np.testing.assert_array_equal(features["tf32"], features["fp32"])  # TF32 only changes Ampere+ GPU kernels
