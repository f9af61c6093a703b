"""What every model's graph module shares: the precisions' dtypes, the checks of a layer, a precision and the
images, and what "weights" means (Keras's cache file for "imagenet", the hub's file at a pinned commit for a
transformer's, else a file identified by its content).
"""

from pathlib import Path

import tensorflow as tf

from models.hub_checkpoint import check_model_type, hub_checkpoint, hub_checkpoint_folder, is_hub_weights
from models.hub_download import hub_file
from models.imagenet_download import keras_file
from models.registry import PRECISION_NAMES, layout_of_file, what_weights_are
from models.files import WeightsError, fingerprint

# The compute dtype of each precision. tf32 computes in float32 too: what differs is whether the engine lets
# float32 matmuls and convolutions run as TF32, which it reads from the "precision" of the model's settings
# (parallel.devices.set_float32_precision).
PRECISIONS = dict(zip(PRECISION_NAMES, (tf.float32, tf.float32, tf.float16, tf.bfloat16)))


def check_endpoint(endpoint, endpoints):
    """ValueError naming `endpoint` and the model's `endpoints` unless it is one of them."""
    if endpoint not in endpoints:
        raise ValueError("layer=%r; expected one of %s" % (endpoint, ", ".join(endpoints)))


def check_uint8_images(images):
    """ValueError naming the dtype and shape received unless `images` is a uint8 tensor (RGB [N, H, W, 3])."""
    if images.dtype != tf.uint8:
        raise ValueError("images must be uint8 [N, H, W, 3] RGB; got %s %s" % (images.dtype.name, images.shape))


def check_image_size(images, size):
    """ValueError naming the shape received unless `images` is [N, H, W, 3] for `size` (H, W)."""
    if images.shape.rank != 4 or tuple(images.shape[1:]) != tuple(size) + (3,):
        raise ValueError("images must be [N, %d, %d, 3]; got %s" % (tuple(size) + (images.shape,)))


def compute_dtype(precision):
    """The tf dtype the devices compute in for `precision` (one of PRECISION_NAMES); ValueError otherwise."""
    if precision not in PRECISIONS:
        raise ValueError("precision=%r; expected one of %s" % (precision, ", ".join(PRECISIONS)))
    return PRECISIONS[precision]


class Weights:
    """A model's `weights` argument: "imagenet" (Keras's file `file`, from its cache or downloaded into it) or
    the path of a file, checked to exist when the model is built and read only when the engine asks.

    Attributes:
      identity: its part of a job's identity (Keras's name and hash, or the file's fingerprint).
      files: the local files it reads, which a job never writes over: () for "imagenet".
    """

    def __init__(self, weights, file, expected, cache_dir=None):
        """
        Args:
          weights: "imagenet" or a path.
          file: the KerasFile "imagenet" means here.
          expected: what a user should pass, for the message of a path that is not a file
            ("a vgg16.npy or vgg16_weights_tf_dim_ordering_tf_kernels.h5").
          cache_dir: Keras's home folder for "imagenet" (default: $KERAS_HOME or ~/.keras).

        Raises:
          WeightsError: a path that is not a file.
        """
        self.imagenet = weights == "imagenet"
        self._weights, self._file, self._cache_dir = weights, file, cache_dir
        if self.imagenet:
            self.identity, self.files = file.identity, ()
            return
        if not Path(weights).is_file():
            held = what_weights_are(weights) if Path(weights).is_dir() else ""  # another model's checkpoint folder
            raise WeightsError("weights=%s is a folder: %s" % (weights, held) if held else
                               "weights=%s is not a file (pass %s, or 'imagenet')" % (weights, expected))
        self.identity, self.files = fingerprint(Path(weights)), (str(weights),)

    def path(self):
        """The file to read: Keras's cache file for "imagenet" (downloaded if absent), else the path given."""
        return keras_file(self._file, self._cache_dir) if self.imagenet else self._weights


class HubWeights(Weights):
    """A transformer's `weights` argument: "imagenet" (the name the command line's default keeps: the model's
    published pretrained checkpoint) or "hub", both the pinned Hugging Face file `file`, from the hub's cache or
    downloaded into it; "hf://ORG/NAME@COMMIT", that file of another commit (models.hub_checkpoint); or a path: the
    file, or a folder holding `file.filename` (Hugging Face's layout).

    Attributes:
      identity: its part of a job's identity (the repository, commit and SHA-256, or the file's fingerprint).
      files: the local files it reads, which a job never writes over: () for the hub's.
    """

    PRETRAINED = ("imagenet", "hub")

    def __init__(self, weights, file, expected, cache_dir=None, family=None):
        """
        Args:
          weights: "imagenet", "hub", "hf://ORG/NAME@COMMIT", or a path.
          file: the models.hub_download.HubFile the pinned checkpoint is.
          expected: what a user should pass, for the message of a path that is neither a file nor a folder
            holding one ("a DINOv2 ViT-S/14 model.safetensors").
          cache_dir: the hub's cache folder (default: huggingface_hub's, `hub_download.hub_cache_dir()`).
          family: the family (a folder of models/) an hf:// checkpoint's config must name; None: unchecked.

        Raises:
          WeightsError: a path that is neither a file nor a folder holding `file.filename`; an hf:// form that
            names no commit.
        """
        self._checkpoint, self._family = None, family
        if is_hub_weights(weights):
            pinned = ((file.filename, file.sha256),) if weights == "hf://%s@%s" % (file.repo, file.revision) else ()
            self._checkpoint = hub_checkpoint(weights, file.what.split(" (")[0], file.random_command, pinned)
            self._weights, self._file, self._cache_dir, self.imagenet = weights, file, cache_dir, False
            self.identity, self.files = self._checkpoint.file(file.filename).identity, ()
            return
        if weights in self.PRETRAINED:
            weights = "imagenet"
        elif Path(weights).is_dir():
            if not (Path(weights) / file.filename).is_file():
                raise WeightsError("weights=%s is a folder without %s (pass %s, or 'imagenet')"
                                   % (weights, file.filename, expected))
            weights = str(Path(weights) / file.filename)
        if weights != "imagenet" and layout_of_file(weights):  # an .npy, an .h5: said now, not as a header's length
            raise WeightsError("weights=%s is not a safetensors file: %s" % (weights, layout_of_file(weights)))
        super().__init__(weights, file, expected, cache_dir)

    def path(self):
        """The file to read: the hub's cache file for "imagenet" and hf:// (downloaded if absent), else the path."""
        if self._checkpoint is not None:
            folder = hub_checkpoint_folder(self._checkpoint, (self._file.filename,), ("config.json",), self._cache_dir)
            if self._family is not None:
                check_model_type(folder, self._family, self._weights)
            return folder / self._file.filename
        return hub_file(self._file, self._cache_dir) if self.imagenet else self._weights
