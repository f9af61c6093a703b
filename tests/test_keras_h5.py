"""Keras's legacy .h5 layout read and written by layer name, on tiny files (any model)."""

import h5py
import numpy as np
import pytest

from models import keras_h5
from models.weight_files import WeightsError

EXPECTED = {"dense": (("kernel", (3, 2)), ("bias", (2,))),
            "norm": (("gamma", (2,)), ("beta", (2,)), ("moving_mean", (2,)), ("moving_variance", (2,)))}


def tiny_weights(seed=0):
    rng = np.random.default_rng(seed)
    return {layer: {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes}
            for layer, shapes in EXPECTED.items()}


def write(path, weights):
    layers = [("input", ())] + [(layer, tuple(arrays.items())) for layer, arrays in weights.items()]
    keras_h5.write_weights(path, layers)
    return path


def read(path):
    return keras_h5.read_weights(path, EXPECTED, "Tiny", "tiny.h5")


def assert_same(read_back, weights):
    assert list(read_back) == list(weights)
    for layer, arrays in weights.items():
        assert list(read_back[layer]) == list(arrays)
        for name, array in arrays.items():
            np.testing.assert_array_equal(read_back[layer][name], array)


def test_what_is_written_reads_back_by_name_in_keras_s_layout(tmp_path):
    weights = tiny_weights()
    path = write(tmp_path / "tiny.h5", weights)
    assert_same(read(path), weights)
    with h5py.File(path, "r") as file:
        assert [name.decode() for name in file.attrs["layer_names"]] == ["input", "dense", "norm"]
        assert list(file["dense"].attrs["weight_names"]) == [b"dense/kernel:0", b"dense/bias:0"]
        assert len(file["input"].attrs["weight_names"]) == 0


def test_reads_what_keras_3_writes_weights_alone_or_in_a_whole_model(tmp_path):
    import keras
    from keras.src.legacy.saving import legacy_h5_format

    inputs = keras.Input((3,))
    dense = keras.layers.Dense(2, name="dense")(inputs)
    model = keras.Model(inputs, keras.layers.BatchNormalization(name="norm")(dense))
    weights = tiny_weights(1)
    for layer, arrays in weights.items():
        model.get_layer(layer).set_weights(list(arrays.values()))
    with h5py.File(tmp_path / "weights.h5", "w") as file:
        legacy_h5_format.save_weights_to_hdf5_group(file, model)  # datasets "dense/kernel", no ":0"
    assert_same(read(tmp_path / "weights.h5"), weights)
    legacy_h5_format.save_model_to_hdf5(model, str(tmp_path / "model.h5"))  # under /model_weights
    assert_same(read(tmp_path / "model.h5"), weights)


def test_a_layer_names_list_split_into_chunks_is_joined(tmp_path):
    path = write(tmp_path / "tiny.h5", tiny_weights())
    with h5py.File(path, "a") as file:  # as Keras splits an attribute too large for an HDF5 header
        del file.attrs["layer_names"]
        file.attrs["layer_names0"] = np.array([b"input", b"dense"])
        file.attrs["layer_names1"] = np.array([b"norm"])
    assert_same(read(path), tiny_weights())


def damaged(tmp_path, change):
    path = write(tmp_path / "tiny.h5", tiny_weights())
    with h5py.File(path, "a") as file:
        change(file)
    return path


def replace_kernel(file, array):
    del file["dense"]["dense"]["kernel:0"]
    file["dense"]["dense"].create_dataset("kernel:0", data=array)


@pytest.mark.parametrize("change, message", [
    (lambda file: replace_kernel(file, np.zeros((3, 5), np.float32)),
     r"tiny.h5: layer dense kernel has shape \(3, 5\); Tiny needs \(3, 2\)$"),
    (lambda file: replace_kernel(file, np.zeros((3, 2), np.int32)), r"layer dense kernel is int32, not a float array"),
    (lambda file: file["norm"].attrs.__setitem__("weight_names", np.array([b"norm/gamma:0"])),
     r"layer norm has 1 weights; Tiny needs 4 \(gamma, beta, moving_mean, moving_variance\)"),
    (lambda file: file.attrs.__setitem__("layer_names", np.array([b"input", b"dense"])),
     r"has no layer norm, which Tiny needs \(expected tiny.h5; the file has 2 layers: input, dense\)"),
    (lambda file: file.attrs.__delitem__("layer_names"), r"without Keras's 'layer_names' attribute; expected tiny.h5"),
])
def test_a_wrong_file_is_one_line_naming_the_file_layer_and_shapes(tmp_path, change, message):
    path = damaged(tmp_path, change)
    with pytest.raises(WeightsError, match=message) as error:
        read(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_missing_not_hdf5_and_truncated_files_are_one_line(tmp_path):
    with pytest.raises(WeightsError, match="nowhere.h5: No such file"):
        read(tmp_path / "nowhere.h5")
    (tmp_path / "notes.h5").write_text("not weights")
    with pytest.raises(WeightsError, match=r"notes.h5 is not a Keras .h5 weights file \(expected tiny.h5\)"):
        read(tmp_path / "notes.h5")
    path = write(tmp_path / "tiny.h5", tiny_weights())
    path.write_bytes(path.read_bytes()[:3000])
    with pytest.raises(WeightsError, match=r"tiny.h5 cannot be read as a Keras .h5 weights file \(truncated"):
        read(path)
