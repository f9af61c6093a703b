"""Batch feature extraction on every device: flags -> Config -> parallel.engine.run.

    python run_inference.py --gpus 0,1,2,3 --images photos/            # -> results/features.csv
    python run_inference.py --devices cpu:0,cpu:1 --images photos/ --weights vgg16.npy --output out.csv

Exit status: 0 every image written; 3 the run completed but some images could not be read
(see <output>.errors.csv); 2 bad flags or inputs (nothing written); 1 the run could not
complete (committed rows are kept: rerun to resume); 130 stopped by Ctrl-C or SIGTERM.
"""

import argparse
import logging
import os
import sys

EXIT_USAGE = 2


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="run_inference.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--images", required=True, help="folder searched recursively for images")
    parser.add_argument("--output", default=os.path.join("results", "features.csv"),
                        help="output file (resumed if it exists and was written with the same settings)")
    parser.add_argument("--format", dest="output_format", default="csv", choices=("csv", "parquet", "npy"),
                        help="csv: path,<layer>_0,...; parquet: path + float32 features; npy: float32 [N, D] + <output>.paths.csv")
    devices = parser.add_mutually_exclusive_group()
    devices.add_argument("--gpus", help="GPU indices, e.g. 0,1,2,3 (default: every visible GPU, else cpu:0)")
    devices.add_argument("--devices", help="TensorFlow device names, e.g. cpu:0,cpu:1 or gpu:0; several CPU "
                                           "devices run data-parallel on the CPU")
    parser.add_argument("--batch-size", type=int, default=12, help="images per device per step")
    parser.add_argument("--layer", default="fc7", choices=("pool5", "fc6", "relu6", "fc7", "relu7", "fc8", "prob"),
                        help="endpoint, tensorflow-vgg names: fc7 is BEFORE the ReLU, relu7 after it (Keras 'fc2')")
    parser.add_argument("--weights", default="imagenet",
                        help="'imagenet' (Keras's cached/downloaded h5), or a path to vgg16.npy (tensorflow-vgg) or "
                             "vgg16_weights_tf_dim_ordering_tf_kernels.h5 (Keras)")
    parser.add_argument("--resize", default="crop", choices=("crop", "stretch"),
                        help="crop: centre square then 224x224 (tensorflow-vgg); stretch: whole image to 224x224")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "fp16", "bf16"),
                        help="compute precision on the devices; output is always float32")
    parser.add_argument("--workers", type=int, default=None, help="decode threads (default: one per core)")
    parser.add_argument("--prefetch", type=int, default=2, help="host batches decoded ahead of the devices")
    parser.add_argument("--overwrite", action="store_true", help="start afresh instead of resuming --output")
    parser.add_argument("--strict", action="store_true", help="stop at the first image that cannot be read")
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no log; errors only")
    parser.add_argument("--verbose", action="store_true", help="TensorFlow's own log, and tracebacks")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if not args.verbose:
        _silence_native_logs()
    logging.basicConfig(format="%(message)s", stream=sys.stderr,
                        level=logging.WARNING if args.quiet else logging.INFO)
    logging.getLogger("parallel").setLevel(logging.WARNING if args.quiet else logging.INFO)

    from parallel import engine
    from parallel.devices import resolve_devices
    from models import vgg16

    try:
        config = engine.Config(
            model=vgg16.feature_model(endpoint=args.layer, weights=args.weights, precision=args.precision),
            images=args.images, output=args.output, devices=resolve_devices(args.gpus, args.devices),
            per_device_batch=args.batch_size, resize=args.resize, output_format=args.output_format,
            workers=args.workers, prefetch_batches=args.prefetch, overwrite=args.overwrite, strict=args.strict,
            progress=not args.quiet and sys.stderr.isatty())
        summary = engine.run(config)
    except KeyboardInterrupt:
        print("run_inference: interrupted; rerun the same command to resume", file=sys.stderr)
        return engine.EXIT_INTERRUPTED
    except ValueError as error:
        if args.verbose:
            raise
        print("run_inference: error: %s" % error, file=sys.stderr)
        return engine.EXIT_USAGE
    except Exception as error:  # anything else: one line, the traceback only on request
        if args.verbose:
            raise
        print("run_inference: failed: %s%s" % (_one_line(error), "" if isinstance(error, engine.RunError)
                                               else " (--verbose shows the traceback)"), file=sys.stderr)
        return engine.EXIT_FAILED
    if summary.interrupted:
        print("run_inference: stopped by %s; %s. Rerun the same command to resume."
              % ("a signal", summary.line()), file=sys.stderr)
    elif not args.quiet:
        print(summary.line(), file=sys.stderr)
    return summary.exit_status


def _silence_native_logs():
    """Hides TensorFlow's start-up noise (oneDNN, CUDA, CPU-feature notices) unless --verbose.

    TF_CPP_MIN_LOG_LEVEL stops most of it, but some lines are printed by C++ code before
    that setting is read. So file descriptor 2 goes to /dev/null, and Python's own stderr
    (our messages, the progress bar, the log) keeps writing to the real one.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # before TensorFlow is imported
    if "tensorflow" in sys.modules or not hasattr(os, "dup"):
        return
    try:
        sys.stderr.flush()
        real_stderr = os.dup(2)
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
    except (OSError, ValueError):  # no real descriptor 2 (embedded, captured): leave it alone
        return
    sys.stderr = open(real_stderr, "w", buffering=1, encoding=sys.stderr.encoding,
                      errors="backslashreplace")


def _one_line(error):
    text = str(error).strip().splitlines()
    return "%s: %s" % (type(error).__name__, text[0] if text else "")


if __name__ == "__main__":
    sys.exit(main())
