"""What a job's text tower gave an indexed output's rows (`run_inference.py --text-column`, `--labels`): its
`<output>.text.parquet` (parallel.output.text_rows), read for search.

    scores = caption_scores(index)          # float32 [N] in the index's row order, NaN where a row has none
    check_caption_scores(index)             # SearchError (one line) for an output without: before any work
    captions = Captions(index)
    lists = captions.ranked(unit_vectors, k, min_score=0.28)   # [[(key, cosine)]] best first, against the captions
    allowed = caption_filter(index, 0.28)   # bool [N]: the rows whose caption score is 0.28 or more
    found = neighbours(index, unit_vectors, k, to_captions, min_score)  # [[(key, score)]]: the index's or captions'

A caption score is the cosine of a row's caption, embedded by the model's text tower, and its image's
embedding (LAION kept the pairs of CLIP ViT-B/32 at 0.28 and above); NaN for a row without one (no caption, a
caption that failed, an image that failed). This is the one module that knows where an output keeps them.

A query (an image's vector or a sentence's, normalised: `search.queries`) is compared with the rows' captions
exactly, a row group of the text file at a time (memory: one group and the k best per query): image to text
and text to text, where the index answers image to image and text to image.
"""

from pathlib import Path

import numpy as np

from search.kinds import SearchError


def text_file(index):
    """The path (str) of the indexed output's text file, `<output>.text.parquet` (a kept <output>.shards/ folder's:
    its output's); it exists only for a job run with --text-column or --labels."""
    from parallel.output.text_rows import TEXT_SUFFIX  # a constant: the output layer imports no engine
    from search.image_rows import job_output
    return job_output(index) + TEXT_SUFFIX


def _checked(index, name, what):
    """The path of the indexed output's text file, when it holds the column `name` (its schema alone read);
    SearchError (one line, naming `what`) when the job gave none."""
    import pyarrow.parquet as pq
    path = text_file(index)
    if not Path(path).is_file():
        raise SearchError("%s has no %s: its job embedded no captions (run_inference.py --text-column NAME gives "
                          "each row one, in %s)" % (index.meta["source"]["output"], what, Path(path).name))
    try:
        names = pq.read_schema(path).names
    except (OSError, ValueError) as error:
        raise SearchError("%s cannot be read: %s" % (path, error)) from None
    if name not in names:
        raise SearchError("%s has no %s: its job was run without --text-column (%s holds %s)" % (
            index.meta["source"]["output"], what, Path(path).name, "its labels only"))
    return path


def _column(index, name, what):
    """(keys, values) of the text file's column `name`; SearchError (one line) when the job gave none."""
    from parallel.output.text_rows import column_of
    path = _checked(index, name, what)
    try:
        return column_of(path, name)
    except (OSError, ValueError, KeyError) as error:
        raise SearchError("%s cannot be read: %s" % (path, error)) from None


def check_caption_scores(index):
    """Raises SearchError (one line, as `caption_scores`) unless the indexed output has caption scores: what a
    command that needs them asks before any work (the text file's schema alone is read)."""
    _checked(index, "caption_score", "caption scores")


def caption_scores(index):
    """The caption score of each row of `index`.

    Args:
      index: a loaded `search.index.Index`.

    Returns:
      float32 [N], in the index's row order; NaN for a row without one (no caption, a caption that failed).

    Raises:
      SearchError: the indexed output has no caption scores (one line: its job embedded no captions).
    """
    keys, scores = _column(index, "caption_score", "caption scores")
    found = dict(zip(keys, np.asarray(scores, np.float32)))
    return np.array([found.get(path, np.nan) for path in index.paths], np.float32)


def caption_filter(index, min_score, scores=None):
    """bool [N]: the rows of `index` whose caption score is `min_score` or more (NaN: never); SearchError as
    `caption_scores`. scores: its `caption_scores`, when already read (a service reads them once), or None."""
    scores = caption_scores(index) if scores is None else scores
    with np.errstate(invalid="ignore"):
        return scores >= min_score


class Captions:
    """The caption embeddings of an indexed output's rows, compared with queries a row group at a time.

    Args:
      index: a loaded `search.index.Index`; SearchError (one line) when its job embedded no captions.
    """

    def __init__(self, index):
        import pyarrow.parquet as pq
        self.path = _checked(index, "caption_score", "captions")  # a job's with captions: else one line
        self.size = pq.read_schema(self.path).field("caption_embedding").type.list_size

    def ranked(self, unit_vectors, k, min_score=None):
        """[[(key, cosine)] best first] of each query: the k rows whose caption is nearest it (ties by row order).

        Args:
          unit_vectors: float32 [Q, D], normalised, uncentred (a sentence's, or an image's of an index of raw
            cosines: `search.queries.check_text_queries`).
          k: neighbours per query.
          min_score: None, or only rows whose caption score is at least this.
        """
        import pyarrow.parquet as pq
        queries = np.asarray(unit_vectors, np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.size:
            raise SearchError("queries of shape %s cannot be compared with captions of %d dimensions"
                              % (queries.shape, self.size))
        best_keys = [[] for _ in queries]
        best_scores = np.full((len(queries), 0), -np.inf, np.float32)
        with pq.ParquetFile(self.path) as file:
            for group in range(file.num_row_groups):
                table = file.read_row_group(group, columns=["key_bytes", "caption_embedding", "caption_score"])
                keep = ~np.asarray(table.column("caption_embedding").is_null().to_numpy(zero_copy_only=False), bool)
                if min_score is not None:
                    with np.errstate(invalid="ignore"):
                        keep &= table.column("caption_score").to_numpy(zero_copy_only=False) >= min_score
                if not keep.any():
                    continue
                table = table.filter(keep)
                vectors = np.asarray(table.column("caption_embedding").combine_chunks().flatten().to_numpy(
                    zero_copy_only=False), np.float32).reshape(-1, self.size)
                keys = [raw.decode("utf-8", "surrogateescape") for raw in table.column("key_bytes").to_pylist()]
                scores = np.concatenate([best_scores, queries @ vectors.T], axis=1)
                candidates = [found + keys for found in best_keys]
                order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # stable: the earlier row first
                best_scores = np.take_along_axis(scores, order, axis=1)
                best_keys = [[candidates[query][place] for place in row] for query, row in enumerate(order)]
        return [list(zip(keys, map(float, scores))) for keys, scores in zip(best_keys, best_scores)]


def neighbours(index, unit_vectors, k, to_captions, min_score=None):
    """[[(key, score)] best first] of each query: its k nearest rows in the index (image to image, text to image),
    or by their captions where `to_captions` (image to text, text to text); only rows whose caption score is at
    least `min_score`, unless None.

    Args:
      index: a loaded `search.index.Index`.
      unit_vectors: float32 [Q, D], normalised (`search.queries.query_vectors`).
      k: neighbours per query.
      to_captions: [bool] per query.
    """
    from search.queries import check_text_queries, ranked
    found = [None] * len(unit_vectors)
    indexed = [number for number, captions in enumerate(to_captions) if not captions]
    if indexed:
        allowed = None if min_score is None else caption_filter(index, min_score)
        for number, pairs in zip(indexed, ranked(index, unit_vectors[indexed], k, allowed)):
            found[number] = [(index.paths[row], score) for row, score in pairs]
    others = [number for number, captions in enumerate(to_captions) if captions]
    if others:
        check_text_queries(index)  # an image's vector, as a sentence's, in the text tower's space, uncentred
        for number, pairs in zip(others, Captions(index).ranked(unit_vectors[others], k, min_score)):
            found[number] = pairs
    return found
