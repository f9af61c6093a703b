"""The models by name: checks without TensorFlow, and VGG16's identity unchanged by the registry."""

import subprocess
import sys
from pathlib import Path

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


def test_vgg16_by_name_is_the_model_vgg16_builds(seeded_files):
    from models import vgg16

    by_name = registry.feature_model("vgg16", weights=str(seeded_files["npy"]), precision="bf16")
    direct = vgg16.feature_model(endpoint="fc7", weights=str(seeded_files["npy"]), precision="bf16")
    assert (by_name.name, by_name.output_name, by_name.settings, by_name.files) == (
        direct.name, direct.output_name, direct.settings, direct.files)
    assert registry.feature_model("vgg16").settings["weights"] == (
        "imagenet (Keras vgg16_weights_tf_dim_ordering_tf_kernels.h5, md5 64373286793e3c8b2b4e3219cbf3544b)")
