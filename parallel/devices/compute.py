"""The compute stage: the model replicated on every device, one Session, one sess.run per batch.

    images uint8 [N, H, W, 3] --shard_features--> one shard per device --sess.run--> merge_results
        --> float32 [N, D], rows in input order

`DeviceRunner` feeds each step's shards to the devices with the step (`feed_dict`, synchronous);
`parallel.devices.staging.StagedRunner` puts the next step's shards on the devices during the current
step, so that on GPUs the host-to-device copy overlaps the compute.

Weights are loaded from host arrays once per process and copied once onto each device
(`ReplicatedVariables`); they are never constants in the graph (four replicas of VGG16's
553 MB would break the 2 GB GraphDef limit), and a step moves only the input shards to the
devices and the features back.
"""

import logging

import numpy as np
import tensorflow as tf

from parallel.devices.batch_split import shard_features, shard_sizes
from parallel.devices.placement import ReplicatedVariables
from parallel.devices.replication import data_parallelism, merge_results

tf1 = tf.compat.v1
log = logging.getLogger("parallel")


def fed_input(dtype, shape):
    """A replica's input fed with the step: a placeholder on the replica's device.

    Returns:
      (placeholder, images): the same `dtype` `shape` tensor twice.
    """
    images = tf1.placeholder(dtype, shape, name="images")
    return images, images


def build_graph(model, device_names, replica_input=fed_input):
    """The graph the engine runs: `model.fn` once per device, each with a resident copy of the weights.

    Nothing runs here, so the graph can be built, and its placement checked, for devices this
    machine does not have.

    Args:
      model: ModelSpec.
      device_names: graph device names, one replica each ("/device:GPU:0", ...).
      replica_input: called as `replica_input(tf.uint8, [None, H, W, 3])` in each replica's
        device and name scope; returns (the placeholder a step feeds, the images the model
        reads). `fed_input`, or `parallel.devices.staging.StagingAreas().replica_input`.

    Returns:
      (graph, placement, placeholders, outputs): the `tf.Graph`; its `ReplicatedVariables`
      (which `load` fills); per device, the placeholder `uint8 [None, H, W, 3]` and the
      features `float32 [None, D]`, flattened.

    Raises:
      ValueError: the model's features have no fixed size per image.
    """
    height, width = model.image_size
    graph = tf.Graph()
    with graph.as_default():
        placement = ReplicatedVariables(device_names)

        def replica():
            placeholder, images = replica_input(tf.uint8, [None, height, width, 3])
            features = model.fn(images)
            size = features.shape[1:].num_elements()
            if size is None:
                raise ValueError("model %s returns features of unknown size %s" % (model.name, features.shape))
            return placeholder, tf.reshape(features, [-1, size])

        placeholders, outputs = data_parallelism(placement, replica)
    return graph, placement, placeholders, outputs


class DeviceRunner:
    """Builds the replicated graph once and runs uint8 batches through every device.

    Each device gets a placeholder `uint8 [None, H, W, 3]`, fed with the step, and a resident
    copy of the weights (`ReplicatedVariables`), loaded from host arrays once; the graph is then
    finalized, so nothing can be added to it per step.

    `run(images)` gives a batch's features. `submit` and `flush` are the compute stage `run_loop`
    drives; this runner keeps nothing in flight, so `submit` returns the batch's own features.
    """

    def __init__(self, model, devices, per_device_batch, weights=None):
        """Builds the graph and the Session, and loads the weights.

        Args:
          model: ModelSpec.
          devices: Devices.
          per_device_batch: rows per device per step (the largest batch a step sends).
          weights: {variable name: array}; None calls `model.load_weights()`.
        """
        self.devices = devices
        self.max_rows_per_step = per_device_batch * len(devices.names)
        self.graph, placement, self.placeholders, self.outputs = build_graph(model, devices.names,
                                                                             self._replica_input)
        self.feature_size = self.outputs[0].shape[1]
        self.session = tf1.Session(graph=self.graph,
                                   config=devices.session_config(model.settings.get("precision")))
        try:
            placement.load(self.session, model.load_weights() if weights is None else weights)
        except BaseException:
            self.session.close()
            raise
        self.graph.finalize()

    def _replica_input(self, dtype, shape):
        """Hook: builds one replica's input, as `build_graph`'s `replica_input`."""
        return fed_input(dtype, shape)

    def run(self, images):
        """Features of a batch of any size, in row order.

        A device that runs out of memory halves the rows per step and the batch is
        retried (with a warning), down to one row per device; no row is lost.

        Args:
          images: uint8 [N, H, W, 3], N >= 1.

        Returns:
          float32 [N, feature_size].

        Raises:
          ValueError: an empty batch, naming its shape.
        """
        check_batch(images)
        results, start = [], 0
        while start < len(images):
            chunk = images[start:start + self.max_rows_per_step]
            try:
                fetches, feed_dict = shard_features(chunk, self.placeholders, self.outputs)
                per_device = self.session.run(fetches, feed_dict)
            except tf.errors.ResourceExhaustedError as error:
                self._take_smaller_steps(error)
                continue
            results.append(merge_results(per_device, shard_sizes(len(chunk), len(self.devices.names))))
            start += len(chunk)
        return joined(results)

    def submit(self, images):
        """The compute stage of `run_loop`: hands a batch to the devices.

        Args:
          images: uint8 [N, H, W, 3], N >= 1.

        Returns:
          list of float32 [N_b, feature_size], the features of the batches submitted so far that
          are now complete, in submit order: here always `[run(images)]`.
        """
        return [self.run(images)]

    def flush(self):
        """The features of the batches still in flight, in submit order: here always []."""
        return []

    def _take_smaller_steps(self, error):
        """After a device ran out of memory: halves the rows per step, with a warning.

        Raises:
          tf.errors.ResourceExhaustedError: `error`, when a step already had one row per device.
        """
        if self.max_rows_per_step <= len(self.devices.names):
            raise error
        self.max_rows_per_step = max(len(self.devices.names), self.max_rows_per_step // 2)
        log.warning("out of memory on a device; retrying with %d images per step", self.max_rows_per_step)

    def close(self):
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def check_batch(images):
    """ValueError naming the shape of a batch without rows."""
    if len(images) < 1:
        raise ValueError("a batch needs at least one image; got images of shape %s" % (np.shape(images),))


def joined(parts):
    """float32 [sum n_i, D] from parts [n_i, D], without a copy for one part."""
    return np.concatenate(parts) if len(parts) > 1 else parts[0]
