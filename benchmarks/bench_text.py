"""CLIP ViT-B/32's text tower beside its image tower: a batch of captions against a batch of images, on the devices.

    python benchmarks/bench_text.py                             # random ViT-B/32 weights written to a temporary folder
    python benchmarks/bench_text.py --weights clip-random/ --batch 64 --rounds 5 --devices cpu:0

Why: `--text-column` embeds each row's caption in the same job as its image. A text tower run on the host, as a
search's sentence is, would set the pace of a GPU job if a batch of captions cost the host's cores more than a
batch of images costs the devices; run on the devices (parallel.devices.text_runner), it adds to their work what
this measures. A round times one batch of `--batch` images (uint8 224x224, the engine's DeviceRunner), then the
same number of captions of 5 to 15 words (the tests' vocabulary: at most 17 tokens, CLIP's 24-token tower),
then as many of 75 tokens (the 77-token tower), then the tokenizing of the first (the host's part): each round
takes them in turn, after one warm-up of each, and each ratio is of its round's image batch, as this machine's
speed drifts between rounds; the medians are kept.
"""

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _seconds(function):
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", help="a CLIP ViT-B/32 folder (default: seeded random weights, written)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--devices", default="cpu:0")
    args = parser.parse_args(argv)
    from models.clip import clip, clip_weights
    from parallel.devices import resolve_devices
    from parallel.devices.compute import DeviceRunner
    from parallel.devices.text_runner import TextRunner
    with tempfile.TemporaryDirectory() as folder:
        weights = args.weights
        if weights is None:
            weights = str(Path(folder) / "clip-random")
            clip_weights.VIT_B32.write_random(weights, seed=0)
        spec = clip.VIT_B32.feature_model("embedding", weights=weights)
        devices = resolve_devices(devices=args.devices)
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (args.batch, 224, 224, 3), dtype=np.uint8)
        words = "a photo of a small brown dog running on the beach near the sea at sunset with people".split()
        captions = [" ".join(rng.choice(words, rng.integers(5, 16))) for _ in range(args.batch)]
        longest = [" ".join(rng.choice(words, 80)) for _ in range(args.batch)]  # cut to 77 tokens
        with DeviceRunner(spec, devices, args.batch) as images_runner, \
                TextRunner(spec.text, devices, args.batch) as text_runner:
            ids, long_ids = spec.text.tokenize(captions), spec.text.tokenize(longest)
            steps = {"image tower": lambda: images_runner.run(images), "text tower": lambda: text_runner.run(ids),
                     "text tower, 77 tokens": lambda: text_runner.run(long_ids),
                     "tokenizing, on the host": lambda: spec.text.tokenize(captions)}
            for step in steps.values():  # warm-up
                step()
            rounds = [{name: _seconds(step) for name, step in steps.items()} for _ in range(args.rounds)]
    tokens = int(spec.text.used_positions(ids).max())
    print("%s, %s, Python %s, batch %d, %d rounds, each step in turn" % (
        platform.processor() or platform.machine(), args.devices, platform.python_version(), args.batch, args.rounds))
    for name in steps:
        times = [found[name] for found in rounds]
        ratios = [found[name] / found["image tower"] for found in rounds]
        label = "text tower, <= %d tokens" % tokens if name == "text tower" else name
        print("%-25s %.4f s a batch (%s); of the image tower's, median %.3f (%s)" % (
            label + ":", statistics.median(times), " ".join("%.3f" % t for t in times), statistics.median(ratios),
            " ".join("%.3f" % ratio for ratio in ratios)))


if __name__ == "__main__":
    main()
