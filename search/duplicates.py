"""Near-duplicates: every pair of rows whose cosine is at least a threshold, groups, and the histogram
and the suggestion that help choose the threshold.

    pairs = find_pairs(index, threshold=0.9)          # int64 [P, 2] rows (i < j), float32 [P] scores
    groups = group_pairs(pairs[0], len(index))        # lists of rows, largest group first
    counts, edges = histogram(nearest_scores(index))  # each sampled row's best score, binned
    threshold, why = suggest_threshold(nearest_scores(index), len(index))   # a float or None, and one line

Memory is bounded by the index and one block of scores, never N x N:
    exact   every pair is compared, a block of BLOCK x BLOCK scores at a time, and only j > i
            (half the products of a full matrix): the pair list is exactly that of brute force.
    hnsw    each row's `neighbours` nearest rows (k-NN on the graph), kept when >= threshold.
    ivfpq   each row's `neighbours` nearest rows by the compressed index (PCA, IVF-PQ, 8-bit refine),
            queried with the full vectors the index keeps (search.rerank); those scoring at least
            threshold - RESCORE_MARGIN there are scored again with the full vectors (read for them only)
            and kept when >= threshold. An index built without them reads the output again for the
            queries, and its scores are those of the 256-dimension PCA vectors.
For the approximate kinds a row with more than `neighbours` near-copies keeps its nearest
`neighbours`; its group still joins them all through their own lists.
"""

import numpy as np

from parallel.output.csv_rows import csv_line
from parallel.output.durable import temporary_then_rename
from search.vectors import read_output

BLOCK = 4096
NEIGHBOURS = 20
RESCORE_MARGIN = 0.05  # ivfpq: a candidate is scored with the full vectors when its compressed score is this close
HISTOGRAM_SAMPLE = 20_000
HISTOGRAM_BINS = np.linspace(-1.0, 1.0, 101)  # bins of 0.02
SUGGEST_WINDOW = 20    # the spacings of the scores just below a gap that it is measured against
SUGGEST_CHANCE = 0.01  # a gap is suggested only if scores without near-copies show one as telling less often


def check_threshold(threshold):
    """`threshold` as a float in [-1, 1]. Raises: ValueError naming the value received."""
    try:
        value = float(threshold)
    except (TypeError, ValueError):
        value = float("nan")
    if not -1.0 <= value <= 1.0:
        raise ValueError("threshold=%r; expected a cosine between -1 and 1 (e.g. 0.9)" % (threshold,))
    return value


def _stored_blocks(index, rows):
    """The normalised vectors of `rows` (a range), BLOCK at a time, as the index holds them (exact, hnsw)."""
    for start in range(rows.start, rows.stop, BLOCK):
        stop = min(rows.stop, start + BLOCK)
        yield start, index._index.reconstruct_n(start, stop - start)


def row_blocks(index, source=None):
    """(rows int64 [B], normalised float32 [B, D]) over every row: the stored vectors in the index's order
    (exact, hnsw; ivfpq's full vectors), or the output read again, in its order (an ivfpq index without them)."""
    if index.kind != "ivfpq":
        for start, block in _stored_blocks(index, range(len(index))):
            yield np.arange(start, start + len(block)), block
        return
    if index.keeps_full_vectors:
        for start in range(0, len(index), BLOCK):
            stop = min(len(index), start + BLOCK)
            yield np.arange(start, stop), index.stored(range(start, stop))
        return
    source = source or read_output(index.meta["source"]["output"])
    position = {path: row for row, path in enumerate(index.paths)}
    for paths, vectors in source.batches(BLOCK):
        rows = np.array([position.get(path, -1) for path in paths])
        known = rows >= 0
        if known.any():
            # Rows come in the index's order unless the output changed; the index's row numbers are used either way.
            yield rows[known], index.prepare(vectors[known])


def find_pairs(index, threshold, neighbours=NEIGHBOURS, source=None, progress=None):
    """Every pair of rows with cosine >= `threshold`.

    Args:
      index: a `search.index.Index`.
      threshold: the cosine of centred vectors, in [-1, 1].
      neighbours: for hnsw and ivfpq, the nearest rows looked at per row.
      source: for ivfpq, the output's rows (`OutputVectors`); None: the indexed output, read again.
      progress: callable(rows done, rows in all) or None.

    Returns:
      (pairs, scores): int64 [P, 2] row numbers, i < j in each pair, pairs sorted; float32 [P].
    """
    threshold = check_threshold(threshold)
    found_pairs, found_scores = [], []
    count = len(index)
    if index.kind == "exact":
        for start, block in _stored_blocks(index, range(count)):
            for other_start, other in _stored_blocks(index, range(start, count)):
                scores = block @ other.T
                rows, columns = np.nonzero(scores >= threshold)
                left, right = rows + start, columns + other_start
                keep = right > left
                found_pairs.append(np.stack([left[keep], right[keep]], axis=1))
                found_scores.append(scores[rows[keep], columns[keep]])
            if progress:
                progress(min(count, start + BLOCK), count)
    else:
        done = 0
        k = min(count, int(neighbours) + 1)
        for rows, block in row_blocks(index, source):
            if index.kind == "ivfpq" and index.keeps_full_vectors:
                ids, scores = _candidates_rescored(index, block, k, threshold)
            else:
                ids, scores = index.search_ids(block, k)
            mask = (scores >= threshold) & (ids >= 0) & (ids != rows[:, None])
            query_rows = np.broadcast_to(rows[:, None], ids.shape)[mask]
            other_rows = ids[mask]
            found_pairs.append(np.stack([np.minimum(query_rows, other_rows), np.maximum(query_rows, other_rows)],
                                        axis=1))
            found_scores.append(scores[mask])
            done += len(block)
            if progress:
                progress(done, count)
    if not found_pairs:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.float32)
    pairs, scores = np.concatenate(found_pairs).astype(np.int64), np.concatenate(found_scores).astype(np.float32)
    # A pair found from both of its rows is kept once (the first score; both are the same pair).
    keys = pairs[:, 0] * count + pairs[:, 1]
    keys, first = np.unique(keys, return_index=True)
    return pairs[first], scores[first]


def _candidates_rescored(index, unit_vectors, k, threshold):
    """(int64 [Q, k], float32 [Q, k]): the k nearest rows of each query by the compressed index alone, those
    scoring at least `threshold` - RESCORE_MARGIN there scored again with the full vectors, the others -1 and
    -inf. What a search re-ranks with the full vectors (RERANK x k rows read a query) is read here only for the
    few candidates near the threshold: a near-copy's compressed score was at most 0.001 below its full one, in
    benchmarks/bench_dedup.py's collection, where the margin found every exact pair of the sample."""
    ids, compressed = index.compressed_search(unit_vectors, k)
    queries, places = np.nonzero((compressed >= threshold - RESCORE_MARGIN) & (ids >= 0))
    scores = np.full(ids.shape, -np.inf, np.float32)
    found = np.full(ids.shape, -1, np.int64)
    if len(queries):
        others = ids[queries, places]
        order = np.argsort(others, kind="stable")  # rows read in file order
        full = np.empty((len(others), unit_vectors.shape[1]), np.float32)
        full[order] = index.stored(others[order])
        scores[queries, places] = np.einsum("ij,ij->i", unit_vectors[queries], full)
        found[queries, places] = others
    return found, scores


def group_pairs(pairs, count):
    """Connected components of the pairs (union-find): the groups of rows that are near-duplicates,
    directly or through others.

    Args:
      pairs: int64 [P, 2] row numbers.
      count: N, the rows.

    Returns:
      list of lists of row numbers (each sorted), groups of at least 2, largest first (then by first row).
    """
    parent = np.arange(count)

    def root(row):
        while parent[row] != row:
            parent[row] = parent[parent[row]]  # path halving
            row = parent[row]
        return row

    for left, right in pairs:
        a, b = root(left), root(right)
        if a != b:
            parent[max(a, b)] = min(a, b)
    members = {}
    for row in np.unique(pairs):
        members.setdefault(root(row), []).append(int(row))
    return sorted(members.values(), key=lambda group: (-len(group), group[0]))


def nearest_scores(index, sample=HISTOGRAM_SAMPLE, seed=0, source=None):
    """The cosine of each sampled row with its nearest other row: what a threshold is chosen from.

    Returns:
      float32 [min(sample, N)].
    """
    count = len(index)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(count, size=min(sample, count), replace=False))
    if index.kind == "ivfpq":
        chosen = set(rows.tolist())
        parts = [(block_rows[np.isin(block_rows, rows)], block[np.isin(block_rows, rows)])
                 for block_rows, block in row_blocks(index, source) if chosen.intersection(block_rows.tolist())]
        rows = np.concatenate([part[0] for part in parts])
        vectors = np.concatenate([part[1] for part in parts])
    else:
        vectors = index.stored(rows)
    best = []
    for start in range(0, len(rows), BLOCK):
        ids, scores = index.search_ids(vectors[start:start + BLOCK], 2)
        mine = rows[start:start + BLOCK, None]
        other = np.where(ids != mine, scores, -np.inf)
        best.append(other.max(axis=1))
    best = np.concatenate(best)
    return best[np.isfinite(best)].astype(np.float32)


def histogram(scores, bins=HISTOGRAM_BINS):
    """(counts int64 [len(bins) - 1], edges float64 [len(bins)]) of `scores` over [-1, 1]."""
    counts, edges = np.histogram(np.clip(scores, -1.0, 1.0), bins=bins)
    return counts, edges


def suggest_threshold(scores, rows=None):
    """A threshold between the near-copies and the rest, read from each sampled row's nearest-neighbour score,
    or None when the scores show no group of near-copies apart from the rest.

    A near-copy scores close to 1 with its original, and both stand apart from the rows that merely look
    alike: the sorted scores have a gap below the near-copies. The scores of rows without copies thin out
    smoothly towards their highest; there, each spacing between two distinct scores times the rank of the
    upper one (in pairs: a row and its nearest neighbour score the same) is about alike, as in an
    exponential tail (Renyi's normalised spacings). A gap is measured against the SUGGEST_WINDOW spacings
    just below it; the most telling gap among those above the median score is suggested when a gap that
    telling would come by chance less than SUGGEST_CHANCE of the time (a ratio of exponentials, counted
    once for each place a gap could be). The threshold is the middle of the gap, as few decimals as stay in it.

    Args:
      scores: float [S], `nearest_scores`.
      rows: the index's rows (said when the scores are of a sample); None: the scores are of every row.

    Returns:
      (threshold float or None, one line: what it comes from, or why none is suggested).
    """
    scores = np.asarray(scores, np.float64)
    source = "%s rows' nearest neighbours" % format(len(scores), ",") if rows in (None, len(scores)) else \
        "the nearest neighbours of a sample of %s of the %s rows" % (format(len(scores), ","), format(rows, ","))
    values, counts = np.unique(scores, return_counts=True)
    values, counts = values[::-1], counts[::-1]  # distinct scores, highest first
    places = len(values) // 2  # a gap is looked for above the median: near-copies are the fewer rows
    uppers = np.arange(1, places + 1)  # a gap below the `upper` highest distinct scores
    windows = np.minimum(np.maximum(SUGGEST_WINDOW, uppers), len(values) - 1 - uppers)
    uppers, windows = uppers[windows >= SUGGEST_WINDOW], windows[windows >= SUGGEST_WINDOW]
    if not len(uppers):
        return None, ("no threshold suggested: %s are too few to tell near-copies from the rest; choose one from "
                      "the histogram" % source)
    spacings = np.cumsum(counts)[:-1] / 2 * (values[:-1] - values[1:])  # normalised: the rank in pairs
    summed = np.concatenate([[0.0], np.cumsum(spacings)])
    ratios = spacings[uppers - 1] / ((summed[uppers + windows] - summed[uppers]) / windows)
    chances = places * np.exp(-windows * np.log1p(ratios / windows))  # P(F(2, 2 window) > ratio), each place
    best = int(np.argmin(chances))
    upper = uppers[best]
    low, high = values[upper], values[upper - 1]  # the rest's highest, the near-copies' lowest score
    if chances[best] >= SUGGEST_CHANCE:
        return None, ("no threshold suggested: no gap in %s sets a group of near-copies apart from the rest (the "
                      "most telling, below %.3f, comes by chance more than 1 time in %d); the highest score is "
                      "%.3f: choose one from the histogram" % (source, high, round(1 / SUGGEST_CHANCE), values[0]))
    threshold = next((value for value in (round(float(low + high) / 2, decimals) for decimals in range(2, 10))
                      if low < value <= high), float(high))
    copies = int((scores >= high).sum())
    return threshold, ("suggested threshold %r: in the gap between the %s (%.1f%%) whose nearest neighbour scores "
                       "%.3f or more and the rest, at most %.3f (from %s)" % (
                           threshold, "1 row" if copies == 1 else "%s rows" % format(copies, ","),
                           100 * copies / len(scores), high, low, source))


def histogram_text(counts, edges, width=50):
    """The histogram as lines `0.90-0.92  ####  123`, from the first non-empty bin to the last."""
    nonzero = np.nonzero(counts)[0]
    if not len(nonzero):
        return "(no scores)"
    top = counts.max()
    lines = []
    for position in range(nonzero[0], nonzero[-1] + 1):
        bar = "#" * int(round(width * counts[position] / top))
        lines.append("%5.2f-%5.2f  %-*s %d" % (edges[position], edges[position + 1], width, bar, counts[position]))
    return "\n".join(lines)


def write_pairs(path, paths, pairs, scores):
    """Writes `path` (atomically): CSV `path_a,path_b,score`, a line per pair, highest score first.

    Args:
      path: Path of the CSV.
      paths: the index's paths (row number -> path).
      pairs: int64 [P, 2]; scores: float32 [P].
    """
    order = np.argsort(-scores, kind="stable")
    _write_lines(path, [csv_line(["path_a", "path_b", "score"])] + [
        csv_line([paths[pairs[row, 0]], paths[pairs[row, 1]], "%.6f" % scores[row]]) for row in order])


def write_groups(path, paths, groups):
    """Writes `path` (atomically): CSV `group,size,path`, a line per member, groups numbered from 1, largest first."""
    _write_lines(path, [csv_line(["group", "size", "path"])] + [
        csv_line([str(number), str(len(group)), paths[row]]) for number, group in enumerate(groups, 1)
        for row in group])


def _write_lines(path, lines):
    with temporary_then_rename(path) as temporary:
        with open(temporary, "w", newline="", encoding="utf-8", errors="surrogateescape") as file:
            file.writelines(lines)
