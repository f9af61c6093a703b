"""models.clip.clip_tokenizer: exact ids against Hugging Face's fast CLIP tokenizer and keras-hub's, on a few hundred
sentences (unicode, emoji, long ones cut); CLIP's own ids; start, end, padding, truncation; bad files."""

import json
from pathlib import Path

import numpy as np
import pytest

from models.clip import clip_tokenizer
from models.clip.clip_tokenizer import CONTEXT_LENGTH, Tokenizer, write_test_vocabulary
from real_clip import MISSING, real_clip
from sentences import sentences


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_test_vocabulary(tmp_path_factory.mktemp("clip-vocabulary"))


@pytest.fixture(scope="module")
def tokenizer(folder):
    return Tokenizer.from_folder(folder)


def hugging_face(folder, tokenizer, context_length=CONTEXT_LENGTH):
    """Hugging Face's fast CLIP tokenizer, built as transformers' CLIPConverter builds it (convert_slow_tokenizer.py),
    the special tokens added as the checkpoints' tokenizer.json lists them (normalized: true)."""
    from tokenizers import AddedToken, Regex
    from tokenizers import Tokenizer as Reference
    from tokenizers import normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    vocabulary = json.loads((Path(folder) / "vocab.json").read_text(encoding="utf-8"))
    merges = clip_tokenizer.read_merges(Path(folder) / "merges.txt")
    reference = Reference(BPE(vocab=vocabulary, merges=merges, dropout=None, continuing_subword_prefix="",
                              end_of_word_suffix="</w>", fuse_unk=False, unk_token="<|endoftext|>"))
    reference.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                                 normalizers.Lowercase()])
    reference.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""),
                             behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    reference.post_processor = processors.RobertaProcessing(("<|endoftext|>", tokenizer.end_id),
                                                            ("<|startoftext|>", tokenizer.start_id),
                                                            trim_offsets=False, add_prefix_space=False)
    reference.add_special_tokens([AddedToken(token, normalized=True, special=True)
                                  for token in ("<|startoftext|>", "<|endoftext|>")])
    reference.enable_truncation(context_length)
    reference.enable_padding(length=context_length, pad_id=0)
    return reference


def _check_parity(tokenizer, reference, texts):
    ours = tokenizer.encode(texts)
    theirs = np.array([encoding.ids for encoding in reference.encode_batch(texts)], dtype=np.int32)
    differing = [texts[row] for row in np.flatnonzero((ours != theirs).any(axis=1))]
    assert differing == [], differing[:5]
    return ours


def test_the_ids_are_hugging_face_fast_tokenizers_on_a_few_hundred_sentences(folder, tokenizer):
    texts = sentences(300, long=30, special=True)
    ours = _check_parity(tokenizer, hugging_face(folder, tokenizer), texts)
    assert ours.shape == (len(texts), CONTEXT_LENGTH) and ours.dtype == np.int32
    # Not a pass for nothing: sentences that differ once lowercased are distinct rows, many use merges beyond
    # the bytes, long ones were cut with the end token last, and short ones padded with zeros.
    assert len({row.tobytes() for row in ours}) == len({text.lower() for text in texts})
    assert (ours >= 512).sum() > 2000 and len(np.unique(ours)) > 250 and len(np.unique(ours[ours >= 512])) > 100
    cut = ours[:, -1] == tokenizer.end_id
    assert cut.sum() >= 30 and (ours[cut, :-1] != tokenizer.end_id).all(axis=1).sum() >= 30
    assert ((ours[~cut] == 0).sum(axis=1) > 0).all()


def test_the_ids_are_keras_hubs_clip_tokenizer(folder, tokenizer):
    keras_hub = pytest.importorskip("keras_hub")
    reference = keras_hub.models.CLIPTokenizer(vocabulary=str(Path(folder) / "vocab.json"),
                                               merges=str(Path(folder) / "merges.txt"))
    texts = sentences(120, long=5, seed=1)
    theirs = reference(texts)
    for text, ids in zip(texts, theirs):
        assert tokenizer.token_ids(text) == [int(value) for value in ids], text


def test_clip_ids_of_words_the_test_vocabulary_holds(tokenizer):
    # The ids CLIP's own vocab.json gives (Hugging Face's documented "a photo of a cat": 49406, 320, 1125, 539,
    # 320, 2368, 49407): the test vocabulary lays out ids as CLIP's does, only the special tokens move.
    assert tokenizer.token_ids("a photo of a cat") == [320, 1125, 539, 320, 2368]
    assert tokenizer.token_ids("A Photo of a DOG") == [320, 1125, 539, 320, 1929]
    assert (tokenizer.start_id, tokenizer.end_id) == (512 + 4000, 513 + 4000)


def test_start_end_padding_and_truncation(tokenizer):
    tokens = tokenizer.encode(["a dog", "", "dog " * 100])
    np.testing.assert_array_equal(tokens[0, :4], [tokenizer.start_id, 320, 1929, tokenizer.end_id])
    assert (tokens[0, 4:] == 0).all() and list(tokens[1, :3]) == [tokenizer.start_id, tokenizer.end_id, 0]
    assert list(tokens[2, :2]) == [tokenizer.start_id, 1929] and tokens[2, -1] == tokenizer.end_id
    assert (tokens[2, 1:-1] == 1929).all()  # 75 of the 100 words kept, the end token last
    np.testing.assert_array_equal(tokenizer.encode("a dog"), tokens[:1])
    short = tokenizer.encode(["dog " * 100], context_length=5)
    assert list(short[0]) == [tokenizer.start_id, 1929, 1929, 1929, tokenizer.end_id]
    assert tokenizer.encode([]).shape == (0, CONTEXT_LENGTH)


def test_normalisation_follows_hugging_face(tokenizer):
    assert tokenizer.token_ids("cafe\u0301") == tokenizer.token_ids("café")              # NFC
    assert tokenizer.token_ids("a \t\n\u3000 dog") == tokenizer.token_ids("a dog")         # White_Space runs
    assert tokenizer.token_ids("a\x1cdog") != tokenizer.token_ids("a dog")                # not White_Space
    assert tokenizer.token_ids("ΣΑΣ") == tokenizer.token_ids("σασ")                       # no final sigma
    assert tokenizer.token_ids("it's") == tokenizer.token_ids("it") + tokenizer.token_ids("'s")
    assert tokenizer.token_ids("2024") == sum((tokenizer.token_ids(digit) for digit in "2024"), [])
    assert tokenizer.token_ids("x <|endoftext|>") == tokenizer.token_ids("x") + [tokenizer.end_id]


def test_wrong_arguments_name_the_value(tokenizer):
    with pytest.raises(ValueError, match="sentence 1 is 3; expected a str"):
        tokenizer.encode(["a", 3])
    for length in (1, 7.0, True):
        with pytest.raises(ValueError, match="context_length=%r" % (length,)):
            tokenizer.encode("a", context_length=length)
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
    notice = (Path(clip_tokenizer.__file__).parent / "clip_test_merges.README").read_text()
    assert "MIT" in notice and "bpe_simple_vocab_16e6.txt.gz" in notice
    smaller = Tokenizer.from_folder(write_test_vocabulary(folder / "small", merges=10))
    assert smaller.end_id == 523 and smaller.token_ids("in") == [vocabulary["i"], vocabulary["n</w>"]]


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


def test_the_ids_are_hugging_face_fast_tokenizers_on_clips_own_vocabulary():
    found = real_clip()
    if found is None:
        pytest.skip(MISSING)
    folder = found[1]
    tokenizer = Tokenizer.from_folder(folder)
    assert (tokenizer.start_id, tokenizer.end_id) == (49406, 49407)
    ours = _check_parity(tokenizer, hugging_face(folder, tokenizer), sentences(300, long=30, special=True))
    assert list(ours[0, :3]) == [49406, 320, 1125]
