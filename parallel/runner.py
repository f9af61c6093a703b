"""The compute stage: the model replicated on every device, one Session, one sess.run per batch.

    images uint8 [N, H, W, 3] --shard_features--> one shard per device --sess.run--> merge_results
        --> float32 [N, D], rows in input order

Weights are loaded from host arrays once per process and copied once onto each device
(`ReplicatedVariables`); they are never constants in the graph (four replicas of VGG16's
553 MB would break the 2 GB GraphDef limit), and a step moves only the input shards to the
devices and the features back.
"""

import logging

import numpy as np
import tensorflow as tf

from parallel.data_parallelism import data_parallelism, merge_results
from parallel.placement import ReplicatedVariables
from parallel.shard_features import shard_features, shard_sizes

tf1 = tf.compat.v1
log = logging.getLogger("parallel")


def build_graph(model, device_names):
    """The graph the engine runs: `model.fn` once per device, each with a resident copy of the weights.

    Nothing runs here, so the graph can be built, and its placement checked, for devices this
    machine does not have.

    Args:
      model: ModelSpec.
      device_names: graph device names, one replica each ("/device:GPU:0", ...).

    Returns:
      (graph, placement, placeholders, outputs): the `tf.Graph`; its `ReplicatedVariables`
      (which `load` fills); per device, a placeholder `uint8 [None, H, W, 3]` and the
      features `float32 [None, D]`, flattened.

    Raises:
      ValueError: the model's features have no fixed size per image.
    """
    height, width = model.image_size
    graph = tf.Graph()
    with graph.as_default():
        placement = ReplicatedVariables(device_names)

        def replica():
            images = tf1.placeholder(tf.uint8, [None, height, width, 3], name="images")
            features = model.fn(images)
            size = features.shape[1:].num_elements()
            if size is None:
                raise ValueError("model %s returns features of unknown size %s" % (model.name, features.shape))
            return images, tf.reshape(features, [-1, size])

        placeholders, outputs = data_parallelism(placement, replica)
    return graph, placement, placeholders, outputs


class DeviceRunner:
    """Builds the replicated graph once and runs uint8 batches through every device.

    Each device gets a placeholder `uint8 [None, H, W, 3]` and a resident copy of the
    weights (`ReplicatedVariables`), loaded from host arrays once; the graph is then
    finalized, so nothing can be added to it per step.
    """

    def __init__(self, model, devices, per_device_batch, weights=None):
        """Builds the graph and the Session, and loads the weights.

        Args:
          model: ModelSpec.
          devices: Devices.
          per_device_batch: rows per device per step (the largest batch `run` sends).
          weights: {variable name: array}; None calls `model.load_weights()`.
        """
        self.devices = devices
        self.max_rows_per_step = per_device_batch * len(devices.names)
        self.graph, placement, self.placeholders, self.outputs = build_graph(model, devices.names)
        self.feature_size = self.outputs[0].shape[1]
        self.session = tf1.Session(graph=self.graph, config=devices.session_config())
        try:
            placement.load(self.session, model.load_weights() if weights is None else weights)
        except BaseException:
            self.session.close()
            raise
        self.graph.finalize()

    def run(self, images):
        """Features of a batch of any size, in row order.

        A device that runs out of memory halves the rows per step and the batch is
        retried (with a warning), down to one row per device; no row is lost.

        Args:
          images: uint8 [N, H, W, 3], N >= 1.

        Returns:
          float32 [N, feature_size].
        """
        results, start = [], 0
        while start < len(images):
            chunk = images[start:start + self.max_rows_per_step]
            try:
                fetches, feed_dict = shard_features(chunk, self.placeholders, self.outputs)
                per_device = self.session.run(fetches, feed_dict)
            except tf.errors.ResourceExhaustedError:
                if self.max_rows_per_step <= len(self.devices.names):
                    raise
                self.max_rows_per_step = max(len(self.devices.names), self.max_rows_per_step // 2)
                log.warning("out of memory on a device; retrying with %d images per step",
                            self.max_rows_per_step)
                continue
            results.append(merge_results(per_device, shard_sizes(len(chunk), len(self.devices.names))))
            start += len(chunk)
        return np.concatenate(results) if len(results) > 1 else results[0]

    def close(self):
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
