"""What to remove: in each group of near-duplicates the row a rule keeps, and the others, written as Parquet.

    kept = kept_rows(index, groups, "first-key")                 # int64 [G]: the row each group keeps
    table = removals_table(index, groups, kept)                  # a row per member: kept, or removed for its kept one
    write_removals("removals.parquet", table, {"threshold": "0.9"})
    removed = removed_keys("removals.parquet")                   # {key}: the rows the file says to remove

The rules (`KEEP_RULES`), each ties broken by the first key (the smallest path, as Python orders strings):

    first-key               the member whose key sorts first
    largest-image           the member whose image has the most bytes: the output's manifest records each file's
                            size, its members index each tar member's or row's; the pixel size is not recorded,
                            and reading every member's header would read the collection again. A member whose
                            size is not recorded (no manifest) counts as smallest.
    highest-caption-score   the member whose caption scores highest (search/captions.py); NaN counts as lowest

The file (`write_removals`), one row per member of every group, groups numbered from 1, largest first:

    group     int64    the group's number (for --against: one per row of the other output that is copied)
    key       string   the row's key (its path in the output; bytes that are not UTF-8 as \\xNN escapes)
    key_bytes binary   the key's bytes exactly (what `removed_keys` reads)
    kept_key  string   the key of the row kept in its place (its own key for the kept row)
    remove    bool     False for the row kept, True for the others
    score     float32  the cosine of the row and its kept one (null for the kept row)

and in the file's metadata (`search.removals`: JSON) the index, the threshold, the rule and how it was found.
"""

import json

import numpy as np

from parallel.output.csv_rows import decode_name
from parallel.output.durable import temporary_then_rename
from search.kinds import SearchError

KEEP_RULES = ("first-key", "largest-image", "highest-caption-score")
METADATA_KEY = b"search.removals"
SCORE_BLOCK = 4096  # member rows whose vectors are read at once to score them against their kept rows


def check_keep_rule(rule):
    """`rule` when it is one of KEEP_RULES; ValueError naming it otherwise."""
    if rule not in KEEP_RULES:
        raise ValueError("keep rule %r; expected one of %s" % (rule, ", ".join(KEEP_RULES)))
    return rule


def check_rule_usable(index, rule):
    """Raises before any work when `index`'s output cannot serve `rule`: ValueError for an unknown rule,
    SearchError for highest-caption-score on an output without caption scores."""
    check_keep_rule(rule)
    if rule == "highest-caption-score":
        from search.captions import check_caption_scores
        check_caption_scores(index)


def kept_rows(index, groups, rule):
    """The row each group keeps by `rule`.

    Args:
      index: a loaded `search.index.Index`.
      groups: lists of row numbers (`search.duplicates.group_pairs`).
      rule: one of KEEP_RULES.

    Returns:
      int64 [len(groups)].

    Raises:
      SearchError: highest-caption-score and the output has no caption scores (before any work).
    """
    check_keep_rule(rule)
    members = np.array([row for group in groups for row in group], np.int64)
    if rule == "first-key":
        preference = np.zeros(len(members))
    elif rule == "largest-image":
        preference = image_bytes(index, members).astype(np.float64)
    else:
        from search.captions import caption_scores
        scores = caption_scores(index)[members].astype(np.float64)
        preference = np.where(np.isnan(scores), -np.inf, scores)
    kept, start = [], 0
    for group in groups:
        best = max(range(len(group)), key=lambda at: (preference[start + at], _descending(index.paths[group[at]])))
        kept.append(group[best])
        start += len(group)
    return np.array(kept, np.int64)


class _descending(str):
    """A key that orders the other way: max() of (preference, _descending(key)) takes the first key of the best."""

    def __lt__(self, other):
        return str.__gt__(self, other)

    def __gt__(self, other):
        return str.__lt__(self, other)


def image_bytes(index, rows):
    """The size in bytes of each row's image, as the output recorded it when it read it: a tar member's or a
    Parquet or TFRecord row's from the output's members index, a file's or an object's from its manifest.

    Returns:
      int64 [len(rows)], -1 where the output records none.
    """
    from parallel.inputs.members import is_member
    from parallel.inputs.tars import read_index
    from search.image_rows import read_manifest
    from search.queries import members_index
    keys = [index.paths[row] for row in rows]
    sizes = {}
    members = [key for key in keys if is_member(key)]
    if members:
        try:
            sizes.update((entry.key, entry.size) for entry in read_index(members_index(index), members))
        except OSError:
            pass  # no members index: none recorded
    if len(members) < len(keys):
        manifest = read_manifest(index)
        if manifest is not None:
            import bisect
            for key in keys:
                at = bisect.bisect_left(manifest.paths, key)
                if at < len(manifest.paths) and manifest.paths[at] == key:
                    sizes[key] = int(manifest.sizes[at])
    return np.array([sizes.get(key, -1) for key in keys], np.int64)


def pair_scores(index, rows, others):
    """The cosine of each row with its other, from the vectors the index holds (ivfpq: its float16 full vectors,
    to about 1e-3). rows, others: int64 [P] -> float32 [P]."""
    scores = np.empty(len(rows), np.float32)
    for start in range(0, len(rows), SCORE_BLOCK):
        stop = min(len(rows), start + SCORE_BLOCK)
        left, right = index.stored(rows[start:stop]), index.stored(others[start:stop])
        scores[start:stop] = np.einsum("ij,ij->i", left, right)
    return scores


def removals_table(index, groups, kept):
    """The removals of `groups` (lists of rows) keeping `kept` (int64 [G]): a dict of the file's columns
    (module docstring), in group order, the kept row first in each group, then the others in row order."""
    rows, others, numbers = [], [], []
    for number, (group, keep) in enumerate(zip(groups, kept.tolist()), 1):
        ordered = [keep] + [row for row in group if row != keep]
        rows += ordered
        others += [keep] * len(ordered)
        numbers += [number] * len(ordered)
    rows, others = np.array(rows, np.int64), np.array(others, np.int64)
    remove = rows != others
    scores = np.full(len(rows), np.nan, np.float32)
    scores[remove] = pair_scores(index, rows[remove], others[remove])
    return table_columns(numbers, [index.paths[row] for row in rows], [index.paths[row] for row in others],
                         remove, scores)


def table_columns(groups, keys, kept_keys, remove, scores):
    """The file's columns from its values: groups int [R], keys and kept_keys str [R], remove bool [R],
    scores float32 [R] (NaN where null)."""
    return {"group": np.asarray(groups, np.int64), "key": list(keys), "kept_key": list(kept_keys),
            "remove": np.asarray(remove, bool), "score": np.asarray(scores, np.float32)}


def write_removals(path, columns, metadata):
    """Writes `columns` (`removals_table`, `table_columns`) to the Parquet file `path`, atomically, with
    `metadata` (a dict, JSON) under METADATA_KEY."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def text(keys):
        return pa.array([key.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                         for key in keys], pa.string())
    scores = columns["score"]
    table = pa.table({"group": pa.array(columns["group"], pa.int64()), "key": text(columns["key"]),
                      "key_bytes": pa.array([key.encode("utf-8", "surrogateescape") for key in columns["key"]],
                                            pa.binary()),
                      "kept_key": text(columns["kept_key"]), "remove": pa.array(columns["remove"], pa.bool_()),
                      "score": pa.array(scores, pa.float32(), mask=np.isnan(scores))})
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(metadata).encode("utf-8")})
    with temporary_then_rename(path) as temporary:
        pq.write_table(table, temporary)


def removed_keys(path):
    """The keys a removals file (`write_removals`) says to remove: a set of str.

    Raises:
      SearchError: `path` is not such a file.
    """
    import pyarrow.parquet as pq
    try:
        table = pq.read_table(path, columns=["key_bytes", "remove"])
    except (OSError, ValueError, KeyError) as error:
        raise SearchError("removals=%s is not a removals file that `duplicates --removals` writes (%s)"
                          % (path, str(error).splitlines()[0] if str(error) else type(error).__name__)) from None
    remove = table.column("remove").to_numpy(zero_copy_only=False)
    return {decode_name(raw) for raw, gone in zip(table.column("key_bytes").to_pylist(), remove) if gone}
