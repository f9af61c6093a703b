"""VGG16: the table, the endpoints, Keras equivalence, the weight files and their failures."""

import hashlib
import http.server
import pickle
import re
import socket
import threading

import h5py
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

from models import vgg16
from parallel import engine
from parallel.devices import resolve_devices

tf1 = tf.compat.v1


@pytest.fixture(scope="module")
def weights():
    return vgg16.random_weights(seed=0)


@pytest.fixture(scope="module")
def weight_files(weights, tmp_path_factory):
    """The same seeded weights in both real on-disk layouts."""
    folder = tmp_path_factory.mktemp("weights")
    vgg16.save_npy(weights, folder / "vgg16.npy")
    vgg16.save_h5(weights, folder / vgg16.IMAGENET_FILE)
    return {"npy": folder / "vgg16.npy", "h5": folder / vgg16.IMAGENET_FILE}


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


def run_model(weights, images, endpoint="fc7", precision="fp32", num_devices=1):
    model = engine.ModelSpec(
        name="vgg16", fn=lambda batch: vgg16.vgg16(batch, endpoint, vgg16.PRECISIONS[precision]),
        image_size=vgg16.IMAGE_SIZE, load_weights=lambda: vgg16.variable_values(weights, endpoint),
        output_name=endpoint)
    devices = resolve_devices(devices=",".join("cpu:%d" % i for i in range(num_devices)), gpu_count=0)
    runner = engine.DeviceRunner(model, devices, per_device_batch=2)
    try:
        return runner.run(images)
    finally:
        runner.close()


def test_the_table_pins_the_parameter_count_and_the_names(graph):
    count = sum(np.prod(layer.shape) + layer.shape[-1] for layer in vgg16.LAYERS)
    assert count == vgg16.PARAMETER_COUNT == 138_357_544
    vgg16.vgg16(tf1.placeholder(tf.uint8, [None, 224, 224, 3]), endpoint="fc7")
    variables = tf1.global_variables()
    assert sum(v.shape.num_elements() for v in variables) == vgg16.PARAMETER_COUNT_TO_FC7 == 134_260_544
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


def test_relu7_equals_keras_fc2_given_the_same_h5_weights(weight_files, images):
    import keras

    reference = keras.applications.VGG16(weights=None)
    reference.load_weights(str(weight_files["h5"]))  # Keras itself reads our legacy layout
    fc2 = keras.Model(reference.inputs, reference.get_layer("fc2").output)
    expected = fc2.predict(keras.applications.vgg16.preprocess_input(images.astype(np.float32)), verbose=0)
    weights = vgg16.load_weights(weight_files["h5"])
    relu7, fc7 = (run_model(weights, images, endpoint) for endpoint in ("relu7", "fc7"))
    assert np.abs(relu7 - expected).max() / np.abs(expected).max() <= 1e-4
    assert (expected > 0).mean() > 0.1  # the comparison is not of zeros
    # fc7 is the pre-activation: negative where relu7 is 0.
    assert (fc7 < 0).any()
    np.testing.assert_array_equal(np.maximum(fc7, 0), relu7)


def test_npy_and_h5_files_give_the_same_weights(weights, weight_files):
    from_npy, from_h5 = vgg16.load_weights(weight_files["npy"]), vgg16.load_weights(weight_files["h5"])
    assert list(from_npy) == list(from_h5) == [layer.name for layer in vgg16.LAYERS]
    for name in from_npy:
        for ours, theirs, original in zip(from_npy[name], from_h5[name], weights[name]):
            np.testing.assert_array_equal(ours, theirs)
            np.testing.assert_array_equal(ours, original)


def test_a_python2_tensorflow_vgg_pickle_loads(tmp_path):
    """vgg16.npy was written by Python 2: protocol 2, array data as latin-1 str."""
    small = {"conv1_1": [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)]}
    array = np.empty((), dtype=object)
    array[()] = small
    path = tmp_path / "py2.npy"
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "|O", "fortran_order": False, "shape": ()})
        pickle.dump(array, handle, protocol=2)
    loaded = vgg16._read_npy(path)
    np.testing.assert_array_equal(loaded["conv1_1"][0], small["conv1_1"][0])


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, ("touch %s" % self.marker,))


def _npy_with_pickle(path, content):
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "|O", "fortran_order": False, "shape": ()})
        pickle.dump(content, handle, protocol=3)


@pytest.mark.parametrize("content", ["code", "set"])
def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path, content):
    marker = tmp_path / "code-ran"
    payload = {"conv1_1": [_RunsCode(marker)]} if content == "code" else {"conv1_1": {1, 2}}
    _npy_with_pickle(tmp_path / "evil.npy", payload)
    with pytest.raises(vgg16.WeightsError, match="refused: it refers to (posix|os|builtins)"):
        vgg16.load_weights(tmp_path / "evil.npy")
    assert not marker.exists()
    # The unprotected way would have run it: proves the fixture is really hostile.
    if content == "code":
        np.load(tmp_path / "evil.npy", allow_pickle=True)
        assert marker.exists()


def _h5_with(tmp_path, layers):
    path = tmp_path / "partial.h5"
    vgg16.save_h5(layers, path)
    return path


@pytest.mark.parametrize("make, message", [
    (lambda tmp: _h5_with(tmp, {"conv1_1": (np.zeros((3, 3, 3, 32), np.float32), np.zeros(32, np.float32))}),
     r"layer conv1_1 \(Keras: block1_conv1\) weights have shape \(3, 3, 3, 32\); VGG16 needs \(3, 3, 3, 64\)"),
    (lambda tmp: _h5_with(tmp, {"conv1_1": (np.zeros((3, 3, 3, 64), np.float32), np.zeros(64, np.float32))}),
     r"has no layer conv1_2 \(Keras: block1_conv2\)"),
    (lambda tmp: (tmp / "a.npy", np.save(tmp / "a.npy", np.zeros(3)))[0], "plain float64 array"),
    (lambda tmp: (tmp / "a.txt", (tmp / "a.txt").write_text("hello"))[0], "neither a tensorflow-vgg"),
    (lambda tmp: tmp / "missing.h5", "No such file"),
    (lambda tmp: (tmp / "e.h5", h5py.File(tmp / "e.h5", "w").close())[0], "without Keras's 'layer_names'"),
    (lambda tmp: (tmp / "l.npy", _npy_with_pickle(tmp / "l.npy", [1, 2]))[0], "holds a list"),
])
def test_bad_weight_files_are_one_clear_error(tmp_path, make, message):
    with pytest.raises(vgg16.WeightsError, match=message):
        vgg16.load_weights(make(tmp_path))


@pytest.mark.parametrize("kind", ["npy", "h5"])
def test_truncated_weight_files_are_refused(weight_files, tmp_path, kind):
    truncated = tmp_path / ("truncated." + kind)
    with open(weight_files[kind], "rb") as source:
        truncated.write_bytes(source.read(30_000_000))
    with pytest.raises(vgg16.WeightsError, match="truncated or damaged"):
        vgg16.load_weights(truncated)


def test_feature_model_is_an_engine_model(weight_files):
    spec = vgg16.feature_model(endpoint="relu7", weights=str(weight_files["npy"]))
    assert (spec.output_name, spec.image_size, spec.settings["layer"]) == ("relu7", (224, 224), "relu7")
    assert "vgg16.npy" in spec.settings["weights"]
    assert vgg16.feature_model(weights=str(weight_files["h5"])).settings["weights"] != spec.settings["weights"]
    with pytest.raises(vgg16.WeightsError, match="nowhere.npy is not a file"):
        vgg16.feature_model(weights="nowhere.npy")


# ----------------------------------------------------------------------------- imagenet: cache and download

class _OneFileServer:
    """Serves `content` on loopback (tests never touch the network)."""

    def __init__(self, content):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/%s" % (self.server.server_port, vgg16.IMAGENET_FILE)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_the_keras_cache_file_is_used_without_downloading(tmp_path, monkeypatch):
    cached = tmp_path / "models" / vgg16.IMAGENET_FILE
    cached.parent.mkdir()
    cached.write_bytes(b"cached")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert vgg16.imagenet_weights(url="http://127.0.0.1:9/unreachable") == cached


def test_a_download_is_checked_and_stored_atomically(tmp_path):
    content = b"weights" * 1000
    server = _OneFileServer(content)
    try:
        with pytest.raises(vgg16.WeightsError, match="has MD5 .* expected 0+; nothing was kept"):
            vgg16.imagenet_weights(tmp_path, url=server.url, md5="0" * 32)
        assert list((tmp_path / "models").iterdir()) == []
        path = vgg16.imagenet_weights(tmp_path, url=server.url, md5=hashlib.md5(content).hexdigest())
    finally:
        server.close()
    assert path == tmp_path / "models" / vgg16.IMAGENET_FILE and path.read_bytes() == content
    assert [p.name for p in path.parent.iterdir()] == [vgg16.IMAGENET_FILE]


def test_offline_is_one_line_pointing_to_weights_path(tmp_path):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(vgg16.WeightsError, match=r"offline\? pass --weights PATH") as error:
        vgg16.imagenet_weights(tmp_path, url="http://127.0.0.1:%d/x.h5" % port)
    assert "\n" not in str(error.value)
    assert list((tmp_path / "models").iterdir()) == []


# ----------------------------------------------------------------------------- devices and precision

def test_features_do_not_depend_on_the_number_of_devices(weights, images):
    one = run_model(weights, images, "fc7", num_devices=1)
    three = run_model(weights, images, "fc7", num_devices=3)
    np.testing.assert_allclose(three, one, rtol=1e-5, atol=1e-5 * np.abs(one).max())


def _has_gpu_kernel(op):
    """Whether TensorFlow registers a GPU kernel (or a device-independent one) for `op`'s types."""
    for kernel in kernels.get_registered_kernels_for_op(op.type).kernel:
        if kernel.device_type in ("GPU", "DEFAULT") and all(
                op.node_def.attr[constraint.name].type in constraint.allowed_values.list.type
                for constraint in kernel.constraint if constraint.allowed_values.list.type):
            return True
    return False


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_on_gpus_every_op_runs_on_its_replicas_gpu_and_has_a_gpu_kernel(precision):
    """What --gpus 0,1,2 builds, checked without GPUs: soft placement is off, so an op on the wrong
    device, or without a GPU kernel for its dtype, would fail (or be copied) on a real GPU box."""
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
    for op in operations:
        match = replica_of.match(op.name)
        assert device_of(op) == names[int(match.group(1)) if match else 0], (op.name, device_of(op))
    assert [op.name for op in operations if not _has_gpu_kernel(op)] == []
    assert len(placement.variables()) == 2 * 16 and all(
        [copy.device for copy in copies] == list(names) for copies in placement.variables().values())


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_reduced_precision_stays_close_to_fp32(weights, images, precision):
    reference = run_model(weights, images, "fc7")
    reduced = run_model(weights, images, "fc7", precision=precision)
    assert reduced.dtype == np.float32
    cosine = (reduced * reference).sum(1) / np.linalg.norm(reduced, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.999, cosine
    assert not np.array_equal(reduced, reference)  # it really computed in another precision
