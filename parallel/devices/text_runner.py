"""A model's text tower on the devices: sentences as vectors of the image tower's space, one Session.

    runner = TextRunner(model.text, devices, per_device_batch)   # model.text: a parallel.model.TextSpec
    vectors = runner.embed(["a dog on a beach", ...])             # float32 [N, D], unit length, rows in order
    runner.probability(cosines)                                   # the model's own (SigLIP's); None for CLIP

What `DeviceRunner` is for images, for token ids: the tower replicated on every device, each with a
resident copy of its weights (`ReplicatedVariables`, loaded once), a host batch split across the devices
(`shard_features`), a step that runs out of memory halved. The tower is built once per length it takes
(`TextSpec.lengths`): each row runs on the shortest that holds the positions it needs, rows of one length
together, so that a caption of ten words costs CLIP a third of its 77 positions.

Why on the devices, beside the image tower, and not on the host as a search's sentence is: on a CPU device
a batch of 64 captions (17 tokens at most) costs CLIP ViT-B/32's text tower a fifth of what 64 images cost
its image tower, and 0.84 of it at 77 tokens (benchmarks/bench_text.py; docs/benchmarks.md#models); on GPUs,
where a batch of images takes milliseconds, the host's cores would set the pace. The host only tokenizes
(about 40 microseconds a caption).
"""

import logging

import numpy as np
import tensorflow as tf

from parallel.devices.batch_split import shard_features, shard_sizes
from parallel.devices.placement import ReplicatedVariables
from parallel.devices.replication import data_parallelism, merge_results
from parallel.model import TextSpec

tf1 = tf.compat.v1
log = logging.getLogger("parallel")


class TextRunner:
    """A text tower (`TextSpec`) built once on `devices`, its weights loaded; then sentences through it.

    A context manager; `close()` releases the Session.

    Attributes:
      embedding_size: D, the floats of a sentence's vector (the image tower's `embedding`'s).
    """

    def __init__(self, spec, devices, per_device_batch, weights=None):
        """Builds the graph and the Session, and loads the weights.

        Args:
          spec: TextSpec.
          devices: Devices (`parallel.devices.selection`).
          per_device_batch: sentences per device per step (the largest batch a step sends).
          weights: {variable name: array}; None calls `spec.load_weights()`.
        """
        if not isinstance(spec, TextSpec):
            raise ValueError("spec must be a TextSpec; got %r" % (spec,))
        self.spec, self.devices = spec, devices
        self.max_rows_per_step = per_device_batch * len(devices.names)
        self.graph = tf.Graph()
        with self.graph.as_default():
            placement = ReplicatedVariables(devices.names)

            def replica():  # every length in each replica, one set of variables
                fed = []
                with tf1.variable_scope(tf1.get_variable_scope(), reuse=tf1.AUTO_REUSE):
                    for length in spec.lengths:
                        token_ids = tf1.placeholder(tf.int32, [None, length], "token_ids_%d" % length)
                        fed += [token_ids, spec.fn(token_ids)]
                return tuple(fed)

            per_device = data_parallelism(placement, replica)
            self._fed = {length: (per_device[2 * place], per_device[2 * place + 1])
                         for place, length in enumerate(spec.lengths)}
        self.embedding_size = int(per_device[1][0].shape[1])
        self.session = tf1.Session(graph=self.graph, config=devices.session_config())
        try:
            placement.load(self.session, spec.load_weights() if weights is None else weights)
        except BaseException:
            self.session.close()
            raise
        self.graph.finalize()

    def embed(self, sentences):
        """The sentences' vectors: float32 [N, D], unit length, in the image tower's space (`tokenize`, then `run`).

        Raises:
          ValueError: a sentence that is not a str (naming it).
        """
        sentences = [sentences] if isinstance(sentences, str) else list(sentences)
        if not sentences:
            return np.zeros((0, self.embedding_size), np.float32)
        return self.run(self.spec.tokenize(sentences))

    def run(self, token_ids):
        """The vectors of token ids: float32 [N, D], rows in order.

        Each row runs on the shortest of the tower's lengths that holds the positions it needs; the rows of a
        length go to the devices together, at most `max_rows_per_step` a step (halved, with a warning, when a
        device runs out of memory). The same ids in the same order give the same bits.

        Args:
          token_ids: int [N, context_length], as `TextSpec.tokenize` makes them.

        Raises:
          ValueError: ids of another shape (naming it).
        """
        token_ids = np.asarray(token_ids)
        context = self.spec.context_length
        if token_ids.ndim != 2 or token_ids.shape[1] != context or not np.issubdtype(token_ids.dtype, np.integer):
            raise ValueError("token_ids must be int [N, %d]; got %s %s" % (context, token_ids.dtype, token_ids.shape))
        token_ids = token_ids.astype(np.int32)
        lengths = np.asarray(self.spec.lengths)
        needed = np.full(len(token_ids), context) if self.spec.used_positions is None else \
            np.minimum(np.asarray(self.spec.used_positions(token_ids)), context)
        row_lengths = lengths[np.searchsorted(lengths, needed)]
        vectors = np.zeros((len(token_ids), self.embedding_size), np.float32)
        for length in np.unique(row_lengths):
            rows = np.flatnonzero(row_lengths == length)
            vectors[rows] = self._run_length(int(length), token_ids[rows, :length])
        return vectors

    def _run_length(self, length, token_ids):
        """float32 [N, D] of ids of one `length`, N >= 1, on every device."""
        placeholders, outputs = self._fed[length]
        results, start = [], 0
        while start < len(token_ids):
            chunk = token_ids[start:start + self.max_rows_per_step]
            try:
                fetches, feed_dict = shard_features(chunk, placeholders, outputs)
                per_device = self.session.run(fetches, feed_dict)
            except tf.errors.ResourceExhaustedError as error:
                if self.max_rows_per_step <= len(self.devices.names):
                    raise
                self.max_rows_per_step = max(len(self.devices.names), self.max_rows_per_step // 2)
                log.warning("out of memory on a device (%s); retrying with %d sentences per step",
                            type(error).__name__, self.max_rows_per_step)
                continue
            results.append(merge_results(per_device, shard_sizes(len(chunk), len(self.devices.names))))
            start += len(chunk)
        return np.concatenate(results)

    def probability(self, cosines):
        """The model's own probability that an image and a sentence of these cosines go together (float64 of their
        shape: SigLIP's), or None for a model that has none (CLIP)."""
        return None if self.spec.probability is None else self.spec.probability(np.asarray(cosines, np.float64))

    def close(self):
        self.session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
