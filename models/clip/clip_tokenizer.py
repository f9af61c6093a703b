"""CLIP's tokenizer: byte-level BPE run by Hugging Face's `tokenizers`, from a checkpoint's tokenizer.json, or built
from its vocab.json and merges.txt as transformers builds CLIPTokenizerFast when a folder has no tokenizer.json.

    tokenizer = Tokenizer.from_folder("clip-vit-base-patch32/")      # tokenizer.json, else vocab.json + merges.txt
    tokens = tokenizer.encode(["a dog on a beach"])                  # int32 [1, 77]

A sentence becomes the start token, its BPE tokens, the end token, then zeros up to the context length (77 for
every CLIP): the ids of transformers' CLIPTokenizerFast with `truncation=True, max_length=77` (tested on 333
sentences), padded with zeros as OpenAI's and open_clip's `tokenize` pad (transformers pads with the end token;
the text tower reads nothing after the end token, so the embedding is the same). A longer sentence is cut to 77
with the end token kept last. The shared part (truncation, padding, a sentence at a time) is
models/text_tokenizer.py's.

Built from vocab.json and merges.txt, the pipeline is transformers' (its models/clip/tokenization_clip.py), which a
checkpoint's tokenizer.json says in its own words (and is read as it says):
1. Unicode NFC; every run of whitespace (`\\s`: Unicode's White_Space) becomes one space; lowercase.
2. The special tokens "<|startoftext|>" and "<|endoftext|>" written as such in a sentence are those tokens.
3. The rest splits into the pieces of CLIP's pattern (`PATTERN`,
   `'s|'t|'re|'ve|'m|'ll|'d|[\\p{L}]+|[\\p{N}]|[^\\s\\p{L}\\p{N}]+` after the special tokens): a contraction, a run of
   letters, one digit, or a run of anything else that is not a space.
4. Each piece's UTF-8 bytes, in GPT-2's printable byte alphabet, "</w>" ending the last, are merged by the
   merges' ranks; the start and end tokens go around (RoBERTa's post-processor).

OpenAI's and open_clip's own tokenizer differs before step 1: it runs `ftfy.fix_text` (mojibake repaired,
"â€™" read back as "’"; curly quotes made straight; ligatures, full-width forms and some control
characters replaced) and unescapes HTML entities twice ("&amp;" becomes "&"), splits whitespace as
Python's `str.split` does (which also splits at U+001C-U+001F), and lowercases the whole string (final
sigma "ς"). Those sentences get other ids there; ordinary text gets the same ones. We follow Hugging
Face's tokenizer, which needs no ftfy and whose files the checkpoints carry; a query with mojibake or
entities should be fixed by whoever types it.
"""

import json
from pathlib import Path

from models.text_tokenizer import TextTokenizer

START_TOKEN, END_TOKEN = "<|startoftext|>", "<|endoftext|>"
END_OF_WORD = "</w>"
CONTEXT_LENGTH = 77  # every CLIP's text tower: 77 positions
TOKENIZER_FILE, VOCABULARY_FILE, MERGES_FILE = "tokenizer.json", "vocab.json", "merges.txt"
MERGES_HEADER = "#version: 0.2"
# transformers' (tokenization_clip.py, 5.x): the special tokens, then CLIP's own pattern.
PATTERN = r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""
# The file write_test_vocabulary reads: the first 4,000 of CLIP's merges (see its README beside it).
TEST_MERGES = Path(__file__).with_name("clip_test_merges.txt")


class Tokenizer(TextTokenizer):
    """CLIP's tokenizer: a `TextTokenizer` (models/text_tokenizer.py) padding with zeros, whose vocabulary has the
    start and end tokens.

    Attributes:
      start_id, end_id: the ids of "<|startoftext|>" and "<|endoftext|>" (49406 and 49407 in CLIP's files).
    """

    def __init__(self, tokenizer, context_length=CONTEXT_LENGTH, pad_id=0, source="the tokenizer"):
        """As TextTokenizer's; ValueError (naming `source`) for a tokenizer without CLIP's special tokens."""
        super().__init__(tokenizer, context_length, pad_id, source)
        self.start_id, self.end_id = self.token_id(START_TOKEN), self.token_id(END_TOKEN)

    @classmethod
    def from_folder(cls, folder, context_length=CONTEXT_LENGTH):
        """The tokenizer of a checkpoint's folder: its tokenizer.json, else its vocab.json and merges.txt.

        Raises:
          ValueError: the files are missing or malformed (one line naming the file and what is wrong).
        """
        folder = Path(folder)
        if (folder / TOKENIZER_FILE).is_file():
            return cls.from_file(folder / TOKENIZER_FILE, context_length)
        vocabulary, merges = read_vocabulary(folder / VOCABULARY_FILE), read_merges(folder / MERGES_FILE)
        check_vocabulary(vocabulary, merges, str(folder))
        return cls(build(vocabulary, merges), context_length, source=str(folder))


def build(vocabulary, merges):
    """CLIP's `tokenizers.Tokenizer` over a vocabulary and its merges, as transformers' CLIPTokenizerFast builds it
    (the module docstring's steps). The vocabulary must have passed `check_vocabulary`: the library does not
    check a merge's token is in the vocabulary, and stops the process (a Rust panic) on one that is not.

    Args:
      vocabulary: {token: id}, with the two special tokens.
      merges: [(first, second)], highest priority first.

    Returns:
      tokenizers.Tokenizer, whose `save` writes a tokenizer.json.
    """
    from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers, processors
    from tokenizers import Tokenizer as Library
    from tokenizers.models import BPE

    tokenizer = Library(BPE(vocab=dict(vocabulary), merges=[tuple(pair) for pair in merges], dropout=None,
                            continuing_subword_prefix="", end_of_word_suffix=END_OF_WORD, fuse_unk=False,
                            unk_token=END_TOKEN))
    tokenizer.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Replace(Regex(r"\s+"), " "),
                                                 normalizers.Lowercase()])
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                  for token in (START_TOKEN, END_TOKEN)])
    tokenizer.post_processor = processors.RobertaProcessing((END_TOKEN, vocabulary[END_TOKEN]),
                                                            (START_TOKEN, vocabulary[START_TOKEN]),
                                                            trim_offsets=False, add_prefix_space=False)
    return tokenizer


def check_vocabulary(vocabulary, merges, source="the vocabulary"):
    """ValueError (one line naming `source`) unless the vocabulary has the special tokens, the 512 byte tokens
    (each byte, alone and ending a word: else a byte maps to the unknown token, silently) and every merge's token.
    """
    for token in (START_TOKEN, END_TOKEN):
        if token not in vocabulary:
            raise ValueError("%s has no %s token" % (source, token))
    alphabet = byte_alphabet()
    missing = [token for token in alphabet + [token + END_OF_WORD for token in alphabet] if token not in vocabulary]
    if missing:
        raise ValueError("%s lacks %d of the 512 byte tokens (%r, ...): not a byte-level BPE vocabulary"
                         % (source, len(missing), missing[0]))
    for first, second in merges:
        if first + second not in vocabulary:
            raise ValueError("%s: the merge %r %r makes %r, which is not in the vocabulary"
                             % (source, first, second, first + second))


def byte_order():
    """The 256 byte values in CLIP's vocabulary order: the 188 printable ones ('!'..'~', '¡'..'¬', '®'..'ÿ'),
    then the others in increasing order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    return printable + [byte for byte in range(256) if byte not in printable]


def byte_alphabet():
    """GPT-2's and CLIP's printable stand-in for each byte: a list of 256 one-character str, by byte value.

    A printable byte stands for itself; the others (controls, the space, ...) take U+0100, U+0101, ... in
    increasing byte order, so that no token holds a space or a control character.
    """
    printable = set(byte_order()[:188])
    alphabet, extra = [], 0
    for byte in range(256):
        alphabet.append(chr(byte) if byte in printable else chr(256 + extra))
        extra += byte not in printable
    return alphabet


# ----------------------------------------------------------------------------- files

def read_vocabulary(path):
    """{token: id} from a Hugging Face vocab.json.

    Raises:
      ValueError: missing, not JSON, or not an object of str to distinct non-negative int (naming the file).
    """
    try:
        vocabulary = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError("%s: %s" % (path, error.strerror or error)) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError("%s is not a vocab.json (%s)" % (path, str(error).splitlines()[0])) from None
    if not isinstance(vocabulary, dict) or not vocabulary:
        raise ValueError("%s is not a vocab.json: expected an object {token: id}, got %s"
                         % (path, type(vocabulary).__name__ if vocabulary else "nothing"))
    bad = next(((token, value) for token, value in vocabulary.items()
                if isinstance(value, bool) or not isinstance(value, int) or value < 0), None)
    if bad:
        raise ValueError("%s is not a vocab.json: token %r has id %r; expected an int >= 0" % ((path,) + bad))
    if len(set(vocabulary.values())) != len(vocabulary):
        raise ValueError("%s is not a vocab.json: %d tokens share %d ids" % (path, len(vocabulary),
                                                                           len(set(vocabulary.values()))))
    return vocabulary


def read_merges(path):
    """[(first, second)] from a Hugging Face merges.txt: an optional "#version" line, then one merge a line.

    Raises:
      ValueError: missing, not UTF-8, or a line that is not two tokens (naming the file and the line).
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except OSError as error:
        raise ValueError("%s: %s" % (path, error.strerror or error)) from None
    except UnicodeDecodeError as error:
        raise ValueError("%s is not a merges.txt: not UTF-8 (%s)" % (path, error.reason)) from None
    if lines and lines[0].startswith("#version"):
        lines = lines[1:]
    while lines and not lines[-1]:
        lines.pop()
    merges = []
    for number, line in enumerate(lines, 2):
        pair = line.split(" ")
        if len(pair) != 2 or not all(pair):
            raise ValueError("%s is not a merges.txt: line %d is %r; expected two tokens separated by a space"
                             % (path, number, line[:80]))
        merges.append(tuple(pair))
    return merges


def vocabulary_of(merges):
    """CLIP's vocabulary for `merges`, ids laid out as in CLIP's own vocab.json: the 256 bytes (in
    `byte_order()`), the 256 bytes with "</w>", one token per merge, then the start and end tokens.

    Returns:
      {token: id}, 514 + len(merges) entries.
    """
    alphabet = byte_alphabet()
    tokens = [alphabet[byte] for byte in byte_order()]
    tokens += [token + END_OF_WORD for token in tokens]
    tokens += [first + second for first, second in merges] + [START_TOKEN, END_TOKEN]
    return {token: index for index, token in enumerate(tokens)}


def write_test_vocabulary(folder, merges=None):
    """Writes vocab.json, merges.txt and tokenizer.json into `folder` (created): a real prefix of CLIP's merges
    (TEST_MERGES, the first 4,000 of them), the vocabulary CLIP lays out for them (`vocabulary_of`), and the
    tokenizer `build` makes of them, as a checkpoint's folder has the three.

    English words of a few letters are one token, as in CLIP's files; longer and rarer words are cut into
    more tokens than CLIP's 48,894 merges would cut them. For tests and random weights: the ids are not
    CLIP's beyond the first 512 + 4,000 (the start token is 4,512, the end token 4,513).

    Args:
      folder: where to write (str or Path).
      merges: how many of the prefix's merges to keep (default all 4,000).

    Returns:
      Path of the folder.
    """
    kept = read_merges(TEST_MERGES)
    if merges is not None:
        if not 0 <= merges <= len(kept):
            raise ValueError("merges=%r; expected 0 to %d" % (merges, len(kept)))
        kept = kept[:merges]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / VOCABULARY_FILE).write_text(json.dumps(vocabulary_of(kept), ensure_ascii=False), encoding="utf-8")
    (folder / MERGES_FILE).write_text("\n".join([MERGES_HEADER] + ["%s %s" % pair for pair in kept]) + "\n",
                                      encoding="utf-8")
    build(vocabulary_of(kept), kept).save(str(folder / TOKENIZER_FILE), pretty=False)
    return folder
