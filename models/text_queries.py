"""Search by text: which outputs a sentence can query, and a sentence's embedding by the model's text tower.

    from models import text_queries
    text_queries.check_text_queries(settings)       # an output's settings: ValueError unless CLIP's embedding
    vectors = text_queries.text_embedding("clip_vit_b32", ["a dog on a beach"], weights="clip-random")
                                                    # float32 [1, 512], unit length
    embedder = text_queries.TextEmbedder("clip_vit_b32", weights="clip-random")   # kept open: a service's

A sentence is compared with an image through a model's two towers: the image tower's `embedding` layer and the
text tower, which project into one space (CLIP's 512 dimensions for B/32 and B/16, 768 for L/14, its config's for
the family `clip`; SigLIP's the image tower's width). The other layers (CLIP's and SigLIP's `pooled`) and the other
models have no text tower to compare with. SigLIP gives its own score beside the cosine:
`TextEmbedder.probability(cosines)`, sigmoid(exp(logit_scale) * cosine + logit_bias), the probability that the
image and the sentence go together (CLIP has none: None).

Importing this module imports no TensorFlow (search/ reads TEXT_LAYERS to choose an index's centring);
`text_embedding` and `TextEmbedder` do, through models.clip.clip or models.siglip.siglip.
"""

from models.siglip.siglip_layers import FAMILY as SIGLIP, PRESETS as SIGLIP_PRESETS  # a table: no TensorFlow

CLIP_MODELS = ("clip", "clip_vit_b32", "clip_vit_b16", "clip_vit_l14", "clip_vit_l14_336")
SIGLIP_MODELS = (SIGLIP,) + tuple(SIGLIP_PRESETS)
# {model: the layer of its image tower in its text tower's space}.
TEXT_LAYERS = dict.fromkeys(CLIP_MODELS + SIGLIP_MODELS, "embedding")


def shares_text_space(settings):
    """Whether an output of `settings` ({"model": ..., "layer": ...}, as its record holds them) is in a text
    tower's space: a sentence's embedding can be compared with its rows."""
    model = settings.get("model")
    return model in TEXT_LAYERS and settings.get("layer") == TEXT_LAYERS[model]


def check_text_queries(settings):
    """Raises ValueError (one line naming the model and layer received) unless an output of `settings`
    can take a text query (`shares_text_space`)."""
    model, layer = settings.get("model"), settings.get("layer")
    if model not in TEXT_LAYERS:
        raise ValueError("a text query needs an output of a model with a text tower (%s, %s and its sizes); this "
                         "output's model is %r" % (", ".join(CLIP_MODELS), SIGLIP, model))
    if layer != TEXT_LAYERS[model]:
        raise ValueError("a text query needs %s's layer %s (in its text tower's space); this output holds layer %r"
                         % (model, TEXT_LAYERS[model], layer))


def text_embedding(model, sentences, weights="imagenet", precision="fp32", cache_dir=None):
    """The sentences' embeddings by `model`'s text tower, tokenized with the tokenizer files of its weights.

    Args:
      model: one of TEXT_LAYERS ("clip_vit_b32").
      sentences: a str, or a sequence of N str.
      weights: "imagenet" (the published checkpoint, with its tokenizer files), hf://ORG/NAME@COMMIT or a path, as
        the image tower takes it (the tokenizer's files beside the checkpoint: tokenizer.json, or vocab.json and
        merges.txt).
      precision: one of models.registry.PRECISION_NAMES.
      cache_dir: the hub's cache folder for "imagenet".

    Returns:
      float32 [N, D] (D = 512 for CLIP), unit length, comparable by cosine with the image tower's `embedding`.

    Raises:
      ValueError: a model without a text tower, a sentence that is not a str; WeightsError: weights that
        cannot be read, or no tokenizer files beside them; ValueError naming the file: a damaged tokenizer.json,
        vocab.json or merges.txt.
    """
    with TextEmbedder(model, weights=weights, precision=precision, cache_dir=cache_dir) as embedder:
        return embedder.text(sentences)


class TextEmbedder:
    """A model's text tower and tokenizer, kept open: sentences embedded without loading the weights again.

        with TextEmbedder("clip_vit_b32", weights="clip-random") as embedder:
            vectors = embedder.text(["a dog on a beach"])       # float32 [1, 512], unit length

    Args (as `text_embedding`'s): model, weights, precision, cache_dir. `text` may be called from several
    threads at once (TensorFlow's Session.run is; the tokenizers keep no state between calls).
    """

    def __init__(self, model, weights="imagenet", precision="fp32", cache_dir=None):
        if model not in TEXT_LAYERS:
            raise ValueError("model=%r has no text tower; expected one of %s, %s" % (
                model, ", ".join(CLIP_MODELS), ", ".join(SIGLIP_MODELS)))
        if model in SIGLIP_MODELS:
            from models.siglip.siglip import TextTower
            from models.siglip.siglip_tokenizer import Tokenizer
        else:
            from models.clip.clip import TextTower
            from models.clip.clip_tokenizer import Tokenizer
        self._tower = TextTower(model, weights=weights, precision=precision, cache_dir=cache_dir)
        self._tokenizer = Tokenizer.from_folder(self._tower.tokenizer_folder, self._tower.context_length)

    def text(self, sentences):
        """float32 [N, D] unit length: the embeddings of `sentences` (a str, or a sequence of N str)."""
        return self._tower.embed(self._tokenizer.encode(sentences))

    def probability(self, cosines):
        """The model's own probability that an image and a sentence of these cosines go together, float64 of their
        shape (SigLIP: sigmoid(exp(logit_scale) * cosine + logit_bias)); None for a model without one (CLIP)."""
        score = getattr(self._tower, "probability", None)
        return None if score is None else score(cosines)

    def close(self):
        self._tower.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
