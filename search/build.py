"""A new index from an output's rows: two passes over them, the kind trained, the search tuned to the recall.

    index = Index.build("results/features.npy", "results/features.index")    # build_index(Index, ...)

The first pass takes the rows' centre and a sample (search/centre.py): the rows of the recall check, and
for ivfpq the rows that train the PCA and IVF-PQ (search/kinds.py). The second adds every row through the
Index's own `_fill` and `_map_full`, the way `Index.add` adds a resumed output's (one way in for rows),
while the exact neighbours of the sample are found (search/recall.py). Then the least search work that
finds RECALL_TARGET of them is chosen (`search.kinds.search_steps`), and the folder is saved, index.json last.
Imports search's own modules only, never search.index (the class comes as an argument): no import circle.
"""

import time
from pathlib import Path

from search.centre import mean_and_sample, uncentred_reason
from search.kinds import (KINDS, RECALL_TARGET, SearchError, check_rows_for_kind, choose_kind, import_faiss,
                          new_index, normalise, normalise_in_place, search_steps, training_rows)
from search.metadata import VERSION
from search.recall import ExactNeighbours
from search.vectors import read_output

RECALL_QUERIES = 200       # rows whose exact neighbours are found while the index is filled
RECALL_K = 10


def build_index(index_class, output, folder, kind=None, batch_rows=4096, progress=None, source=None, seed=0,
                full_vectors=True, centre=None):
    """Indexes every row of `output` into `folder` (created; an existing index there is replaced).

    Two passes over the rows, a batch at a time: the first takes their mean and a sample (the
    rows of the recall check, and for ivfpq the rows that train the PCA and IVF-PQ: `training_rows`), the
    second adds them. Memory: the index plus a few copies of one batch, plus for ivfpq its
    sample while it is trained; the whole matrix is never held.

    Args:
      index_class: the class of the index made (`search.index.Index`: `Index.build` passes itself).
      output: an output path (see `search.vectors.read_output`).
      folder: the index folder (str or Path).
      kind: one of KINDS, or None to choose by size (`choose_kind`).
      batch_rows: rows read at a time.
      progress: callable(rows done, rows in all, what) or None.
      source: an `OutputVectors` to read instead of `output` (a generator of batches, in benchmarks).
      seed: of the sample.
      full_vectors: ivfpq: keep every normalised vector in float16 in the folder (2 D bytes a
        row on disk) to re-rank each search's candidates in the full dimensions; False: the
        PCA's scores and order only (less disk, lower recall: docs/benchmarks.md#search).
      centre: None: as the output's settings say (`search.centre.uncentred_reason`: an output in a
        text tower's space is not centred), else centred when the rows allow it (`choose_centre`);
        True: centred when the rows allow it, whatever the model; False: never centred (raw cosines).

    Returns:
      Index; `meta["left_out"]` names the rows left out (values not finite).

    Raises:
      SearchError: an unknown kind, fewer than 2 rows with finite values, a kind that cannot be
        trained on so few rows, faiss missing. ValueError: an unreadable output.
    """
    faiss = import_faiss()
    source = source or read_output(output)
    if kind is not None and kind not in KINDS:
        raise SearchError("kind=%r; expected one of %s" % (kind, ", ".join(KINDS)))
    if source.count < 2:
        raise SearchError("output=%s holds %d rows: nothing to index" % (source.output, source.count))
    kind = kind or choose_kind(source.count, source.feature_size)
    check_rows_for_kind(kind, source.count, source.output)
    started = time.monotonic()
    if centre not in (None, True, False):
        raise SearchError("centre=%r; expected None (as the output's model says), True or False" % (centre,))
    if centre is None:
        centre = uncentred_reason(source.settings) or True
    sample_rows = max(RECALL_QUERIES, training_rows(kind, source.count, source.feature_size))
    mean, sample, centre = mean_and_sample(source, batch_rows, seed, progress, sample_rows, centre=centre)
    check_rows_for_kind(kind, centre["rows"], source.output)
    queries = sample[:RECALL_QUERIES].copy()  # the sample is in random order; a copy, so that it can go
    faiss_index, parameters = new_index(faiss, kind, source.feature_size, centre["rows"],
                                        normalise_in_place(sample, mean))
    del sample
    if not full_vectors:
        parameters.pop("full_vectors", None)
        parameters.get("search", {}).pop("rerank", None)
    meta = {"version": VERSION, "kind": kind, "rows": 0, "feature_size": source.feature_size,
            "source": {"output": str(Path(str(source.output)).resolve()), "format": source.format,
                       "settings": source.settings, "complete": source.complete},
            "parameters": parameters, "centre": centre, "mean": [float(value) for value in mean]}
    index = index_class(folder, meta, faiss_index, [], mean)
    recall = ExactNeighbours(normalise(queries, mean), RECALL_K)
    index.folder.mkdir(parents=True, exist_ok=True)
    meta["left_out"] = index._fill(source, batch_rows, None, progress, recall, index._full_path(".tmp"))
    index._map_full(index._full_path(".tmp"))
    meta["recall_at_build"] = recall.measure(index)
    # The least work a query that finds RECALL_TARGET of the exact top k here: harder data and more rows
    # need more (ivfpq: rerank 3 found 1.0 at 100k fc7-like rows, 0.88 at 1M).
    for step in search_steps(kind, meta["parameters"]):
        if (meta["recall_at_build"]["recall"] or 0) >= RECALL_TARGET:
            break
        index.set_search(**step)
        meta["recall_at_build"] = recall.measure(index)
    meta["build_seconds"] = round(time.monotonic() - started, 3)
    index.save()
    return index
