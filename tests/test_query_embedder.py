"""models/query_embedder.py: the output's model for queries, its weights checked, loaded on first use and once."""

import numpy as np
import pytest

import models.registry
from models.query_embedder import QueryEmbedder, _weights_needed, query_model
from models.text_queries import TextEmbedder, text_embedding
from search_data import SETTINGS

def test_the_weights_file_an_output_records_is_looked_for_here_and_near_the_output(tmp_path, monkeypatch):
    from models.files import fingerprint
    weights = tmp_path / "kept" / "clip" / "model.safetensors"
    weights.parent.mkdir(parents=True)
    weights.write_bytes(b"weights " * 1000)
    recorded = fingerprint(weights)
    output = tmp_path / "kept" / "results" / "f.npy"  # the output's folder, its parent and theirs are looked in
    output.parent.mkdir()
    here = tmp_path / "here"
    (here / "other").mkdir(parents=True)
    (here / "other" / "model.safetensors").write_bytes(b"WEIGHTS " * 1000)  # its name and size, not its content
    monkeypatch.chdir(here)
    found = _weights_needed(recorded, output)
    assert found == "the output was computed with the weights file %s; its record names the file, not where it " \
        "is: pass --weights %s (found there: that size and content)" % (recorded, weights)
    weights.rename(tmp_path / "model.safetensors")  # no longer near the output: its name, to look for
    assert _weights_needed(recorded, output).endswith(
        "pass --weights PATH, the path of that model.safetensors")
    (here / "model.safetensors").write_bytes(b"weights " * 1000)  # in the current folder: named as it is there
    assert _weights_needed(recorded, output).endswith("--weights model.safetensors (found there: "
                                                                      "that size and content)")
    assert _weights_needed("imagenet (vgg16_weights.h5, md5 ...)", output) == (
        "the output was computed with weights 'imagenet (vgg16_weights.h5, md5 ...)': pass them with --weights")


def test_the_model_is_loaded_on_the_first_query_only_and_once(monkeypatch):
    built, loaded = [], []

    class Embedder:
        def __init__(self, model, **kwargs):
            loaded.append(kwargs)

        def images(self, images):
            return np.ones((len(images), 4), np.float32), []

        def close(self):
            pass

    def feature_model(name, **kwargs):
        built.append(name)
        return type("Spec", (), {"settings": {"weights": SETTINGS["weights"]}})()

    monkeypatch.setattr(models.registry, "feature_model", feature_model)
    before = []
    embedder = QueryEmbedder(SETTINGS, "f.npy", image_embedder=Embedder, before_load=lambda: before.append(1))
    assert built == [] and loaded == []  # nothing until a query needs it
    for _ in range(3):
        assert embedder.images([b"a", b"b"])[0].shape == (2, 4)
    assert built == ["vgg16"] and loaded == [{"devices": "cpu:0", "resize": "crop"}]
    assert before == [1]
    with pytest.raises(ValueError, match="a text query needs an output of a model with a text tower"):
        embedder.text(["a dog"])
    embedder.close()


def test_weights_other_than_the_output_s_are_refused_before_anything_is_read(tmp_path):
    with pytest.raises(ValueError, match="is not a file or folder"):
        QueryEmbedder(SETTINGS, "f.npy", weights=str(tmp_path / "none.npy"), image_embedder=object).images([b"x"])
    with pytest.raises(ValueError, match="it was given no image_embedder"):
        QueryEmbedder(SETTINGS, "f.npy").images([b"x"])


def test_unusable_says_why_a_first_query_would_fail_without_loading_a_model(monkeypatch):
    built = []

    def feature_model(name, weights, **kwargs):
        built.append(weights)
        return type("Spec", (), {"settings": {"weights": "weights of %s" % weights}})()

    monkeypatch.setattr(models.registry, "feature_model", feature_model)
    settings = dict(SETTINGS, weights="weights of imagenet")
    assert QueryEmbedder(settings, "f.npy").unusable() is None  # imagenet: the output's own
    assert QueryEmbedder(dict(SETTINGS, weights="other"), "f.npy").unusable() == (
        "the output was computed with weights 'other': pass them with --weights")
    assert QueryEmbedder({"layer": "fc7"}, "f.npy").unusable() == (
        "the indexed output records no model settings: pass the query as a vector (.npy)")
    assert built == ["imagenet", "imagenet"]  # a spec only: nothing loaded, no weights read


def test_an_output_of_the_hub_s_weights_is_queried_with_the_commit_it_records():
    """Nothing is downloaded until a query is embedded: the spec is built from the names alone."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    recorded = "hub owner/clip@%s model.safetensors, sha256 from the hub's X-Linked-Etag" % commit
    settings = {"model": "clip_vit_b32", "layer": "embedding", "weights": recorded}
    spec, weights = query_model(settings, None, "f.npy")
    assert weights == "hf://owner/clip@%s" % commit and spec.settings["weights"] == recorded
    assert query_model(settings, weights, "f.npy")[1] == weights
    pinned, weights = query_model(dict(settings, weights=models.registry.feature_model(
        "clip_vit_b32").settings["weights"]), None, "f.npy")  # "imagenet" recorded: its pinned commit, by name
    assert weights == "hf://openai/clip-vit-base-patch32@c237dc49a33fc61debc9276459120b7eac67e7ef"
    assert pinned.settings["weights"] == models.registry.feature_model("clip_vit_b32").settings["weights"]
    with pytest.raises(ValueError, match="--weights hf://owner/clip@1{40} is not the weights the output was computed "
                                         "with"):
        query_model(settings, "hf://owner/clip@" + "1" * 40, "f.npy")


def test_a_text_embedder_kept_open_embeds_as_text_embedding_does(tmp_path):
    from small_clip import small_clip
    with small_clip(tmp_path / "clip") as weights:
        expected = text_embedding("clip_vit_b32", ["a dog", "a red car"], weights=str(weights))
        with TextEmbedder("clip_vit_b32", weights=str(weights)) as embedder:
            np.testing.assert_array_equal(embedder.text(["a dog"]), expected[:1])
            np.testing.assert_array_equal(embedder.text(["a dog", "a red car"]), expected)
    with pytest.raises(ValueError, match="model='vgg16' has no text tower"):
        TextEmbedder("vgg16")
