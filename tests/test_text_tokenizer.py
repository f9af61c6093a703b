"""models.text_tokenizer: any tokenizer.json as a tower's ids (its normalisation and special tokens as it says; the
context length, the cut keeping the end token, and the padding here), on a tokenizer of another kind than CLIP's:
a word-level vocabulary that lowercases and ends a sentence with "</s>", padded with 1, as SigLIP's are."""

import json
import threading

import numpy as np
import pytest

from models.text_tokenizer import TextTokenizer

WORDS = ["<unk>", "<pad>", "</s>", "a", "dog", "on", "the", "beach", "cat"]


def word_level(path, padding=None, truncation=None):
    """Writes a tokenizer.json: lowercasing, whitespace pieces, word ids, "</s>" after each sentence; with the
    padding and truncation settings given (which the tower's replace)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    tokenizer = Tokenizer(WordLevel({word: index for index, word in enumerate(WORDS)}, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    if padding:
        tokenizer.enable_padding(length=padding, pad_id=0)
    if truncation:
        tokenizer.enable_truncation(truncation)
    tokenizer.save(str(path))
    return path


def test_the_file_s_normalisation_and_end_token_with_the_tower_s_length_and_padding(tmp_path):
    path = word_level(tmp_path / "tokenizer.json", padding=3, truncation=2)  # the file's own: replaced
    tokenizer = TextTokenizer.from_file(path, context_length=5, pad_id=1)
    assert (tokenizer.context_length, tokenizer.pad_id, tokenizer.vocabulary_size) == (5, 1, len(WORDS))
    ids = tokenizer.encode(["A DOG", "the cat on the beach", "a zebra", ""])
    np.testing.assert_array_equal(ids, [[3, 4, 2, 1, 1],        # lowercased, "</s>" last, padded with 1
                                        [6, 8, 5, 6, 2],        # cut to 4 words: the end token kept
                                        [3, 0, 2, 1, 1],        # an unknown word
                                        [2, 1, 1, 1, 1]])
    assert ids.dtype == np.int32 and tokenizer.token_id("</s>") == 2
    np.testing.assert_array_equal(tokenizer.encode("a dog"), ids[:1])


def test_sentences_from_several_threads_at_once_get_their_own_ids(tmp_path):
    tokenizer = TextTokenizer.from_file(word_level(tmp_path / "tokenizer.json"), context_length=8)
    texts = [" ".join(WORDS[3 + (seed + position) % 6] for position in range(seed % 7)) for seed in range(200)]
    expected = tokenizer.encode(texts)
    results = [None] * 4

    def encode(index):
        results[index] = tokenizer.encode(texts[index::4])

    threads = [threading.Thread(target=encode, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(4):
        np.testing.assert_array_equal(results[index], expected[index::4])


def test_wrong_arguments_and_files_are_one_line_naming_them(tmp_path):
    path = word_level(tmp_path / "tokenizer.json")
    for length in (1, 3.0, True, None):
        with pytest.raises(ValueError, match=r"context_length=%r; expected an int of at least 2 \(the 1 special tokens "
                                             % (length,)):
            TextTokenizer.from_file(path, context_length=length)
    tokenizer = TextTokenizer.from_file(path, context_length=4)
    with pytest.raises(ValueError, match="sentence 2 is b'dog'; expected a str"):
        tokenizer.encode(["a", "dog", b"dog"])
    with pytest.raises(ValueError, match=r"tokenizer.json has no <s> token"):
        tokenizer.token_id("<s>")
    with pytest.raises(ValueError, match=r"nowhere.json: no such file"):
        TextTokenizer.from_file(tmp_path / "nowhere.json", context_length=4)
    (tmp_path / "bad.json").write_text(json.dumps({"version": "1.0", "model": {"type": "Nothing"}}))
    with pytest.raises(ValueError, match=r"bad.json is not a tokenizer.json: ") as error:
        TextTokenizer.from_file(tmp_path / "bad.json", context_length=4)
    assert "\n" not in str(error.value)
