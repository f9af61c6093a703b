"""Export: the rows a query, a score or a removals file selects, as Parquet, and their images as tars.

    selection = select_rows(index, queries, threshold=0.3, removals="removals.parquet")   # .rows, .scores, ...
    export(index, "subset.parquet", queries, threshold=0.3, images_out="subset/")   # the next job's input
    export(index, "dogs.parquet", labels=LabelBound(("dog",), rank=1, min_score=0.2))

What selects a row (all of those given; none given: every row):

    queries + threshold    its cosine with one of the queries (normalised vectors: a sentence, an image, a row)
                           is at least the threshold; its score is the best of them
    min_caption_score      its caption score (search/captions.py) is at least this
    labels                 one of its best labels (`run_inference.py --labels`) is one of those named, with a
                           cosine of at least a bound if given (search.captions.LabelBound)
    removals               a removals file (`duplicates --removals`, `--against`) does not say to remove it

The Parquet file (`write_rows`), a row per row selected, in the index's order:

    key, key_bytes   the row's key (as in search/removals.py: text, and its bytes exactly)
    row              its row in the index
    score            its best cosine with the queries (null without queries)
    caption_score    its caption score (only when one bounds the selection)
    label            its best-ranked label among those named, and label_score its cosine (only with labels)
    sample           its sample's key in the tars (only with images: search/export_tars.py; null when its image
                     was not written)
    kept:<name>      each value kept beside the rows (`run_inference.py --keep`), from the members index

Memory: the selection is a few numbers a row selected (its row, its scores); the vectors are read a block at a
time (search.duplicates.row_blocks), the kept values and the file written CHUNK_ROWS rows at a time.
"""

import dataclasses
from typing import Optional

import numpy as np

from parallel.output.durable import temporary_then_rename
from search.duplicates import BLOCK, check_threshold, row_blocks
from search.export_tars import SHARD_SIZE, sample_name, write_tars
from search.kinds import SearchError

CHUNK_ROWS = 1 << 16  # rows whose kept values are read (one pass over the members index) and written at once


@dataclasses.dataclass
class Selection:
    """The rows selected, with what selected them.

    Attributes:
      rows: int64 [S], ascending (the index's rows).
      scores: float32 [S], the best cosine with the queries; None without queries.
      captions: float32 [S], the caption scores; None without a caption bound.
      labels: object [S] of str, each row's label selected, and label_scores float32 [S] its cosine; None without.
    """

    rows: np.ndarray
    scores: Optional[np.ndarray] = None
    captions: Optional[np.ndarray] = None
    labels: Optional[np.ndarray] = None
    label_scores: Optional[np.ndarray] = None


def select_rows(index, unit_queries=None, threshold=None, min_caption_score=None, removals=None, labels=None,
                progress=None):
    """The rows selected (module docstring).

    Args:
      index: a loaded `search.index.Index`.
      unit_queries: float32 [Q, D] normalised query vectors (`Index.prepare`, search.queries), or None.
      threshold: with queries, the cosine a row must reach with one of them.
      min_caption_score: the caption score a row must reach, or None.
      removals: a removals file's path, or None.
      labels: a `search.captions.LabelBound`, or None.
      progress: callable(rows done, rows in all, what) or None.

    Returns:
      A `Selection`.

    Raises:
      SearchError: queries without a threshold or a threshold without queries, a caption bound on an output
        without caption scores, labels on an output without them or a label no row has, a file that is not a
        removals file (all before the rows are read).
    """
    has_queries = unit_queries is not None and len(unit_queries)
    if has_queries and threshold is None:
        raise SearchError("a query selects the rows at a cosine: give --threshold")
    if threshold is not None and not has_queries:
        raise SearchError("threshold=%s selects the rows near a query: give a QUERY or --text" % threshold)
    if threshold is not None:
        threshold = check_threshold(threshold)
    captions = None
    if min_caption_score is not None:
        from search.captions import caption_scores
        captions = caption_scores(index)
    label_names = label_scores = None
    if labels is not None:
        from search.captions import label_selection
        label_names, label_scores = label_selection(index, labels)
    removed = set()
    if removals is not None:
        from search.removals import removed_keys
        removed = removed_keys(removals)
    count = len(index)
    blocks = row_blocks(index) if has_queries else (
        (np.arange(start, min(count, start + BLOCK)), None) for start in range(0, count, BLOCK))
    chosen, best = [], []
    done = 0
    for rows, block in blocks:
        keep = np.ones(len(rows), bool)
        if has_queries:
            scores = (block @ np.asarray(unit_queries, np.float32).T).max(axis=1)
            keep &= scores >= threshold
        if captions is not None:
            keep &= captions[rows] >= min_caption_score  # NaN (no caption) is never selected
        if label_names is not None:
            keep &= label_names[rows] != None  # noqa: E711 -- elementwise on objects
        if removed:
            keep &= np.array([index.paths[row] not in removed for row in rows.tolist()], bool)
        chosen.append(rows[keep])
        if has_queries:
            best.append(scores[keep].astype(np.float32))
        done += len(rows)
        if progress:
            progress(done, count, "selecting")
    rows = np.concatenate(chosen) if chosen else np.zeros(0, np.int64)
    scores = np.concatenate(best) if has_queries and best else (np.zeros(0, np.float32) if has_queries else None)
    order = np.argsort(rows, kind="stable")  # an ivfpq index read from its output: rows in the output's order
    rows = rows[order].astype(np.int64)
    return Selection(rows, None if scores is None else scores[order],
                     None if captions is None else captions[rows].astype(np.float32),
                     None if label_names is None else label_names[rows],
                     None if label_scores is None else label_scores[rows].astype(np.float32))


def write_rows(path, index, selection, samples=None, progress=None):
    """Writes the Parquet file of the rows selected (module docstring) to `path`, atomically.

    Args:
      selection: a `Selection` (a column for each of its scores, captions, labels that is not None).
      samples: None (no column), or the names of the samples not written ({sample name: why}): the others are
        named by their place in `rows` (search.export_tars.sample_name).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from search.queries import Kept
    kept = Kept(index)
    rows, scores, captions = selection.rows, selection.scores, selection.captions
    writer = None
    with temporary_then_rename(path) as temporary:
        try:
            for start in range(0, max(1, len(rows)), CHUNK_ROWS):
                stop = min(len(rows), start + CHUNK_ROWS)
                keys = [index.paths[row] for row in rows[start:stop].tolist()]
                raw = [key.encode("utf-8", "surrogateescape") for key in keys]
                columns = {"key": pa.array([value.decode("utf-8", "backslashreplace") for value in raw], pa.string()),
                           "key_bytes": pa.array(raw, pa.binary()), "row": pa.array(rows[start:stop], pa.int64())}
                columns["score"] = pa.array(scores[start:stop], pa.float32()) if scores is not None else \
                    pa.nulls(stop - start, pa.float32())
                if captions is not None:
                    columns["caption_score"] = pa.array(captions[start:stop], pa.float32())
                if selection.labels is not None:
                    columns["label"] = pa.array(selection.labels[start:stop].tolist(), pa.string())
                    columns["label_score"] = pa.array(selection.label_scores[start:stop], pa.float32())
                if samples is not None:
                    names = [sample_name(number) for number in range(start, stop)]
                    columns["sample"] = pa.array([None if name in samples else name for name in names], pa.string())
                values = kept.of(keys)
                for name in kept.names:
                    columns["kept:" + name] = pa.array([values.get(key, {}).get(name) for key in keys], pa.string())
                table = pa.table(columns)
                if writer is None:
                    writer = pq.ParquetWriter(temporary, table.schema)
                writer.write_table(table)
                if progress:
                    progress(stop, len(rows), "writing")
        finally:
            if writer is not None:
                writer.close()


def export(index, out, unit_queries=None, threshold=None, min_caption_score=None, removals=None, labels=None,
           images_out=None, shard_size=SHARD_SIZE, progress=None, say=None):
    """Selects rows (`select_rows`), writes their images as tars into `images_out` when given
    (search/export_tars.py: resumable), then the Parquet file `out` (`write_rows`).

    Returns:
      {"rows": rows selected, "failed": {sample name: why} of the images not written}.
    """
    selection = select_rows(index, unit_queries, threshold, min_caption_score, removals, labels, progress)
    failed = None
    if images_out is not None:
        failed = write_tars(index, selection.rows, images_out, shard_size, progress, say)
    write_rows(out, index, selection, failed, progress)
    return {"rows": len(selection.rows), "failed": failed or {}}
