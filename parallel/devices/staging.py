"""Staged inputs: each device holds its next input shard while it computes on the current one.

    host placeholder --put (host-to-device copy)--> staging area on device i --get--> the model
        run k: get() gives the shard put by run k - 1, while put() copies the shard of run k + 1

- `StagingAreas`: the areas in the graph; its `replica_input` is the input hook `build_graph`
  calls once per replica.
- `StagedRunner`: a `DeviceRunner` that drives them; features come back one step late.
- `open_runner`: the runner the engine uses, staged on GPUs.

tf_cnn_benchmarks stages its GPU inputs the same way. The areas are built from `tf.raw_ops` (Stage,
Unstage, StageClear, StageSize): public ops, with kernels registered for every device type, GPUs
included.
"""

import collections

import tensorflow as tf

from parallel.devices.batch_split import shard_features, shard_sizes
from parallel.devices.compute import DeviceRunner, check_batch, joined
from parallel.devices.replication import merge_results

tf1 = tf.compat.v1

# Feeds land in host memory; the copy from here to each device is the one staging overlaps.
HOST_DEVICE = "/device:CPU:0"


class StagingAreas:
    """One first-in first-out staging area per replica, on the replica's device.

    An area holds at most two shards, and only within a step that both puts and gets (the get
    takes the older one); between steps it holds the shard of the next step or nothing. A get
    on an empty area blocks forever, so only fetch the features of replicas whose area holds a
    shard.

    Attributes:
      puts: per replica, the op that copies its placeholder's value into its area.
      clears: per replica, the op that empties its area.
      sizes: per replica, int32 [] the number of shards its area holds.
    """

    def __init__(self):
        self.puts, self.clears, self.sizes = [], [], []

    def replica_input(self, dtype, shape):
        """Builds one replica's input; call it in the replica's device and name scope.

        Args:
          dtype: the input's dtype (tf.uint8 for images).
          shape: the input's shape, first dimension None (`[None, H, W, 3]`).

        Returns:
          (placeholder, staged): the host placeholder that feeds the next step's shard, and the
          shard staged by the previous step, `dtype` `shape`, on the replica's device.
        """
        with tf.device(HOST_DEVICE):
            placeholder = tf1.placeholder(dtype, shape, name="next_images")
        # Put, get, clear and size find their area by this name on their device; it must be the
        # same for the four ops and differ between replicas.
        area = dict(dtypes=[dtype], shared_name=tf1.get_default_graph().unique_name("staging_area"))
        self.puts.append(tf.raw_ops.Stage(values=[placeholder], shared_name=area["shared_name"], name="put"))
        [staged] = tf.raw_ops.Unstage(**area, name="get")
        staged.set_shape(shape)  # Unstage does not know the shape it gives
        self.clears.append(tf.raw_ops.StageClear(**area, name="clear"))
        self.sizes.append(tf.raw_ops.StageSize(**area, name="size"))
        return placeholder, staged


class StagedRunner(DeviceRunner):
    """A DeviceRunner whose devices hold their next input while they compute.

    Each device has a staging area on it (`StagingAreas`). One `sess.run` computes on the
    shards the previous run put in the areas and puts the next chunk's shards in them, so the
    host-to-device copy of step k + 1 overlaps the compute of step k, as in tf_cnn_benchmarks.
    The pipeline is one step deep: the first run only puts (warm-up), the last only computes
    (`flush`). A deeper one would hold one more input on every device and hide no more: a step
    already has a whole compute to hide its one copy behind.

    Chunks are cut as `DeviceRunner.run` cuts them (`max_rows_per_step` rows of one batch per
    step) and each is computed on the same devices with the same shard sizes, so the rows are
    those of a DeviceRunner, bit for bit.

    A batch's features come back one call late, from the next `submit` or from `flush`:

        for images in batches:                   # uint8 [N, H, W, 3]
            for features in runner.submit(images):
                ...                              # float32 [N_b, D]: the earlier batches, in order
        for features in runner.flush():
            ...                                  # the batches still in flight
    """

    def __init__(self, model, devices, per_device_batch, weights=None):
        """As `DeviceRunner`, with a staging area on every device."""
        self._staging = StagingAreas()
        self._in_flight = collections.deque()  # _InFlight, in submit order
        self._staged = None  # the _Chunk the areas hold, or None
        super().__init__(model, devices, per_device_batch, weights)

    def _replica_input(self, dtype, shape):
        return self._staging.replica_input(dtype, shape)

    def run(self, images):
        """Features of a batch, with nothing else in flight: a warm-up put, then a drain.

        Raises:
          RuntimeError: batches are in flight (call `flush` first).
        """
        if self._in_flight:
            raise RuntimeError("run() with %d batches in flight; flush() them first" % len(self._in_flight))
        [features] = self.submit(images) + self.flush()
        return features

    def submit(self, images):
        """Puts a batch on its way; returns the features of the earlier batches now complete.

        Every row of `images` is computed or staged on the devices when this returns. The
        runner keeps `images` (it puts them again after running out of memory) until its
        features are returned: do not write into it meanwhile.

        Args:
          images: uint8 [N, H, W, 3], N >= 1.

        Returns:
          list of float32 [N_b, feature_size], one per batch completed, in submit order ([] for
          the first batch).

        Raises:
          ValueError: an empty batch, naming its shape.
        """
        check_batch(images)
        self._in_flight.append(_InFlight(images))
        while self._next_chunk() is not None:
            self._step()
        return self._completed()

    def flush(self):
        """Computes what is in flight; returns the features of every batch not returned yet, in order."""
        while self._staged is not None or self._next_chunk() is not None:
            self._step()
        return self._completed()

    def staged_shards(self):
        """Shards each device's area holds (one run; for tests and debugging): list of ints."""
        return [int(size) for size in self.session.run(self._staging.sizes)]

    def _step(self):
        """One `sess.run`: computes the staged chunk and puts the next; either may be absent."""
        computing, putting = self._staged, self._next_chunk()
        fetches, feed_dict = {}, None
        if putting is not None:
            fetches["put"], feed_dict = shard_features(putting.images, self.placeholders, self._staging.puts)
        if computing is not None:
            # Only the devices that hold a shard: a get on an empty area would wait forever.
            rows_per_device = shard_sizes(len(computing.images), len(self.devices.names))
            fetches["features"] = self.outputs[:len(rows_per_device)]
        try:
            results = self.session.run(fetches, feed_dict)
        except tf.errors.ResourceExhaustedError as error:
            # A failed run may have taken shards out of the areas and put others in: empty them
            # and put the rows again from the host copy, from the first row not computed.
            self.session.run(self._staging.clears)
            self._staged = None
            if computing is not None:
                computing.batch.staged_rows = computing.start
            self._take_smaller_steps(error)
            return
        if computing is not None:
            computing.batch.features.append(merge_results(results["features"], rows_per_device))
        if putting is not None:
            putting.batch.staged_rows = putting.stop
        self._staged = putting

    def _next_chunk(self):
        """The rows to put next: those of the first batch not all put, one step's worth; or None."""
        for batch in self._in_flight:
            if batch.staged_rows < len(batch.images):
                return _Chunk(batch, batch.staged_rows,
                              min(batch.staged_rows + self.max_rows_per_step, len(batch.images)))
        return None

    def _completed(self):
        completed = []
        while self._in_flight and self._in_flight[0].computed_rows() == len(self._in_flight[0].images):
            completed.append(joined(self._in_flight.popleft().features))
        return completed


class _InFlight:
    """A batch handed to `StagedRunner.submit`: its rows put on the devices, its features computed."""

    def __init__(self, images):
        self.images = images
        self.staged_rows = 0
        self.features = []  # float32 [n_i, D] per chunk computed, in row order

    def computed_rows(self):
        return sum(len(features) for features in self.features)


class _Chunk(collections.namedtuple("_Chunk", "batch start stop")):
    """Rows [start, stop) of an _InFlight batch: what one step puts or computes."""

    @property
    def images(self):
        return self.batch.images[self.start:self.stop]


def open_runner(model, devices, per_device_batch, weights=None):
    """The runner the engine uses for `devices`: staged on GPUs, fed with the step on CPUs.

    On a GPU, staging hides the host-to-device copy of each step's input behind the compute of
    the step before. CPU devices read the host's memory: there is no copy to hide, and staging
    would only add a step of latency.

    Args:
      model: ModelSpec.
      devices: Devices.
      per_device_batch: rows per device per step.
      weights: {variable name: array}; None calls `model.load_weights()`.

    Returns:
      StagedRunner if any device is a GPU, else DeviceRunner.
    """
    runner = StagedRunner if devices.physical_gpus else DeviceRunner
    return runner(model, devices, per_device_batch, weights)
