"""The model interface: what a model gives the engine.

Models import this module, never the engine. It holds no TensorFlow, so that the model
interface (and `import parallel`) costs nothing to import; the tensors it describes are
built by the model's own code when the engine calls it.
"""

import dataclasses
from typing import Callable, Mapping, Optional

import numpy as np

# The resize filters a model may ask the reader for (Pillow's of those names: parallel.inputs.resize), and the
# resize modes (--resize: parallel.inputs.resize.RESIZE_MODES, the same names).
RESIZE_FILTERS = ("bilinear", "bicubic")
RESIZE_MODES = ("crop", "stretch")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What the engine needs to know about a model; nothing here depends on VGG.

    Attributes:
      name: short model name, recorded in the output's settings sidecar.
      fn: builds one replica. Called once per device by `data_parallelism`, inside
        that device's scope: `fn(images)` with `images: uint8 [N, H, W, 3]` RGB returns
        the features as a float tensor `[N, ...]` (flattened to `[N, D]` by the engine).
        Variables must be created with `tf.compat.v1.get_variable` so that the
        placement strategy can give each device its own copy.
      image_size: `(height, width)` the reader resizes every image to.
      load_weights: called once per process, after the graph is built; returns
        `{variable name: array}` for every variable `fn` created (names as created
        under the caller's variable scope, e.g. "vgg16/conv1_1/weights").
      output_name: prefix of the feature columns, e.g. "fc7" gives fc7_0 ... fc7_4095.
      settings: what determines the features (weights identity, layer, ...); an
        existing output written with other settings is not appended to.
      files: the local files the model reads (its weights file): a job never writes its
        output over one of them, --overwrite or not.
      resize_filter: the filter the reader resizes with, one of RESIZE_FILTERS: "bilinear"
        (VGG16's, the default) or "bicubic" (CLIP's, DINOv2's checkpoints were trained on it).
      resize_short_side: None (the default): `--resize crop` takes the centre square and resizes it
        to `image_size`, as tensorflow-vgg does. An int S >= max(image_size): the whole image is
        resized so that its short side is S (aspect kept), then its centre `image_size` is cut
        out, as Hugging Face's image processors do (CLIP: 224 for a 224 crop; DINOv2: 256). With
        `--resize stretch` it is not used. A model that sets either field says so in
        `settings["preprocessing"]`: they change its features.
      resize_mode: the --resize of a job that names none, one of RESIZE_MODES: "crop" (the default) or
        "stretch", for a model whose reference processor resizes the whole image to `image_size`,
        aspect not kept (SigLIP's SiglipImageProcessor). The job records the mode it ran with.
      text: the model's text tower (`TextSpec`) where its features are in that tower's space (CLIP's and
        SigLIP's `embedding` layer): a job embeds captions and labels with it (`Config.text_column`, `labels`);
        None: it has none.

    Raises:
      ValueError: a bad `resize_filter` or `resize_short_side`, named with the value received.
    """

    name: str
    fn: Callable
    image_size: tuple
    load_weights: Callable[[], Mapping[str, np.ndarray]]
    output_name: str
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    files: tuple = ()
    resize_filter: str = "bilinear"
    resize_short_side: Optional[int] = None
    resize_mode: str = "crop"
    text: Optional["TextSpec"] = None

    def __post_init__(self):
        if self.resize_mode not in RESIZE_MODES:
            raise ValueError("resize_mode must be one of %s; got %r" % (", ".join(RESIZE_MODES), self.resize_mode))
        if self.text is not None and not isinstance(self.text, TextSpec):
            raise ValueError("text must be a TextSpec or None; got %r" % (self.text,))
        if self.resize_filter not in RESIZE_FILTERS:
            raise ValueError("resize_filter must be one of %s; got %r"
                             % (", ".join(RESIZE_FILTERS), self.resize_filter))
        short_side = self.resize_short_side
        if short_side is not None:
            crop_side = max(self.image_size)
            if isinstance(short_side, bool) or not isinstance(short_side, (int, np.integer)) or short_side < crop_side:
                raise ValueError("resize_short_side must be None or an integer of at least max(image_size) = %d "
                                 "(the crop must fit in the resized image); got %r" % (crop_side, short_side))


@dataclasses.dataclass(frozen=True)
class TextSpec:
    """What a model's text tower gives the engine: sentences as vectors of its image tower's space.

    A family with a text tower (CLIP, SigLIP) gives one as its image model's `ModelSpec.text`; the engine
    runs it on the devices (`parallel.devices.text_runner.TextRunner`: `embed(sentences)`, `probability`).

    Attributes:
      name: the model's name, for messages.
      fn: builds one replica: `fn(token_ids)` with `token_ids: int32 [N, L]` (L one of `lengths`) returns
        float32 [N, D], unit length, in the image tower's space. Called once per length in each device's
        scope, under one variable scope that reuses its variables (`tf.compat.v1.get_variable`).
      context_length: the ids' length `tokenize` gives, the longest the tower takes.
      tokenize: callable, a sequence of N str -> int32 [N, context_length] (its files read on first call).
      load_weights: called once per process; returns {variable name: array} for every variable `fn` created.
      lengths: the lengths the tower is built for, ascending, the last `context_length`: each row runs on the
        shortest that holds the positions it needs (`used_positions`). () : `context_length` alone.
      used_positions: callable, int32 [N, context_length] -> int [N]: the leading positions a row needs (a causal
        tower's, CLIP's: up to its end token: what follows changes nothing it returns); None: all of them.
      probability: None, or a callable, float cosines (any shape) -> float64 of that shape: the model's own
        probability that an image and a sentence of that cosine go together (SigLIP's
        sigmoid(exp(logit_scale) * cosine + logit_bias)); CLIP has none.
    """

    name: str
    fn: Callable
    context_length: int
    tokenize: Callable
    load_weights: Callable[[], Mapping[str, np.ndarray]]
    lengths: tuple = ()
    used_positions: Optional[Callable] = None
    probability: Optional[Callable] = None

    def __post_init__(self):
        lengths = tuple(self.lengths) or (self.context_length,)
        if list(lengths) != sorted(set(lengths)) or lengths[-1] != self.context_length or lengths[0] < 1:
            raise ValueError("lengths must rise to context_length=%d; got %r" % (self.context_length, self.lengths))
        object.__setattr__(self, "lengths", lengths)
