"""A text tower on the host: a model's TextSpec (the tower a job runs on its devices) in a Graph and Session of its
own, for search by text. CLIP's and SigLIP's TextTower are this, given their checkpoint's spec.

    with clip.TextTower("clip_vit_b32", weights="clip-random") as tower:
        embeddings = tower.embed(token_ids)        # float32 [N, projection], unit length
"""

import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1


class HostTextTower:
    """A TextSpec's tower built once per length it runs at, its weights assigned from host arrays.

    Attributes:
      model: the size (its `projection`, `vocabulary_size` and `context_length` are read here).
      context_length: the token ids' length.
      tokenizer_folder: the folder of the tokenizer's files that came with the weights.
      identity: the weights' identity, as the image tower's settings record it.
    """

    def __init__(self, spec, model, identity, tokenizer_folder):
        """
        Args:
          spec: a parallel.model.TextSpec (fn, lengths, used_positions, load_weights).
          model: the size the spec computes (projection, vocabulary_size, context_length).
          identity: the weights' identity.
          tokenizer_folder: where the tokenizer's files are.
        """
        self._spec, self.model, self.identity = spec, model, identity
        self.context_length, self.tokenizer_folder = model.context_length, tokenizer_folder
        values = spec.load_weights()
        self._graph = tf.Graph()
        with self._graph.as_default():
            # One tower per length, the same variables: a row runs on the shortest that holds what it needs.
            self._token_ids, self._embedding = {}, {}
            for length in spec.lengths:
                self._token_ids[length] = tf1.placeholder(tf.int32, (None, length), "token_ids_%d" % length)
                self._embedding[length] = spec.fn(self._token_ids[length])
            variables = {variable.op.name: variable for variable in tf1.global_variables()}
            feeds = {name: tf1.placeholder(variable.dtype.base_dtype, variable.shape) for name, variable
                     in variables.items()}
            assign = tf.group(*[variables[name].assign(feeds[name]) for name in variables])
        self._graph.finalize()
        self._session = tf1.Session(graph=self._graph)
        self._session.run(assign, {feeds[name]: np.asarray(values[name], feeds[name].dtype.as_numpy_dtype)
                                   for name in variables})

    def embed(self, token_ids):
        """The sentences' embeddings.

        Args:
          token_ids: int32 [N, context_length] as the model's tokenizer makes them.

        Returns:
          float32 [N, projection], unit length.

        Raises:
          ValueError: ids of another shape, or outside the vocabulary (naming the value received).
        """
        token_ids = np.asarray(token_ids)
        if token_ids.ndim != 2 or token_ids.shape[1] != self.context_length:
            raise ValueError("token_ids must be [N, %d]; got shape %s" % (self.context_length, token_ids.shape))
        if not token_ids.size:
            return np.zeros((0, self.model.projection), np.float32)
        if token_ids.min() < 0 or token_ids.max() >= self.model.vocabulary_size:
            raise ValueError("token_ids must be in 0 .. %d; got %d .. %d" % (
                self.model.vocabulary_size - 1, token_ids.min(), token_ids.max()))
        spec = self._spec
        if len(spec.lengths) == 1:
            return self._session.run(self._embedding[self.context_length],
                                     {self._token_ids[self.context_length]: token_ids.astype(np.int32)})
        # each row on the shortest length that holds its used positions: rows of one length together
        lengths = np.asarray(spec.lengths)[np.searchsorted(spec.lengths, spec.used_positions(token_ids))]
        embeddings = np.empty((len(token_ids), self.model.projection), np.float32)
        for length in np.unique(lengths):
            rows = lengths == length
            embeddings[rows] = self._session.run(
                self._embedding[length], {self._token_ids[length]: token_ids[rows, :length].astype(np.int32)})
        return embeddings

    def close(self):
        """Releases the Session."""
        self._session.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
