"""Keras's legacy .h5 layout read and written by layer name, on tiny files (any model)."""

import h5py
import numpy as np
import pytest

from models import keras_h5
from models.files import WeightsError

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
     r"has no layer norm, which Tiny needs \(expected tiny.h5; the file has 1 layers with weights: dense\)$"),
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


# ----------------------------------------------------------------------------- for callers with quirks

NORMALIZATION = (("mean", (3,)), ("variance", (3,)), ("count", (), np.int64))


def test_read_layers_gives_every_layer_in_the_file_s_order_by_short_weight_names(tmp_path):
    weights = tiny_weights()
    layers = keras_h5.read_layers(write(tmp_path / "tiny.h5", weights), "tiny.h5")
    assert list(layers) == ["input", "dense", "norm"] and layers["input"] == ()
    assert [name for name, _ in layers["norm"]] == ["gamma", "beta", "moving_mean", "moving_variance"]
    np.testing.assert_array_equal(layers["dense"][0][1], weights["dense"]["kernel"])


def test_a_layer_whose_name_varies_is_found_by_the_caller_and_checked_by_name(tmp_path):
    """As EfficientNet's Normalization, which Keras numbers ("normalization_3"): found by its weights."""
    mean, variance = np.float32([0.5, 0.4, 0.3]), np.float32([0.2, 0.2, 0.1])
    path = tmp_path / "numbered.h5"
    keras_h5.write_weights(path, [("normalization_3", (("mean", mean), ("variance", variance),
                                                       ("count", np.int64(7))))])
    layers = keras_h5.read_layers(path, "numbered.h5")
    found = [name for name, weights in layers.items()
             if {weight for weight, _ in weights} == {"mean", "variance", "count"}]
    assert found == ["normalization_3"]
    checked = keras_h5.checked(layers[found[0]], NORMALIZATION, path, found[0], "Tiny")
    np.testing.assert_array_equal(checked["mean"], mean)
    assert checked["mean"].dtype == np.float32 and checked["count"].dtype == np.int64 and checked["count"] == 7


def test_a_non_float_weight_is_written_as_it_is_and_read_with_the_dtype_asked(tmp_path):
    path = tmp_path / "count.h5"
    keras_h5.write_weights(path, [("norm", (("mean", np.zeros(3)), ("variance", np.ones(3)),
                                            ("count", np.array(5, np.int32))))])
    with h5py.File(path, "r") as file:
        assert file["norm"]["norm"]["mean:0"].dtype == np.float32 and file["norm"]["norm"]["count:0"].dtype == np.int32
    weights = keras_h5.read_weights(path, {"norm": NORMALIZATION}, "Tiny", "tiny.h5")["norm"]
    assert weights["count"].dtype == np.int64 and weights["count"].shape == () and weights["count"] == 5
    with pytest.raises(WeightsError, match=r"count.h5: layer norm variance is float32, not an integer array$"):
        keras_h5.read_weights(path, {"norm": (("mean", (3,)), ("variance", (3,), np.int64), ("count", ()))},
                              "Tiny", "tiny.h5")


def test_a_weight_name_with_a_slash_is_the_weight_s_whole_name(tmp_path):
    """As Keras 2 named the weights of a layer nested in another (ConvNeXt's stem: a Sequential)."""
    kernel, bias = np.ones((2, 2), np.float32), np.zeros(2, np.float32)
    path = tmp_path / "nested.h5"
    keras_h5.write_weights(path, [("stem", (("stem_conv/kernel", kernel), ("bias", bias)))])
    with h5py.File(path, "r") as file:
        assert list(file["stem"].attrs["weight_names"]) == [b"stem_conv/kernel:0", b"stem/bias:0"]
    read_back = keras_h5.read_weights(path, {"stem": (("kernel", (2, 2)), ("bias", (2,)))}, "Tiny", "tiny.h5")
    np.testing.assert_array_equal(read_back["stem"]["kernel"], kernel)


def test_keras_3_s_normalization_count_reads_as_an_integer(tmp_path):
    import keras
    from keras.src.legacy.saving import legacy_h5_format

    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Normalization(name="normalization_1")(inputs))
    model.get_layer("normalization_1").set_weights([np.float32([1, 2, 3]), np.float32([4, 5, 6]), np.array(9)])
    with h5py.File(tmp_path / "weights.h5", "w") as file:
        legacy_h5_format.save_weights_to_hdf5_group(file, model)
    weights = keras_h5.read_weights(tmp_path / "weights.h5", {"normalization_1": NORMALIZATION}, "Tiny", "tiny.h5")
    np.testing.assert_array_equal(weights["normalization_1"]["variance"], [4, 5, 6])
    assert weights["normalization_1"]["count"] == 9
