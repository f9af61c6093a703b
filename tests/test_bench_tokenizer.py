"""benchmarks/bench_tokenizer.py on a few sentences (the benchmark encodes 3,000 a round): it reports each round, and
compares with another tokenizer module only when both give the same ids."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_a_quick_run_reports_each_round_and_the_ratio_to_another_module(tmp_path, capsys):
    assert bench_tokenizer.main(["--sentences", "40", "--rounds", "2", "--against",
                                 str(ROOT / "models" / "clip" / "clip_tokenizer.py")]) == 0
    printed = capsys.readouterr().out
    assert "40 sentences, 2 rounds" in printed and printed.count("sentences/s (load") == 4
    assert "median ours / theirs (sentences/s): " in printed
    other = tmp_path / "other.py"
    other.write_text("import numpy as np\n"
                     "class Tokenizer:\n"
                     "    @classmethod\n"
                     "    def from_folder(cls, folder):\n"
                     "        return cls()\n"
                     "    def encode(self, sentences):\n"
                     "        return np.zeros((1 if isinstance(sentences, str) else len(sentences), 77), np.int32)\n")
    with pytest.raises(SystemExit, match="the two tokenizers give different ids"):
        bench_tokenizer.main(["--sentences", "10", "--rounds", "1", "--against", str(other)])
