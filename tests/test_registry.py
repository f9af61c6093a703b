"""The models by name: checks without TensorFlow, VGG16's identity unchanged by the registry, and each model once
through a path of the engine (tars, a store, Parquet, search, ranks, bf16, Ray's pickling), the families' own
names (clip, dinov2: their size from the weights' config) included."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hangs import HANG_SECONDS
from models import registry
from models.files import WeightsError

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
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True,
                          timeout=HANG_SECONDS)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


KERAS_H5_MODELS = ("vgg16", "resnet50", "efficientnet_b0", "convnext_tiny")


def keras_file_of_one_floats(model, path):
    """`model`'s weights file in the real layout, written by its own writer (every layer of the full file, under
    Keras's names), with every weight one float: the layout of a random file, in kilobytes."""
    from models import vgg16_layers, weight_files
    from models.convnext import convnext_layers, convnext_weights
    from models.efficientnet import efficientnet_layers, efficientnet_weights
    from models.resnet import resnet_layers, resnet_weights

    one = np.zeros(1, np.float32)
    if model == "vgg16":
        weight_files.save_h5({layer.name: (one, one) for layer in vgg16_layers.LAYERS}, path)
    elif model == "resnet50":
        resnet_weights.save_h5({layer: {name: one for name, _ in shapes}
                                for layer, shapes in resnet_layers.weight_shapes().items()}, path)
    elif model == "efficientnet_b0":
        efficientnet_weights.save_h5({layer.name: {name: one for name, _ in layer.weights}
                                      for layer in efficientnet_layers.KERAS_LAYERS}, path)
    else:
        convnext_weights.save_h5({layer.name: (one,) * len(layer.arrays) for layer in convnext_layers.LAYERS}, path)
    return path


@pytest.mark.parametrize("given", KERAS_H5_MODELS)
def test_another_keras_model_s_file_is_refused_in_one_line_naming_its_model(given, tmp_path):
    path = keras_file_of_one_floats(given, tmp_path / ("%s.h5" % given))
    for model in KERAS_H5_MODELS:
        if model == given:
            continue
        with pytest.raises(WeightsError) as refused:
            registry.weight_files(model).load_weights(path)
        message = str(refused.value)
        assert "\n" not in message and message.startswith("weights=%s has no layer " % path), message
        assert message.endswith("; it looks like a%s %s weights file: pass --model %s" % (
            "n" if given == "efficientnet_b0" else "", registry.entry(given).title, given)), message
        assert "which %s needs" % registry.entry(model).title in message, message


def test_a_random_file_of_another_model_is_named_not_described_by_vgg16_s_names(tmp_path):
    """The issue's case: VGG16 said "has no layer conv1_1 ...; it has: fc8" of an EfficientNetB0 (or ResNet50)
    file, its own name for the one layer the files share (`predictions`)."""
    from models import weight_files

    path = tmp_path / "efficientnet_b0-random.h5"
    assert weight_files.main(["random", str(path), "--model", "efficientnet_b0"]) == 0
    with pytest.raises(WeightsError) as refused:
        weight_files.load_weights(path)
    assert str(refused.value) == (
        "weights=%s has no layer conv1_1 (Keras: block1_conv1), which VGG16 needs (the file has 132 layers with "
        "weights: normalization, stem_conv, stem_bn, block1a_dwconv, ...); it looks like an EfficientNetB0 weights "
        "file: pass --model efficientnet_b0" % path)


def test_a_file_of_the_model_itself_is_never_said_to_be_another_s(tmp_path):
    from models.resnet import resnet_layers

    full, notop = resnet_layers.WEIGHT_FILE_NAMES, resnet_layers.WEIGHT_FILE_NAMES - {"predictions"}
    assert registry.looks_like(full, "resnet50") == registry.looks_like(notop, "ResNet50") == ""
    assert registry.looks_like(notop, "vgg16") == "; it looks like a ResNet50 weights file: pass --model resnet50"
    # One name the models share, or a file mostly of names no model has, is nobody's.
    assert registry.looks_like(["predictions"], "convnext_tiny") == ""
    assert registry.looks_like(["conv1_conv", "dense", "dense_1"], "vgg16") == ""


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
    """run_inference's exit status for `name` with seeded random weights on one CPU device, batch 1 (each model's
    own tests run it on several devices: here its path through the engine is the point)."""
    import run_inference
    weights = tmp_path / ("%s.h5" % name)
    if not weights.exists():
        registry.weight_files(name).write_random(weights, seed=0)
    return run_inference.main(["--model", name, "--images", str(images), "--weights", str(weights), "--output",
                               str(output), "--devices", "cpu:0", "--batch-size", "1", "--quiet", *flags])


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


def test_a_checkpoint_of_another_model_is_named_by_its_tensors_and_a_file_by_its_magic(tmp_path, monkeypatch):
    """A CLIP folder given to VGG16 spoke of VGG16's files; VGG16's .npy given to CLIP, of a header's length."""
    import dataclasses
    from models.clip import clip_weights
    from models.dinov2 import dinov2_weights
    from models.vit.vit_layers import TransformerConfig
    from small_clip import SMALL, write_small_clip
    monkeypatch.setattr(clip_weights.VIT_B32, "model", SMALL)  # ViT-B/32's tensors are SMALL's, as its checkpoint's
    folder = write_small_clip(tmp_path / "clip")
    assert registry.what_weights_are(folder) == ("it holds CLIP ViT-B/32 weights (model.safetensors): pass --model "
                                                 "clip_vit_b32")
    assert registry.what_else(folder / "model.safetensors", "vgg16") == ("; it holds CLIP ViT-B/32 weights: pass "
                                                                         "--model clip_vit_b32")
    assert registry.what_weights_are(folder, "clip_vit_b32") == ""  # its own model's: nothing to say of it
    small = dataclasses.replace(dinov2_weights.VITS14, transformer=TransformerConfig(32, 1, 2, 64, layer_scale=True))
    monkeypatch.setattr(dinov2_weights.VITS14_FILES, "variant", small)
    dinov2_weights.write_random(tmp_path / "dinov2.safetensors", small)
    assert registry.what_weights_are(tmp_path / "dinov2.safetensors", "clip_vit_b32") == (
        "it holds DINOv2 ViT-S/14 weights: pass --model dinov2_vits14")
    np.save(tmp_path / "vgg16.npy", {"conv1_1": [np.zeros(3)]}, allow_pickle=True)
    assert registry.what_weights_are(tmp_path / "vgg16.npy") == "it is a NumPy .npy file (--model vgg16 reads those)"
    (tmp_path / "notes.txt").write_text("neither")
    assert registry.what_weights_are(tmp_path / "notes.txt") == registry.what_weights_are(tmp_path) == ""


# A family's own name (clip, dinov2) reads its size from the weights' config: small sizes of the real layouts here.

def small_open_clip(folder):
    """A small CLIP in open_clip's layout: open_clip_model.safetensors, its open_clip_config.json (GELU, LAION's
    default) and the tests' tokenizer files."""
    import json
    from models.clip import clip_layers, clip_weights
    from models.clip.clip_tokenizer import write_test_vocabulary
    from models.vit.vit_layers import TransformerConfig
    model = clip_layers.Config("clip", "", 32, TransformerConfig(64, 2, 4, 128, "gelu", epsilon=1e-5),
                               TransformerConfig(32, 2, 2, 64, "gelu", epsilon=1e-5), projection=16,
                               vocabulary_size=4514)
    folder.mkdir()
    clip_weights.write_checkpoint(clip_weights.random_weights(model), folder / "open_clip_model.safetensors",
                                  layout="open_clip", model=model)
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": {
        "embed_dim": 16, "vision_cfg": {"image_size": 224, "layers": 2, "width": 64, "head_width": 16, "mlp_ratio": 2,
                                        "patch_size": 32},
        "text_cfg": {"context_length": 77, "vocab_size": 4514, "width": 32, "heads": 2, "layers": 2, "mlp_ratio": 2}},
        "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}}))
    write_test_vocabulary(folder)
    return folder


def test_the_clip_family_from_parquet_files_is_searched_by_a_sentence(photographs_folder, tmp_path, capsys):
    import csv
    import io
    import run_inference
    import search_features
    from dataset_files import write_files
    weights = small_open_clip(tmp_path / "laion-small")
    files = write_files("img2dataset", photographs_folder, tmp_path / "parquet", 2, pattern="*.jpg")
    assert run_inference.main(["--model", "clip", "--images", str(tmp_path / "parquet" / "*.parquet"), "--weights",
                               str(weights), "--output", str(tmp_path / "f.npy"), "--devices", "cpu:0",
                               "--batch-size", "1", "--quiet"]) == 0
    assert len(files) == 2 and np.load(tmp_path / "f.npy").shape == (4, 16)
    index = tmp_path / "f.index"
    assert search_features.main(["--quiet", "index", str(tmp_path / "f.npy"), "--index", str(index)]) == 0
    capsys.readouterr()
    assert search_features.main(["neighbours", str(index), "--text", "a cup of coffee", "-k", "4", "--weights",
                                 str(weights)]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 4 and len({row["path"] for row in rows}) == 4


def assert_three_ranks_in_a_store_are_one_process(run, local, s3):
    """`run(output, *flags)` into `local`, then as three static ranks (shards of one) into the store's three.npy:
    the store's output and paths file are the local ones, byte for byte."""
    from outputs import job_outputs
    assert run(local) == 0
    for rank in range(3):
        assert run(s3.url("three.npy"), "--distributed", "static", "--rank", str(rank), "--world-size", "3",
                   "--shard-size", "1") == 0
    files = job_outputs(local)
    assert sorted(files) == ["", ".paths.csv"] and {suffix: s3.filesystem.cat_file("%s/three.npy%s" % (
        s3.bucket, suffix)) for suffix in files} == files


def test_the_dinov2_family_with_registers_in_tars_over_three_ranks_in_a_store_and_in_bf16(photographs_folder, tmp_path,
                                                                                           s3):
    import dataclasses
    import run_inference
    from models.dinov2 import dinov2_layers, dinov2_weights
    from models.vit.vit_layers import TransformerConfig
    from stores import write_tars
    small = dataclasses.replace(dinov2_layers.VITS14_REG, name="dinov2",
                                transformer=TransformerConfig(64, 2, 4, 256, layer_scale=True))
    dinov2_weights.write_random_folder(tmp_path / "registers", small)
    write_tars(photographs_folder, tmp_path / "shards", 2, pattern="*.jpg")

    def run(output, *flags):
        return run_inference.main(["--model", "dinov2", "--images", str(tmp_path / "shards" / "*.tar"), "--weights",
                                   str(tmp_path / "registers"), "--output", str(output), "--devices", "cpu:0",
                                   "--batch-size", "1", "--quiet", "--layer", "class_and_patch_mean", *flags])

    assert_three_ranks_in_a_store_are_one_process(run, tmp_path / "one.npy", s3)
    assert run(s3.url("registers.npy")) == 0
    assert s3.filesystem.cat_file("%s/registers.npy" % s3.bucket) == (tmp_path / "one.npy").read_bytes()
    assert run(tmp_path / "bf16.npy", "--precision", "bf16") == 0
    reference, reduced = np.load(tmp_path / "one.npy"), np.load(tmp_path / "bf16.npy")
    assert reference.shape == (4, 128) and not np.array_equal(reference, reduced)
    cosine = (reference * reduced).sum(1) / np.linalg.norm(reference, axis=1) / np.linalg.norm(reduced, axis=1)
    assert cosine.min() >= 0.999, cosine


def test_a_family_s_model_pickled_as_ray_ships_it_to_its_actors_computes_the_same(photographs, tmp_path):
    """Ray sends a job's ModelSpec to each actor with its cloudpickle (the Config read from the weights' config
    inside it), and the actor reads the weights on its node: the same features."""
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    from parallel import engine
    from parallel.devices import resolve_devices
    spec = registry.feature_model("clip", weights=str(small_open_clip(tmp_path / "laion-small")))
    shipped = cloudpickle.loads(cloudpickle.dumps(spec))
    assert shipped.settings == spec.settings and shipped.image_size == spec.image_size
    features = []
    for model in (spec, shipped):
        with engine.DeviceRunner(model, resolve_devices(devices="cpu:0", gpu_count=0), per_device_batch=5) as runner:
            features.append(runner.run(photographs))
    np.testing.assert_array_equal(features[0], features[1])


@pytest.fixture(scope="module")
def siglip_folder(tmp_path_factory):
    """A small SigLIP 2 checkpoint folder (config.json, model.safetensors, a Gemma tokenizer trained here), written
    once for the tests that read it."""
    from siglip_files import write_small
    return write_small(tmp_path_factory.mktemp("siglip") / "siglip2")


def test_a_checkpoint_of_a_family_at_a_size_no_name_has_is_named_by_its_config(siglip_folder, tmp_path):
    """what_weights_are (the line refusing weights given to the wrong --model) knows the families: a folder whose
    config names one, at a size no preset has, says which --model reads it; nothing for the family's own models."""
    import dataclasses
    from models.dinov2 import dinov2_layers, dinov2_weights
    from models.vit.vit_layers import TransformerConfig
    laion = small_open_clip(tmp_path / "laion-small")
    assert registry.what_weights_are(laion, "vgg16") == (
        "it holds a CLIP checkpoint (open_clip_config.json): pass --model clip, which reads its size from it")
    assert registry.what_weights_are(laion, "clip") == registry.what_weights_are(laion, "clip_vit_l14") == ""
    small = dataclasses.replace(dinov2_layers.VITS14_REG, name="dinov2",
                                transformer=TransformerConfig(32, 1, 2, 128, layer_scale=True))
    dinov2_weights.write_random_folder(tmp_path / "registers", small)
    assert registry.what_else(tmp_path / "registers" / "model.safetensors", "resnet50") == (
        "; it holds a DINOv2 checkpoint (its config.json's model_type dinov2_with_registers): pass --model dinov2, "
        "which reads its size from it")
    siglip = siglip_folder
    assert registry.what_weights_are(siglip, "clip") == (
        "it holds a SigLIP or SigLIP 2 checkpoint (its config.json's model_type siglip): pass --model siglip, which "
        "reads its size from it")
    assert registry.what_weights_are(siglip, "siglip2_base_patch16_256") == ""
    with pytest.raises(WeightsError, match="weights=.*siglip2 is a folder: it holds a SigLIP or SigLIP 2 checkpoint"):
        registry.feature_model("vgg16", weights=str(siglip))


def test_the_siglip_family_in_tars_over_three_ranks_into_a_store_and_as_ray_ships_it(photographs_folder, photographs,
                                                                                     siglip_folder, tmp_path, s3):
    """`--model siglip` (its size from config.json) over tars: three static ranks writing into a store give one
    local process's output, and its ModelSpec pickled as Ray ships it to an actor computes the same features."""
    import run_inference
    from parallel import engine
    from parallel.devices import resolve_devices
    from stores import write_tars
    weights = siglip_folder
    write_tars(photographs_folder, tmp_path / "shards", 2, pattern="*.jpg")

    def run(output, *flags):
        return run_inference.main(["--model", "siglip", "--images", str(tmp_path / "shards" / "*.tar"), "--weights",
                                   str(weights), "--output", str(output), "--devices", "cpu:0", "--batch-size", "1",
                                   "--quiet", *flags])

    assert_three_ranks_in_a_store_are_one_process(run, tmp_path / "one.npy", s3)
    rows = np.load(tmp_path / "one.npy")
    assert rows.shape[0] == 4 and np.abs(rows[0] - rows[1:]).max() > 1e-2  # different images, different rows
    cloudpickle = pytest.importorskip("ray.cloudpickle")
    from PIL import Image
    spec = registry.feature_model("siglip", weights=str(weights))
    images = np.stack([np.asarray(Image.fromarray(image).resize(spec.image_size)) for image in photographs])
    features = []
    for model in (spec, cloudpickle.loads(cloudpickle.dumps(spec))):
        with engine.DeviceRunner(model, resolve_devices(devices="cpu:0", gpu_count=0), per_device_batch=5) as runner:
            features.append(runner.run(images))
    np.testing.assert_array_equal(features[0], features[1])
