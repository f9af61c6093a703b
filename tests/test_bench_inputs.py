"""benchmarks/bench_inputs.py's decode modes on a tiny input (the benchmark reads 1,000 JPEGs a round): the files it
packs hold the JPEGs, in order, as the tools it imitates write them, and a quick run reports every ratio."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_inputs  # noqa: E402
from parallel.inputs.sources import PARQUET, TARS, TFRECORD  # noqa: E402
from parallel.inputs.streamed import stream_images  # noqa: E402


def test_a_quick_run_of_the_decode_modes_reports_every_ratio(tmp_path, capsys):
    bench_inputs.main(["tars", "parquet", "tfrecord", "--images", "16", "--per-tar", "8", "--rounds", "1",
                       "--workdir", str(tmp_path)])
    results = json.loads((tmp_path / "results.json").read_text())
    for mode, key in (("tars", "tars/files"), ("parquet", "parquet/tars"), ("tfrecord", "tfrecord/tars"),
                      ("tfrecord", "tfrecord-gzip/tars")):
        assert results[mode][key] > 0 and results[mode][key + " by CPU"] > 0, (mode, key)
    printed = capsys.readouterr().out
    assert "parquet/tars = " in printed and "tfrecord-gzip/tars = " in printed and "(no bar)" in printed
    photos = tmp_path / "photos-16"
    jpegs = [path.read_bytes() for path in sorted(photos.glob("*.jpg"))]
    for kind, folder, own in ((TARS, "tars-16-8", "photo_000009.jpg"), (PARQUET, "parquet-16-8", "000000009"),
                              (TFRECORD, "tfrecord-16-8", "photo_000009.jpg"),
                              (TFRECORD, "tfrecord-gzip-16-8", "photo_000009.jpg")):
        files = sorted(str(path) for path in (tmp_path / folder).iterdir())
        assert len(files) == 2, folder
        items = [item for path in files for item in stream_images(kind, path, [])]
        assert [data for _, data in items] == jpegs, folder
        assert items[9][0].split("://", 1)[1] == "%s::%s" % (own, files[1]), folder  # the dataset's own key
