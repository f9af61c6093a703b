"""SigLIP's tokenizers through the `tokenizers` library against transformers' own on the tests' sentences: SigLIP's
SentencePiece model (SiglipTokenizer, its canonical text) and SigLIP 2's Gemma tokenizer (Siglip2Tokenizer,
lowercased), on tokenizer files trained here in the published files' layout (tests/siglip_files.py)."""

import numpy as np
import pytest

from models.siglip.siglip_tokenizer import Tokenizer, canonicalize, write_random_tokenizer
from multilingual_sentences import SENTENCES as MULTILINGUAL
from sentences import sentences
from siglip_files import write_gemma, write_sentencepiece

SENTENCES = sentences(special=True)  # 333: English, accents, CJK, emoji, punctuation, spaces, long ones


@pytest.fixture(scope="module")
def sentencepiece_folder(tmp_path_factory):
    return write_sentencepiece(tmp_path_factory.mktemp("siglip") / "tokenizer")


@pytest.fixture(scope="module")
def gemma_folder(tmp_path_factory):
    return write_gemma(tmp_path_factory.mktemp("siglip2") / "tokenizer")


def transformers_ids(tokenizer, texts):
    """transformers' ids as its pipelines ask for them (padding="max_length", truncation, 64)."""
    return np.asarray(tokenizer(texts, padding="max_length", max_length=64, truncation=True)["input_ids"])


def test_siglip_s_ids_are_transformers_siglip_tokenizer_s(sentencepiece_folder):
    from transformers import SiglipTokenizer
    assert len(SENTENCES) == 333
    ours = Tokenizer.from_folder(sentencepiece_folder)
    assert not ours.siglip2 and (ours.pad, ours.end) == (1, 1)
    theirs = transformers_ids(SiglipTokenizer(vocab_file=str(sentencepiece_folder / "spiece.model")), SENTENCES)
    np.testing.assert_array_equal(ours.encode(SENTENCES, 64), theirs)
    assert len({tuple(row) for row in theirs}) > 300  # the sentences are told apart


def test_siglip2_s_ids_are_transformers_siglip2_tokenizer_s_in_every_script(gemma_folder):
    from transformers import Siglip2Tokenizer
    assert len(MULTILINGUAL) == 100
    ours = Tokenizer.from_folder(gemma_folder)
    assert ours.siglip2 and ours.pad == 0
    texts = SENTENCES + MULTILINGUAL
    theirs = transformers_ids(Siglip2Tokenizer.from_pretrained(str(gemma_folder)), texts)
    np.testing.assert_array_equal(ours.encode(texts, 64), theirs)
    # The other scripts are tokenized by their own pieces (the tests' vocabulary learnt them), not unknown bytes.
    multilingual = ours.encode(MULTILINGUAL, 64)
    assert (multilingual >= 261).mean() > 0.2 and len({tuple(row) for row in multilingual}) == 100


def test_text_is_lowercased_cut_to_64_with_its_end_token_and_padded_right(sentencepiece_folder, gemma_folder):
    for folder, end, pad in ((sentencepiece_folder, 1, 1), (gemma_folder, 1, 0)):
        tokenizer = Tokenizer.from_folder(folder)
        upper, lower = tokenizer.encode(["A DOG ON A BEACH", "a dog on a beach"], 64)
        np.testing.assert_array_equal(upper, lower)
        length = int(np.argmax(lower == end)) + 1
        assert lower[length - 1] == end and (lower[length:] == pad).all()
        long = tokenizer.encode("dog " * 200, 64)[0]
        assert long[-1] == end and (long[:-1] != pad).all()
    assert canonicalize("  A  Dog's (photo)!\t") == "a dogs photo"


def test_random_tokenizers_are_read_as_their_kinds(tmp_path):
    for gemma in (True, False):
        folder = tmp_path / ("gemma" if gemma else "sentencepiece")
        folder.mkdir()
        write_random_tokenizer(folder, gemma)
        tokenizer = Tokenizer.from_folder(folder)
        ids = tokenizer.encode(["a photo of a dog", "Ünïcödé 猫"], 64)
        assert tokenizer.siglip2 == gemma and ids.shape == (2, 64) and ids.max() < 300
        assert ids[0, 0] != ids[1, 0]


def test_a_folder_without_a_tokenizer_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="has neither spiece.model .SigLIP. nor tokenizer.json .SigLIP 2.$"):
        Tokenizer.from_folder(tmp_path)
    (tmp_path / "spiece.model").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="spiece.model is not a SentencePiece model"):
        Tokenizer.from_folder(tmp_path)
