"""The models by name: checks without TensorFlow, and VGG16's identity unchanged by the registry."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models import registry

REPOSITORY = Path(__file__).resolve().parents[1]


def test_an_unknown_model_or_layer_is_one_line_naming_what_there_is():
    with pytest.raises(ValueError, match=r"model='vgg19'; expected one of vgg16"):
        registry.entry("vgg19")
    with pytest.raises(ValueError, match=r"layer='conv9' is not a layer of vgg16; expected one of pool5, fc6, "):
        registry.check_layer("vgg16", "conv9")
    assert registry.check_layer("vgg16", None) == "fc7" and registry.check_layer("vgg16", "relu7") == "relu7"


def test_every_model_has_its_three_modules_and_a_default_among_its_layers():
    for entry in registry.ENTRIES:
        assert registry.default_layer(entry.name) in registry.layers(entry.name)
        files = registry.weight_files(entry.name)
        assert files.RANDOM_SUFFIXES and callable(files.write_random)


def test_the_checks_of_model_and_layer_import_no_tensorflow():
    code = ("import sys; from models import registry\n"
            "for name in registry.NAMES: registry.check_layer(name, None); registry.weight_files(name)\n"
            "print(sorted({'tensorflow', 'keras', 'h5py'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_vgg16_by_name_is_the_model_vgg16_builds(tmp_path):
    from models import vgg16

    weights = tmp_path / "vgg16.npy"  # only fingerprinted here: read when the engine asks
    weights.write_bytes(b"weights")
    by_name = registry.feature_model("vgg16", weights=str(weights), precision="bf16")
    direct = vgg16.feature_model(endpoint="fc7", weights=str(weights), precision="bf16")
    assert (by_name.name, by_name.output_name, by_name.settings, by_name.files) == (
        direct.name, direct.output_name, direct.settings, direct.files)
    assert by_name.settings["weights"].startswith("vgg16.npy (7 bytes, sha256 of ends ")
    assert registry.feature_model("vgg16").settings["weights"] == (
        "imagenet (Keras vgg16_weights_tf_dim_ordering_tf_kernels.h5, md5 64373286793e3c8b2b4e3219cbf3544b)")


# ----------------------------------------------------------------------------- every model, everywhere
# The engine knows no model: each new model is run once through a path of the engine VGG16's tests cover in
# full (tars, a store, search), so that every path has run with a model other than VGG16.

@pytest.fixture(scope="module")
def photographs_folder(tmp_path_factory):
    """The four smallest real photographs of tests/photographs/, copied into a folder of their own."""
    import shutil
    folder = tmp_path_factory.mktemp("photographs") / "photos"
    folder.mkdir()
    for path in sorted((REPOSITORY / "tests" / "photographs").glob("*.jpg"))[1:]:
        shutil.copyfile(path, folder / path.name)
    return folder


def run_model(name, images, output, tmp_path, *flags):
    """run_inference's exit status for `name` with seeded random weights on two CPU devices, batch 1."""
    import run_inference
    weights = tmp_path / ("%s.h5" % name)
    if not weights.exists():
        registry.weight_files(name).write_random(weights, seed=0)
    return run_inference.main(["--model", name, "--images", str(images), "--weights", str(weights), "--output",
                               str(output), "--devices", "cpu:0,cpu:1", "--batch-size", "1", "--quiet", *flags])


def test_a_tar_job_of_resnet50_gives_the_folder_job_s_features(photographs_folder, tmp_path):
    import pandas as pd
    from stores import write_tars
    tars = write_tars(photographs_folder, tmp_path / "shards", 2, pattern="*.jpg")
    assert run_model("resnet50", photographs_folder, tmp_path / "folder.parquet", tmp_path) == 0
    assert run_model("resnet50", tmp_path / "shards" / "*.tar", tmp_path / "tars.parquet", tmp_path) == 0
    folder, members = (pd.read_parquet(tmp_path / name) for name in ("folder.parquet", "tars.parquet"))
    by_name = {key.split("://")[1].split("::")[0]: row for key, row in zip(members["path"], members["avg_pool"])}
    assert len(tars) == 2 and sorted(by_name) == sorted(folder["path"]) and len(folder) == 4
    for path, row in zip(folder["path"], folder["avg_pool"]):
        assert len(row) == 2048 and np.array_equal(row, by_name[path]), path  # the same bits


def test_an_efficientnet_b0_output_in_a_store_is_the_local_one(photographs_folder, tmp_path, s3):
    from outputs import job_outputs
    assert run_model("efficientnet_b0", photographs_folder, tmp_path / "local.csv", tmp_path) == 0
    assert run_model("efficientnet_b0", photographs_folder, s3.url("remote.csv"), tmp_path) == 0
    local = job_outputs(tmp_path / "local.csv")
    assert s3.filesystem.cat_file("%s/remote.csv" % s3.bucket) == local[""]
    assert local[""].split(b"\n")[0].endswith(b",avg_pool_1279")


def test_a_convnext_tiny_output_is_searched_with_convnext_tiny(photographs_folder, tmp_path, capsys):
    import csv
    import io
    import search_features
    assert run_model("convnext_tiny", photographs_folder, tmp_path / "f.npy", tmp_path) == 0
    index = tmp_path / "f.index"
    assert search_features.main(["--quiet", "index", str(tmp_path / "f.npy"), "--index", str(index)]) == 0
    capsys.readouterr()
    query = tmp_path / "query.jpg"  # a photograph outside the indexed folder: computed with the output's model
    query.write_bytes((photographs_folder / "coffee.jpg").read_bytes())
    assert search_features.main(["neighbours", str(index), str(query), "-k", "2", "--weights",
                                 str(tmp_path / "convnext_tiny.h5")]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["path"] == "coffee.jpg" and float(rows[0]["score"]) > 0.999
    assert float(rows[1]["score"]) < 0.99  # another photograph, clearly further
