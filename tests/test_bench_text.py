"""benchmarks/bench_text.py on the small CLIP (tests/small_clip.py), a batch of two: each step of each round reported,
with its ratio to the round's image batch."""

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_text  # noqa: E402
from text_jobs import clip_weights  # noqa: E402


def test_a_quick_run_reports_each_step_and_its_ratio_to_the_image_tower(tmp_path, capsys):
    with clip_weights(tmp_path / "clip") as weights:
        bench_text.main(["--weights", weights, "--batch", "2", "--rounds", "2"])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].endswith("cpu:0, Python %s, batch 2, 2 rounds, each step in turn" % sys.version.split()[0])
    steps = [line.split(":")[0] for line in printed[1:]]
    assert steps[0] == "image tower" and re.fullmatch(r"text tower, <= \d+ tokens", steps[1]), steps
    assert steps[2:] == ["text tower, 77 tokens", "tokenizing, on the host"]
    assert "of the image tower's, median 1.000 (1.000 1.000)" in printed[1]
