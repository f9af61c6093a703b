"""CLIP's tokenizer: sentences/s over a few thousand sentences, and one short sentence's time (a search query's).

    python benchmarks/bench_tokenizer.py                        # the tests' vocabulary, 3,000 sentences, 5 rounds
    python benchmarks/bench_tokenizer.py --folder clip-vit-base-patch32/   # a checkpoint's tokenizer files
    git show 3c4abfa:models/clip/clip_tokenizer.py > /tmp/hand_written.py
    python benchmarks/bench_tokenizer.py --against /tmp/hand_written.py    # and another tokenizer module, alternated

The sentences are the tests' (tests/sentences.py: English, accents, CJK, other scripts, emoji, punctuation,
numbers, contractions, odd whitespace; one in a hundred long, cut to 77 tokens). A round builds the tokenizer
afresh from the folder (the load timed apart) and encodes every sentence, one `encode` call for all of them; with
--against, a module whose `Tokenizer.from_folder(folder).encode(sentences)` gives the same ids (checked) is timed
in the same round, after ours, and the median of the rounds' ratios is kept: this machine is shared, and its
speed drifts between rounds. The short sentence ("a photo of a dog") is timed alone, 2,000 calls, the median.
"""

import argparse
import importlib.util
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from models.clip import clip_tokenizer  # noqa: E402
from sentences import sentences  # noqa: E402


def _module(path):
    """The tokenizer module at `path` (a file), imported under a name of its own."""
    spec = importlib.util.spec_from_file_location("against_tokenizer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _round(tokenizer_class, folder, texts):
    """(seconds to load, seconds to encode `texts`, the ids, seconds per call of one short sentence)."""
    started = time.perf_counter()
    tokenizer = tokenizer_class.from_folder(folder)
    loaded = time.perf_counter()
    ids = tokenizer.encode(texts)
    encoded = time.perf_counter()
    calls = []
    for _ in range(2000):
        before = time.perf_counter()
        tokenizer.encode("a photo of a dog")
        calls.append(time.perf_counter() - before)
    return loaded - started, encoded - loaded, ids, statistics.median(calls)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--folder", help="a folder of tokenizer files (default: the tests' vocabulary, written)")
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", help="another tokenizer module's file, timed alternately with ours")
    args = parser.parse_args(argv)
    texts = sentences(args.sentences, long=args.sentences // 100, seed=5)
    other = _module(args.against) if args.against else None
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or clip_tokenizer.write_test_vocabulary(Path(scratch) / "vocabulary")
        print("%s, %s; %d sentences, %d rounds" % (platform.processor() or platform.machine(), platform.python_version(),
                                                   len(texts), args.rounds))
        ratios = []
        for number in range(args.rounds):
            load, seconds, ids, short = _round(clip_tokenizer.Tokenizer, folder, texts)
            line = "round %d: ours %.0f sentences/s (load %.3f s), a short sentence %.1f us" % (
                number + 1, len(texts) / seconds, load, short * 1e6)
            if other is not None:
                other_load, other_seconds, other_ids, other_short = _round(other.Tokenizer, folder, texts)
                if not (other_ids == ids).all():
                    raise SystemExit("the two tokenizers give different ids: nothing to compare")
                ratios.append(other_seconds / seconds)
                line += "; theirs %.0f sentences/s (load %.3f s), a short sentence %.1f us; ours / theirs %.2f" % (
                    len(texts) / other_seconds, other_load, other_short * 1e6, ratios[-1])
            print(line, flush=True)
        if ratios:
            print("median ours / theirs (sentences/s): %.2f" % statistics.median(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
