"""The model interface: light to import, and (with the durable writes of the weights download) the only
part of `parallel` that models depend on."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from hangs import HANG_SECONDS
import parallel

REPOSITORY = Path(__file__).resolve().parents[1]
HEAVY = ("tensorflow", "keras", "PIL", "polars", "pyarrow", "h5py")


@pytest.mark.parametrize("module", ["parallel", "parallel.model", "parallel.output.durable", "parallel.messages"])
def test_importing_the_package_or_the_model_interface_imports_nothing_heavy(module):
    code = "import sys, %s; print(sorted(set(%r) & set(sys.modules)))" % (module, HEAVY)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True,
                          timeout=HANG_SECONDS)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_every_exported_name_is_reachable_and_the_functions_keep_their_names():
    import parallel.engine  # noqa: F401 -- imports the submodules data_parallelism and shard_features
    from parallel import data_parallelism, shard_features

    for name in parallel.__all__:
        assert getattr(parallel, name).__name__ == name
    assert callable(data_parallelism) and callable(shard_features)  # the functions, not their modules
    assert parallel.ModelSpec is parallel.engine.ModelSpec
    assert set(parallel.__all__) <= set(dir(parallel))


def _imported_modules(path):
    """The absolute module names that `path` imports, anywhere in it (functions included)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            # `from parallel import model` imports parallel.model; `from parallel.model import X` the module.
            if node.module == "parallel":
                yield from ("parallel." + alias.name for alias in node.names)
            else:
                yield node.module


# What models may import from parallel: the model interface, the durable file operations (standard library
# only) that the weights download writes its file with, and the command lines' parser (standard library only:
# `python -m models.weight_files`).
MODEL_IMPORTS = {"parallel.model", "parallel.output.durable", "parallel.messages", "parallel.native_log",
                 "parallel.flag_types"}  # no engine


def test_models_import_only_the_model_interface_and_durable_writes_from_parallel():
    imports = {path.name: set(_imported_modules(path)) for path in (REPOSITORY / "models").glob("**/*.py")}
    from_parallel = {name: sorted(module for module in modules if module.split(".")[0] == "parallel")
                     for name, modules in imports.items()}
    assert from_parallel["vgg16.py"] == ["parallel.model"]  # the scan sees the imports there are
    assert from_parallel["imagenet_download.py"] == ["parallel.messages", "parallel.output.durable"]
    assert {name: modules for name, modules in from_parallel.items() if set(modules) - MODEL_IMPORTS} == {}


def _spec(**fields):
    from parallel.model import ModelSpec
    return ModelSpec(name="m", fn=None, image_size=(224, 224), load_weights=dict, output_name="m", **fields)


def test_a_spec_resizes_as_vgg16_unless_it_says_otherwise():
    spec = _spec()
    assert (spec.resize_filter, spec.resize_short_side) == ("bilinear", None)
    clip_like = _spec(resize_filter="bicubic", resize_short_side=224)
    assert (clip_like.resize_filter, clip_like.resize_short_side) == ("bicubic", 224)
    assert _spec(resize_filter="bicubic", resize_short_side=256).resize_short_side == 256  # DINOv2's
    assert spec.resize_mode == "crop" and _spec(resize_mode="stretch").resize_mode == "stretch"  # SigLIP's


def test_a_job_that_names_no_resize_takes_its_model_s_mode(tmp_path):
    from parallel.devices import resolve_devices
    from parallel.jobs import Config
    devices = resolve_devices(devices="cpu:0", gpu_count=0)
    for spec, expected in ((_spec(), "crop"), (_spec(resize_mode="stretch"), "stretch")):
        assert Config(model=spec, images=tmp_path, output=tmp_path / "o.csv", devices=devices).resize == expected
        assert Config(model=spec, images=tmp_path, output=tmp_path / "o.csv", devices=devices,
                      resize="crop").resize == "crop"


@pytest.mark.parametrize("fields, message", [
    (dict(resize_filter="lanczos"), "resize_filter must be one of bilinear, bicubic; got 'lanczos'"),
    (dict(resize_filter=None), "resize_filter must be one of bilinear, bicubic; got None"),
    (dict(resize_short_side=223), r"resize_short_side must be None or an integer of at least max\(image_size\) = 224 "
                                  r"\(the crop must fit in the resized image\); got 223"),
    (dict(resize_short_side=0), "of at least max.image_size. = 224 .*; got 0"),
    (dict(resize_short_side=256.0), "of at least max.image_size. = 224 .*; got 256.0"),
    (dict(resize_short_side=True), "of at least max.image_size. = 224 .*; got True"),
    (dict(resize_short_side="256"), "of at least max.image_size. = 224 .*; got '256'"),
    (dict(resize_mode="squash"), "resize_mode must be one of crop, stretch; got 'squash'"),
])
def test_a_bad_resize_filter_or_short_side_is_refused_naming_it(fields, message):
    with pytest.raises(ValueError, match=message):
        _spec(**fields)
