"""Every endpoint of a model in one run: one graph, one Session and one weight load, instead of a run per endpoint.

Each endpoint is still computed by its own `ModelSpec.fn` from the weights its own `load_weights` reads: only the
graph they are built in is shared (the later endpoints reuse the variables the first created).
"""

import numpy as np
import tensorflow as tf

from arrays import assert_same_array
from parallel import engine
from parallel.devices import resolve_devices
from parallel.model import ModelSpec

tf1 = tf.compat.v1


def every_endpoint(specs, images, per_device_batch=2):
    """The features of `images` at every endpoint of `specs`, on one CPU device.

    Args:
      specs: {endpoint: ModelSpec} of one model (one image size, one variable scope), the endpoint that needs
        the most variables first (the others reuse them).
      images: uint8 [N, H, W, 3] RGB.
      per_device_batch: rows per step.

    Returns:
      {endpoint: float32 [N, that endpoint's feature size]}, as `DeviceRunner(specs[endpoint], ...).run(images)`.
    """
    sizes = []

    def every(batch):
        outputs = []
        for index, spec in enumerate(specs.values()):
            with tf1.variable_scope(tf1.get_variable_scope(), reuse=True if index else None):
                output = spec.fn(batch)
            sizes.append(int(np.prod(output.shape[1:])))
            outputs.append(tf.reshape(output, [-1, sizes[-1]]))
        return tf.concat(outputs, axis=1)

    def load_weights():
        values = {}
        for spec in specs.values():
            for name, value in spec.load_weights().items():
                if name in values:  # an endpoint reads a variable as the one before it did
                    assert_same_array(value, values[name], name)
                values[name] = value
        return values

    first = next(iter(specs.values()))
    spec = ModelSpec(name=first.name, fn=every, image_size=first.image_size, load_weights=load_weights,
                     output_name="every_endpoint", settings=first.settings)
    with engine.DeviceRunner(spec, resolve_devices(devices="cpu:0", gpu_count=0), per_device_batch) as runner:
        features = runner.run(images)
    return dict(zip(specs, np.split(features, np.cumsum(sizes)[:-1], axis=1)))
