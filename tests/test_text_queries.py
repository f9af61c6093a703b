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
    with small_clip(tmp_path_factory.mktemp("text") / "clip") as folder:
        yield folder


def test_which_outputs_take_a_sentence():
    assert shares_text_space({"model": "clip_vit_b32", "layer": "embedding"})
    assert shares_text_space({"model": "clip_vit_b16", "layer": "embedding", "weights": "x"})
    assert shares_text_space({"model": "clip", "layer": "embedding"})  # the family, at its checkpoint's size
    for settings in ({"model": "clip_vit_b32", "layer": "pooled"}, {"model": "vgg16", "layer": "fc7"}, {}):
        assert not shares_text_space(settings)
    check_text_queries({"model": "clip_vit_b16", "layer": "embedding"})
    with pytest.raises(ValueError, match=r"needs an output of a model with a text tower \(clip, clip_vit_b32, "
                                         r"clip_vit_b16, clip_vit_l14, clip_vit_l14_336\); this output's model is "
                                         r"'vgg16'$"):
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


def test_weights_without_the_tokenizer_files_are_one_line(clip_folder, tmp_path):
    from models.files import WeightsError
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "model.safetensors").write_bytes((clip_folder / "model.safetensors").read_bytes())
    with pytest.raises(WeightsError, match="no vocab.json or merges.txt beside it"):
        text_embedding("clip_vit_b32", ["a dog"], weights=str(alone / "model.safetensors"))
    assert set(text_queries.TEXT_LAYERS.values()) == {"embedding"}
