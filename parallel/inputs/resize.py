"""How a decoded image becomes (H, W): the resize rule a job asks for (`Resize`), and the resize itself.

    Resize(mode="crop", filter="bilinear", short_side=None)   a job's rule: --resize and its model's spec
    resize_rule(resize)                                        a Resize, or a mode alone as Resize(mode)
    resized(image, (H, W), rule)                               a PIL image -> a PIL image of (H, W)

The rules (the mode the job asks for, the filter and short side its model's spec gives):

    "crop", no short side   the centre square of side min(w, h), resized to (H, W) in one Pillow
                            call (tensorflow-vgg's preprocessing; VGG16, ResNet50, EfficientNetB0,
                            ConvNeXt)
    "crop", short side S    the whole image resized so that its short side is S, the long side
                            int(S * long / short), then its centre (H, W) cut out at offsets
                            ((h' - H) // 2, (w' - W) // 2): Hugging Face's image processors'
                            rule (get_resize_output_image_size, center_crop), so CLIP's (S = 224)
                            and DINOv2's (S = 256) pixels are their processors' (slow, PIL ones)
    "stretch"               the whole image resized to (H, W)

with Pillow's bilinear (the default) or bicubic filter. The short-side path takes two Pillow calls,
the resize then an exact crop, as the processors do: one call with the crop as a fractional box is
not the same (Pillow 13, noise images of 140 sizes: most differ, by 1-2 levels, and by up to 26 on
upscaled ones).

parallel.inputs.decode resizes each image so, after its EXIF orientation and before transparency is
composited over white (Pillow resamples RGBA premultiplied). Pillow only: no TensorFlow.
"""

import dataclasses
from typing import Optional

import numpy as np
from PIL import Image

RESIZE_MODES = ("crop", "stretch")
# The filters by the names a ModelSpec gives them (parallel.model.RESIZE_FILTERS: the same names).
_PILLOW_FILTERS = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}
RESIZE_FILTERS = tuple(_PILLOW_FILTERS)


@dataclasses.dataclass(frozen=True)
class Resize:
    """How an image becomes (H, W): the rule of the module docstring.

    A job's comes from its --resize (`mode`) and its model's spec (`filter`, `short_side`:
    `ModelSpec.resize_filter`, `ModelSpec.resize_short_side`). Wherever a decode takes `resize`,
    a mode alone ("crop", "stretch") is `Resize(mode)`: VGG16's rule.

    Attributes:
      mode: one of RESIZE_MODES.
      filter: one of RESIZE_FILTERS, Pillow's filter of that name.
      short_side: None, or (mode "crop") the short side S the whole image is resized to before its
        centre (H, W) is cut out; an int >= max(H, W), checked against the size by
        `parallel.inputs.decode.check_image_arguments`.

    Raises:
      ValueError: a bad attribute, named with the value received.
    """

    mode: str = "crop"
    filter: str = "bilinear"
    short_side: Optional[int] = None

    def __post_init__(self):
        if self.mode not in RESIZE_MODES:
            raise ValueError("resize must be one of %s; got %r" % (", ".join(RESIZE_MODES), self.mode))
        if self.filter not in RESIZE_FILTERS:
            raise ValueError("resize filter must be one of %s; got %r" % (", ".join(RESIZE_FILTERS), self.filter))
        short_side = self.short_side
        if short_side is not None and (isinstance(short_side, bool) or not isinstance(short_side, (int, np.integer))
                                       or short_side < 1):
            raise ValueError("resize short side must be None or a positive integer; got %r" % (short_side,))


def resize_rule(resize):
    """`resize` as a Resize: a Resize as is, a mode ("crop", "stretch") as `Resize(mode)`; ValueError else."""
    if isinstance(resize, Resize):
        return resize
    if isinstance(resize, str):
        return Resize(resize)
    raise ValueError("resize must be one of %s, or a Resize; got %r" % (", ".join(RESIZE_MODES), resize))


def resized(image, size, resize):
    """`image` resized to `size` = (H, W) by the Resize `resize` (the rules of the module docstring)."""
    height, width = size
    resample = _PILLOW_FILTERS[resize.filter]
    if resize.mode == "stretch":
        return image.resize((width, height), resample)
    if resize.short_side is None:  # the centre square, in one call
        width_now, height_now = image.size
        side = min(width_now, height_now)
        left, top = (width_now - side) // 2, (height_now - side) // 2
        return image.resize((width, height), resample, box=(left, top, left + side, top + side))
    resized_width, resized_height = _short_side_size(image.size, resize.short_side)
    left, top = (resized_width - width) // 2, (resized_height - height) // 2
    return image.resize((resized_width, resized_height), resample).crop((left, top, left + width, top + height))


def _short_side_size(image_size, short_side):
    """The (width, height) an image of `image_size` (width, height) is resized to so that its short side is
    `short_side`, the aspect kept: the long side int(short_side * long / short), truncated, as Hugging Face's
    `get_resize_output_image_size` and torchvision's `Resize` compute it."""
    width, height = image_size
    if width <= height:
        return short_side, int(short_side * height / width)
    return int(short_side * width / height), short_side
