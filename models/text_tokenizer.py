"""A text tower's tokenizer through Hugging Face's `tokenizers` library: the ids a tower takes, int32
[N, context_length], from a checkpoint's tokenizer.json (or from a `tokenizers.Tokenizer` a family builds from its
files).

    tokenizer = TextTokenizer.from_file("clip-vit-base-patch32/tokenizer.json", context_length=77)
    ids = tokenizer.encode(["a dog on a beach"])          # int32 [1, 77]: start, tokens, end, then pad_id

What the tokenizer says is done as it says: its normalisation (NFC, whitespace, lowercasing, ...), its
pre-tokenisation, its model (BPE, Unigram, WordPiece), the special tokens its post-processor adds (CLIP's start
and end tokens, an end token alone). What is the tower's is set here, once: each sentence cut to the context
length, the post-processor's tokens kept (a cut sentence still ends with its end token, as transformers'
`truncation=True` and open_clip's `tokenize` cut it), then padded with `pad_id`. A tokenizer.json's own
truncation and padding settings are replaced by these.

Shared by every family with a text tower (models/clip/clip_tokenizer.py builds CLIP's); imports no TensorFlow.
A sentence is encoded alone (`Tokenizer.encode`, not `encode_batch`): a query's sentence is one, thousands are
as fast this way, and the library's thread pool is never started, so a process that forks later (a test's
child, a reader's) gets no warning from it. `encode` may be called from several threads at once: the
tokenizer's settings are made once, here, and never changed.
"""

from pathlib import Path

import numpy as np


class TextTokenizer:
    """A `tokenizers.Tokenizer` giving a tower's ids.

    Attributes:
      context_length: ids per sentence.
      pad_id: the id that fills a row after its last token.
      vocabulary_size: the number of ids, added tokens included.
      source: what the tokenizer was read from, for messages.
    """

    def __init__(self, tokenizer, context_length, pad_id=0, source="the tokenizer"):
        """
        Args:
          tokenizer: a tokenizers.Tokenizer; its truncation and padding are set here (it is not to be shared).
          context_length: ids per sentence, more than the special tokens the tokenizer adds to one.
          pad_id: the id after a sentence's last token (CLIP's 0, as OpenAI's and open_clip's code pad).
          source: what to name in messages (the file read).

        Raises:
          ValueError: a context_length that is not an int above the special tokens added (naming it).
        """
        added = tokenizer.post_processor.num_special_tokens_to_add(False) if tokenizer.post_processor else 0
        if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length <= added:
            raise ValueError("context_length=%r; expected an int of at least %d (the %d special tokens %s adds to a "
                             "sentence, and one)" % (context_length, added + 1, added, source))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=context_length)
        self._tokenizer, self.context_length, self.pad_id, self.source = tokenizer, context_length, pad_id, source
        self.vocabulary_size = tokenizer.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_file(cls, path, context_length, pad_id=0):
        """The tokenizer of a tokenizer.json (Hugging Face's `tokenizers` format).

        Raises:
          ValueError: a file that is missing or is not a tokenizer.json (one line naming it and why).
        """
        from tokenizers import Tokenizer

        path = Path(path)
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as error:  # the library's errors are plain Exceptions with the reason (Rust's)
            if not path.is_file():
                raise ValueError("%s: no such file" % path) from None
            raise ValueError("%s is not a tokenizer.json: %s" % (path, str(error).splitlines()[0])) from None
        return cls(tokenizer, context_length, pad_id, str(path))

    def token_id(self, token):
        """The id of `token` (a special token's: "<|endoftext|>"); ValueError naming the file if it has none."""
        found = self._tokenizer.token_to_id(token)
        if found is None:
            raise ValueError("%s has no %s token" % (self.source, token))
        return found

    def encode(self, sentences):
        """The ids of each sentence, as the tower takes them.

        Args:
          sentences: a str, or a sequence of N str.

        Returns:
          int32 [N, context_length]: each sentence's ids with the tokenizer's special tokens, cut to
          context_length (its special tokens kept), then pad_id.

        Raises:
          ValueError: a sentence that is not a str (naming its position and value).
        """
        if isinstance(sentences, str):
            sentences = [sentences]
        sentences = list(sentences)
        ids = np.full((len(sentences), self.context_length), self.pad_id, dtype=np.int32)
        for row, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                raise ValueError("sentence %d is %r; expected a str" % (row, sentence))
            tokens = self._tokenizer.encode(sentence).ids
            ids[row, :len(tokens)] = tokens
        return ids
