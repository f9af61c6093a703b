"""models.clip.clip_tokenizer: the ids of transformers' CLIPTokenizerFast on the 333 sentences (unicode, emoji, long
ones cut, the special tokens as text), from a tokenizer.json or from vocab.json and merges.txt alone; keras-hub's;
CLIP's own ids; start, end, padding, truncation; bad files."""

import json
from pathlib import Path

import numpy as np
import pytest

from models.clip import clip_tokenizer
from models.clip.clip_tokenizer import CONTEXT_LENGTH, Tokenizer, write_test_vocabulary
from real_clip import MISSING, real_clip
from sentences import sentences

TEXTS = sentences(300, long=30, special=True)  # 333 sentences


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The tests' vocabulary as a checkpoint's folder has it: tokenizer.json, vocab.json and merges.txt."""
    return write_test_vocabulary(tmp_path_factory.mktemp("clip-vocabulary"))


@pytest.fixture(scope="module")
def tokenizer(folder):
    return Tokenizer.from_folder(folder)


def transformers_ids(folder, texts):
    """transformers' CLIPTokenizerFast from `folder`: its ids with truncation=True, max_length=77 (unpadded)."""
    from transformers import CLIPTokenizerFast
    reference = CLIPTokenizerFast.from_pretrained(str(folder))
    return reference(texts, truncation=True, max_length=CONTEXT_LENGTH)["input_ids"]


def _check_parity(ours, theirs, texts):
    """Each row of `ours` is `theirs` (a list of ids) followed by zeros."""
    padded = np.zeros_like(ours)
    for row, ids in enumerate(theirs):
        padded[row, :len(ids)] = ids
    differing = [texts[row] for row in np.flatnonzero((ours != padded).any(axis=1))]
    assert differing == [], differing[:5]


def _ids(tokenizer, text):
    """The BPE ids of one sentence, without start, end and padding."""
    row = tokenizer.encode(text)[0]
    return [int(value) for value in row[1:np.flatnonzero(row == tokenizer.end_id)[0]]]


@pytest.mark.parametrize("files", ["tokenizer.json", "vocab.json and merges.txt", "transformers' tokenizer.json"])
def test_the_ids_are_transformers_clip_tokenizer_fast_on_333_sentences(folder, tmp_path, files):
    if files == "vocab.json and merges.txt":  # built by clip_tokenizer.build, as transformers builds it
        write_test_vocabulary(tmp_path)
        (tmp_path / "tokenizer.json").unlink()
        folder = tmp_path
    elif files == "transformers' tokenizer.json":  # the file transformers itself writes
        from transformers import CLIPTokenizerFast
        CLIPTokenizerFast.from_pretrained(str(folder)).save_pretrained(str(tmp_path))
        assert not (tmp_path / "vocab.json").exists()
        folder = tmp_path
    ours = Tokenizer.from_folder(folder).encode(TEXTS)
    assert len(TEXTS) == 333 and ours.shape == (333, CONTEXT_LENGTH) and ours.dtype == np.int32
    _check_parity(ours, transformers_ids(folder, TEXTS), TEXTS)
    # Not a pass for nothing: sentences that differ once lowercased are distinct rows, many use merges beyond
    # the bytes, long ones were cut with the end token last, and short ones padded with zeros.
    end = 4513
    assert len({row.tobytes() for row in ours}) == len({text.lower() for text in TEXTS})
    assert (ours >= 512).sum() > 2000 and len(np.unique(ours)) > 250 and len(np.unique(ours[ours >= 512])) > 100
    cut = ours[:, -1] == end
    assert cut.sum() >= 30 and (ours[cut, :-1] != end).all(axis=1).sum() >= 30
    assert ((ours[~cut] == 0).sum(axis=1) > 0).all()


def test_the_ids_are_keras_hub_s_clip_tokenizer(folder, tokenizer):
    """keras-hub's CLIPTokenizer runs tensorflow-text's BPE: another implementation than the `tokenizers` library."""
    keras_hub = pytest.importorskip("keras_hub")
    reference = keras_hub.models.CLIPTokenizer(vocabulary=str(Path(folder) / "vocab.json"),
                                               merges=str(Path(folder) / "merges.txt"))
    texts = sentences(120, long=5, seed=1)
    for text, theirs, ours in zip(texts, reference(texts), tokenizer.encode(texts)):
        theirs = [tokenizer.start_id] + [int(value) for value in theirs][:CONTEXT_LENGTH - 2] + [tokenizer.end_id]
        assert list(ours[:len(theirs)]) == theirs and not ours[len(theirs):].any(), text


def test_clip_ids_of_words_the_test_vocabulary_holds(tokenizer):
    # The ids CLIP's own vocab.json gives (Hugging Face's documented "a photo of a cat": 49406, 320, 1125, 539,
    # 320, 2368, 49407): the test vocabulary lays out ids as CLIP's does, only the special tokens move.
    assert _ids(tokenizer, "a photo of a cat") == [320, 1125, 539, 320, 2368]
    assert _ids(tokenizer, "A Photo of a DOG") == [320, 1125, 539, 320, 1929]
    assert (tokenizer.start_id, tokenizer.end_id) == (512 + 4000, 513 + 4000)


def test_start_end_padding_and_truncation(folder, tokenizer):
    tokens = tokenizer.encode(["a dog", "", "dog " * 100])
    np.testing.assert_array_equal(tokens[0, :4], [tokenizer.start_id, 320, 1929, tokenizer.end_id])
    assert (tokens[0, 4:] == 0).all() and list(tokens[1, :3]) == [tokenizer.start_id, tokenizer.end_id, 0]
    assert list(tokens[2, :2]) == [tokenizer.start_id, 1929] and tokens[2, -1] == tokenizer.end_id
    assert (tokens[2, 1:-1] == 1929).all()  # 75 of the 100 words kept, the end token last
    np.testing.assert_array_equal(tokenizer.encode("a dog"), tokens[:1])
    short = Tokenizer.from_folder(folder, context_length=5).encode(["dog " * 100])
    assert list(short[0]) == [tokenizer.start_id, 1929, 1929, 1929, tokenizer.end_id]
    assert tokenizer.encode([]).shape == (0, CONTEXT_LENGTH)


def test_normalisation_follows_hugging_face(tokenizer):
    assert _ids(tokenizer, "cafe\u0301") == _ids(tokenizer, "café")              # NFC
    assert _ids(tokenizer, "a \t\n\u3000 dog") == _ids(tokenizer, "a dog")         # White_Space runs
    assert _ids(tokenizer, "a\x1cdog") != _ids(tokenizer, "a dog")                # not White_Space
    assert _ids(tokenizer, "ΣΑΣ") == _ids(tokenizer, "σασ")                       # no final sigma
    assert _ids(tokenizer, "it's") == _ids(tokenizer, "it") + _ids(tokenizer, "'s")
    assert _ids(tokenizer, "2024") == sum((_ids(tokenizer, digit) for digit in "2024"), [])
    row = tokenizer.encode("x <|endoftext|> y")[0]
    assert list(row[:4]) == [tokenizer.start_id] + _ids(tokenizer, "x") + [tokenizer.end_id, _ids(tokenizer, "y")[0]]


def test_wrong_arguments_name_the_value(folder, tokenizer):
    with pytest.raises(ValueError, match="sentence 1 is 3; expected a str"):
        tokenizer.encode(["a", 3])
    for length in (2, 7.0, True):
        with pytest.raises(ValueError, match=r"context_length=%r; expected an int of at least 3 \(the 2 special tokens "
                                             % (length,)):
            Tokenizer.from_folder(folder, context_length=length)
    with pytest.raises(ValueError, match="merges=5000; expected 0 to 4000"):
        write_test_vocabulary("unused", merges=5000)


def test_the_test_vocabulary_is_laid_out_as_clips(folder):
    vocabulary = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    merges = clip_tokenizer.read_merges(folder / "merges.txt")
    assert (folder / "merges.txt").read_text(encoding="utf-8").startswith("#version: 0.2\ni n\nt h\n")
    tokens = sorted(vocabulary, key=vocabulary.get)
    assert list(vocabulary.values()) == list(range(len(vocabulary))) == list(range(514 + 4000))
    assert tokens[:3] == ["!", '"', "#"] and tokens[188] == "Ā" and tokens[256] == "!</w>"
    assert tokens[512:516] == ["in", "th", "an", "re"] and tokens[-2:] == ["<|startoftext|>", "<|endoftext|>"]
    assert tokens[512:-2] == [first + second for first, second in merges]
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert saved["model"]["vocab"] == vocabulary and len(saved["model"]["merges"]) == 4000
    notice = (Path(clip_tokenizer.__file__).parent / "clip_test_merges.README").read_text()
    assert "MIT" in notice and "bpe_simple_vocab_16e6.txt.gz" in notice
    smaller = Tokenizer.from_folder(write_test_vocabulary(folder / "small", merges=10))
    assert smaller.end_id == 523 and _ids(smaller, "in") == [vocabulary["i"], vocabulary["n</w>"]]


@pytest.mark.parametrize("vocabulary, merges, message", [
    (None, "#version: 0.2\ni n\n", r"vocab.json: No such file"),
    ("{not json", "", r"vocab.json is not a vocab.json \(Expecting property name"),
    ("[1, 2]", "", r"vocab.json is not a vocab.json: expected an object \{token: id\}, got list"),
    ('{"a": "1"}', "", r"vocab.json is not a vocab.json: token 'a' has id '1'"),
    ('{"a": 1, "b": 1}', "", r"vocab.json is not a vocab.json: 2 tokens share 1 ids"),
    ("VOCABULARY", None, r"merges.txt: No such file"),
    ("VOCABULARY", "#version: 0.2\ni n\nt h x\n", r"merges.txt is not a merges.txt: line 3 is 't h x'"),
    ("VOCABULARY", b"\xff\xfe", r"merges.txt is not a merges.txt: not UTF-8"),
    ("VOCABULARY", "#version: 0.2\nq q\n", r"the merge 'q' 'q' makes 'qq', which is not in the vocabulary"),
    ("NO END", "", r"has no <\|endoftext\|> token"),
    ('{"<|startoftext|>": 0, "<|endoftext|>": 1}', "", r"lacks 512 of the 512 byte tokens"),
])
def test_bad_files_are_one_line_naming_the_file(folder, tmp_path, vocabulary, merges, message):
    good = (folder / "vocab.json").read_text(encoding="utf-8")
    if vocabulary == "VOCABULARY":
        vocabulary = good
    elif vocabulary == "NO END":
        vocabulary = json.dumps({token: index for token, index in json.loads(good).items() if token != "<|endoftext|>"})
    for name, content in (("vocab.json", vocabulary), ("merges.txt", merges)):
        if content is not None:
            (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    with pytest.raises(ValueError, match=message) as error:
        Tokenizer.from_folder(tmp_path)
    assert "\n" not in str(error.value) and str(tmp_path) in str(error.value)


def test_a_bad_tokenizer_json_is_one_line_naming_it(folder, tmp_path):
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"tokenizer.json is not a tokenizer.json: ") as error:
        Tokenizer.from_folder(tmp_path)
    assert "\n" not in str(error.value) and str(tmp_path) in str(error.value)
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    saved["added_tokens"] = [token for token in saved["added_tokens"] if token["content"] != "<|startoftext|>"]
    del saved["model"]["vocab"]["<|startoftext|>"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"tokenizer.json has no <\|startoftext\|> token"):
        Tokenizer.from_folder(tmp_path)


def test_the_ids_are_transformers_on_clips_own_vocabulary():
    found = real_clip()
    if found is None:
        pytest.skip(MISSING)
    folder = found[1]
    tokenizer = Tokenizer.from_folder(folder)
    assert (tokenizer.start_id, tokenizer.end_id) == (49406, 49407)
    ours = tokenizer.encode(TEXTS)
    _check_parity(ours, transformers_ids(folder, TEXTS), TEXTS)
    assert list(ours[0, :3]) == [49406, 320, 1125]
