"""parallel.inputs.sorting: the images of a folder or a list in path order, spilled in runs, and the
manifest written from them a shard at a time: the same file as Manifest.save, in memory that does
not grow with the number of images."""

import os
import tracemalloc

import pytest

from parallel.inputs.manifest import Manifest
from parallel.inputs import sorting
from parallel.inputs.sorting import SortedEntries, folder_entries, list_entries, read_list

# Names whose order is easy to get wrong: "a.jpg" < "a/b.jpg" ("." < "/"), case, a name that is not UTF-8.
NAMES = ["a.jpg", "a/b.jpg", "a/a.png", "B.jpg", "b.jpg", "a0.jpg", "z/y/x.jpg", os.fsdecode(b"n\xff.jpg"),
         "\u00e9t\u00e9.jpg", "a-b.jpg"] + ["many/%04d.jpg" % number for number in range(37)]


def make_folder(root):
    for number, name in enumerate(NAMES):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * number)
    (root / "notes.txt").write_text("not an image")
    return root


def test_runs_spilled_to_disk_merge_into_sorted_order():
    entries = SortedEntries([(name, number, -number) for number, name in enumerate(reversed(NAMES))], run_entries=4)
    assert len(entries._runs) == -(-len(NAMES) // 4) and len(entries) == len(NAMES)
    assert [entry[0] for entry in entries] == sorted(NAMES)
    assert [entry[0] for entry in entries] == sorted(NAMES)  # iterable again
    assert [len(shard) for shard in entries.shards(10)] == [10, 10, 10, 10, 7]
    entries.close()


@pytest.mark.parametrize("run_entries", [3, 1000])
def test_a_folder_s_manifest_is_the_file_manifest_save_writes(tmp_path, run_entries):
    root = make_folder(tmp_path / "images")
    Manifest.scan(root).save(tmp_path / "memory.parquet", shard_size=8, job={"k": "v"})
    with folder_entries(root, run_entries=run_entries) as entries:
        entries.save(tmp_path / "spilled.parquet", shard_size=8, job={"k": "v"})
        assert entries.manifest() == Manifest.scan(root)
    assert (tmp_path / "spilled.parquet").read_bytes() == (tmp_path / "memory.parquet").read_bytes()
    assert Manifest.load(tmp_path / "spilled.parquet").paths == sorted(NAMES)
    assert Manifest.load_shard(tmp_path / "spilled.parquet", 2).paths == sorted(NAMES)[16:24]


def test_excluded_paths_and_a_missing_folder(tmp_path):
    root = make_folder(tmp_path / "images")
    with folder_entries(root, exclude={"many", "a.jpg"}, run_entries=2) as entries:
        assert [entry[0] for entry in entries] == sorted(name for name in NAMES
                                                         if name != "a.jpg" and not name.startswith("many/"))
    with pytest.raises(ValueError, match="is not a folder"):
        folder_entries(tmp_path / "nowhere")


def test_a_list_file_is_sorted_checked_and_stated_in_runs(tmp_path):
    root = make_folder(tmp_path / "images")
    listing = tmp_path / "list.txt"
    listing.write_text("# a comment\n\n" + "".join(name + "\n" for name in reversed(NAMES[:9])) + "gone.jpg\n",
                       encoding="utf-8", errors="surrogateescape")
    with list_entries(listing, root, run_entries=2) as entries:
        got = list(entries)
    assert [entry[0] for entry in got] == sorted(NAMES[:9] + ["gone.jpg"])
    assert dict((path, size) for path, size, _ in got)["gone.jpg"] == -1  # fails when read, as before
    assert dict((path, size) for path, size, _ in got)["a/b.jpg"] == 1
    assert read_list(listing, root).paths == [entry[0] for entry in got]
    listing.write_text("a.jpg\nb.jpg\na.jpg\nb.jpg\nb.jpg\nc.jpg\n")
    with pytest.raises(ValueError, match=r"lists 2 paths twice \(a.jpg, b.jpg\)"):
        list_entries(listing, root, run_entries=2)
    listing.write_text("# nothing\n")
    with pytest.raises(ValueError, match="lists no images"):
        list_entries(listing, root)
    (tmp_path / "list.csv").write_text("name\nx.jpg\n")
    with pytest.raises(ValueError, match="cannot be read: it has no column 'path'"):
        list_entries(tmp_path / "list.csv", root)


def _peak_bytes(count, tmp_path):
    # Runs of 2,000 read back 50 at a time, as the defaults' 262,144 and 2,048 in proportion.
    tracemalloc.start()
    try:
        with SortedEntries((("f%03d/image_%07d.jpg" % (number % 997, number * 7919 % count), 0, 0)
                            for number in range(count)), run_entries=2_000) as entries:
            entries.save(tmp_path / ("m%d.parquet" % count), shard_size=500)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_number_of_images(tmp_path, monkeypatch):
    monkeypatch.setattr(sorting, "CHUNK_ENTRIES", 50)
    _peak_bytes(1_000, tmp_path)  # pyarrow's first use allocates for itself: not counted below
    small, large = _peak_bytes(10_000, tmp_path), _peak_bytes(40_000, tmp_path)
    assert large < 1.5 * small, (small, large)  # 1.2 measured; the whole list in memory: 3.8
    assert Manifest.load(tmp_path / "m40000.parquet").paths == sorted(Manifest.load(tmp_path / "m40000.parquet").paths)
