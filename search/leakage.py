"""Leakage between two outputs: the rows of one that have a near-copy in the other (a test split against its
training split).

    keys, other_rows, scores = find_leaks(test_index, train_index, threshold=0.9)
    write_removals("leakage.parquet", leakage_table(train_index, keys, other_rows, scores), {...})

Each row of the first output is read again from that output (its raw vectors, a batch at a time) and searched in
the other's index, prepared as the other prepares its own rows: so the score is the cosine of the two rows centred
on the OTHER output's mean (raw, when the other index is not centred), the score a row of the other output would
have with it. The two outputs must hold the same features (model, layer, weights, precision, feature size).
Memory: the other index, the paths of both, one batch of rows, and the rows found.
"""

import numpy as np

from search.duplicates import BLOCK, NEIGHBOURS, check_threshold
from search.kinds import SearchError
from search.removals import table_columns
from search.vectors import read_output


def check_comparable(index, other):
    """Raises SearchError unless the rows of `index` and `other` are features of the same model and layer."""
    from search.index import differences
    if index.meta["feature_size"] != other.meta["feature_size"]:
        raise SearchError("%s holds %d features a row, %s %d: they cannot be compared" % (
            index.folder, index.meta["feature_size"], other.folder, other.meta["feature_size"]))
    different = differences(index.settings, other.settings)
    if different:
        raise SearchError("%s and %s hold features computed with other settings (%s): they cannot be compared"
                          % (index.folder, other.folder, different))


def find_leaks(index, other, threshold, neighbours=NEIGHBOURS, progress=None):
    """The rows of `index`'s output whose nearest row in `other` has cosine >= `threshold`.

    Args:
      index, other: loaded `search.index.Index`es of comparable outputs (`check_comparable`).
      threshold: a cosine in [-1, 1].
      neighbours: hnsw, ivfpq: the nearest rows of `other` looked at per row (the best of them is kept).
      progress: callable(rows done, rows in all) or None.

    Returns:
      (keys, other_rows, scores): list of str [L], the keys of `index`'s rows in its output's order;
      int64 [L], the row of `other` each is nearest to; float32 [L], their cosines.
    """
    threshold = check_threshold(threshold)
    check_comparable(index, other)
    source = read_output(index.meta["source"]["output"])
    indexed = set(index.paths)
    keys, other_rows, scores = [], [], []
    done, k = 0, min(len(other), max(1, int(neighbours)))
    for paths, vectors in source.batches(BLOCK):
        done += len(paths)
        ours = np.array([path in indexed for path in paths], bool) & np.isfinite(vectors).all(axis=1)
        if ours.any():
            ids, found = other.search_ids(other.prepare(vectors[ours]), k)
            best, near = ids[:, 0], found[:, 0]
            hit = (best >= 0) & (near >= threshold)
            keys += [path for path, mine in zip((p for p, o in zip(paths, ours) if o), hit) if mine]
            other_rows.append(best[hit])
            scores.append(near[hit])
        if progress:
            progress(done, source.count)
    if not other_rows:
        return [], np.zeros(0, np.int64), np.zeros(0, np.float32)
    return keys, np.concatenate(other_rows).astype(np.int64), np.concatenate(scores).astype(np.float32)


def leakage_table(other, keys, other_rows, scores):
    """The removals file's columns (search.removals) of the leaks found (`find_leaks`): every row found is
    removed, its kept key the row of `other` it copies; rows copying the same row of `other` share a group,
    numbered from 1 in the order of `other`'s rows."""
    if not len(keys):
        return table_columns([], [], [], [], [])
    order = np.lexsort((np.arange(len(keys)), other_rows))
    _, groups = np.unique(other_rows[order], return_inverse=True)
    return table_columns(groups + 1, [keys[at] for at in order], [other.paths[row] for row in other_rows[order]],
                         np.ones(len(keys), bool), scores[order])


def check_not_same(index, other):
    """Raises SearchError when `other` is `index`'s own folder: duplicates without --against lists those."""
    if index.folder.resolve() == other.folder.resolve():
        raise SearchError("--against %s is the index itself: leave --against out to find its duplicates"
                          % other.folder)
