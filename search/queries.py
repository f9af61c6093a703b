"""Queries as vectors, and their neighbours: what the command line's `neighbours` and `page` and the service share.

    resolved = query_vectors(index, ["img/1.jpg", "q.npy", "new.jpg"], ["a dog"], embedder)
    lists = ranked(index, np.stack([vector for _, _, vector in resolved]), k=10)   # [[(row, score)]] best first

A query is a path of the index (its stored row), a .npy of vectors (raw features), or an image file: one of
the indexed images, unchanged since it was computed (search/image_rows.py), is answered by its row; any other
is computed by `embedder`. A sentence is computed by `embedder` too. The embedder is given (the command line
builds it from the engine and the models, models/query_embedder.py): search never imports TensorFlow.
It has `images(list of bytes) -> (float32 [M, D], [(number, kind, message)])` and
`text(sentences) -> float32 [N, D]`, and may have `probability(cosines)`: the model's own probability that an image
and a sentence of those cosines go together (SigLIP's), or None (`probabilities`).

The values kept beside the rows (`run_inference.py --keep`: a tar sample's .txt or .json, a Parquet column, a
TFRecord feature) are in the output's members index; `Kept` reads them for the rows shown, never the whole index:

    kept = Kept(index)
    kept.names                                  # ("txt", "json"); () when nothing was kept
    kept.of(["tar://a/1.jpg::/d/0.tar"])       # {"tar://a/1.jpg::/d/0.tar": {"txt": "a dog", "json": None}}
"""

from pathlib import Path

import numpy as np

from search.kinds import SearchError


def check_text_queries(index):
    """A one-line SearchError unless the index takes text queries: an output in a text tower's space
    (models.text_queries' table), indexed uncentred (search/centre.py)."""
    from models.text_queries import check_text_queries as check  # a table: no TensorFlow
    try:
        check(index.settings)
    except ValueError as error:
        raise SearchError(str(error)) from None
    if index.meta["centre"]["centred"]:
        raise SearchError("index %s is centred on its rows' mean, which a sentence's embedding cannot be compared "
                          "with: build it again with `index --overwrite`" % index.folder)


def in_index(index, key):
    """Whether `key` is the path of a row of `index`."""
    try:
        index.row(key)
        return True
    except ValueError:
        return False


def image_vectors(index, images, embedder, names):
    """float32 [len(images), D] normalised: images given as bytes, by `embedder`; SearchError naming the
    `names` of those that cannot be read (and why)."""
    features, failures = embedder.images(images)
    if failures:
        raise SearchError("cannot read the image %s" % "; ".join(
            "%s (%s: %s)" % (names[number], kind, message) for number, kind, message in failures))
    return index.prepare(features)


def text_vectors(index, sentences, embedder):
    """float32 [len(sentences), D] normalised: the sentences by `embedder`'s text tower (checked first)."""
    check_text_queries(index)
    return index.prepare(embedder.text(list(sentences)))


def query_vectors(index, queries, sentences, embedder, say=None):
    """[(label, image path or None, float32 [D] normalised)] for every query, in order, then every sentence.

    Args:
      index: Index.
      queries: str paths: of the index, of a .npy [D] or [Q, D], or of an image file.
      sentences: str, each embedded by the text tower.
      embedder: as this module's docstring says (None: no image file or sentence may need it).
      say: called with one line per image file saying whether its row or the model answered.
    """
    from search.image_rows import ImageRows
    resolved, images, image_rows, notes = [], [], ImageRows(index), []
    for query in queries:
        if in_index(index, query):
            resolved.append((query, query, index.stored([index.row(query)])[0]))
        elif query.endswith(".npy") and Path(query).is_file():
            vectors = index.prepare(np.load(query))
            resolved.extend(("%s[%d]" % (query, row), None, vector) for row, vector in enumerate(vectors))
        elif Path(query).is_file():
            row, why = image_rows.row(query)  # an image of the output, unchanged: its row, not the model
            notes.append("%s: %s" % (query, "its indexed row %s, unchanged since it was computed" % index.paths[row]
                                         if why is None else "computed by the model: %s" % why))
            resolved.append((query, str(Path(query).resolve()), None if why else index.stored([row])[0]))
            images += [query] if why else []
        else:
            raise SearchError("query %r is not a path in the index, a .npy file or an image file" % query)
    if sentences:
        check_text_queries(index)
    if images:
        computed = dict(zip(images, image_vectors(index, [Path(image).read_bytes() for image in images], embedder,
                                                  images)))
        resolved = [(label, image, computed[label] if vector is None else vector)
                    for label, image, vector in resolved]
    if sentences:
        resolved += [(sentence, None, vector) for sentence, vector in zip(sentences, text_vectors(
            index, sentences, embedder))]
    for note in notes if say else ():  # which image files their rows answered, once every query has its vector
        say(note)
    return resolved


def ranked(index, unit_vectors, k, allowed=None):
    """[[(row, score)] best first] of each query: its k nearest rows (fewer when the index has fewer).

    Args:
      unit_vectors: float32 [Q, D], normalised (`Index.prepare`, `Index.stored`).
      allowed: None, or bool [N]: only these rows (`search.captions.caption_filter`): the index is asked for four
        times as many until k of them come back, or it has no more.
    """
    unit_vectors, asked = np.asarray(unit_vectors, np.float32), k
    while True:
        ids, scores = index.search_ids(unit_vectors, min(asked, len(index)))
        lists = [[(int(row), float(score)) for row, score in zip(row_ids, row_scores)
                  if row >= 0 and (allowed is None or allowed[row])][:k] for row_ids, row_scores in zip(ids, scores)]
        if allowed is None or asked >= len(index) or all(len(found) == k for found in lists):
            return lists
        asked *= 4


def probabilities(embedder, lists, first=0):
    """Per list of `ranked`'s [(row, score)], from the list `first` on (the sentences'), the model's own probability
    of each score ([float]: SigLIP's sigmoid(exp(logit_scale) * cosine + logit_bias)); None for the lists before
    `first`, or for all when the embedder gives none (CLIP, or an embedder without `probability`)."""
    score = getattr(embedder, "probability", None)
    found = [None if number < first or score is None else score(np.asarray([cosine for _, cosine in pairs], float))
             for number, pairs in enumerate(lists)]
    return [None if values is None else [float(value) for value in values] for values in found]


def neighbour_lines(lists, kept):
    """The CSV lines (str, each ending in "\\n") that `neighbours` prints: a header, then a line per neighbour:
    query, rank, score, (probability,) path, and a column "kept:<name>" per value kept (`Kept`: "" when the row has
    none).

    Args:
      lists: [(the query's label, [(path, score)] best first)], or [(label, [(path, score)], probabilities)] where
        probabilities is None or [float] (`probabilities`: a sentence's, for a model that gives one): then a column
        "probability" follows "score", "%.6g" of each (six significant digits: an unrelated pair's is around
        1e-5), "" for a query without one (an image).
      kept: the index's `Kept`; its values are read for these rows only.
    """
    from parallel.inputs.tars import KEPT_PREFIX
    from parallel.output.csv_rows import csv_line
    lists = [(label, found, chances[0] if chances else None) for label, found, *chances in lists]
    values = kept.of(path for _, found, _ in lists for path, _ in found)
    shown = any(chances is not None for _, _, chances in lists)
    lines = [csv_line(["query", "rank", "score"] + ["probability"] * shown + ["path"]
                      + [KEPT_PREFIX + name for name in kept.names])]
    for label, found, chances in lists:
        lines += [csv_line([label, str(rank), "%.6f" % score]
                           + (["" if chance is None else "%.6g" % chance] if shown else [])
                           + [path] + kept.texts(values.get(path)))
                  for rank, ((path, score), chance) in enumerate(zip(found, chances or [None] * len(found)), 1)]
    return lines


def members_index(index):
    """The path (str) of the indexed output's members index, `<output>.members.parquet` (for a kept
    <output>.shards/ folder, its output's); it exists only for an output of tars, Parquet or TFRecord files."""
    from parallel.inputs.tars import MEMBERS_SUFFIX  # a constant: parallel.inputs.tars imports no engine
    from search.image_rows import job_output
    return job_output(index) + MEMBERS_SUFFIX


class Kept:
    """The values kept beside an index's rows (`--keep`), read from its output's members index for the rows asked.

    Args:
      index: a loaded `search.index.Index`.
    """

    def __init__(self, index):
        self.path = members_index(index)
        self._names = None  # read once, on first need

    @property
    def names(self):
        """The names kept, in order (the index's KEPT_PREFIX columns); () for an output without --keep or
        without a members index (a folder of images)."""
        if self._names is None:
            from parallel.inputs.tars import kept_names
            self._names = kept_names(self.path) if Path(self.path).is_file() else ()
        return self._names

    def of(self, keys):
        """{key: {name: str or None}} of the `keys` (the rows' paths) found in the members index, the rows of
        those keys only read; {} when nothing was kept."""
        keys = set(keys)
        if not self.names or not keys:
            return {}
        from parallel.inputs.tars import read_index
        return {entry.key: dict(zip(self.names, entry.kept)) for entry in read_index(self.path, keys)}

    def texts(self, values):
        """[str] of one row's values ({name: value} as `of` gives it, or None), in the order of `names`; "" for
        a value the row has not."""
        return [(values or {}).get(name) or "" for name in self.names]
