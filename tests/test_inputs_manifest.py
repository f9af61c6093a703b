"""Discovery and the frozen manifest: which images a job covers, and what changed since it started."""

import errno
import os

import pytest
from PIL import Image

from long_paths import make_deep_folder, write_relative
from parallel.inputs.manifest import (IMAGE_EXTENSIONS, Changes, DamagedManifest, Manifest, describe_changes,
                                      discover_images, manifest_path, read_job, scan_images)

RED, GREEN = (255, 0, 0), (0, 255, 0)


def solid(size, colour):
    return Image.new("RGB", size, colour)


def test_image_extensions():
    assert IMAGE_EXTENSIONS == {".jpg", ".jpeg", ".jpe", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp",
                                ".ppm", ".pgm", ".pbm", ".pnm"}
    assert all(extension == extension.lower() for extension in IMAGE_EXTENSIONS)


# --- discovery ---------------------------------------------------------------------------------------------


def test_discover_sorts_relative_slash_paths_with_any_case_of_extension(tmp_path):
    for name in ["b.JPG", "a/c.png", "a/b/d.Jpeg", "A.PnG", "z.tif", "notes.txt", "photo.jpg.txt", "x.webp",
                 "a/b/e.TIFF", "README"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    found = discover_images(tmp_path)
    assert found == ["A.PnG", "a/b/d.Jpeg", "a/b/e.TIFF", "a/c.png", "b.JPG", "x.webp", "z.tif"]
    assert found == sorted(found)
    assert discover_images(str(tmp_path) + "/") == found  # a str root, trailing slash or not


def test_discover_refuses_a_root_that_is_not_a_folder(tmp_path):
    with pytest.raises(ValueError, match="missing is not a folder"):
        discover_images(tmp_path / "missing")
    (tmp_path / "file.jpg").write_bytes(b"x")
    with pytest.raises(ValueError, match="file.jpg is not a folder"):
        discover_images(tmp_path / "file.jpg")


def test_discover_link_policy(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "x.jpg").mkdir(parents=True)  # a folder named like an image: descended
    solid((4, 4), RED).save(root / "x.jpg" / "inner.png")
    outside.mkdir()
    solid((4, 4), GREEN).save(outside / "far.png")
    os.symlink(outside / "far.png", root / "near.png")  # a link to a file outside: an image
    os.symlink(outside, root / "linked")  # a linked folder: not descended
    os.symlink(root, root / "x.jpg" / "back")  # would loop if followed
    os.symlink("loop.jpg", root / "loop.jpg")  # a link to itself
    os.symlink(tmp_path / "nowhere.png", root / "broken.png")
    assert discover_images(root) == ["broken.png", "loop.jpg", "near.png", "x.jpg/inner.png"]
    sizes = {path: size for path, size, _ in scan_images(root)}
    assert sizes["near.png"] == (outside / "far.png").stat().st_size  # the target's, through the link


def test_discover_skips_a_folder_it_cannot_list_with_a_warning(tmp_path, monkeypatch, caplog):
    (tmp_path / "locked").mkdir()
    (tmp_path / "open").mkdir()
    for name in ("locked/a.png", "open/b.png", "c.png"):
        (tmp_path / name).write_bytes(b"x")
    real_open = os.open

    def open_folder(path, flags, mode=0o777, *, dir_fd=None):
        if os.fspath(path) == "locked":
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", open_folder)
    with caplog.at_level("WARNING", logger="parallel"):
        assert discover_images(tmp_path) == ["c.png", "open/b.png"]
    assert any("locked" in record.getMessage() and "Permission denied" in record.getMessage()
               for record in caplog.records)


@pytest.mark.skipif(os.geteuid() == 0, reason="root lists a chmod 000 folder anyway")
def test_discover_skips_a_real_unreadable_folder(tmp_path, caplog):
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "a.png").write_bytes(b"x")
    (tmp_path / "c.png").write_bytes(b"x")
    os.chmod(tmp_path / "locked", 0)
    try:
        with caplog.at_level("WARNING", logger="parallel"):
            assert discover_images(tmp_path) == ["c.png"]
    finally:
        os.chmod(tmp_path / "locked", 0o755)
    assert any("locked" in record.getMessage() for record in caplog.records)


def test_a_path_longer_than_the_system_allows_is_found(tmp_path):
    """os.walk skips a folder whose path is over PATH_MAX; fwalk opens it relative to its parent."""
    deep = make_deep_folder(tmp_path)
    write_relative(deep / "deep.png", b"x" * 10)
    (tmp_path / "near.png").write_bytes(b"y")
    found = discover_images(tmp_path)
    assert len(found) == 2 and found[1] == "near.png"
    assert found[0].endswith("/deep.png") and len(os.fsencode(str(tmp_path / found[0]))) > 4096
    [(path, size, mtime)] = [row for row in scan_images(tmp_path) if row[0] == found[0]]
    assert size == 10 and mtime > 0


def test_excluded_paths_are_never_listed_nor_descended(tmp_path):
    for name in ("a.png", "feats.png", "feats.png.parts/part-000000.png", "sub/b.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    assert discover_images(tmp_path, exclude={"feats.png", "feats.png.parts"}) == ["a.png", "sub/b.png"]


# --- the frozen manifest -----------------------------------------------------------------------------------


def test_scan_records_size_and_time_and_marks_what_cannot_be_stated(tmp_path):
    (tmp_path / "a.png").write_bytes(b"abc")
    os.utime(tmp_path / "a.png", ns=(1_000_000_000, 2_000_000_123))
    os.symlink(tmp_path / "nowhere.png", tmp_path / "broken.png")
    os.mkfifo(tmp_path / "pipe.jpg")
    manifest = Manifest.scan(tmp_path)
    assert manifest.paths == ["a.png", "broken.png", "pipe.jpg"]
    assert list(manifest.sizes) == [3, -1, -1]
    assert list(manifest.mtimes) == [2_000_000_123, -1, -1]


def test_save_and_load_round_trip_with_any_name(tmp_path):
    names = sorted(["a.png", "caf\udce9.jpg", "new\nline.png", 'q"uote,comma.jpg'])
    manifest = Manifest(names, [1, 2, 3, -1], [10, 20, 30, -1])
    path = manifest_path(tmp_path / "out.csv")
    assert path.endswith("out.csv.manifest.parquet")
    manifest.save(path)
    assert Manifest.load(path) == manifest
    assert not os.path.exists(path + ".tmp")
    assert Manifest.load(tmp_path / "none.parquet") is None
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="bad.parquet is damaged.*--overwrite"):
        Manifest.load(tmp_path / "bad.parquet")


def test_changes_are_added_removed_and_changed_by_size_or_time():
    frozen = Manifest(["a", "b", "c", "d"], [1, 2, 3, 4], [10, 20, 30, 40])
    now = Manifest(["a", "b", "d", "e"], [1, 5, 4, 6], [10, 20, 41, 60])
    assert frozen.changes(now) == Changes(added=["e"], removed=["c"], changed=["b", "d"])
    assert not frozen.changes(frozen)
    updated = frozen.updated(now, ["b"])
    assert updated.paths == frozen.paths and list(updated.sizes) == [1, 5, 3, 4] and updated.mtimes == frozen.mtimes


def test_only_added_images_and_stale_rows_are_refused():
    changes = Changes(added=["n1", "n2", "n3", "n4"], removed=["gone", "never_done"], changed=["edited", "fixed"])
    before_rows_known = describe_changes(changes, "photos", "out.csv")
    assert "4 images added (n1, n2, n3, ...)" in before_rows_known and "removed" not in before_rows_known
    message = describe_changes(changes, "photos", "out.csv", committed={"gone", "edited"})
    assert message.startswith("photos changed since the job writing out.csv started: ")
    assert "1 image removed after its row was written (gone)" in message
    assert "1 image changed after its row was written (edited)" in message
    assert "--overwrite" in message and "--output" in message and "\n" not in message
    # An image without a row that was repaired or removed is simply processed.
    assert describe_changes(Changes([], ["never_done"], ["fixed"]), "photos", "out.csv", committed={"a"}) is None


# --- checksums: a damaged manifest is refused, never read as another list of images --------------------------


def rewrite(path, change_paths=None, change_record=None):
    """The manifest at `path` written again with its rows or its record changed, as damage would leave it."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pq.read_table(path)
    record = json.loads(table.schema.metadata[b"parallel.job"])
    if change_paths:
        raws = change_paths(table.column("path_bytes").to_pylist())
        table = table.set_column(1, "path_bytes", pa.array(raws, pa.binary()))
    if change_record:
        change_record(record)
    table = table.replace_schema_metadata({b"parallel.job": json.dumps(record, sort_keys=True).encode()})
    pq.write_table(table, path, row_group_size=record["shard_size"])


def flip_a_byte(raws, row=4):
    raws[row] = raws[row][:1] + bytes([raws[row][1] ^ 1]) + raws[row][2:]
    return raws


def test_one_flipped_byte_of_a_path_is_a_damaged_manifest(tmp_path):
    path = manifest_path(tmp_path / "out.csv")
    Manifest(["a%d.png" % index for index in range(7)], list(range(7)), list(range(7))).save(path, shard_size=3)
    assert Manifest.load_shard(path, 1).paths == ["a3.png", "a4.png", "a5.png"]
    rewrite(path, change_paths=flip_a_byte)
    with pytest.raises(DamagedManifest, match="out.csv.manifest.parquet is damaged \\(checksum\\): pass --overwrite"):
        Manifest.load(path)
    with pytest.raises(DamagedManifest, match="damaged \\(checksum\\)"):
        Manifest.load_shard(path, 1)
    assert Manifest.load_shard(path, 2).paths == ["a6.png"]  # each shard is checked alone
    assert read_job(path)["images"] == 7


@pytest.mark.parametrize("change", [lambda record: record.update(images=6), lambda record: record["job"].update(x="y"),
                                    lambda record: record["shards"].reverse()])
def test_a_changed_record_is_a_damaged_manifest(tmp_path, change):
    path = manifest_path(tmp_path / "out.csv")
    Manifest(["a%d.png" % index for index in range(7)], list(range(7)), list(range(7))).save(path, 3, job={"x": "z"})
    rewrite(path, change_record=change)
    with pytest.raises(DamagedManifest, match="damaged \\(checksum\\)"):
        read_job(path)
    error = pytest.raises(DamagedManifest, Manifest.load, path).value
    assert str(error.with_way_out("remove it")).endswith("is damaged (checksum): remove it")


def test_a_manifest_of_an_earlier_version_without_checksums_is_read(tmp_path):
    path = manifest_path(tmp_path / "out.csv")
    manifest = Manifest(["a.png", "b.png"], [1, 2], [3, 4])
    manifest.save(path, shard_size=1)
    rewrite(path, change_record=lambda record: [record.pop(key) for key in ("shards", "checksum")])
    assert Manifest.load(path) == manifest and Manifest.load_shard(path, 1).paths == ["b.png"]
    assert set(read_job(path)) == {"shard_size", "images", "job"}


def test_the_digest_covers_each_row_s_name_size_and_time_in_order():
    manifest = Manifest(["a.png", "b\udce9.png"], [1, 2], [3, 4])
    assert manifest.digest() == Manifest(["a.png", "b\udce9.png"], [1, 2], [3, 4]).digest()
    assert len(manifest.digest()) == 32 and manifest.digest(0, 1) == Manifest(["a.png"], [1], [3]).digest()
    names = ["a.png", "b\udce9.png"]
    for other in (Manifest(["a.png", "b\udce8.png"], [1, 2], [3, 4]), Manifest(names, [1, 3], [3, 4]),
                  Manifest(names, [1, 2], [3, 5]), Manifest(["a.pn", "gb\udce9.png"], [1, 2], [3, 4])):
        assert other.digest() != manifest.digest()


def test_a_refusal_says_the_way_out_it_is_given():
    message = describe_changes(Changes([], ["gone"], []), "photos", "out.csv", committed={"gone": 3},
                               way_out="remove out.csv.shards/shard-000003 and rerun to recompute it")
    assert message.endswith("1 image removed after its row was written (gone). Remove out.csv.shards/shard-000003 "
                            "and rerun to recompute it")
