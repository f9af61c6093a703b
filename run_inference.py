"""The command line: a model's features (VGG16 fc7 by default) of every image in a folder, as CSV, Parquet or npy.

    python run_inference.py --gpus 0,1,2,3 --images photos/            # -> results/features.csv
    python run_inference.py --help                                     # the flags, examples, exit statuses

This file only turns the flags into the settings of one run and starts it; the work is done in `parallel/` (the
engine) and `models/` (`models/vgg16.py` and the others of `models/registry.py`). Mistakes in the flags are reported
before those are imported, since importing TensorFlow takes seconds.
"""

# First, before the imports that take a moment (numpy, PIL, polars: a quarter of a second): as the program, a
# Ctrl-C or SIGTERM from here on exits with status 130 and no traceback (see console()). Imported (by a test,
# by search_features.py), this module leaves the signal handlers alone.
from parallel import signals as _signals  # the standard library only

_INTERRUPTED = "interrupted; rerun the same command to resume"  # the line of every status 130 but the loop's

if _signals.run_as_program(__name__, "run-inference"):
    _signals.exit_on_signal(message="run_inference: " + _INTERRUPTED)

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# The choices and exit statuses, from the modules that own them; none of these imports TensorFlow,
# which takes seconds: a mistyped flag is reported at once.
from models import registry  # noqa: E402
from models.registry import PRECISION_NAMES  # noqa: E402
from parallel.inputs.resize import RESIZE_MODES  # noqa: E402
from parallel import native_log  # noqa: E402
from parallel.flag_types import FlagParser, at_least_one, names, parameters_as_flags, seconds  # noqa: E402
from parallel.loop import EXIT_FAILED, EXIT_USAGE  # noqa: E402
from parallel.messages import first_line, one_line  # noqa: E402
from parallel.output import FORMATS  # noqa: E402
from parallel.signals import (EXIT_INTERRUPTED, by_a_signal, exit_now, exit_on_second_signal,  # noqa: E402
                              exit_on_signal)
from parallel.locations import is_url  # noqa: E402

DEFAULT_FORMAT = "csv"
DEFAULT_FOLDER = "results"
FILE_NAME = "features"  # + "." + format, when --output is a folder or not given

DESCRIPTION = """\
Computes a model's features of every image in a folder (searched recursively) and
writes them to one file: a row per image, keyed by its path relative to the folder.
By default the model is VGG16 (--model chooses another), its features fc7 (4096
floats per image), its weights the published ImageNet ones (downloaded once, 553 MB),
and every visible GPU is used, or the CPU when there is none. To check that it runs
offline, write seeded random weights (their features are meaningless) and use them:
python -m models.weight_files random vgg16-random.npy, then --weights vgg16-random.npy.

The output is written as the run goes. If the run stops (Ctrl-C, a crash, a full
disk), the same command resumes it, computing only the images without a row yet.
Beside the output: <output>.run.json (the settings it was written with) and
<output>.errors.csv (the images that could not be read, if any)."""

EPILOG = """\
examples:
  %(prog)s --images photos/                   -> results/features.csv
  %(prog)s --images photos/ --gpus 0,1        on GPUs 0 and 1 only
  %(prog)s --images photos/ --format parquet  -> results/features.parquet
  %(prog)s --images photos/ --output runs/    -> runs/features.csv
  %(prog)s --images photos/ --output feats.npy --weights vgg16-random.npy
                                              npy output, weights from a file (offline)
  srun %(prog)s --images photos/ --distributed static --output /shared/feats.parquet
                                              one rank per Slurm task (see docs/many-hosts.md)

exit status:
  0    every image was written (or already had been, by an earlier run)
  3    the run finished, but some images could not be read: see <output>.errors.csv
  2    usage error (bad flag, no images, bad weights, absent GPU, output written
       with other settings): one line on stderr, nothing written
  1    the run could not finish (disk full, device error, --strict and a bad image):
       the rows written so far are kept; rerun the same command to resume
  130  stopped by Ctrl-C or SIGTERM; rerun the same command to resume"""


class _Parser(FlagParser):
    """argparse, with its errors in one line and exit status 2 like every usage error; a flag of one value
    given twice is one of them (`FlagParser`), but --images and --keep, which take every value given."""

    def error(self, message):
        self.exit(EXIT_USAGE, "run_inference: error: %s (see --help)\n" % message)


class _Help(argparse.RawDescriptionHelpFormatter):
    """argparse's help, where --images reads as the one FOLDER it names (several values: tars the shell expanded)."""

    def _format_args(self, action, default_metavar):
        return "FOLDER" if action.dest == "images" else super()._format_args(action, default_metavar)


def make_parser():
    """The command line's parser: its flags, their help, examples and exit statuses."""
    # No prog: argparse names the program after sys.argv[0], so the console script's help says
    # "usage: run-inference" and the script's "usage: run_inference.py".
    parser = _Parser(description=DESCRIPTION, epilog=EPILOG, formatter_class=_Help)
    parser.add_argument("--images", metavar="FOLDER", nargs="+", action="extend",
                        help="folder of images, searched recursively (.jpg, .png, .bmp, .gif, .tif, .webp, ...); "
                             "or a prefix of a store (s3://bucket/photos/); or tar shards, Parquet or TFRecord files: "
                             "a path or URL, a pattern 'shards/{000000..000099}.tar' or 'data/*.parquet', several "
                             "(given twice: both), or a folder of them and of no image, such as img2dataset's (see "
                             "docs/images.md); with --images-from, the folder its relative paths start from "
                             "(default: the current folder)")
    parser.add_argument("--images-from", metavar="FILE",
                        help="the images listed in FILE instead of a folder's: one path per line, or the column "
                             "'path' of a .csv or .parquet file")
    parser.add_argument("--image-column", metavar="NAME",
                        help="Parquet and TFRecord files: the column or feature of the images (default: found by "
                             "the names datasets, img2dataset and TensorFlow's ImageNet write: image, jpg, "
                             "image/encoded)")
    parser.add_argument("--keep", metavar="NAMES", type=names, action="extend", default=[],
                        help="values kept beside each row, in <output>.members.parquet: columns of Parquet files, "
                             "features of TFRecord files, a tar sample's members by extension (txt,json,cls; "
                             "given twice: both)")
    parser.add_argument("--text-column", metavar="NAME",
                        help="a model with a text tower (CLIP's, SigLIP's embedding): each row's caption (a value "
                             "--keep names) embedded, and its cosine with the image, in <output>.text.parquet")
    parser.add_argument("--labels", metavar="FILE",
                        help="a model with a text tower: labels, one a line (or first 'template: a photo of a {}.'): "
                             "each image's nearest (zero-shot) and their cosines, in <output>.text.parquet")
    parser.add_argument("--labels-top", metavar="K", type=at_least_one, default=5,
                        help="the labels kept per image, best first (default: %(default)s)")
    parser.add_argument("--output", metavar="PATH",
                        help="the output file (default: results/features.<format>). A path ending in / or an "
                             "existing folder means a folder: features.<format> is written in it. An existing "
                             "output is resumed (--overwrite starts afresh). Or an object in a store, "
                             "s3://bucket/feats.parquet (pip install -e '.[cloud]'; see docs/outputs.md)")
    parser.add_argument("--format", dest="output_format", choices=FORMATS,
                        help="csv: a header path,fc7_0,fc7_1,... (named after --layer) and a row per image; "
                             "parquet: a path column and a column of float32 lists; npy: a float32 "
                             "[images, features] array, with the paths of its rows in <output>.paths.csv "
                             "(default: the --output extension if it is .csv, .parquet or .npy, else csv; an "
                             "--output extension naming another format is an error)")
    devices = parser.add_mutually_exclusive_group()
    devices.add_argument("--gpus", metavar="LIST",
                         help="GPU indices, e.g. 0,1,2,3 (default: every visible GPU, else the CPU)")
    devices.add_argument("--devices", metavar="LIST",
                         help="TensorFlow device names instead of --gpus, e.g. gpu:0 or cpu:0,cpu:1 (several "
                              "CPU devices split the CPU's cores and run data-parallel)")
    parser.add_argument("--batch-size", type=at_least_one, metavar="N",
                        help="images per device per step (default: 12 on CPU devices, 64 on GPUs; a device "
                             "that runs out of memory halves it and retries)")
    parser.add_argument("--model", default=registry.DEFAULT_MODEL, choices=registry.NAMES,
                        help="the network whose features are written (default: %(default)s); docs/models.md "
                             "describes each: " + "; ".join("%s: %s" % (entry.name, entry.summary)
                                                            for entry in registry.ENTRIES))
    parser.add_argument("--layer", metavar="NAME",
                        help="the layer whose output is written (default: the model's, named first below). "
                             + "; ".join("%s: %s" % (name, ", ".join(sorted(  # its layers, the default first
                                 registry.layers(name), key=registry.default_layer(name).__ne__)))
                                 for name in registry.NAMES)
                             + ". VGG16's fc7 is before the ReLU and can be negative; relu7 is after it "
                               "(Keras's 'fc2', Caffe's 'fc7')")
    parser.add_argument("--weights", default="imagenet", metavar="WEIGHTS",
                        help="'imagenet' (default: the model's published pretrained weights, downloaded once: "
                             "Keras's ImageNet file into ~/.keras/models; for DINOv2 and CLIP the pinned Hugging "
                             "Face checkpoint into the hub's cache, by huggingface_hub: HF_TOKEN, HF_ENDPOINT, "
                             "HF_HUB_OFFLINE; SigLIP's named sizes' too); for DINOv2, CLIP and SigLIP, "
                             "hf://ORG/NAME@COMMIT: another checkpoint of the hub, pinned to a commit (40 hex digits; "
                             "clip, dinov2 and siglip read its size from its config); or the path of a weights file "
                             "or folder (for vgg16 a tensorflow-vgg vgg16.npy or a Keras .h5; docs/models.md lists each model's), "
                             "such as seeded random weights, which check that a model runs offline (their features "
                             "are meaningless): python -m models.weight_files random FILE --model NAME")
    parser.add_argument("--resize", default=None, choices=RESIZE_MODES,
                        help="crop (the default but for SigLIP): the centre 224x224: VGG16, ResNet50, EfficientNetB0 "
                             "and ConvNeXt resize the centre square to 224x224; CLIP resizes the image to a short "
                             "side of 224, DINOv2 to 256 (bicubic), then cuts its centre 224x224. stretch (SigLIP's, "
                             "as its processor): the whole image resized to the model's size")
    parser.add_argument("--precision", default="fp32", choices=PRECISION_NAMES,
                        help="arithmetic on the devices; the output is float32 either way. fp32 (default): "
                             "IEEE float32 on every device, so features agree across GPU generations and with "
                             "the CPU; tf32: float32 with TF32 matmuls and convolutions on Ampere and newer "
                             "GPUs (faster, about 1e-3 relative differences); fp16, bf16: 16-bit floats")
    parser.add_argument("--workers", type=at_least_one, metavar="N",
                        help="threads decoding images (default: one per CPU core)")
    parser.add_argument("--prefetch", type=at_least_one, default=2, metavar="N",
                        help="batches decoded ahead of the devices (default: %(default)s)")
    parser.add_argument("--overwrite", action="store_true",
                        help="start afresh, replacing the output, instead of resuming it")
    parser.add_argument("--strict", action="store_true",
                        help="stop at the first image that cannot be read (default: list it in "
                             "<output>.errors.csv and go on)")
    jobs = parser.add_argument_group(
        "one job over many processes or hosts (see docs/many-hosts.md)",
        "The images are frozen in a manifest and cut into shards; each process computes shards and commits each "
        "as a part; whichever commits the last one writes --output, byte for byte what one process writes. A run "
        "without --distributed is such a job with one process: --shard-size and --keep-shards apply to it too.")
    jobs.add_argument("--distributed", choices=("static", "ray"),
                      help="static: this process is one rank of a scheduler's job (--rank/--world-size, or "
                           "Slurm's, torchrun's, a Kubernetes Indexed Job's or TF_CONFIG's variables); ray: the "
                           "shards go to actors of a Ray cluster (pip install -e '.[ray]')")
    jobs.add_argument("--rank", type=int, metavar="N", help="this process's rank, 0 .. world size - 1 (static)")
    jobs.add_argument("--world-size", type=at_least_one, metavar="N", help="how many ranks (static)")
    jobs.add_argument("--shard-size", type=at_least_one, metavar="N",
                      help="images per shard (default: the size the job was started with, else the largest "
                           "multiple of the images per step up to 10000: 9996 with 12 images per step, 9984 "
                           "with 64 or 4 x 64); for tars, tars per shard (about 256 MiB of them); on one process too")
    jobs.add_argument("--manifest-wait", type=seconds, metavar="SECONDS",
                      help="how long a process waits for the one writing the job's manifest before giving up "
                           "(default: 600)")
    jobs.add_argument("--keep-shards", action="store_true",
                      help="keep <output>.shards/ (a Parquet dataset) after the output is written; on one process too")
    jobs.add_argument("--ray-address", metavar="ADDRESS",
                      help="the Ray cluster to join, e.g. auto or ray://head:10001 (default: start one here)")
    jobs.add_argument("--gpus-per-worker", type=int, default=1, metavar="N",
                      help="GPUs each Ray actor drives (default: %(default)s; 0: actors compute on the CPU)")
    parser.add_argument("--quiet", action="store_true", help="print errors only: no progress bar, log or summary")
    parser.add_argument("--verbose", action="store_true", help="show TensorFlow's own log, and tracebacks")
    return parser


def parse_args(argv=None):
    """The parsed flags; `output` and `output_format` are None when not given (see `resolve_output`)."""
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.images is None and args.images_from is None:
        parser.error("--images or --images-from is required")
    try:
        args.layer = registry.check_layer(args.model, args.layer)
    except ValueError:
        parser.error("--layer %s is not a layer of --model %s; its layers: %s"
                     % (args.layer, args.model, ", ".join(registry.layers(args.model))))
    if args.distributed is None:
        given = [flag for flag, value in (("--rank", args.rank), ("--world-size", args.world_size),
                                          ("--ray-address", args.ray_address), ("--manifest-wait", args.manifest_wait))
                 if value is not None]
        if given:
            parser.error("%s only with --distributed" % ", ".join(given))
    elif args.distributed == "static" and args.ray_address is not None:
        parser.error("--ray-address only with --distributed ray")
    elif args.distributed == "ray" and (args.rank is not None or args.world_size is not None):
        parser.error("--rank and --world-size only with --distributed static")
    return args


def resolve_output(output, output_format):
    """The output file and its format, from --output and --format as typed (None when not given).

    - No --output: results/features.<format>.
    - An --output ending in a path separator, or naming an existing folder: features.<format> in it.
    - No --format: the format the output's extension names (.csv, .parquet, .npy, in any case), else csv.
    - An extension naming another format than --format is refused: a file named x.csv holding
      Parquet would mislead whoever opens it. Other extensions, or none, are kept as typed.

    Args:
      output: str, --output; None for the default.
      output_format: str, --format ("csv", "parquet" or "npy"); None to follow the output's name.

    Returns:
      (path, output_format): a Path, and one of FORMATS.

    Raises:
      ValueError: --output is empty, or its extension contradicts --format.
    """
    if output is None:
        output = DEFAULT_FOLDER + os.sep
    if not output:
        raise ValueError("--output is empty; give a file or a folder")
    separators = tuple(separator for separator in (os.sep, os.altsep) if separator)
    if is_url(output):  # s3://bucket/feats.parquet: kept as typed (a Path would fold its "//")
        if output.endswith("/"):
            output_format = output_format or DEFAULT_FORMAT
            return "%s%s.%s" % (output, FILE_NAME, output_format), output_format
        named = os.path.splitext(output.rpartition("/")[2])[1][1:].lower()
        if output_format is not None and named in FORMATS and named != output_format:
            raise ValueError("--output %s ends in .%s but --format is %s" % (output, named, output_format))
        return output, output_format or (named if named in FORMATS else DEFAULT_FORMAT)
    if output.endswith(separators) or os.path.isdir(output):
        output_format = output_format or DEFAULT_FORMAT
        return Path(output) / ("%s.%s" % (FILE_NAME, output_format)), output_format
    path = Path(output)
    named = path.suffix[1:].lower()
    if output_format is None:
        return path, named if named in FORMATS else DEFAULT_FORMAT
    if named in FORMATS and named != output_format:
        raise ValueError("--output %s ends in %s but --format is %s; use --output %s, or --format %s"
                         % (output, path.suffix, output_format, path.with_suffix("." + output_format), named))
    return path, output_format


def main(argv=None):
    """Runs the command line; returns the exit status (listed in --help)."""
    args = parse_args(argv)
    try:
        output, output_format = resolve_output(args.output, args.output_format)
    except ValueError as error:
        _say("error: %s" % error)
        return EXIT_USAGE
    if not args.verbose:
        native_log.hide_for_the_command_line()
    else:  # TensorFlow's own log, its start-up lines too (parallel.native_log keeps what the level lets through)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
    # The run's own log at INFO; the libraries' (botocore's "Found credentials ...", Ray's) only their warnings.
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=logging.WARNING)
    logging.getLogger("parallel").setLevel(logging.WARNING if args.quiet else logging.INFO)
    if args.output_format is None and os.path.splitext(str(output))[1][1:].lower() not in FORMATS:
        logging.warning("--output %s names no format (.csv, .parquet or .npy): it is written as CSV; --format "
                        "parquet or --format npy chooses another", output)

    try:
        with exit_on_second_signal("run_inference: stopped at once; committed rows are kept: rerun the same "
                                   "command to resume"):
            summary = _run(args, output, output_format)
    except KeyboardInterrupt:
        _say(_INTERRUPTED)
        return EXIT_INTERRUPTED
    except ValueError as error:  # the inputs are wrong: the message says which
        if args.verbose:
            raise
        _say("error: %s" % error)
        return EXIT_USAGE
    except Exception as error:
        if by_a_signal(error):  # e.g. ImportError("initialization failed") of an import a signal cut short
            _say(_INTERRUPTED)
            return EXIT_INTERRUPTED
        if args.verbose:
            raise
        from parallel.engine import RunError
        if isinstance(error, RunError):  # an expected failure: its message is the whole story
            _say("failed: %s" % first_line(error))
        else:  # a bug or the unforeseen: one line, the traceback only on request
            what = ": ".join(filter(None, (type(error).__name__, first_line(error))))
            _say("failed: %s (--verbose shows the traceback)" % what)
        return EXIT_FAILED
    if summary.interrupted:
        _say("stopped by a signal; %s. Rerun the same command to resume." % summary.line())
    elif not args.quiet:
        print(summary.line(), file=sys.stderr)
    return summary.exit_status


def _run(args, output, output_format):
    """The flags as a job's Config, run. TensorFlow is imported here, inside the signal handling."""
    from parallel import jobs
    from parallel.devices import resolve_devices

    labels, template = jobs.read_labels(args.labels) if args.labels is not None else ((), "{}")
    config = jobs.Config(
        model=registry.feature_model(args.model, layer=args.layer, weights=args.weights, precision=args.precision),
        images=_images(args.images), output=output, devices=resolve_devices(args.gpus, args.devices),
        images_from=args.images_from, shard_size=args.shard_size, keep_shards=args.keep_shards,
        distribution=_distribution(args, jobs), per_device_batch=args.batch_size, resize=args.resize,
        output_format=output_format, workers=args.workers, prefetch_batches=args.prefetch, overwrite=args.overwrite,
        strict=args.strict, progress=not args.quiet and sys.stderr.isatty(), image_column=args.image_column,
        keep=args.keep, text_column=args.text_column, labels=labels, label_template=template,
        labels_top=args.labels_top)
    return jobs.run(config)


def _images(values):
    """--images as a Config's images: one folder, prefix or tar pattern, or a tuple of tars (a pattern the shell
    expanded: the same job as the quoted pattern)."""
    if not values:
        return os.curdir
    return values[0] if len(values) == 1 else tuple(values)


def _distribution(args, jobs):
    """--distributed and its flags as a job's Distribution, or None (--shard-size, --keep-shards: the Config's)."""
    if args.distributed is None:
        return None
    waiting = {} if args.manifest_wait is None else {"wait_seconds": args.manifest_wait}
    return jobs.Distribution(kind=args.distributed, rank=args.rank, world_size=args.world_size,
                             ray_address=args.ray_address, gpus_per_worker=args.gpus_per_worker,
                             verbose=args.verbose, **waiting)


# The library's messages name its parameters ("weights=vgg.npy is not a file"); ours, the flags ("--weights vgg.npy").
as_flags = parameters_as_flags({
    "images_from": "--images-from", "images": "--images", "weights": "--weights", "output": "--output",
    "shard_size": "--shard-size", "overwrite": "--overwrite", "rank": "--rank", "world_size": "--world-size",
    "image_column": "--image-column", "keep": "--keep", "text_column": "--text-column", "labels": "--labels",
    "labels_top": "--labels-top"})


def _say(message):
    """One line on stderr: the message's first line, at most LINE_LIMIT characters (--verbose has it whole)."""
    print("run_inference: %s" % one_line(as_flags(message)), file=sys.stderr)


def console():
    """The program (`run-inference`, `python run_inference.py`): main(), then exit at once with its status.

    A Ctrl-C or SIGTERM at any moment until the process begins to exit gives status 130 and one line
    saying so: from the module's first statement (these handlers, set again here for a program that
    imports this module and calls console()), through main(), which hands them back when its own
    signal handling ends, to just after the summary line. The output is durable when main() returns, so the process ends
    there, without the interpreter's and TensorFlow's teardown. An exception from main() (--verbose)
    takes the usual way out.
    """
    exit_on_signal(message="run_inference: " + _INTERRUPTED)
    exit_now(main())


if __name__ == "__main__":
    console()
