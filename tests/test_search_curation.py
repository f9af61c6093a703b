"""search/curation.py: the command line's duplicates and export, through the curation walk-through of docs/search.md
run as written (its commands in order, in a folder holding the two outputs it names)."""

import shlex
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

import search_features
from parallel.inputs.manifest import Manifest, manifest_path
from search_data import SETTINGS, clustered, near_copy, write_npy
from services import png

DOCS = Path(__file__).resolve().parent.parent / "docs" / "search.md"
NAMES = ["p%02d.png" % row for row in range(28)] + ["cat.png", "dog.png", "dog-2.png"]


def _walk_through():
    """The commands of docs/search.md's curation block, each as search_features.main's argv."""
    text = DOCS.read_text()
    block = text[text.index("```bash\npython search_features.py index train.npy"):]
    lines = block[len("```bash\n"):block.index("\n```")].splitlines()
    return [shlex.split(command)[2:] for line in lines for command in line.split(" && ")]


def test_the_curation_walk_through_of_docs_search_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    photos = tmp_path / "photos"
    photos.mkdir()
    for row, name in enumerate(NAMES):  # dog.png has more bytes than its copy dog-2.png: largest-image keeps it
        (photos / name).write_bytes(png((60, 40) if name == "dog.png" else (20 + row % 5, 16), row))
    train = clustered(31, seed=4)
    train[NAMES.index("dog-2.png")] = near_copy(train[NAMES.index("dog.png")])
    write_npy(tmp_path / "train.npy", train, settings=dict(SETTINGS, images=str(photos)))
    # write_npy names rows img/NNNNN.jpg: the training split's rows are named by their photos instead.
    (tmp_path / "train.npy.paths.csv").write_text("path\n" + "".join(name + "\n" for name in NAMES))
    Manifest.scan(photos).save(manifest_path(tmp_path / "train.npy"))
    test = clustered(12, seed=5) * 1.2
    test[3] = near_copy(train[NAMES.index("cat.png")], seed=9)
    write_npy(tmp_path / "test.npy", test, first=1000)
    for argv in _walk_through():
        assert search_features.main(["--quiet"] + argv) == 0, argv
    removed = pq.read_table("rm.parquet").to_pylist()
    assert [(line["key"], line["kept_key"], line["remove"]) for line in removed] == [
        ("dog.png", "dog.png", False), ("dog-2.png", "dog.png", True)]
    leaks = pq.read_table("test.npy.index/leakage.parquet").to_pylist()
    assert [(line["key"], line["kept_key"]) for line in leaks] == [("img/01003.jpg", "cat.png")]
    assert pq.read_table("subset.parquet").column("key").to_pylist() == [name for name in NAMES if name != "dog-2.png"]
    assert sorted(path.name for path in (tmp_path / "subset").iterdir()) == ["00000.tar", "_export.json"]
    assert "img/01003.jpg" not in pq.read_table("clean-test.parquet").column("key").to_pylist()
    cats = pq.read_table("cats.parquet").to_pylist()
    assert cats[0]["key"] == "cat.png" or "cat.png" in [line["key"] for line in cats]
    assert np.isclose(max(line["score"] for line in cats), 1.0)
