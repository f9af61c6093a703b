"""Images given as queries (a search service's uploads, a command line's files): their features by one open runner.

    with ImageEmbedder(model, devices="cpu:0", resize="crop") as embedder:   # graph and weights loaded once
        features, failures = embedder.images([jpeg_bytes, png_bytes])       # float32 [M, D], [(number, kind, message)]

The bytes are decoded by the engine's rules (`parallel.inputs.decode.decode_bytes_row`: the model's resize
rule, the pixel bound, decompression bombs refused), so a file's bytes give the features `extract` gives the
file. The runner stays open between calls: a service loads its model once, not once a query. `images` may be
called from several threads at once (TensorFlow's Session.run is); the caller bounds how many.
"""

import numpy as np

from parallel.devices.selection import Devices, resolve_devices, set_float32_precision
from parallel.devices.staging import open_runner
from parallel.inputs.decode import MAX_PIXELS, decode_bytes_row
from parallel.inputs.resize import RESIZE_MODES, Resize


class ImageEmbedder:
    """One model's runner, kept open, for images given as bytes.

    Attributes:
      feature_size: D, the features' width.
    """

    def __init__(self, model, devices="cpu:0", resize="crop", max_pixels=MAX_PIXELS, per_device_batch=None):
        """Builds the graph and loads the weights, once.

        Args:
          model: ModelSpec (the indexed output's model, layer, weights and precision).
          devices: `Devices`, or device names as for --devices ("cpu:0").
          resize: "crop" or "stretch", with the filter and short side of `model`'s spec (as the output's run).
          max_pixels: an image of more pixels is refused ("too_large") before it is decoded.
          per_device_batch: rows per device per step; None: by device kind.

        Raises:
          ValueError: a bad argument, named with the value received.
        """
        if resize not in RESIZE_MODES:
            raise ValueError("resize must be one of %s; got %r" % (", ".join(RESIZE_MODES), resize))
        if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1:
            raise ValueError("max_pixels must be at least 1; got %r" % (max_pixels,))
        if isinstance(devices, str):
            devices = resolve_devices(devices=devices)
        if not isinstance(devices, Devices):
            raise ValueError("devices must be a Devices or device names such as 'cpu:0'; got %r" % (devices,))
        self.size = tuple(model.image_size)
        self.resize = Resize(resize, model.resize_filter, model.resize_short_side)
        self.max_pixels = max_pixels
        set_float32_precision(model.settings.get("precision"))  # process-global: before the Session
        self._runner = open_runner(model, devices, per_device_batch or devices.default_batch())
        self.feature_size = self._runner.feature_size

    def images(self, images):
        """The features of images given as bytes.

        Args:
          images: a list of M bytes, each a whole image file (JPEG, PNG, ...).

        Returns:
          (features float32 [M', D] of the images that decode, in order; failures [(number, kind, message)]:
          the place in `images` of each that does not, its kind as the errors file names it ("too_large",
          "not_an_image", ...) and one line).
        """
        pixels = np.zeros((len(images),) + self.size + (3,), np.uint8)
        failures = []
        for number, data in enumerate(images):
            failure = decode_bytes_row(data, pixels, number, self.size, self.resize, self.max_pixels)
            if failure is not None:
                failures.append((number,) + tuple(failure))
        failed = {number for number, _, _ in failures}
        decoded = pixels[[number for number in range(len(images)) if number not in failed]]
        if not len(decoded):
            return np.zeros((0, self.feature_size), np.float32), failures
        return self._runner.run(decoded), failures

    def close(self):
        self._runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
