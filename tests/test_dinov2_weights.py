"""DINOv2's files: Hugging Face's tensors mapped onto the graph's variables, the position embeddings' bicubic
resize by its definition, wrong files refused in one line naming them, the `random` command."""

import numpy as np
import pytest

from models import safetensors_files, weight_files
from models.dinov2 import dinov2_layers, dinov2_weights
from models.dinov2.dinov2_layers import VITB14, VITS14
from models.files import WeightsError


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """Seeded random ViT-S/14 weights in Hugging Face's layout, written by the `random` command."""
    path = tmp_path_factory.mktemp("dinov2") / "dinov2_vits14.safetensors"
    assert weight_files.main(["random", str(path), "--model", "dinov2_vits14", "--seed", "3"]) == 0
    return path


def test_the_random_command_writes_hugging_face_s_tensors_which_map_onto_every_variable(checkpoint):
    tensors = dinov2_weights.read_tensors(checkpoint)
    assert sorted(tensors) == sorted(list(dinov2_weights.hub_names(VITS14).values()) + ["embeddings.mask_token"])
    assert sum(array.size for array in tensors.values()) == VITS14.parameter_count
    assert safetensors_files.read_metadata(checkpoint) == {"format": "pt"}
    values = dinov2_weights.load_weights(checkpoint, VITS14)
    assert [(name, array.shape) for name, array in values.items()] == [
        ("dinov2_vits14/" + name, shape) for name, shape in dinov2_layers.variables(VITS14)]
    # PyTorch's layouts, transposed: a Linear's [outputs, inputs], the patch Conv2d's [outputs, 3, 14, 14].
    np.testing.assert_array_equal(values["dinov2_vits14/block_3/mlp/fc1/kernel"],
                                  tensors["encoder.layer.3.mlp.fc1.weight"].T)
    np.testing.assert_array_equal(values["dinov2_vits14/patch_embedding/kernel"][2, 5, 1],
                                  tensors["embeddings.patch_embeddings.projection.weight"][:, 1, 2, 5])
    np.testing.assert_array_equal(values["dinov2_vits14/position_embedding"][0],
                                  tensors["embeddings.position_embeddings"][0, 0])
    gammas = tensors["encoder.layer.0.layer_scale1.lambda1"]
    assert 0.05 <= gammas.min() and gammas.max() <= 0.3  # small, as a trained network's


def test_each_reading_and_writing_walks_the_size_s_name_table_once(checkpoint, monkeypatch):
    """hub_names walks every variable of the size: built once a call, not once a variable (quadratic in the depth:
    the registry's line refusing a giant's file for another model took seconds)."""
    calls, real = [], dinov2_weights.hub_names
    monkeypatch.setattr(dinov2_weights, "hub_names", lambda variant: calls.append(variant.name) or real(variant))
    for work in (lambda: dinov2_weights.RandomFiles(VITS14).tensors(), lambda: dinov2_weights.load_weights(
            checkpoint, VITS14), lambda: dinov2_weights.random_tensors(VITS14)):
        calls.clear()
        work()
        assert calls == ["dinov2_vits14"], len(calls)


def test_a_wrong_file_is_one_line_naming_it(checkpoint, tmp_path):
    with pytest.raises(WeightsError, match=r"tensor embeddings.cls_token has shape \(1, 1, 384\); DINOv2 ViT-B/14 "
                                           r"needs \(1, 1, 768\) \(the file is DINOv2 ViT-S/14's\?\)"):
        dinov2_weights.load_weights(checkpoint, VITB14)
    other = tmp_path / "other.safetensors"
    dinov2_weights.write_tensors(other, {"weight": np.ones(3, np.float32)})
    with pytest.raises(WeightsError, match="has no tensor embeddings.patch_embeddings.projection.weight: it has 0"):
        dinov2_weights.load_weights(other, VITS14)
    with pytest.raises(WeightsError, match="is a folder without model.safetensors"):
        dinov2_weights.load_weights(tmp_path, VITS14)
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes(checkpoint.read_bytes()[:1000])
    with pytest.raises(WeightsError, match="damaged.safetensors is truncated"):
        dinov2_weights.load_weights(damaged, VITS14)


def test_an_interpolation_to_the_same_grid_is_the_table_and_a_bad_table_is_refused():
    table = np.random.default_rng(0).standard_normal((1 + 16 * 16, 8)).astype(np.float32)
    np.testing.assert_array_equal(dinov2_weights.interpolate_positions(table, 16), table)
    with pytest.raises(ValueError, match="of 18 rows are not a class token and a square grid"):
        dinov2_weights.interpolate_positions(table[:18], 16)
    with pytest.raises(ValueError, match="method='bilinear'"):
        dinov2_weights.resize_matrix(37, 16, "bilinear")


def test_the_torch_kernel_is_pytorch_s_bicubic():
    """PyTorch's upsample_bicubic2d (align_corners=False) by its definition: sample i of 16 at (i + 0.5) * 37 / 16
    - 0.5, cubic convolution with a = -0.75, taps beyond the border clamped; every row sums to 1."""
    matrix = dinov2_weights.resize_matrix(37, 16, "torch")
    np.testing.assert_allclose(matrix.sum(1), 1, atol=1e-12)
    position = 0.5 * 37 / 16 - 0.5  # 0.65625: taps -1 (clamped to 0), 0, 1, 2
    a, t = -0.75, position
    weights = [a * (((s - 5) * s + 8) * s - 4) if s > 1 else ((a + 2) * s - (a + 3)) * s * s + 1
               for s in (t + 1, t, 1 - t, 2 - t)]
    np.testing.assert_allclose(matrix[0, :3], [weights[0] + weights[1], weights[2], weights[3]], atol=1e-12)
    assert np.count_nonzero(matrix[0]) == 3 and np.count_nonzero(matrix[8]) == 4


