"""SigLIP folders for the tests, written offline in the publisher's layout: transformers' model.safetensors and
config.json, and tokenizers trained here (never downloaded) in the layout of the published files.

    write_sentencepiece(folder)     spiece.model + tokenizer_config.json: SigLIP's (a Unigram model, T5's ids:
                                    <pad> 0, </s> 1, <unk> 2; nmt_nfkc), trained by SentencePiece on English
    write_gemma(folder)             tokenizer.json + tokenizer_config.json: SigLIP 2's (Gemma's layout: a
                                    byte-fallback BPE, <pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4, the 256 byte
                                    pieces, "▁" for spaces; its post-processor puts <eos> after the tokens, as the
                                    published file's does), trained by `tokenizers` on the tests' sentences and a
                                    hundred in other scripts
    write_small(folder, siglip2)    a small SigLIP of our own writer (siglip_weights) with one of those tokenizers,
                                    for the engine, the command line and search (seconds, where a real size's
                                    file takes minutes)
"""

import io
import json
from pathlib import Path

from multilingual_sentences import SENTENCES as MULTILINGUAL
from sentences import sentences

GEMMA_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
VOCABULARY = 2000  # the small model's token embeddings: more than either tokenizer's pieces


def write_sentencepiece(folder):
    """SigLIP's tokenizer files, trained on English-ish text (the other scripts fall to <unk>), into `folder`."""
    import sentencepiece
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = io.BytesIO()
    corpus = [text for text in sentences(600, long=10, seed=3) if text.strip()]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus), model_writer=model, vocab_size=800, model_type="unigram", pad_id=0, eos_id=1,
        unk_id=2, bos_id=-1, normalization_rule_name="nmt_nfkc", character_coverage=0.98, minloglevel=2,
        num_threads=1, hard_vocab_limit=False)
    (folder / "spiece.model").write_bytes(model.getvalue())
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "SiglipTokenizer", "eos_token": "</s>", "pad_token": "</s>", "unk_token": "<unk>",
        "model_max_length": 64, "do_lower_case": True}))
    return folder


def write_gemma(folder):
    """SigLIP 2's tokenizer files (Gemma's layout), trained on the tests' sentences lowercased, into `folder`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    corpus = [text.lower() for text in sentences(600, long=10, seed=3) + MULTILINGUAL * 2]
    trained = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    trained.normalizer = normalizers.Replace(" ", "▁")
    trained.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=1500, special_tokens=GEMMA_SPECIAL,
                                                            show_progress=False, max_token_length=16))
    data = json.loads(trained.to_str())["model"]
    pieces = [piece for piece, _ in sorted(data["vocab"].items(), key=lambda item: item[1])
              if piece not in GEMMA_SPECIAL]
    vocabulary = {piece: index for index, piece in enumerate(
        GEMMA_SPECIAL + ["<0x%02X>" % byte for byte in range(256)] + pieces)}
    merges = [tuple(merge) if isinstance(merge, list) else tuple(merge.split(" ")) for merge in data["merges"]]
    tokenizer = Tokenizer(models.BPE(vocabulary, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tokenizer.normalizer = normalizers.Replace(" ", "▁")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tokenizer.add_special_tokens(GEMMA_SPECIAL)
    tokenizer.post_processor = processors.TemplateProcessing(single="$A <eos>", special_tokens=[("<eos>", 1)])
    (folder / "tokenizer.json").write_text(tokenizer.to_str())
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "GemmaTokenizer", "add_bos_token": False, "add_eos_token": True, "bos_token": "<bos>",
        "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>", "padding_side": "right",
        "model_max_length": 64}))
    return folder


def small_config(name="siglip", width=32, depth=2, heads=2, mlp_width=64, image_size=32, patch_size=8):
    """A siglip_layers.Config of the real layout and small sizes (a 4x4 grid of patches, 64 text positions)."""
    from models.siglip.siglip_layers import LAYER_NORM_EPSILON, Config
    from models.vit.vit_layers import TransformerConfig
    tower = TransformerConfig(width, depth, heads, mlp_width, activation="gelu_tanh", epsilon=LAYER_NORM_EPSILON)
    return Config(name, tower, tower, patch_size=patch_size, image_size=image_size, vocabulary_size=VOCABULARY,
                  context_length=64, projection=width)


def write_small(folder, siglip2=True, seed=0, **sizes):
    """A small SigLIP checkpoint folder (our writer: config.json, model.safetensors) with SigLIP 2's tokenizer
    (siglip2) or SigLIP's; returns the folder."""
    from models.siglip import siglip_weights
    folder = Path(folder)
    folder.mkdir(parents=True)
    model = small_config(**sizes)
    siglip_weights.write_checkpoint(siglip_weights.random_weights(model, seed), folder, model)
    (write_gemma if siglip2 else write_sentencepiece)(folder)
    return folder
