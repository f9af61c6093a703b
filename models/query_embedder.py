"""The queries of an indexed output as vectors: images and sentences through the output's own model, loaded once.

    embedder = QueryEmbedder(index.settings, index.meta["source"]["output"], weights="vgg16.npy",
                             image_embedder=parallel.queries.ImageEmbedder)
    features, failures = embedder.images([jpeg_bytes])   # float32 [M, D] by the output's layer, resize, precision
    vectors = embedder.text(["a dog on a beach"])         # float32 [N, D]: the text tower (models.text_queries)
    embedder.probability(cosines)                         # SigLIP's probability of those cosines; None for CLIP

What `search/` is given to turn a new image or a sentence into a vector (search/queries.py, search/service.py):
search never imports the engine or TensorFlow, so the command line builds this object and hands it over; a
model never imports the engine either, so the command line gives it the engine's image embedder too. Nothing
is loaded until a query needs it; then the model (or the text tower) is built once and kept open, so that a
service answers every later query without loading it again. The weights are checked against the identity the
output records before anything is read.

Importing this module imports no TensorFlow.
"""

import re
import threading
from pathlib import Path

from models.hub_checkpoint import is_hub_weights
from models.text_queries import check_text_queries
from parallel.messages import first_line

_HUB_IDENTITY = re.compile(r"hub (?P<repo>[\w.-]+/[\w.-]+)@(?P<commit>[0-9a-f]{40}) ")


def query_model(settings, weights, output):
    """The indexed output's model as a ModelSpec, with `weights` (None: the hub's commit the output records, else
    "imagenet"), checked to be the weights the output records (by the identity the model gives them; nothing is
    read yet).

    Args:
      settings: the output's recorded settings (model, layer, weights, precision).
      weights: the --weights given, or None.
      output: the indexed output's path (where a weights file it names is looked for).

    Returns:
      (ModelSpec, the weights used).

    Raises:
      ValueError: no model settings recorded, `weights` not a file or folder, or not the output's weights
        (naming what the output records, and where a file of that fingerprint was found).
    """
    from models import registry
    if settings.get("model") not in registry.NAMES or "layer" not in settings:
        raise ValueError("the indexed output records no model settings: pass the query as a vector (.npy)")
    given = weights
    # Without --weights: the hub's commit the output records (its own weights, whichever name fetched them).
    weights = weights or _recorded_hub_weights(settings.get("weights")) or "imagenet"
    if weights != "imagenet" and not is_hub_weights(weights) and not Path(weights).exists():
        raise ValueError("--weights %s is not a file or folder" % weights)
    model = registry.feature_model(settings["model"], layer=settings["layer"], weights=weights,
                                   precision=settings.get("precision", "fp32"))
    if model.settings.get("weights") != settings.get("weights"):
        if given is None:
            raise ValueError(_weights_needed(settings.get("weights"), Path(output)))
        raise ValueError("--weights %s is not the weights the output was computed with (%s)"
                         % (weights, settings.get("weights")))
    return model, weights


def _recorded_hub_weights(recorded):
    """"hf://ORG/NAME@COMMIT" when an output's recorded weights are a hub file at a commit (models.hub_download's
    identity: "hub ORG/NAME@COMMIT model.safetensors, sha256 ..."), else None."""
    match = _HUB_IDENTITY.match(recorded) if isinstance(recorded, str) else None
    return "hf://%s@%s" % (match.group("repo"), match.group("commit")) if match else None


def _weights_needed(recorded, output):
    """Why --weights is needed: the weights the output records; for a file, its name and fingerprint, not where
    it is: a file of that fingerprint found here or near the output (models.files), or the name to look for."""
    from models.files import find_fingerprinted, fingerprinted_name
    name = fingerprinted_name(recorded)
    if name is None:
        return "the output was computed with weights %r: pass them with --weights" % recorded
    found = find_fingerprinted(recorded, [Path("."), output.parent, output.parent.parent])
    return "the output was computed with the weights file %s; its record names the file, not where it is: pass " \
        "--weights %s" % (recorded, "%s (found there: that size and content)" % found[0] if found else
                          "PATH, the path of that %s" % name)


class QueryEmbedder:
    """Images and sentences as vectors of an indexed output's space, each model loaded on first use, once.

    Args:
      settings: the indexed output's recorded settings (`Index.settings`).
      output: the indexed output's path.
      weights: the weights it was computed with (None: "imagenet"), checked against its record.
      devices: for images, as --devices ("cpu:0").
      image_embedder: what computes images' features, built once by `image_embedder(model, devices=, resize=)`
        with the output's model (the engine's `parallel.queries.ImageEmbedder`); None: images are refused.
      max_pixels: an image of more pixels is refused before it is decoded (None: the image embedder's bound).
      before_load: called once before a model is first built (the command line hides TensorFlow's log there).

    `text` and `images` may be called from several threads at once; the first call loads under a lock.
    """

    def __init__(self, settings, output, weights=None, devices="cpu:0", image_embedder=None, max_pixels=None,
                 before_load=None):
        self.settings, self.output, self.weights, self.devices = settings, output, weights, devices
        self.image_embedder, self.max_pixels, self.before_load = image_embedder, max_pixels, before_load
        self._lock, self._image, self._text = threading.Lock(), None, None

    def _model(self):
        if self.before_load is not None:
            self.before_load()
        return query_model(self.settings, self.weights, self.output)

    def unusable(self):
        """None when the output's model can be had with these weights; else why not, one line (none recorded,
        or weights not the output's): what the first query would meet, found by `query_model`, which reads only
        the weights' identity. What a service asks as it starts, to say what it answers."""
        try:
            self._model()
        except ValueError as error:
            return first_line(error)
        return None

    def images(self, images):
        """(features float32 [M', D], failures [(number, kind, message)]) of images given as bytes
        (`parallel.queries.ImageEmbedder.images`), by the output's model, layer, resize and precision."""
        if self.image_embedder is None:
            raise ValueError("this embedder computes no image: it was given no image_embedder")
        with self._lock:
            if self._image is None:
                model, _ = self._model()
                bound = {} if self.max_pixels is None else {"max_pixels": self.max_pixels}
                self._image = self.image_embedder(model, devices=self.devices,
                                                  resize=self.settings.get("resize", "crop"), **bound)
        return self._image.images(images)

    def text(self, sentences):
        """float32 [N, D], unit length: the sentences by the output's model's text tower, with its weights and
        precision. ValueError (one line) for an output that is not in a text tower's space."""
        check_text_queries(self.settings)
        with self._lock:
            if self._text is None:
                from models.text_queries import TextEmbedder
                _, weights = self._model()
                self._text = TextEmbedder(self.settings["model"], weights=weights,
                                          precision=self.settings.get("precision", "fp32"))
        return self._text.text(sentences)

    def probability(self, cosines):
        """The output's model's own probability that an image and a sentence of these cosines go together (float64
        of their shape: SigLIP's sigmoid(exp(logit_scale) * cosine + logit_bias), `models.text_queries`), or None
        for a model without one (CLIP), or before any sentence was embedded."""
        text = self._text
        return None if text is None else text.probability(cosines)

    def close(self):
        for embedder in (self._image, self._text):
            if embedder is not None:
                embedder.close()
        self._image = self._text = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
