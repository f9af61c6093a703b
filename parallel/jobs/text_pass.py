"""A job's text side, where its model has a text tower: each row's caption embedded and scored, its labels ranked.

    text = TextPass(config, devices)     # the tower on a worker's devices (TextRunner), the labels embedded once
    text.shard(attempt, keys, captions, features, stop)   the shard's TEXT_FILE in its attempt; False if stopped
    text.rescored(rows, images)          rows (their captions' embeddings) scored with their images: a retry's

A shard's captions are embedded once its images are (its rows and index written), in chunks of a step's size at
fixed places of its rows (0 .. B - 1, B .., whatever the number of processes), each committed in the attempt
as it is computed (a FeatureWriter: _captions.parquet), so that a kill costs at most one chunk and the next
run, given the shard, resumes after the last one committed: the embeddings are one uninterrupted run's, bit for
bit. A caption that is missing (the row has no such value) or blank is a failure of that caption alone: the
row's caption_error says which, its image's row is kept, and it is counted in the log, not in the errors file
(which lists images without a row, computed again by every run).

The shard's text file (parallel.output.text_rows) is then made from its captions' embeddings and its rows:
the caption score is the cosine of a row's caption and image embeddings, the labels those of the highest
cosines with the image (ties in the labels' order). Each row's numbers are computed from that row alone
(reductions along a row, a matrix-vector product per row), so that a row retried later is scored with the
same bits as in an uninterrupted run.
"""

import logging

import numpy as np

from parallel.devices.text_runner import TextRunner
from parallel.output import OutputError, open_writer
from parallel.output.text_rows import EMPTY, MISSING, TEXT_FILE, TextRows, write_rows

log = logging.getLogger("parallel")

CAPTIONS_PART = "_captions.parquet"  # an attempt's captions' embeddings, committed chunk by chunk


class TextPass:
    """The text tower of `config.model` on `devices`, and what a job asks of it (`Config.text_column`, `labels`).

    A context manager; `close()` releases the tower's Session.
    """

    def __init__(self, config, devices):
        self.config = config
        self.runner = TextRunner(config.model.text, devices, config.per_device_batch)
        try:  # the labels' unit vectors, float64 [L, D], embedded once (the same bits in every process of the job)
            self.labels = None
            if config.labels:
                self.labels = self.runner.embed(config.label_prompts).astype(np.float64)
                self.labels /= np.linalg.norm(self.labels, axis=1, keepdims=True)
        except BaseException:
            self.runner.close()
            raise

    def shard(self, attempt, keys, captions, features, stop=None):
        """Writes a shard's text file (TEXT_FILE) in its attempt, its captions' embeddings resumed where committed.

        Args:
          attempt: the attempt's folder (Path).
          keys: the shard's rows' keys, in order: its members index's, or its images'.
          captions: per key, its caption (a str, or None for a row without one); None when the job embeds none.
          features: Path of the shard's rows (features.parquet): the images' embeddings by key.
          stop: None, or a StopRequest: a signal stops the embedding after the chunk under way.

        Returns:
          bool: False when it was stopped (what is committed stays, for the next run to resume).
        """
        rows = TextRows(list(keys))
        if captions is not None:
            rows.errors = [MISSING if caption is None else EMPTY if not caption.strip() else None
                           for caption in captions]
            rows.embeddings = self._captions(attempt / CAPTIONS_PART, rows.keys, captions, rows.errors, stop)
            if rows.embeddings is None:
                return False
            failed = sum(error is not None for error in rows.errors)
            if failed:
                log.info("%d of the shard's %d captions are missing or blank: those rows have no caption score "
                         "(their caption_error says which)", failed, len(keys))
        write_rows(attempt / TEXT_FILE, self.rescored(rows, image_rows(features, rows.keys,
                                                                        self.config.model.output_name)))
        return True

    def _captions(self, part, keys, captions, errors, stop):
        """float32 [N, D] of the captions (NaN rows where `errors` has one), committed chunk by chunk in `part`;
        None when `stop` stopped it."""
        chunk_size = self.config.host_batch
        writer = self._open(part)
        try:
            for start in range(0, len(keys), chunk_size):
                rows = [row for row in range(start, min(start + chunk_size, len(keys))) if errors[row] is None]
                if not rows or keys[rows[0]] in writer.completed:  # a chunk is committed whole, in one write
                    continue
                if stop is not None and stop.signal_name is not None:
                    writer.abort()
                    return None
                writer.write([keys[row] for row in rows], self.runner.embed([captions[row] for row in rows]))
            writer.close()
        except BaseException:
            writer.abort()
            raise
        return image_rows(part, keys, "caption")  # the reader of a shard's rows: by key, NaN where none

    def _open(self, part):
        """The writer of an attempt's captions' embeddings: resumed, or started afresh when it cannot be."""
        options = dict(format="parquet", column_prefix="caption", feature_size=self.runner.embedding_size,
                       settings={"text_column": self.config.text_column}, record_digests=True)
        try:
            return open_writer(part, **options)
        except OutputError as error:
            log.warning("the captions' embeddings in %s cannot be resumed (%s): they are computed again", part.parent,
                        str(error).split(": pass --overwrite")[0])
            return open_writer(part, overwrite=True, **options)

    def rescored(self, rows, images):
        """`rows` (TextRows, their `embeddings` and `errors` when the job has captions) with their scores and labels
        from `images`, float32 [N, D], NaN rows for images without a row: `rows`, filled in."""
        images = np.asarray(images, np.float64)
        known = ~np.isnan(images).any(axis=1)
        if rows.embeddings is not None:
            rows.scores = cosines(images, rows.embeddings)
            probability = self.runner.probability(rows.scores)
            rows.probabilities = None if probability is None else np.asarray(probability, np.float32)
        if self.labels is not None:
            top = self.config.labels_top
            unit = images / np.linalg.norm(images, axis=1, keepdims=True)
            rows.labels, rows.label_scores = [], np.full((len(rows.keys), top), np.nan, np.float32)
            for row in range(len(rows.keys)):
                if not known[row]:
                    rows.labels.append(None)
                    continue
                similar = self.labels @ unit[row]  # this row's cosines, from this row alone
                order = np.argsort(-similar, kind="stable")[:top]
                rows.labels.append(tuple(self.config.labels[place] for place in order))
                rows.label_scores[row] = similar[order]
        return rows

    def close(self):
        self.runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def cosines(first, second):
    """float32 [N]: the cosine of each row of `first` and the same row of `second` (float [N, D]), computed in float64
    from that row alone; NaN where either row is NaN."""
    first, second = np.asarray(first, np.float64), np.asarray(second, np.float64)
    norms = np.sqrt(np.sum(first * first, axis=1) * np.sum(second * second, axis=1))
    return (np.sum(first * second, axis=1) / norms).astype(np.float32)


def image_rows(features, keys, column):
    """float32 [len(keys), D]: the rows of `keys` in the Parquet file `features` (path_bytes and the list column
    `column`, as FeatureWriter writes them), NaN rows for keys it has none of."""
    import pyarrow.parquet as pq
    table = pq.read_table(features, columns=["path_bytes", column])
    size = table.schema.field(column).type.list_size
    places = {raw.decode("utf-8", "surrogateescape"): place
              for place, raw in enumerate(table.column("path_bytes").to_pylist())}
    values = np.asarray(table.column(column).combine_chunks().flatten().to_numpy(zero_copy_only=False),
                        np.float32).reshape(-1, size)
    rows = np.full((len(keys), size), np.nan, np.float32)
    for row, key in enumerate(keys):
        place = places.get(key)
        if place is not None:
            rows[row] = values[place]
    return rows
