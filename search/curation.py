"""The command line's `duplicates` and `export`: what they do with the flags search_features.py parsed.

    duplicates INDEX --threshold 0.9 [--removals FILE --keep-rule RULE]  pairs.csv, groups.csv, what to remove
    duplicates INDEX --against OTHER [--removals FILE]                    the rows with a near-copy in OTHER
    export INDEX [QUERY ...] [--text S] [--threshold T] [--min-caption-score S] [--removals FILE]
           [--label NAME ... [--label-rank K] [--min-label-score S]]
           [--out PARQUET] [--images-out FOLDER]                           the rows selected, and their images

Each takes the parsed flags (`args`), the index loaded, and the command line's hooks: `progress` (its bars),
`say` (a line on stderr), `writing` (runs a function that writes: its errors are failures, status 1, not usage
errors). What they print is the command line's: one summary line on stderr.
"""

import sys
from pathlib import Path

from search import duplicates
from search.removals import check_rule_usable, kept_rows, removals_table, write_removals

LEAKAGE_FILE = "leakage.parquet"  # duplicates --against's file in the index folder, when --removals is not given


def duplicates_command(args, index, load, progress, say, writing):
    """`duplicates`: the calibration, or the pairs and groups (and the removals file), or the leaks (--against).

    Args:
      load: callable(folder) -> the index there, with the command line's search parameters (for --against).
    """
    if args.calibrate:
        scores = duplicates.nearest_scores(index)
        counts, edges = duplicates.histogram(scores)
        print("nearest-neighbour cosine of %d images (sample):\n%s\n%s" % (counts.sum(), duplicates.histogram_text(
            counts, edges), duplicates.suggest_threshold(scores, len(index))[1]))
        return
    metadata = {"index": str(index.folder), "threshold": args.threshold, "kind": index.kind}
    if args.against is not None:
        from search.leakage import check_not_same, find_leaks, leakage_table
        other = load(args.against)
        check_not_same(index, other)
        removals_file = Path(args.removals or index.folder / LEAKAGE_FILE)
        keys, other_rows, scores = find_leaks(index, other, args.threshold, args.neighbours, progress)
        progress.close()
        table = leakage_table(other, keys, other_rows, scores)
        writing(write_removals, removals_file, table, dict(metadata, against=str(other.folder)))
        print("%d rows of %s have a near-copy in %s (cosine >= %g): %s" % (
            len(keys), index.meta["source"]["output"], other.meta["source"]["output"], args.threshold,
            removals_file), file=sys.stderr)
        return
    pairs_file = Path(args.pairs or index.folder / "pairs.csv")
    groups_file = Path(args.groups or index.folder / "groups.csv")
    if args.removals:
        check_rule_usable(index, args.keep_rule)  # an output without caption scores: said before any work
    pairs, scores = duplicates.find_pairs(index, args.threshold, neighbours=args.neighbours, progress=progress)
    progress.close()
    groups = duplicates.group_pairs(pairs, len(index))
    writing(duplicates.write_pairs, pairs_file, index.paths, pairs, scores)
    writing(duplicates.write_groups, groups_file, index.paths, groups)
    removing = ""
    if args.removals:
        table = removals_table(index, groups, kept_rows(index, groups, args.keep_rule))
        writing(write_removals, Path(args.removals), table, dict(metadata, keep_rule=args.keep_rule))
        removing = "; %d rows to remove, one kept a group (%s): %s" % (int(table["remove"].sum()), args.keep_rule,
                                                                       args.removals)
    print("%d pairs with cosine >= %g in %d groups: %s, %s%s" % (len(pairs), args.threshold, len(groups),
          pairs_file, groups_file, removing), file=sys.stderr)


def export_command(args, index, query_vectors, progress, say, writing):
    """`export`: the rows selected as Parquet, and with --images-out their images as tars.

    Args:
      query_vectors: callable() -> float32 [Q, D] normalised vectors of the queries given (None: none given).
    """
    from search.captions import LabelBound, check_caption_scores, check_labels
    from search.export import export
    out = Path(args.out or index.folder / "export.parquet")
    if args.min_caption_score is not None:
        check_caption_scores(index)  # an output without caption scores: said before a query is embedded
    labels = None
    if args.label:
        labels = LabelBound(tuple(args.label), args.label_rank, args.min_label_score)
        check_labels(index, labels)  # so is an output without labels
    queries = query_vectors() if args.queries or args.text else None
    summary = writing(export, index, out, queries, threshold=args.threshold, min_caption_score=args.min_caption_score,
                      removals=args.removals, labels=labels, images_out=args.images_out, shard_size=args.shard_size,
                      progress=progress, say=say)
    progress.close()
    failed = len(summary["failed"])
    print("exported %d of %d rows: %s%s" % (summary["rows"], len(index), out, "" if args.images_out is None else
                                            "; their images in %s%s" % (args.images_out, ", %d not written" % failed
                                                                         if failed else "")), file=sys.stderr)
