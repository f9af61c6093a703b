"""The command line of search: index an output, neighbours, near-duplicates, the page, its server.

    python search_features.py index results/features.parquet         # -> results/features.parquet.index/
    python search_features.py --help                                 # the subcommands, examples, exit statuses

This file only parses flags and calls the `search` package, which never imports the engine or TensorFlow:
it gives search the embedder of new images and sentences (models.query_embedder, with the engine's
parallel.queries.ImageEmbedder), built with the indexed output's settings. See docs/search.md.
"""

# First, before the imports that take a moment: as the program, a Ctrl-C from here until main() takes it over
# (console()) exits with status 130 and no traceback. SIGTERM keeps its default, as in the rest of the program.
import signal

from parallel import signals as _signals  # the standard library only

if _signals.run_as_program(__name__, "search-features"):
    _signals.exit_on_signal((signal.SIGINT,))

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from parallel.loop import EXIT_FAILED, EXIT_OK, EXIT_USAGE  # noqa: E402
from parallel.messages import PhaseBars, first_line  # noqa: E402
from parallel.signals import EXIT_INTERRUPTED  # noqa: E402
from parallel import native_log  # noqa: E402
from parallel.flag_types import FlagParser, at_least_one  # noqa: E402
from search.kinds import EF_SEARCH, RERANK  # noqa: E402
from search.removals import KEEP_RULES  # noqa: E402

PROGRAM = "search_features"
INDEX_SUFFIX = ".index"

DESCRIPTION = """\
Search the features an output holds (run_inference.py's CSV, Parquet or npy output, or a kept
<output>.shards/ folder): build an index, find the nearest neighbours of images, find every pair
of near-duplicates, and write a page to look at them. Needs faiss: pip install -e '.[search]'.
Similarity is the cosine of the vectors centred on the indexed output's mean; for CLIP's and SigLIP's embedding,
which a sentence can query (--text), the raw cosine (and SigLIP's probability). See docs/search.md."""

EPILOG = """\
examples:
  %(prog)s index results/features.parquet           -> results/features.parquet.index/
  %(prog)s index feats.npy --index big.index --kind ivfpq
  %(prog)s add results/features.parquet.index       rows of the resumed output not yet indexed
  %(prog)s neighbours IDX cats/01.jpg -k 5           an image of the output (its path in it)
  %(prog)s neighbours IDX new.jpg --weights vgg16.npy
                                                    a new image, computed with the output's settings
  %(prog)s neighbours IDX query.npy                  a vector [D] or vectors [Q, D]
  %(prog)s neighbours IDX --text "a dog on a beach"  a sentence (an output of CLIP's or SigLIP's embedding)
  %(prog)s neighbours IDX --caption "a dog"          the rows whose caption is nearest (--text-column's)
  %(prog)s duplicates IDX --calibrate               nearest-neighbour scores: histogram, a threshold
  %(prog)s duplicates IDX --threshold 0.9           -> IDX/pairs.csv and IDX/groups.csv
  %(prog)s duplicates IDX --threshold 0.9 --removals remove.parquet --keep-rule largest-image
  %(prog)s duplicates TEST_IDX --against TRAIN_IDX  -> TEST_IDX/leakage.parquet
  %(prog)s export IDX --removals remove.parquet --images-out subset/
                                                    -> IDX/export.parquet, subset/00000.tar ...
  %(prog)s page IDX --threshold 0.9 --query cats/01.jpg --text "a cat"
                                                    -> IDX/page/index.html (open it, or:)
  %(prog)s serve IDX --port 8000                    the search service: http://127.0.0.1:8000/api/index
  %(prog)s serve IDX/page --port 8000               the page's files (loopback only)

exit status:
  0    done
  2    usage error (bad flag, no such output or index, a damaged index or output, a query the
       index cannot take, faiss missing): one line on stderr, nothing written
  1    could not finish (disk full, a damaged file met part-way): what was written before is kept
  130  stopped by Ctrl-C (serve: 0, stopping is how it ends)"""


class _Parser(FlagParser):  # a flag of one value given twice is refused; --text and --query take every one
    def error(self, message):
        self.exit(EXIT_USAGE, "%s: error: %s (see --help)\n" % (PROGRAM, message))


def _cosine(text):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not -1 <= value <= 1:
        raise argparse.ArgumentTypeError("must be a cosine between -1 and 1; got %r" % text)
    return value


def parse_args(argv=None):
    parser = _Parser(prog=None, description=DESCRIPTION, epilog=EPILOG,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quiet", action="store_true", help="no progress bar; serve: no line a request")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    index = commands.add_parser("index", help="index an output (a folder beside it)")
    index.add_argument("output", help="a .csv, .parquet or .npy output, or a kept <output>.shards/ folder")
    index.add_argument("--index", metavar="FOLDER", help="the index folder (default: <output>.index)")
    index.add_argument("--kind", choices=("exact", "hnsw", "ivfpq"),
                       help="exact (default while the vectors take at most 256 MiB: 16,384 rows of 4,096 "
                            "floats), hnsw (while it fits in memory), ivfpq (PCA 256 + IVF-PQ, beyond; at least "
                            "256 rows)")
    index.add_argument("--overwrite", action="store_true", help="replace an existing index folder")
    index.add_argument("--no-full-vectors", dest="full_vectors", action="store_false",
                       help="ivfpq: do not keep every vector in float16 beside the index (2 x D bytes a row on "
                            "disk) to re-rank with; less disk, lower recall")

    add = commands.add_parser("add", help="add the rows of a resumed or extended output to an index")
    add.add_argument("index", metavar="INDEX")
    add.add_argument("--output", help="the output to add from (default: the indexed one)")

    neighbours = commands.add_parser("neighbours", help="the nearest rows of images or vectors (CSV on stdout)")
    neighbours.add_argument("index", metavar="INDEX")
    neighbours.add_argument("queries", nargs="*", metavar="QUERY",
                            help="a path of the indexed output, a .npy of a vector [D] or vectors [Q, D], or "
                                 "an image file (one of the indexed images, unchanged, is answered by its row); "
                                 "none, with --text")
    _search_flags(neighbours)
    _query_flags(neighbours)

    duplicates = commands.add_parser("duplicates", help="every pair with cosine >= --threshold, and groups")
    duplicates.add_argument("index", metavar="INDEX")
    duplicates.add_argument("--threshold", type=_cosine, default=0.9, help="cosine (default: %(default)s)")
    duplicates.add_argument("--calibrate", action="store_true",
                            help="print the histogram of each image's nearest-neighbour score, a threshold in "
                                 "the gap below the near-copies if it shows one, and stop")
    duplicates.add_argument("--pairs", metavar="CSV", help="default: INDEX/pairs.csv")
    duplicates.add_argument("--groups", metavar="CSV", help="default: INDEX/groups.csv")
    duplicates.add_argument("--neighbours", type=at_least_one, default=20, metavar="N",
                            help="hnsw, ivfpq: nearest rows looked at per row (default: %(default)s)")
    duplicates.add_argument("--removals", metavar="PARQUET", help="write each group's row kept and the rows to "
                            "remove, each with its kept one and their cosine (with --against: default "
                            "INDEX/leakage.parquet)")
    duplicates.add_argument("--keep-rule", choices=KEEP_RULES, default=KEEP_RULES[0],
                            help="the row a group keeps (default: %(default)s; ties: the first key)")
    duplicates.add_argument("--against", metavar="OTHER_INDEX", help="instead: the rows of INDEX with a near-copy "
                            "in the output of OTHER_INDEX (a test split against its training split)")
    _search_flags(duplicates)

    export = commands.add_parser("export", help="the rows selected as Parquet, and their images as tars")
    export.add_argument("index", metavar="INDEX")
    export.add_argument("queries", nargs="*", metavar="QUERY", help="as for neighbours: rows near one are selected")
    export.add_argument("--threshold", type=_cosine, help="with a QUERY or --text: the cosine a row must reach")
    export.add_argument("--min-caption-score", type=_cosine, metavar="S", help="the caption score a row must reach")
    export.add_argument("--removals", metavar="PARQUET", help="leave out the rows this removals file removes")
    export.add_argument("--label", action="append", default=[], metavar="NAME",
                        help="the rows with this label among their best (the job's --labels); repeat for any of "
                             "several")
    export.add_argument("--label-rank", type=at_least_one, default=1, metavar="K",
                        help="with --label: how many of a row's best labels count (default: %(default)s, its best)")
    export.add_argument("--min-label-score", type=_cosine, metavar="S",
                        help="with --label: the cosine the label must have with the image")
    export.add_argument("--out", metavar="PARQUET", help="default: INDEX/export.parquet")
    export.add_argument("--images-out", metavar="FOLDER", help="the images as WebDataset tars (resumed if killed)")
    export.add_argument("--shard-size", type=at_least_one, default=10_000, metavar="N",
                        help="samples a tar (default: %(default)s)")
    _query_flags(export, neighbours=False)

    page = commands.add_parser("page", help="a static HTML report with thumbnails")
    page.add_argument("index", metavar="INDEX")
    page.add_argument("--out", metavar="FOLDER", help="default: INDEX/page")
    page.add_argument("--query", action="append", default=[], metavar="QUERY", help="as for neighbours; repeat")
    page.add_argument("--threshold", type=_cosine, help="show the duplicate groups at this cosine")
    page.add_argument("--neighbours", type=at_least_one, default=20, metavar="N", help="as for duplicates")
    page.add_argument("--keep-rule", choices=KEEP_RULES, default=KEEP_RULES[0],
                      help="as for duplicates: each group's row kept is marked, the others 'would go'")
    page.add_argument("--overwrite", action="store_true",
                      help="replace an index.html in --out that is not a page this program wrote")
    _search_flags(page)
    _query_flags(page)

    serve = commands.add_parser("serve", help="the search service of an index (or a page's files) on 127.0.0.1 "
                                              "until Ctrl-C or SIGTERM (exit 0)")
    serve.add_argument("folder", metavar="INDEX", help="an index folder (its JSON API), or a page's folder")
    serve.add_argument("--port", type=int, default=8000, help="default: %(default)s; 0: any free port")
    serve.add_argument("--host", default="127.0.0.1", help="the address to answer on (default: %(default)s, "
                                                           "loopback only); another is reachable: a warning says so")
    serve.add_argument("--weights", help="for image and text queries, as for neighbours")
    serve.add_argument("--devices", default="cpu:0", help="for image queries (default: %(default)s)")
    serve.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS,
                       help="no line a request on stderr (as --quiet before the command)")
    args = parser.parse_args(argv)
    if args.command == "export" and not args.label and (args.label_rank != 1 or args.min_label_score is not None):
        parser.error("export: --label-rank and --min-label-score bound a --label NAME: give one")
    if args.command == "neighbours" and not args.queries and not args.text and not args.caption:
        parser.error("neighbours: give a QUERY, --text SENTENCE or --caption SENTENCE")
    for flag in ("text", "caption"):
        if any(not sentence.strip() for sentence in getattr(args, flag, ())):
            parser.error("%s: --%s %r has no words: give a sentence" % (args.command, flag, next(
                sentence for sentence in getattr(args, flag) if not sentence.strip())))
    return args


def _search_flags(parser):
    parser.add_argument("--ef-search", type=at_least_one, metavar="N",
                        help="hnsw: candidates kept while searching (default: the index's, chosen at build, "
                             "%d or more); more finds more" % EF_SEARCH)
    parser.add_argument("--nprobe", type=at_least_one, metavar="N",
                        help="ivfpq: lists visited per query (default: the index's, chosen at build, 1/32 of "
                             "its lists, at least 32, or more); more finds more")
    parser.add_argument("--rerank", type=at_least_one, metavar="N",
                        help="ivfpq: candidates re-ranked with the full vectors per neighbour asked for (default: "
                             "the index's, chosen at build, %d or more); more finds more" % RERANK)


def _load(args, folder=None):
    """The index of args.index (or `folder`), with the search parameters given on the command line."""
    from search.index import Index
    index = Index.load(folder or args.index)
    given = {name: value for name, value in (("efSearch", getattr(args, "ef_search", None)), ("nprobe", getattr(
        args, "nprobe", None)), ("rerank", getattr(args, "rerank", None))) if value is not None}
    if given:
        index.set_search(**given)
    return index


def _query_flags(parser, neighbours=True):
    """The flags of a query; `neighbours`: and of its neighbours (-k, and those that compare it with captions)."""
    parser.add_argument("--text", action="append", default=[], metavar="SENTENCE",
                        help="a sentence, embedded by the model's text tower (an output of CLIP's or SigLIP's "
                             "embedding layer; SigLIP's probability is printed beside the score); repeat")
    if neighbours:
        parser.add_argument("-k", type=at_least_one, default=10, help="neighbours per query (default: %(default)s)")
        parser.add_argument("--caption", action="append", default=[], metavar="SENTENCE",
                            help="a sentence, compared with each row's caption (an output of run_inference.py "
                                 "--text-column: text to text); repeat")
        parser.add_argument("--captions", action="store_true",
                            help="the other queries (images, keys, vectors, --text) compared with the captions too")
        parser.add_argument("--min-caption-score", type=_cosine, metavar="COSINE",
                            help="only rows whose caption score (caption to image) is at least this (LAION's: 0.28)")
    parser.add_argument("--weights", help="for image and text queries: the weights the output was computed with "
                                          "(default: the hub's commit its record names, hf://ORG/NAME@COMMIT, or "
                                          "'imagenet')")
    parser.add_argument("--devices", default="cpu:0", help="for image queries (default: %(default)s)")


def _say(message):
    print("%s: %s" % (PROGRAM, message), file=sys.stderr)


def main(argv=None):
    """Runs the command line; returns the exit status (listed in --help)."""
    args = parse_args(argv)
    bars = PhaseBars(not args.quiet and sys.stderr.isatty())
    try:
        return _COMMANDS[args.command](args, bars)
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED
    except _Failed as error:
        _say("failed: %s" % first_line(error))
        return EXIT_FAILED
    except ValueError as error:  # SearchError, OutputError: the inputs are wrong, nothing written
        _say("error: %s" % first_line(error))
        return EXIT_USAGE
    except Exception as error:  # a disk, a device (image queries), or the unforeseen: one line
        _say("failed: %s" % ": ".join(filter(None, (type(error).__name__, first_line(error)))))
        return EXIT_FAILED
    finally:
        bars.close()


class _Failed(Exception):
    """An error after something was written."""


def _writing(function, *args, **kwargs):
    """Runs `function`, which writes: any error from it is a failure (status 1), not a usage error."""
    from search.kinds import SearchError
    try:
        return function(*args, **kwargs)
    except SearchError:  # the inputs are wrong, found before anything is written: a usage error
        raise
    except (OSError, ValueError, RuntimeError) as error:
        raise _Failed(first_line(error) or type(error).__name__) from error


def _index(args, bars):
    from search.commands import index_command
    index_command(args, bars, _say, INDEX_SUFFIX)
    return EXIT_OK


def _add(args, bars):
    from search.commands import add_command
    add_command(args, bars, _say)
    return EXIT_OK


def _embedder(index, args):
    """The queries' embedder (models/query_embedder.py): the output's model, loaded when a query first needs it."""
    from models.query_embedder import QueryEmbedder
    return QueryEmbedder(index.settings, index.meta["source"]["output"], weights=args.weights, devices=args.devices,
                         image_embedder=_image_embedder, before_load=native_log.hide_for_the_command_line)


def _image_embedder(model, **options):
    """The engine's ImageEmbedder (given to the model's side: models never import the engine), imported when an
    image is first embedded: the engine imports TensorFlow (3 s of CPU), which a key's or a vector's query, and
    a service that is never sent an image, do not need."""
    from parallel.queries import ImageEmbedder
    return ImageEmbedder(model, **options)


def _neighbour_lists(index, args, queries):
    """[(label, image path or None, [(path, score)] best first, whether a sentence, its probabilities or None)]."""
    from search.captions import neighbours
    from search.queries import probabilities, query_vectors
    with _embedder(index, args) as embedder:  # the sentences come last: --text's, then --caption's
        resolved = query_vectors(index, queries, args.text + args.caption, embedder, say=_say)
        first_text = len(resolved) - len(args.text) - len(args.caption)
        to_captions = [args.captions or number >= first_text + len(args.text) for number in range(len(resolved))]
        lists = neighbours(index, np.stack([vector for _, _, vector in resolved]), args.k, to_captions,
                           args.min_caption_score)
        # the model's own score (SigLIP's) of a sentence and the images it found; none against captions
        chances = probabilities(embedder, [[] if captions else found for found, captions in zip(lists, to_captions)],
                                first_text)
    return [(label, image, found, number >= first_text, None if to_captions[number] else chances[number])
            for number, ((label, image, _), found) in enumerate(zip(resolved, lists))]


def _neighbours(args, bars):
    from search.queries import Kept, neighbour_lines
    index = _load(args)
    lines = neighbour_lines([(label, found, chances) for label, _, found, _, chances in
                             _neighbour_lists(index, args, args.queries)], Kept(index))
    sys.stdout.buffer.write("".join(lines).encode("utf-8", "surrogateescape"))
    return EXIT_OK


def _duplicates(args, bars):
    from search.curation import duplicates_command
    duplicates_command(args, _load(args), lambda folder: _load(args, folder), bars, _say, _writing)
    return EXIT_OK


def _export(args, bars):
    from search.curation import export_command
    from search.queries import query_vectors
    index = _load(args)

    def unit_queries():
        with _embedder(index, args) as embedder:
            return np.stack([vector for _, _, vector in query_vectors(index, args.queries, args.text, embedder,
                                                                      say=_say)])
    export_command(args, index, unit_queries, bars, _say, _writing)
    return EXIT_OK


def _page(args, bars):
    from search.commands import page_command
    page_command(args, _load(args), lambda index: _neighbour_lists(index, args, args.query), bars, _writing)
    return EXIT_OK


def _serve(args, bars):
    def announce(line):  # one write a line (stderr is line-buffered): lines from the service's threads stay whole
        sys.stderr.write(line + "\n")
    if not (Path(args.folder) / "index.json").is_file():  # a page's folder: its files, on loopback
        from search.server import LOOPBACK, serve
        if args.host != LOOPBACK:
            raise ValueError("--host %s: a page's folder is served on %s only" % (args.host, LOOPBACK))
        serve(args.folder, args.port, announce=announce)
        return EXIT_OK
    from search.api import serve_index
    from search.service import Service
    from search.index import Index
    index = Index.load(args.folder)
    embedder = _embedder(index, args)
    no_embedder = embedder.unusable()  # what a first sentence or image would meet, said as the service starts
    if no_embedder and args.weights is not None:  # weights given that the output's model cannot take
        raise ValueError(no_embedder)
    try:
        serve_index(Service(index, None if no_embedder else embedder, no_embedder=no_embedder), args.port, args.host,
                    announce=announce, log=None if args.quiet else announce)
    finally:
        embedder.close()
    return EXIT_OK


_COMMANDS = {"index": _index, "add": _add, "neighbours": _neighbours, "duplicates": _duplicates, "export": _export,
             "page": _page, "serve": _serve}


def console():
    """The program (`search-features`, `python search_features.py`): main(), exit with its status.

    From here Ctrl-C raises KeyboardInterrupt again, which main() turns into one line and status 130
    (and `serve` into its clean stop); before, while the modules were imported, it exited with 130.
    """
    if _signals.handled(signal.SIGINT):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())


if __name__ == "__main__":
    console()
