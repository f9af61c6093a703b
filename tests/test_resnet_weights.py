"""ResNet50's weight files: Keras reads what we write (with and without the top), we read it back by name,
a wrong file is one line, and the random command writes either layout."""

import h5py
import numpy as np
import pytest

from arrays import assert_same_array
from models import weight_files
from models.files import WeightsError
from models.resnet import resnet_layers, resnet_weights


@pytest.fixture(scope="module")
def written():
    """Seed 0's random weights, with the top."""
    return resnet_weights.random_weights(seed=0)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Seed 0's random weights, written with the top and without: {"full": path, "notop": path}."""
    folder = tmp_path_factory.mktemp("resnet50_files")
    paths = {"full": folder / resnet_weights.FILE_NAME, "notop": folder / resnet_weights.NOTOP_FILE_NAME}
    for path in paths.values():
        resnet_weights.write_random(path, seed=0)
    return paths


@pytest.mark.parametrize("kind", ["full", "notop"])
def test_keras_loads_our_file_into_its_own_resnet50_every_weight_where_it_belongs(files, written, kind):
    """Keras reads a legacy file by order: each of its layers must get the weights we wrote under its name."""
    import keras

    model = keras.applications.ResNet50(weights=None, include_top=kind == "full")
    model.load_weights(str(files[kind]))
    loaded = {layer.name: [weight.numpy() for weight in layer.weights] for layer in model.layers if layer.weights}
    assert sorted(loaded) == sorted(set(written) - ({"predictions"} if kind == "notop" else set()))
    for layer in loaded:
        arrays = written[layer]
        for array, (name, expected) in zip(loaded[layer], arrays.items()):
            assert_same_array(array, expected, "%s %s" % (layer, name))


def test_our_reader_reads_both_files_and_the_top_only_from_the_full_one(files, written):
    for kind in ("full", "notop"):
        weights = resnet_weights.load_weights(files[kind])
        assert len(weights) == 106 and "predictions" not in weights  # 53 convolutions and their batch norms
        np.testing.assert_array_equal(weights["conv5_block3_3_bn"]["gamma"], written["conv5_block3_3_bn"]["gamma"])
    top = resnet_weights.load_weights(files["full"], include_top=True)
    assert top["predictions"]["kernel"].shape == (2048, 1000)
    np.testing.assert_array_equal(top["predictions"]["bias"], written["predictions"]["bias"])
    with pytest.raises(WeightsError, match="notop.h5 has no layer predictions, which ResNet50 needs "
                                           r"\(expected resnet50_weights_tf_dim_ordering_tf_kernels.h5;"):
        resnet_weights.load_weights(files["notop"], include_top=True)


def test_random_weights_are_shaped_as_the_table_and_another_seed_gives_others(written):
    """(The same seed gives the same weights: the files of the tests above are compared with a new draw.)"""
    assert {layer: tuple((name, array.shape) for name, array in arrays.items()) for layer, arrays in written.items()} \
        == resnet_layers.weight_shapes()
    assert all(array.dtype == np.float32 for arrays in written.values() for array in arrays.values())
    other = resnet_weights.random_weights(seed=1, include_top=False)
    assert not np.array_equal(written["conv1_conv"]["kernel"], other["conv1_conv"]["kernel"])


def test_a_kernel_of_another_shape_names_the_file_layer_and_both_shapes(files, tmp_path):
    path = tmp_path / "resnet101-like.h5"
    path.write_bytes(files["notop"].read_bytes())
    with h5py.File(path, "a") as file:
        group = file["conv4_block2_2_conv"]["conv4_block2_2_conv"]
        del group["kernel:0"]
        group.create_dataset("kernel:0", data=np.zeros((3, 3, 256, 128), np.float32))
    with pytest.raises(WeightsError) as error:
        resnet_weights.load_weights(path)
    assert str(error.value) == ("weights=%s: layer conv4_block2_2_conv kernel has shape (3, 3, 256, 128); ResNet50 "
                                "needs (3, 3, 256, 256)" % path)


def test_the_random_command_writes_either_layout_and_refuses_another_suffix(tmp_path, capsys):
    def command(output):
        return weight_files.main(["random", str(output), "--model", "resnet50", "--seed", "3"]), (
            capsys.readouterr().err)

    status, error = command(tmp_path / "r_notop.h5")
    assert status == 0 and "RANDOM resnet50 weights (seed 3) in Keras's layout" in error, error
    with h5py.File(tmp_path / "r_notop.h5", "r") as file:
        assert "predictions" not in file and file.attrs["layer_names"][-1] == b"conv5_block3_out"
    status, error = command(tmp_path / "r.npy")
    assert status == 2 and "must end in .h5 (Keras's layout) for resnet50" in error
    assert not (tmp_path / "r.npy").exists()
