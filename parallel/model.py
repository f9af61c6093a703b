"""The model interface: what a model gives the engine.

Models import this module, never the engine. It holds no TensorFlow, so that the model
interface (and `import parallel`) costs nothing to import; the tensors it describes are
built by the model's own code when the engine calls it.
"""

import dataclasses
from typing import Callable, Mapping

import numpy as np


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
      resize_filter: the filter the reader resizes with ("bilinear", or "bicubic" for the
        transformers, as their processors do).
      resize_short_side: None: the reader's own resize to `image_size`; else the short side is
        resized to this many pixels first, then the centre `image_size` is cropped (DINOv2: 256
        then 224).
    """

    name: str
    fn: Callable
    image_size: tuple
    load_weights: Callable[[], Mapping[str, np.ndarray]]
    output_name: str
    settings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    files: tuple = ()
    resize_filter: str = "bilinear"
    resize_short_side: object = None
