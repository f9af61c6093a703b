"""benchmarks/bench_export.py on a few photos: its stages run end to end, and what its results say of the tars is
what the tars hold (a sample for each row exported, each the bytes of its row's file), the rerun over a finished
export writes no tar, the removals file removes the half it says."""

import sys
import tarfile
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_export  # noqa: E402


def test_the_photos_are_jpegs_of_640x480_whose_sizes_spread(tmp_path):
    from PIL import Image
    bench_export.make_photos(tmp_path, 12)
    paths = sorted(tmp_path.iterdir())
    assert [path.name for path in paths] == ["photo_%06d.jpg" % number for number in range(12)]
    for path in paths:
        with Image.open(path) as image:
            assert (image.format, image.size) == ("JPEG", (640, 480))
    sizes = [path.stat().st_size for path in paths]
    assert max(sizes) > 2 * min(sizes) and min(sizes) > 10_000


def test_a_quick_run_exports_every_row_and_the_selection_as_its_results_say(tmp_path):
    results = bench_export.main(["--images", "24", "--shard-size", "8", "--no-read-back", "--workdir",
                                 str(tmp_path)])
    files = {path.name: path.read_bytes() for path in (tmp_path / "photos-24").iterdir()}
    assert results["image bytes"] == sum(map(len, files.values())) and len(files) == 24
    for name, rows, tars in (("all", 24, 3), ("selection", 12, 2)):
        table = pq.read_table(tmp_path / (name + ".parquet"), columns=["key", "sample"]).to_pydict()
        held = {}
        for path in sorted((tmp_path / name).glob("*.tar")):
            with tarfile.open(path) as tar:
                held.update({member.name[:-4]: tar.extractfile(member).read() for member in tar
                             if member.name.endswith(".jpg")})
        assert len(held) == len(table["key"]) == rows == results[name + " samples in the tars"]
        assert all(held[sample] == files[key] for sample, key in zip(table["sample"], table["key"]))
        assert results[name + " image bytes in the tars"] == sum(map(len, held.values())) == \
            results[name + " image bytes of the rows' files"]
        assert results[name + " tars"] == tars and results[name + " each sample its row's file's bytes"]
    removed = {"photo_%06d.jpg" % row for row in bench_export.removed_rows(24)}
    assert set(pq.read_table(tmp_path / "selection.parquet").column("key").to_pylist()) == set(files) - removed
    assert results["all again wrote no tar"] and (tmp_path / "results.json").is_file()
    assert all(results[stage + " CPU seconds"] > 0 and results[stage + " peak MiB"] > 30
               for stage in ("job", "index", "all", "all again", "selection"))
    assert results["all MB a second"] == round(results["image bytes"] / 1e6 / results["all seconds"], 1)
