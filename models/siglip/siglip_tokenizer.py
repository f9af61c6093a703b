"""SigLIP's tokenizers through Hugging Face's `tokenizers` library: SigLIP's SentencePiece model (spiece.model) and
SigLIP 2's Gemma tokenizer (tokenizer.json), with each one's text rules, the same ids as transformers'.

    tokenizer = Tokenizer.from_folder("siglip2-base-patch16-256/")
    ids = tokenizer.encode(["a dog on a beach"], 64)        # int32 [1, 64]: tokens, the end token, padding

SigLIP (transformers' SiglipTokenizer, big_vision's c4_en / mc4 SentencePiece models): the text is canonicalised as
big_vision's prompt engineering does (lowercased; ASCII punctuation removed; each run of whitespace one space;
stripped), after a "▁" is put before it (so leading whitespace stays one space); then SentencePiece (a Unigram
model) encodes it as transformers does: behind "<unk>", whose pieces are then dropped. spiece.model is read here
with protobuf alone (its schema built below) into a `tokenizers.Tokenizer` that encodes as SentencePiece does (its
normaliser's character map, whitespace rules and dummy prefix; the Unigram model and its scores).

SigLIP 2 (Gemma's tokenizer.json, transformers' Siglip2Tokenizer): lowercased first, as SigLIP 2 was trained
(the model card: "the model was trained with lowercased text"), then the byte-fallback BPE of tokenizer.json.

Then: at most L tokens with the special ones, a longer sentence cut and its end token kept; the padding token to L
(right): padding="max_length", truncation=True, max_length=L, as the checkpoints were trained and as transformers'
pipelines call them. SigLIP: the tokens, its end token "</s>" (1), padded with "</s>" (transformers'
SiglipTokenizer). SigLIP 2: tokenizer.json's own post-processor puts the special tokens (the published files:
the tokens then "<eos>" (1), no "<bos>", as their conversion wrote them: add_bos_token=False, add_eos_token=True),
padded with "<pad>" (0): what transformers' tokenizer of that file gives.

A sentence holding a special token's text ("</s>", "<eos>") as words: transformers' SiglipTokenizer splits it out
before canonicalising and this tokenizer does not (its punctuation is removed), so such a sentence's ids differ;
SigLIP 2's are the same (the `tokenizers` library splits added tokens alike).
"""

import functools
import json
import re
import string
from pathlib import Path

import numpy as np

SPIECE_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE = "spiece.model", "tokenizer.json", "tokenizer_config.json"
SPIECE_UNDERLINE = "▁"
CONTEXT_LENGTH = 64  # the published checkpoints' text positions (max_position_embeddings)
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_WHITESPACE = re.compile(r"\s+")


def canonicalize(text):
    """big_vision's (and transformers' SiglipTokenizer's) canonical text: lowercased, ASCII punctuation removed,
    each run of whitespace one space, stripped."""
    return _WHITESPACE.sub(" ", text.lower().translate(_PUNCTUATION)).strip()


class Tokenizer:
    """A SigLIP or SigLIP 2 tokenizer (see the module docstring); `encode` may be called from several threads.

    Args:
      tokenizer: the `tokenizers.Tokenizer` of the pieces (SentencePiece's, or tokenizer.json's with lowercasing).
      siglip2: True: Gemma's rules (lowercase in the tokenizer, its post-processor's special tokens); False:
        SigLIP's canonical text and "<unk>" prefix, then the end token.
      pad: the padding token's id; end: SigLIP's end token's id (SigLIP 2's come from its post-processor).
      context_length: the text tower's positions, the length `encode` gives when it is told none (64).
    """

    def __init__(self, tokenizer, siglip2, pad, end=None, context_length=CONTEXT_LENGTH):
        self._tokenizer, self.siglip2, self.context_length = tokenizer, siglip2, context_length
        self.pad, self.end = pad, end
        self.vocabulary_size = tokenizer.get_vocab_size()
        # The special tokens around a sentence: SigLIP 2's post-processor's; SigLIP's end token.
        self._added = tokenizer.num_special_tokens_to_add(False) if siglip2 else 1
        # transformers encodes "<unk>" + text and drops the pieces "<unk>" alone gives.
        self._prefix = 0 if siglip2 else len(tokenizer.encode("<unk>", add_special_tokens=False).ids)

    @classmethod
    def from_folder(cls, folder, context_length=CONTEXT_LENGTH):
        """The tokenizer of a checkpoint's folder: tokenizer_config.json's class says which (GemmaTokenizer,
        Siglip2Tokenizer: SigLIP 2; SiglipTokenizer: SigLIP); without one, tokenizer.json is SigLIP 2's and
        spiece.model SigLIP's.

        Raises:
          ValueError: neither file, or one that cannot be read (naming it).
        """
        folder = Path(folder)
        config = _json(folder / TOKENIZER_CONFIG_FILE) if (folder / TOKENIZER_CONFIG_FILE).is_file() else {}
        kind = str(config.get("tokenizer_class") or "")
        if (folder / TOKENIZER_FILE).is_file() and kind != "SiglipTokenizer":
            return cls._gemma(folder / TOKENIZER_FILE, config, context_length)
        if (folder / SPIECE_FILE).is_file():
            return cls._sentencepiece(folder / SPIECE_FILE, config, context_length)
        raise ValueError("%s has neither %s (SigLIP) nor %s (SigLIP 2)" % (folder, SPIECE_FILE, TOKENIZER_FILE))

    @classmethod
    def _gemma(cls, path, config, context_length):
        from tokenizers import Tokenizer as Library, normalizers
        try:
            tokenizer = Library.from_file(str(path))
        except Exception as error:  # the library's own exception class is not exported
            raise ValueError("%s is not a tokenizers tokenizer.json (%s)" % (path, error)) from None
        # As transformers' Siglip2Tokenizer: lowercase before tokenizer.json's own normaliser.
        tokenizer.normalizer = normalizers.Sequence([normalizers.Lowercase()] + (
            [tokenizer.normalizer] if tokenizer.normalizer is not None else []))
        return cls(tokenizer, True, _token_id(tokenizer, config, "pad_token", "<pad>", path),
                   context_length=context_length)

    @classmethod
    def _sentencepiece(cls, path, config, context_length):
        proto = read_sentencepiece(path)
        tokenizer = sentencepiece_tokenizer(proto)
        return cls(tokenizer, False, _token_id(tokenizer, config, "pad_token", "</s>", path),
                   _token_id(tokenizer, config, "eos_token", "</s>", path), context_length)

    def ids(self, sentence, length):
        """The ids of one sentence with its special tokens, at most `length` of them (list of int)."""
        if not isinstance(sentence, str):
            raise ValueError("a sentence must be a str; got %s" % type(sentence).__name__)
        if self.siglip2:  # as the library truncates: the tokens first, then the post-processor's special tokens
            encoding = self._tokenizer.encode(sentence, add_special_tokens=False)
            encoding.truncate(max(length - self._added, 0))
            return self._tokenizer.post_process(encoding).ids
        text = canonicalize(SPIECE_UNDERLINE + sentence.replace(SPIECE_UNDERLINE, " "))
        ids = self._tokenizer.encode("<unk>" + text, add_special_tokens=False).ids[self._prefix:]
        return ids[:length - 1] + [self.end]

    def encode(self, sentences, length=None):
        """int32 [N, length]: each sentence's ids as the text tower takes them (module docstring).

        Args:
          sentences: a str, or a sequence of N str.
          length: the text tower's positions (default: the tokenizer's context_length, 64).

        Raises:
          ValueError: a sentence that is not a str.
        """
        if isinstance(sentences, str):
            sentences = [sentences]
        length = self.context_length if length is None else length
        rows = np.full((len(sentences), length), self.pad, np.int32)
        for row, sentence in enumerate(sentences):
            ids = self.ids(sentence, length)
            rows[row, :len(ids)] = ids
        return rows


def _json(path):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError("%s cannot be read as JSON (%s)" % (path, error)) from None


def _token_text(value):
    """A tokenizer_config.json token: a string, or an AddedToken's {"content": ...}."""
    return value.get("content") if isinstance(value, dict) else value


def _token_id(tokenizer, config, key, default, path):
    """The id of tokenizer_config.json's `key` token (or `default`); ValueError naming one the vocabulary lacks."""
    text = str(_token_text(config.get(key, default)))
    token = tokenizer.token_to_id(text)
    if token is None:
        raise ValueError("%s: the vocabulary has no %s %r" % (path, key, text))
    return token


# ----------------------------------------------------------------------------- SentencePiece's model, with protobuf

# The pieces' types (sentencepiece_model.proto's SentencePiece.Type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNIGRAM = 1  # TrainerSpec.ModelType


@functools.lru_cache(maxsize=None)
def _model_class():
    """sentencepiece_model.proto's ModelProto (the fields read here), its schema built with protobuf alone in a
    pool of its own (google/sentencepiece, src/sentencepiece_model.proto: the field numbers and defaults)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="models/siglip/sentencepiece_model.proto", package="sentencepiece",
                                               syntax="proto2")
    optional, repeated = field.LABEL_OPTIONAL, field.LABEL_REPEATED

    def message(name, fields):
        added = proto.message_type.add(name=name)
        for field_name, number, kind, label, extra in fields:
            added.field.add(name=field_name, number=number, type=kind, label=label, **extra)
        return added

    message("SentencePiece", [("piece", 1, field.TYPE_STRING, optional, {}),
                              ("score", 2, field.TYPE_FLOAT, optional, {}),
                              ("type", 3, field.TYPE_INT32, optional, {"default_value": str(NORMAL)})])
    message("TrainerSpec", [("model_type", 3, field.TYPE_INT32, optional, {"default_value": str(UNIGRAM)}),
                            ("byte_fallback", 35, field.TYPE_BOOL, optional, {"default_value": "false"}),
                            ("unk_id", 40, field.TYPE_INT32, optional, {"default_value": "0"}),
                            ("unk_piece", 45, field.TYPE_STRING, optional, {"default_value": "<unk>"})])
    message("NormalizerSpec", [("name", 1, field.TYPE_STRING, optional, {}),
                               ("precompiled_charsmap", 2, field.TYPE_BYTES, optional, {}),
                               ("add_dummy_prefix", 3, field.TYPE_BOOL, optional, {"default_value": "true"}),
                               ("remove_extra_whitespaces", 4, field.TYPE_BOOL, optional, {"default_value": "true"}),
                               ("escape_whitespaces", 5, field.TYPE_BOOL, optional, {"default_value": "true"})])
    message("ModelProto", [
        ("pieces", 1, field.TYPE_MESSAGE, repeated, {"type_name": ".sentencepiece.SentencePiece"}),
        ("trainer_spec", 2, field.TYPE_MESSAGE, optional, {"type_name": ".sentencepiece.TrainerSpec"}),
        ("normalizer_spec", 3, field.TYPE_MESSAGE, optional, {"type_name": ".sentencepiece.NormalizerSpec"})])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("sentencepiece.ModelProto"))


def read_sentencepiece(path):
    """The ModelProto of a SentencePiece model file (spiece.model): its pieces, trainer and normaliser specs.

    Raises:
      ValueError: not a SentencePiece model, or one of another algorithm than Unigram (naming the file).
    """
    from google.protobuf.message import DecodeError
    try:
        proto = _model_class().FromString(Path(path).read_bytes())
    except OSError as error:
        raise ValueError("%s: %s" % (path, error.strerror or error)) from None
    except (DecodeError, RuntimeError, ValueError):
        raise ValueError("%s is not a SentencePiece model" % path) from None
    if not proto.pieces:
        raise ValueError("%s is not a SentencePiece model (no pieces)" % path)
    if proto.trainer_spec.model_type != UNIGRAM:
        raise ValueError("%s is a SentencePiece model of type %d; SigLIP's are Unigram (%d)" % (
            path, proto.trainer_spec.model_type, UNIGRAM))
    return proto


def sentencepiece_tokenizer(proto):
    """A `tokenizers.Tokenizer` that encodes as SentencePiece does with the Unigram model `proto`: its normaliser
    (the precompiled character map, e.g. nmt_nfkc; spaces stripped at the ends and collapsed; spaces escaped as
    "▁"), its dummy prefix, the Unigram model with its pieces' scores and unknown id."""
    from tokenizers import Regex, Tokenizer as Library, normalizers, pre_tokenizers
    from tokenizers.models import Unigram
    spec = proto.normalizer_spec
    tokenizer = Library(Unigram([(piece.piece, piece.score) for piece in proto.pieces], proto.trainer_spec.unk_id,
                                proto.trainer_spec.byte_fallback))
    steps = [normalizers.Precompiled(spec.precompiled_charsmap)] if spec.precompiled_charsmap else []
    if spec.remove_extra_whitespaces:  # SentencePiece's: spaces only, not newlines or tabs
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " ")]
    if spec.escape_whitespaces:
        steps.append(normalizers.Replace(" ", SPIECE_UNDERLINE))
    if spec.add_dummy_prefix:
        # SentencePiece puts its prefix before a text that starts with "▁" too; Metaspace would not.
        steps.append(normalizers.Replace(Regex(r"\A" + SPIECE_UNDERLINE), SPIECE_UNDERLINE * 2))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE_UNDERLINE, prepend_scheme="always",
                                                           split=False)
    tokenizer.normalizer = normalizers.Sequence(steps)
    return tokenizer


# ----------------------------------------------------------------------------- small tokenizers for random weights

_CHARACTERS = "abcdefghijklmnopqrstuvwxyz0123456789"


def write_random_tokenizer(folder, gemma):
    """Writes a small tokenizer of SigLIP 2's kind (gemma=True: tokenizer.json, a byte-fallback BPE of single
    characters, Gemma's special tokens) or SigLIP's (spiece.model: a Unigram model of characters and a few words),
    and its tokenizer_config.json, into `folder`: for random weights, whose text features are meaningless anyway.
    Their ids are below 300, inside every SigLIP vocabulary."""
    from parallel.output.durable import replace_atomically  # standard library only: no engine
    folder = Path(folder)
    if gemma:
        from tokenizers import Tokenizer as Library, decoders, normalizers
        from tokenizers.models import BPE
        vocabulary = {token: index for index, token in enumerate(
            ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"] + ["<0x%02X>" % byte for byte in range(256)]
            + [SPIECE_UNDERLINE] + list(_CHARACTERS))}
        tokenizer = Library(BPE(vocabulary, [], unk_token="<unk>", fuse_unk=True, byte_fallback=True))
        tokenizer.normalizer = normalizers.Replace(" ", SPIECE_UNDERLINE)
        tokenizer.decoder = decoders.Sequence([decoders.Replace(SPIECE_UNDERLINE, " "), decoders.ByteFallback(),
                                               decoders.Fuse()])
        tokenizer.add_special_tokens(["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"])
        replace_atomically(folder / TOKENIZER_FILE, tokenizer.to_str().encode())
        config = {"tokenizer_class": "GemmaTokenizer", "add_bos_token": False, "add_eos_token": True,
                  "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                  "padding_side": "right", "model_max_length": 64}
    else:
        proto = _model_class()()
        proto.trainer_spec.unk_id = 2
        for text, kind in (("<pad>", CONTROL), ("</s>", CONTROL), ("<unk>", UNKNOWN)):
            proto.pieces.add(piece=text, score=0.0, type=kind)
        words = [SPIECE_UNDERLINE + word for word in ("a", "the", "of", "photo", "dog", "cat", "on", "in")]
        for rank, text in enumerate(words + [SPIECE_UNDERLINE] + list(_CHARACTERS)):
            # A word scores above the characters that spell it: Unigram takes the word.
            proto.pieces.add(piece=text, score=-1.0 - rank / 10 - 4.0 * (rank >= len(words)), type=NORMAL)
        proto.normalizer_spec.name = "identity"
        replace_atomically(folder / SPIECE_FILE, proto.SerializeToString())
        config = {"tokenizer_class": "SiglipTokenizer", "eos_token": "</s>", "pad_token": "</s>",
                  "unk_token": "<unk>", "model_max_length": 64, "do_lower_case": True}
    replace_atomically(folder / TOKENIZER_CONFIG_FILE, (json.dumps(config, indent=2) + "\n").encode())
