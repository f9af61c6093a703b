"""models.text_queries: which outputs take a sentence, and a sentence's embedding by CLIP's text tower and
tokenizer (a small CLIP of the real layout: tests/small_clip.py)."""

import numpy as np
import pytest

from models import text_queries
from models.text_queries import check_text_queries, shares_text_space, text_embedding
from small_clip import SMALL, small_clip

SENTENCES = ["a photo of a dog", "a red square on a white background", "Ein Hund am Strand 🏖️", "dog " * 90]


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory):
    """The small CLIP under ViT-B/32's name, its text tower built for two lengths, 8 and 77, not six: each
    length is a graph of its own, each embedding here builds the tower, and SENTENCES run on both
    (tests/test_clip.py and tests/test_devices_text_runner.py run rows on the other lengths)."""
    from models.clip import clip
    with small_clip(tmp_path_factory.mktemp("text") / "clip") as folder, pytest.MonkeyPatch.context() as patch:
        patch.setattr(clip, "TEXT_LENGTHS", (8,))
        yield folder


def test_which_outputs_take_a_sentence():
    assert shares_text_space({"model": "clip_vit_b32", "layer": "embedding"})
    assert shares_text_space({"model": "clip_vit_b16", "layer": "embedding", "weights": "x"})
    assert shares_text_space({"model": "clip", "layer": "embedding"})  # the family, at its checkpoint's size
    for settings in ({"model": "clip_vit_b32", "layer": "pooled"}, {"model": "vgg16", "layer": "fc7"}, {}):
        assert not shares_text_space(settings)
    check_text_queries({"model": "clip_vit_b16", "layer": "embedding"})
    with pytest.raises(ValueError, match=r"needs an output of a model with a text tower \(clip, clip_vit_b32, "
                                         r"clip_vit_b16, clip_vit_l14, clip_vit_l14_336, siglip and its sizes\); "
                                         r"this output's model is 'vgg16'$"):
        check_text_queries({"model": "vgg16", "layer": "fc7"})
    with pytest.raises(ValueError, match="needs clip_vit_b32's layer embedding .*; this output holds layer 'pooled'"):
        check_text_queries({"model": "clip_vit_b32", "layer": "pooled"})
    with pytest.raises(ValueError, match="model='vgg16' has no text tower"):
        text_embedding("vgg16", ["a dog"])


def test_a_sentence_s_embedding_is_the_text_tower_s_of_its_tokens(clip_folder):
    from models.clip.clip import TextTower
    from models.clip.clip_tokenizer import Tokenizer
    embeddings = text_embedding("clip_vit_b32", SENTENCES, weights=str(clip_folder))
    assert embeddings.shape == (4, SMALL.projection) and embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1, rtol=1e-5)
    tokens = Tokenizer.from_folder(clip_folder).encode(SENTENCES)
    with TextTower("clip_vit_b32", weights=str(clip_folder)) as tower:
        np.testing.assert_allclose(embeddings, tower.embed(tokens), atol=1e-6)
        # Each sentence its own embedding: a query can tell them apart.
        assert min(np.abs(embeddings[i] - embeddings[j]).max() for i in range(4) for j in range(i)) > 1e-2
        one = text_embedding("clip_vit_b32", "a photo of a dog", weights=str(clip_folder))
    np.testing.assert_allclose(one, embeddings[:1], atol=1e-6)


def test_a_sentence_with_the_hub_s_weights_is_embedded_as_with_the_folder_they_came_in(clip_folder, fake_hub,
                                                                                       monkeypatch):
    """hf://ORG/NAME@COMMIT: the checkpoint and its tokenizer.json fetched into the hub's cache, then offline."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    for path in clip_folder.iterdir():
        fake_hub.add("owner/clip", commit, path.name, path.read_bytes(), lfs=path.suffix == ".safetensors")
    expected = text_embedding("clip_vit_b32", SENTENCES, weights=str(clip_folder))
    np.testing.assert_array_equal(text_embedding("clip_vit_b32", SENTENCES, weights="hf://owner/clip@" + commit),
                                  expected)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # in the cache now: read again without a request
    fake_hub.requests.clear()
    from models.clip.clip_weights import Checkpoint
    source = Checkpoint("hf://owner/clip@" + commit, SMALL)
    assert source.path().parent == source.tokenizer_folder() and fake_hub.requests == []


def test_weights_without_the_tokenizer_files_are_one_line(clip_folder, tmp_path):
    from models.files import WeightsError
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "model.safetensors").write_bytes((clip_folder / "model.safetensors").read_bytes())
    with pytest.raises(WeightsError, match="no tokenizer.json, nor vocab.json and merges.txt, beside it"):
        text_embedding("clip_vit_b32", ["a dog"], weights=str(alone / "model.safetensors"))
    assert set(text_queries.TEXT_LAYERS.values()) == {"embedding"}
    assert {"clip_vit_b32", "clip_vit_b16", "siglip", "siglip2_base_patch16_256"} <= set(text_queries.TEXT_LAYERS)


@pytest.fixture(scope="module")
def siglip_folder(tmp_path_factory):
    from siglip_files import write_small
    return write_small(tmp_path_factory.mktemp("text") / "siglip2", siglip2=True)


def test_siglip_s_sentences_come_from_its_text_tower_with_its_probability(siglip_folder):
    """A SigLIP output takes a sentence: its tokenizer and text tower, chosen by the model's name; and SigLIP's own
    score, sigmoid(exp(logit_scale) * cosine + logit_bias), where CLIP has none."""
    from models.siglip.siglip import TextTower
    from models.siglip.siglip_tokenizer import Tokenizer
    assert shares_text_space({"model": "siglip", "layer": "embedding"})
    assert not shares_text_space({"model": "siglip", "layer": "pooled"})
    with text_queries.TextEmbedder("siglip", weights=str(siglip_folder)) as embedder:
        embeddings = embedder.text(SENTENCES)
        chances = embedder.probability(np.array([-1.0, 0.0, 0.5, 1.0]))
    with TextTower("siglip", weights=str(siglip_folder)) as tower:
        np.testing.assert_allclose(embeddings, tower.embed(Tokenizer.from_folder(siglip_folder).encode(SENTENCES, 64)),
                                   atol=1e-6)
    assert embeddings.shape == (4, 32) and min(np.abs(embeddings[i] - embeddings[j]).max() for i in range(4)
                                               for j in range(i)) > 1e-2
    # The random weights' logit_scale ln(10) and logit_bias -10 (float32): sigmoid(10 * cosine - 10).
    np.testing.assert_allclose(chances, 1 / (1 + np.exp(-(10 * np.array([-1.0, 0.0, 0.5, 1.0]) - 10))), rtol=1e-6)


def test_clip_has_no_probability(clip_folder):
    with text_queries.TextEmbedder("clip_vit_b32", weights=str(clip_folder)) as embedder:
        assert embedder.probability(np.array([0.3])) is None
