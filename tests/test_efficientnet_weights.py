"""EfficientNetB0's weight files: Keras reads what we write, we read what Keras writes, bad files are one line."""

import re

import h5py
import numpy as np
import pytest

from arrays import assert_same_array
from models import weight_files
from models.efficientnet import efficientnet_weights as files
from models.efficientnet.efficientnet_layers import KERAS_LAYERS, TOP_LAYERS
from models.files import WeightsError


@pytest.fixture(scope="module")
def random_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("efficientnet_b0") / "efficientnetb0.h5"
    files.write_random(path, seed=3)
    return path


@pytest.fixture(scope="module")
def keras_model():
    import keras

    return keras.applications.EfficientNetB0(weights=None)


def test_keras_reads_our_file_layer_for_layer(random_file, keras_model):
    keras_model.load_weights(str(random_file))  # Keras matches an .h5 file's layers by their order
    expected = files.random_weights(seed=3)
    with_weights = [layer for layer in keras_model.layers if layer.weights]
    # Keras numbers its Normalization layers ("normalization_2"): only that name may differ.
    assert [re.sub(r"_\d+$", "", layer.name) if index == 0 else layer.name for index, layer in enumerate(with_weights)
            ] == [layer.name for layer in KERAS_LAYERS]
    for layer, ours in zip(with_weights, KERAS_LAYERS):
        for variable, (name, _) in zip(layer.weights, ours.weights):
            assert_same_array(variable, expected[ours.name][name], ours.name + " " + name)


def test_we_read_a_file_keras_3_wrote(tmp_path, keras_model):
    from keras.src.legacy.saving import legacy_h5_format

    path = tmp_path / "keras3.h5"
    with h5py.File(path, "w") as file:
        legacy_h5_format.save_weights_to_hdf5_group(file, keras_model)
    with h5py.File(path, "r") as file:  # Keras 3's names: "block1a_dwconv/kernel", not ".../depthwise_kernel:0"
        assert list(file["block1a_dwconv"].attrs["weight_names"]) == ["block1a_dwconv/kernel"]
    weights = files.load_weights(path, include_top=True)
    assert list(weights) == [layer.name for layer in KERAS_LAYERS]
    np.testing.assert_array_equal(weights["block1a_dwconv"]["depthwise_kernel"],
                                  keras_model.get_layer("block1a_dwconv").get_weights()[0])
    np.testing.assert_array_equal(weights["predictions"]["bias"], keras_model.get_layer("predictions").bias)
    assert set(weights["normalization"]) == {"mean", "variance"}


def test_what_we_write_is_what_we_read(random_file):
    written, expected = files.load_weights(random_file, include_top=True), files.random_weights(seed=3)
    for layer in KERAS_LAYERS:
        for name, array in written[layer.name].items():
            assert_same_array(array, expected[layer.name][name], layer.name + " " + name)
    assert files.looks_like_keras_imagenet_file(written)  # the random command's file: as Keras's ImageNet file
    assert not files.looks_like_keras_imagenet_file(files.random_weights(seed=3, imagenet_normalization=False))
    assert "predictions" not in files.load_weights(random_file)  # include_top=False reads up to top_bn


def _notop(tmp_path):
    notop = tmp_path / "efficientnetb0_notop.h5"
    weights = files.random_weights(seed=1)
    for name in TOP_LAYERS:
        del weights[name]
    files.save_h5(weights, notop)
    return notop


def test_a_notop_file_reads_without_the_top_and_is_refused_for_it(tmp_path):
    notop = _notop(tmp_path)
    assert len(files.load_weights(notop)) == len(KERAS_LAYERS) - 1
    with pytest.raises(WeightsError, match=r"efficientnetb0_notop.h5 has no layer predictions \(only in the full "
                                           r"file, efficientnetb0.h5, not in the notop one\), which EfficientNetB0 "
                                           r"needs \(the file has 131 layers with weights: normalization, stem_conv, "
                                           r"stem_bn, block1a_dwconv, ...\)$"):
        files.load_weights(notop, include_top=True)


def _written(path, content):
    path.write_bytes(content)
    return path


def _rewritten(source, target, layer, dataset, value):
    """A copy of `source` with `layer`'s dataset `dataset` replaced by `value`."""
    target.write_bytes(source.read_bytes())
    with h5py.File(target, "r+") as file:
        del file[layer][dataset]
        file[layer].create_dataset(dataset, data=value)
    return target


@pytest.mark.parametrize("make, message", [
    (lambda tmp, good: tmp / "missing.h5", "missing.h5: No such file"),
    (lambda tmp, good: _written(tmp / "notes.h5", b"hello"),
     "notes.h5 is not a Keras .h5 weights file"),
    (lambda tmp, good: h5py.File(tmp / "empty.h5", "w").close() or tmp / "empty.h5",
     "empty.h5 is an HDF5 file without Keras's 'layer_names' attribute"),
    (lambda tmp, good: _rewritten(good, tmp / "shape.h5", "block2a_dwconv", "block2a_dwconv/depthwise_kernel:0",
                                  np.zeros((5, 5, 96, 1), np.float32)),
     r"shape.h5: layer block2a_dwconv depthwise_kernel has shape \(5, 5, 96, 1\); "
     r"EfficientNetB0 needs \(3, 3, 96, 1\)"),
    (lambda tmp, good: _rewritten(good, tmp / "ints.h5", "stem_bn", "stem_bn/gamma:0", np.ones(32, np.int32)),
     "ints.h5: layer stem_bn gamma is int32, not a float array"),
    (lambda tmp, good: _written(tmp / "cut.h5", good.read_bytes()[:200_000]),
     "cut.h5 cannot be read as a Keras .h5 weights file"),
])
def test_bad_files_are_one_line_naming_the_file_layer_and_shapes(random_file, tmp_path, make, message):
    with pytest.raises(WeightsError) as refused:
        files.load_weights(make(tmp_path, random_file), include_top=True)
    assert re.search(message, str(refused.value)) and "\n" not in str(refused.value), str(refused.value)


def test_another_model_s_file_is_refused_naming_the_first_missing_layer(tmp_path):
    with h5py.File(tmp_path / "other.h5", "w") as file:  # the layout of VGG16's file, one layer of it
        file.attrs["layer_names"] = [b"block1_conv1", b"block1_pool"]
        file.create_group("block1_pool").attrs["weight_names"] = np.array([], dtype="S1")
        file.create_group("block1_conv1").attrs["weight_names"] = [b"block1_conv1/kernel:0"]
        file["block1_conv1"].create_dataset("block1_conv1/kernel:0", data=np.zeros((3, 3, 3, 64), np.float32))
    with pytest.raises(WeightsError, match=r"other.h5 has no layer normalization \(mean, variance and count\), "
                                           r"which EfficientNetB0 needs \(the file has 1 layers with weights: "
                                           r"block1_conv1\); it looks like a VGG16 weights file: pass --model vgg16$"):
        files.load_weights(tmp_path / "other.h5")


def test_the_random_command_writes_the_full_file(tmp_path, capsys):
    output = tmp_path / "efficientnet_b0-random.h5"
    assert weight_files.main(["random", str(output), "--model", "efficientnet_b0", "--seed", "3"]) == 0
    assert "RANDOM efficientnet_b0 weights (seed 3) in Keras's efficientnetb0.h5 layout" in capsys.readouterr().err
    np.testing.assert_array_equal(files.load_weights(output, include_top=True)["predictions"]["kernel"],
                                  files.random_weights(seed=3)["predictions"]["kernel"])
    assert weight_files.main(["random", str(tmp_path / "x.npy"), "--model", "efficientnet_b0"]) == 2
    assert "x.npy: the name must end in .h5 (Keras's efficientnetb0.h5 layout) for efficientnet_b0" in (
        capsys.readouterr().err)
