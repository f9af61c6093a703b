"""The command line's `index`, `add` and `page`: what they do with the flags search_features.py parsed.

Each takes the parsed flags (`args`) and the command line's hooks: `progress` (its bars), `say` (a line on
stderr), `writing` (runs a function that writes: its errors are failures, status 1, not usage errors). What
they print is the command line's: a summary line on stderr. `duplicates` and `export`: search/curation.py.
"""

import sys
from pathlib import Path


def index_command(args, progress, say, index_suffix):
    """`index`: a new index of args.output in args.index (default: the output's path + `index_suffix`)."""
    from search.index import Index, SearchError, import_faiss
    from search.vectors import read_output
    import_faiss()
    source = read_output(args.output)
    folder = Path(args.index or str(Path(args.output)) + index_suffix)
    if folder.exists() and not args.overwrite:
        raise SearchError("%s exists: pass --overwrite to replace it, or `add` to add rows to it" % folder)
    index = Index.build(args.output, folder, kind=args.kind, progress=progress, source=source,
                        full_vectors=args.full_vectors)
    progress.close()
    recall = index.meta["recall_at_build"]
    say_left_out(index.meta["left_out"], say)
    centre = index.meta["centre"]
    print("indexed %d rows of %s (%s%s) into %s; recall@%d at build %s" % (
        len(index), args.output, index.kind, "" if centre["centred"] else ", raw cosines: %s" % centre.get(
            "reason", "too few rows or rows all alike to centre on their mean"), folder, recall["k"],
        recall["recall"]), file=sys.stderr)


def say_left_out(left_out, say):
    """One line naming the rows left out of the index (values that are not finite), if any."""
    if left_out["rows"]:
        more = left_out["rows"] - len(left_out["paths"])
        say("left out %d row%s with values that are not finite (inf or nan): %s%s" % (
            left_out["rows"], "s" if left_out["rows"] > 1 else "", ", ".join(left_out["paths"]),
            " and %d more" % more if more else ""))


def add_command(args, progress, say):
    """`add`: the rows of a resumed or extended output added to args.index."""
    from search.index import Index
    index = Index.load(args.index)
    added = index.add(args.output, progress=progress)
    progress.close()
    say_left_out(index.left_out, say)
    print("added %d rows; %d in all" % (added, len(index)), file=sys.stderr)


def page_command(args, index, neighbour_lists, progress, writing):
    """`page`: the static page of `index`: its queries' neighbours (a sentence's with the model's probability, where
    it gives one), its duplicate groups (each kept row first, marked by args.keep_rule) and the histogram; each row's
    caption score where the output has them.

    Args:
      neighbour_lists: callable(index) -> [(label, image or None, [(path, score)], whether a sentence, its
        probabilities or None)].
    """
    import functools
    from search import duplicates
    from search.captions import caption_scores, caption_scores_of, has_caption_scores
    from search.page import check_page_folder, write_page
    from search.queries import Kept, members_index
    from search.removals import check_rule_usable, kept_rows
    folder = Path(args.out or index.folder / "page")
    check_page_folder(folder, args.overwrite)  # before any work: a usage error, nothing written
    if args.threshold is not None:
        check_rule_usable(index, args.keep_rule)
    queries = [{"label": label, "image": image, "neighbours": found, "text": text, "probabilities": chances}
               for label, image, found, text, chances in neighbour_lists(index)] \
        if args.query or args.text or args.caption else []
    groups = []
    if args.threshold is not None:
        pairs, _ = duplicates.find_pairs(index, args.threshold, neighbours=args.neighbours, progress=progress)
        rows = duplicates.group_pairs(pairs, len(index))
        kept = kept_rows(index, rows, args.keep_rule)
        groups = [[index.paths[row] for row in [keep] + [row for row in group if row != keep]]
                  for group, keep in zip(rows, kept.tolist())]
    histogram = duplicates.histogram(duplicates.nearest_scores(index))
    scores = caption_scores(index) if has_caption_scores(index) else None  # each row's (NaN: none), read once
    progress.close()
    details = "%d images of %s, %s index, layer %s" % (len(index), index.meta["source"]["output"], index.kind,
                                                       index.settings.get("layer", "?"))
    page = writing(write_page, folder, queries=queries, groups=groups, histogram=histogram,
                   threshold=args.threshold, images_root=index.settings.get("images"), title="Search: %s"
                   % Path(index.meta["source"]["output"]).name, details=details, progress=progress,
                   members=members_index(index), kept=Kept(index).of, overwrite=args.overwrite,
                   image_column=index.settings.get("image_column"),
                   keep_rule=args.keep_rule if args.threshold is not None else None,
                   caption_scores=None if scores is None else functools.partial(caption_scores_of, index,
                                                                                scores=scores))
    progress.close()
    print("wrote %s (open it, or: search-features serve %s)" % (page, folder), file=sys.stderr)
