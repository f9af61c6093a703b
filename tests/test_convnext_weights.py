"""ConvNeXt-Tiny's weight files: Keras reads the files we write, we read the files Keras writes, bad files are
one line naming the file, the layer and the shapes."""

import shutil

import h5py
import numpy as np
import pytest

from arrays import assert_same_array
from models import weight_files
from models.convnext import convnext_layers as table
from models.convnext.convnext_weights import load_weights, random_weights, save_h5
from models.files import WeightsError


@pytest.fixture(scope="module")
def expected():
    """The random command's weights (seed 0): {layer name: arrays}."""
    return random_weights(0)


@pytest.fixture(scope="module")
def files(tmp_path_factory, expected):
    """The random command's file (the full layout, seed 0) and the same weights in the notop layout."""
    folder = tmp_path_factory.mktemp("convnext_tiny")
    full, notop = folder / "convnext_tiny.h5", folder / "convnext_tiny_notop.h5"
    assert weight_files.main(["random", str(full), "--model", "convnext_tiny"]) == 0
    save_h5(expected, notop, include_top=False)
    return {"full": full, "notop": notop}


@pytest.fixture(scope="module")
def keras_models(files):
    """Keras's ConvNeXtTiny with and without its top, each loaded by Keras from our file of its layout."""
    import keras

    full = keras.applications.ConvNeXtTiny(weights=None)
    full.load_weights(str(files["full"]))
    notop = keras.applications.ConvNeXtTiny(weights=None, include_top=False, pooling="avg")
    notop.load_weights(str(files["notop"]))
    return {"full": full, "notop": notop}


def keras_written(model, path):
    """`model`'s weights in Keras 3's own legacy .h5 writing (Keras 3 names: no ':0'; the notop LayerNorm
    named by the session, e.g. layer_normalization_1)."""
    from keras.src.legacy.saving import legacy_h5_format

    with h5py.File(path, "w") as file:
        legacy_h5_format.save_weights_to_hdf5_group(file, model)
    return path


def test_keras_reads_our_files_into_its_own_model(keras_models, expected):
    for kind, top in (("full", True), ("notop", False)):
        layers = [layer for layer in keras_models[kind].layers if layer.weights]
        ours = table.LAYERS if top else table.BODY + (table.HEAD_LAYER_NORM,)
        assert len(layers) == len(ours)
        for keras_layer, layer in zip(layers, ours):
            legacy_order = keras_layer.trainable_weights + keras_layer.non_trainable_weights
            values = [variable.numpy() for variable in legacy_order]
            for value, array in zip(values, expected[layer.name], strict=True):
                assert_same_array(value, array, layer.name)


def test_the_random_command_writes_what_we_read_back(files, expected):
    read = load_weights(files["full"], with_top=True)
    assert list(read) == [layer.name for layer in table.LAYERS]
    for name, arrays in expected.items():
        for ours, theirs in zip(read[name], arrays, strict=True):
            assert_same_array(ours, theirs, name)
    notop = load_weights(files["notop"])
    assert list(notop) == list(read)[:-1]  # no head/dense
    np.testing.assert_array_equal(notop["head/layernorm"][0], expected["head/layernorm"][0])


def test_we_read_the_files_keras_3_writes(keras_models, expected, tmp_path):
    full = load_weights(keras_written(keras_models["full"], tmp_path / "full.h5"), with_top=True)
    with h5py.File(tmp_path / "full.h5") as file:
        stem_names = list(file["convnext_tiny_stem"].attrs["weight_names"])
    assert stem_names[0] == "convnext_tiny_stem/convnext_tiny_stem_conv/kernel"  # Keras 3's names, not Keras 2's
    notop = load_weights(keras_written(keras_models["notop"], tmp_path / "notop.h5"))
    for read in (full, notop):
        for name, arrays in read.items():
            for ours, theirs in zip(arrays, expected[name], strict=True):
                assert_same_array(ours, theirs, name)
    assert set(full) - set(notop) == {"head/dense"}


def test_a_layer_names_attribute_split_in_chunks_reads_the_same(files, tmp_path):
    """Keras splits an attribute larger than HDF5's 64 KiB into layer_names0, layer_names1, ..."""
    path = shutil.copy(files["notop"], tmp_path / "chunked.h5")
    with h5py.File(path, "r+") as file:
        names = list(file.attrs["layer_names"])
        del file.attrs["layer_names"]
        file.attrs["layer_names0"], file.attrs["layer_names1"] = names[:50], names[50:]
    read, expected = load_weights(path), load_weights(files["notop"])
    assert list(read) == list(expected)
    np.testing.assert_array_equal(read["head/layernorm"][1], expected["head/layernorm"][1])


def one_line_error(path, **options):
    with pytest.raises(WeightsError) as raised:
        load_weights(path, **options)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message, message
    return message


def test_bad_files_are_one_line_naming_the_file_the_layer_and_the_shapes(files, expected, tmp_path):
    message = one_line_error(files["notop"], with_top=True)
    assert "no layer convnext_tiny_head_dense (a notop file?)" in message and "convnext_tiny.h5" in message
    weights = dict(expected)
    weights["stage_2/block_4/pointwise_conv_1"] = (np.zeros((384, 1000), np.float32), np.zeros(1000, np.float32))
    save_h5(weights, tmp_path / "misshapen.h5")
    assert ("layer convnext_tiny_stage_2_block_4_pointwise_conv_1 kernel has shape (384, 1000); ConvNeXt-Tiny "
            "needs (384, 1536)") in one_line_error(tmp_path / "misshapen.h5")
    with h5py.File(tmp_path / "missing.h5", "w") as file:
        file.attrs["layer_names"] = [b"convnext_tiny_stem"]
        file.create_group("convnext_tiny_stem").attrs["weight_names"] = [b"convnext_tiny_stem_conv/kernel:0"]
        file["convnext_tiny_stem"].create_dataset("convnext_tiny_stem_conv/kernel:0", data=np.zeros((4, 4, 3, 96)))
    assert "layer convnext_tiny_stem has 1 arrays; ConvNeXt-Tiny's stem has 4" in one_line_error(
        tmp_path / "missing.h5")
    with h5py.File(tmp_path / "vgg.h5", "w") as file:
        file.attrs["layer_names"] = [b"block1_conv1"]
        file.create_group("block1_conv1").attrs["weight_names"] = [b"block1_conv1/kernel:0"]
        file["block1_conv1"].create_dataset("block1_conv1/kernel:0", data=np.zeros((3, 3, 3, 64)))
    assert one_line_error(tmp_path / "vgg.h5").endswith(
        "has no layer convnext_tiny_stem (stem), which ConvNeXt-Tiny needs (the file has 1 layers with weights: "
        "block1_conv1); it looks like a VGG16 weights file: pass --model vgg16")
    with h5py.File(tmp_path / "plain.h5", "w") as file:
        file["x"] = np.zeros(3)
    assert "without Keras's 'layer_names' attribute" in one_line_error(tmp_path / "plain.h5")
    (tmp_path / "notes.h5").write_text("not weights")
    assert "is not a Keras .h5 weights file" in one_line_error(tmp_path / "notes.h5")
    with open(files["full"], "rb") as source:
        (tmp_path / "truncated.h5").write_bytes(source.read(1 << 20))
    assert "truncated or damaged?" in one_line_error(tmp_path / "truncated.h5")
    assert "No such file" in one_line_error(tmp_path / "nowhere.h5")


def test_the_random_command_refuses_other_extensions(tmp_path, capsys):
    assert weight_files.main(["random", str(tmp_path / "x.npy"), "--model", "convnext_tiny"]) == 2
    assert ".h5 (Keras's convnext_tiny.h5 layout) for convnext_tiny" in capsys.readouterr().err
    assert not (tmp_path / "x.npy").exists()
