"""What a job's text tower gave an indexed output's rows (`run_inference.py --text-column`, `--labels`): its
`<output>.text.parquet` (parallel.output.text_rows), read for search.

    scores = caption_scores(index)          # float32 [N] in the index's row order, NaN where a row has none
    check_caption_scores(index)             # SearchError (one line) for an output without: before any work
    has_caption_scores(index)               # False for an output without (what a page shows no score for)
    shown = caption_scores_of(index, keys)  # {key: float or None} of the keys that are rows (a page's tiles)
    captions = Captions(index)
    lists = captions.ranked(unit_vectors, k, min_score=0.28)   # [[(key, cosine)]] best first, against the captions
    allowed = caption_filter(index, 0.28)   # bool [N]: the rows whose caption score is 0.28 or more
    labels, scores = label_selection(index, LabelBound(("dog", "cat"), rank=2))  # the rows labelled so (--labels)
    found = neighbours(index, unit_vectors, k, to_captions, min_score)  # [[(key, score)]]: the index's or captions'

A caption score is the cosine of a row's caption, embedded by the model's text tower, and its image's
embedding (LAION kept the pairs of CLIP ViT-B/32 at 0.28 and above); NaN for a row without one (no caption, a
caption that failed, an image that failed). This is the one module that knows where an output keeps them.

A label bound (`LabelBound`) selects the rows one of whose `rank` best labels (`--labels`: zero-shot, each
row's from its image alone) is one of the names given, with a cosine of at least `min_score` when one is given.

A query (an image's vector or a sentence's, normalised: `search.queries`) is compared with the rows' captions
exactly, a row group of the text file at a time (memory: one group and the k best per query): image to text
and text to text, where the index answers image to image and text to image.
"""

import dataclasses
from pathlib import Path
from typing import Optional

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
    path, names = text_file(index), _schema_names(index, what)
    if name not in names:
        if name.startswith("label"):
            raise SearchError("%s has no %s: its job was run without --labels (%s holds its captions only)" % (
                index.meta["source"]["output"], what, Path(path).name))
        raise SearchError("%s has no %s: its job was run without --text-column (%s holds %s)" % (
            index.meta["source"]["output"], what, Path(path).name, "its labels only"))
    return path


def _schema_names(index, what):
    """The column names of the indexed output's text file; SearchError (one line, naming `what`) without one."""
    import pyarrow.parquet as pq
    path = text_file(index)
    if not Path(path).is_file():
        flag = "--labels FILE gives each row its labels" if what == "labels" else \
            "--text-column NAME gives each row one"
        raise SearchError("%s has no %s: its job embedded no %s (run_inference.py %s, in %s)" % (
            index.meta["source"]["output"], what, "labels" if what == "labels" else "captions", flag,
            Path(path).name))
    try:
        return pq.read_schema(path).names
    except (OSError, ValueError) as error:
        raise SearchError("%s cannot be read: %s" % (path, error)) from None


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


def has_caption_scores(index):
    """Whether the indexed output has caption scores (its job ran with --text-column): its text file's schema alone
    read; False, not an error, for an output without them (or whose text file cannot be read: `caption_scores`
    says why)."""
    try:
        check_caption_scores(index)
    except SearchError:
        return False
    return True


def caption_scores_of(index, keys, scores=None):
    """{key: its row's caption score (float), or None where the row has none} of those of `keys` that are rows of
    `index` (the others left out: a caption whose image failed, an image file given as a query); SearchError as
    `caption_scores`. scores: its `caption_scores`, when already read, or None."""
    scores = caption_scores(index) if scores is None else scores
    found = {}
    for key in keys:
        try:
            value = float(scores[index.row(key)])
        except SearchError:  # not a row of the index
            continue
        found[key] = None if np.isnan(value) else value
    return found


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


@dataclasses.dataclass(frozen=True)
class LabelBound:
    """The rows one of whose `rank` best labels (`run_inference.py --labels`) is one of `names`, with a cosine of at
    least `min_score` when it is not None (export --label NAME --label-rank K --min-label-score S)."""

    names: tuple
    rank: int = 1
    min_score: Optional[float] = None

    def __post_init__(self):
        if not self.names or any(not isinstance(name, str) or not name.strip() for name in self.names):
            raise SearchError("labels %r: give each a label's name" % (tuple(self.names),))
        if not isinstance(self.rank, int) or self.rank < 1:
            raise SearchError("label rank %r: give 1 or more" % (self.rank,))


def check_labels(index, bound):
    """Raises SearchError (one line) unless the indexed output's rows have labels, at least `bound.rank` each:
    what a command that selects by them asks before any work (the text file's schema alone is read)."""
    names = _schema_names(index, "labels")
    kept = sum(1 for name in names if name.startswith("label_score_"))
    if not kept:
        _checked(index, "label_1", "labels")
    if bound.rank > kept:
        raise SearchError("--label-rank %d: the rows of %s have their best %d labels only (its job's --labels-top)"
                          % (bound.rank, index.meta["source"]["output"], kept))


def label_selection(index, bound):
    """Each row's label among `bound` (`LabelBound`), read a row group of the text file at a time.

    Args:
      index: a loaded `search.index.Index`.
      bound: the names, how many of a row's best labels count, and the least cosine.

    Returns:
      (labels: object [N] in the index's row order, the best-ranked of a row's labels that `bound` selects, None
      where none; scores: float32 [N], its cosine with the image, NaN where none).

    Raises:
      SearchError: the output has no labels or fewer than `bound.rank` a row (`check_labels`); a name that no row
        has among its best `bound.rank` labels (a typo: the names the rows have are listed).
    """
    import pyarrow.parquet as pq
    check_labels(index, bound)
    path, wanted = text_file(index), np.array(list(bound.names), object)
    found, seen = {}, set()
    columns = ["key_bytes"] + ["label_%d" % (rank + 1) for rank in range(bound.rank)] + [
        "label_score_%d" % (rank + 1) for rank in range(bound.rank)]
    with pq.ParquetFile(path) as file:
        for group in range(file.num_row_groups):
            table = file.read_row_group(group, columns=columns)
            chosen = np.full(table.num_rows, None, object)
            scores = np.full(table.num_rows, np.nan, np.float32)
            for rank in range(bound.rank):  # best first: a row keeps its best-ranked label that is selected
                names = np.asarray(table.column("label_%d" % (rank + 1)).to_pylist(), object)
                seen.update(name for name in names if name is not None)
                cosines = np.asarray(table.column("label_score_%d" % (rank + 1)).to_numpy(zero_copy_only=False),
                                     np.float32)
                match = np.isin(names, wanted) & (chosen == None)  # noqa: E711 -- elementwise on objects
                if bound.min_score is not None:
                    with np.errstate(invalid="ignore"):
                        match &= cosines >= bound.min_score
                chosen[match], scores[match] = names[match], cosines[match]
            keys = table.column("key_bytes").to_pylist()
            for place in np.flatnonzero(chosen != None).tolist():  # noqa: E711
                found[keys[place].decode("utf-8", "surrogateescape")] = (chosen[place], scores[place])
    unknown = [name for name in bound.names if name not in seen]
    if unknown:
        raise SearchError("--label %r: no row of %s has it among its best %d label%s (they have: %s)" % (
            unknown[0], index.meta["source"]["output"], bound.rank, "" if bound.rank == 1 else "s",
            ", ".join(sorted(seen)[:12]) + (", ..." if len(seen) > 12 else "")))
    labels = np.full(len(index), None, object)
    scores = np.full(len(index), np.nan, np.float32)
    for row, path in enumerate(index.paths):
        if path in found:
            labels[row], scores[row] = found[path]
    return labels, scores


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
