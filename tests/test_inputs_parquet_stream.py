"""Parquet files of images read front to back once: rows, their keys and kept values, failures, read back by row."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from image_files import noise_jpeg
from parallel.inputs import parquet_stream, tars
from parallel.inputs.decode import ImageError


def jpegs(folder, count):
    """`count` small JPEG files under `folder` (each different): [(path, bytes)]."""
    folder.mkdir(exist_ok=True)
    paths = [noise_jpeg(folder / ("%d.jpg" % number), size=(16 + number, 16), seed=number) for number in range(count)]
    return [(str(path), path.read_bytes()) for path in paths]


def datasets_parquet(path, files, embed=True):
    """A Parquet file of datasets' Image feature: its bytes embedded as push_to_hub embeds them (the hub's
    files), or, embed=False, as to_parquet writes a dataset of paths (datasets 5: the paths only)."""
    import datasets
    from datasets.table import embed_table_storage
    datasets.disable_progress_bars()
    dataset = datasets.Dataset.from_dict({"image": [name for name, _ in files]}).cast_column("image", datasets.Image())
    if embed:
        dataset = dataset.with_format("arrow").map(embed_table_storage, batched=True).with_format(None)
    dataset.to_parquet(str(path))
    return str(path)


def img2dataset_parquet(path, images, keys=None, row_group_size=3, **options):
    """A Parquet file of img2dataset's columns (key, jpg, caption, url, width, height, status, error_message)."""
    count = len(images)
    table = pa.table({
        "key": pa.array(keys if keys is not None else ["%09d" % number for number in range(count)], pa.string()),
        "jpg": pa.array(images, pa.binary()),
        "caption": ["a photo number %d" % number for number in range(count)],
        "url": ["https://example.com/%d.jpg" % number for number in range(count)],
        "width": pa.array([640] * count, pa.int32()), "height": pa.array([480] * count, pa.int32()),
        "status": ["success"] * count, "error_message": pa.array([None] * count, pa.string())})
    pq.write_table(table, str(path), row_group_size=row_group_size, **options)
    return str(path)


def read(path, **options):
    index = []
    return list(parquet_stream.stream_rows(str(path), index, **options)), index


def test_datasets_image_rows_in_order_keyed_by_row_number_and_read_back(tmp_path):
    files = jpegs(tmp_path / "jpegs", 5)
    path = datasets_parquet(tmp_path / "train-00000-of-00001.parquet", files)
    items, index = read(path)
    assert [data for _, data in items] == [data for _, data in files]  # byte for byte
    assert [key for key, _ in items] == ["parquet://#%d::%s" % (number, path) for number in range(5)]
    assert [(entry.key, entry.offset, entry.size, entry.kept) for entry in index] == [
        (key, number, len(data), ()) for number, (key, data) in enumerate(items)]
    assert tars.split_key(items[3][0]) == ("#3", path) and tars.is_member(items[3][0])
    for (key, data), entry in zip(items, index):
        assert parquet_stream.read_row(key, entry) == data
    parquet_stream.check_file(path)
    # A dataset of paths written by to_parquet holds no bytes: each row is a missing image, its path named.
    items, index = read(datasets_parquet(tmp_path / "paths.parquet", files[:2], embed=False))
    assert [(data.kind, data.message) for _, data in items] == [
        ("missing", "row %d has no image bytes (its path: %s; datasets' to_parquet of local files keeps their "
                    "paths only: embed the bytes, as push_to_hub does, or give the images' folder)" % (number, name))
        for number, (name, _) in enumerate(files[:2])]
    assert [(entry.offset, entry.size) for entry in index] == [(0, 0), (1, 0)]


def test_img2dataset_rows_keyed_by_their_key_column_with_the_values_kept(tmp_path):
    files = jpegs(tmp_path / "jpegs", 7)
    path = img2dataset_parquet(tmp_path / "00000.parquet", [data for _, data in files])  # row groups of 3
    keep = ("caption", "url", "width", "error_message")
    parquet_stream.check_file(path, keep=keep)
    items, index = read(path, keep=keep)
    assert [data for _, data in items] == [data for _, data in files]
    assert [key for key, _ in items] == [parquet_stream.row_key("%09d" % number, path) for number in range(7)]
    assert index[4].kept == ("a photo number 4", "https://example.com/4.jpg", "640", None)
    for (key, data), entry in zip(items, index):  # rows of the first, a middle and the last row group
        assert parquet_stream.read_row(key, entry) == data
    changed = tars.Entry(index[4].key, 4, index[4].size + 1)
    with pytest.raises(ImageError, match="the file was replaced") as error:
        parquet_stream.read_row(changed.key, changed)
    assert error.value.kind == "changed"
    with pytest.raises(ValueError, match="not the key of a Parquet file's row"):
        parquet_stream.read_row(tars.member_key("a.jpg", path), index[0])
    with pytest.raises(ValueError, match="not a readable row"):
        parquet_stream.read_row(index[0].key, tars.Entry(path, -1, -1))


def test_own_keys_that_are_null_empty_hashed_separated_or_repeated_become_row_numbers(tmp_path):
    keys = ["a", None, "", "#7", "x::y", "a", "b"]
    path = img2dataset_parquet(tmp_path / "k.parquet", [b"%d" % number for number in range(7)], keys=keys)
    items, _ = read(path)
    assert [tars.split_key(key)[0] for key, _ in items] == ["a", "#1", "#2", "#3", "#4", "#5", "b"]
    assert len({key for key, _ in items}) == 7


def test_kept_values_as_text(tmp_path):
    assert [parquet_stream.kept_text(value) for value in (None, "é", b"caf\xc3\xa9", b"\xff", 3, 2.5, True, [7],
                                                          ["a", b"b", 1], [], {"a": 1})] == [
        None, "é", "café", "\ufffd", "3", "2.5", "True", "7", '["a", "b", 1]', "[]", '{"a": 1}']
    table = pa.table({"jpg": [b"A", b"B"], "labels": pa.array([[3], [1, 2]], pa.list_(pa.int64())),
                      "text": pa.array([b"hello", None], pa.binary())})
    pq.write_table(table, tmp_path / "t.parquet")
    _, index = read(tmp_path / "t.parquet", keep=("labels", "text"))
    assert [entry.kept for entry in index] == [("3", "hello"), ("[1, 2]", None)]


def test_a_null_image_is_missing_and_an_oversized_one_too_large_the_others_read(tmp_path):
    files = jpegs(tmp_path / "jpegs", 3)
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = [{"bytes": files[0][1], "path": "0.jpg"}, {"bytes": None, "path": "gone/1.jpg"}, None,
            {"bytes": files[2][1], "path": "2.jpg"}]
    pq.write_table(pa.table({"image": pa.array(rows, image)}), tmp_path / "hf.parquet")
    items, index = read(tmp_path / "hf.parquet")
    assert items[0][1] == files[0][1] and items[3][1] == files[2][1]
    assert items[1][1].kind == "missing"
    assert items[1][1].message.startswith("row 1 has no image bytes (its path: gone/1.jpg; datasets' to_parquet")
    assert (items[2][1].kind, items[2][1].message) == ("missing", "row 2 has no image bytes")
    assert [entry.size for entry in index] == [len(files[0][1]), 0, 0, len(files[2][1])]
    with pytest.raises(ImageError, match="row 1 has no image bytes") as error:
        parquet_stream.read_row(index[1].key, index[1])
    assert error.value.kind == "missing"
    limit = len(files[0][1])
    items, index = read(tmp_path / "hf.parquet", max_bytes=limit)
    assert items[0][1] == files[0][1] and items[3][1].kind == "too_large"
    assert "%d bytes, more than the %d" % (len(files[2][1]), limit) in items[3][1].message
    assert index[3].size == len(files[2][1])


def test_an_image_column_named_binary_or_struct_and_none_found_is_one_line(tmp_path):
    struct = pa.array([{"bytes": b"S", "path": None}], pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"picture": struct, "img": [b"B"], "caption": ["c"]}), tmp_path / "t.parquet")
    path = str(tmp_path / "t.parquet")
    assert [data for _, data in read(path, image_column="picture")[0]] == [b"S"]
    assert [data for _, data in read(path, image_column="img")[0]] == [b"B"]
    with pytest.raises(ValueError) as error:
        parquet_stream.check_file(path)
    message = str(error.value)
    assert "\n" not in message and message.startswith(path) and "picture, img, caption" in message
    assert "--image-column" in message
    items, index = read(path)
    assert [(key, data.kind, data.message) for key, data in items] == [(path, "unreadable", message)]
    assert index == [tars.Entry(path, -1, -1)]
    with pytest.raises(ValueError, match="neither binary nor a struct"):
        parquet_stream.check_file(path, image_column="caption")
    with pytest.raises(ValueError, match="no column 'nope'"):
        parquet_stream.check_file(path, image_column="nope")
    with pytest.raises(ValueError, match="no column 'label' to keep"):
        parquet_stream.check_file(path, image_column="img", keep=("caption", "label"))


def test_a_file_that_is_not_parquet_or_is_missing_is_the_files_failure(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"PK\x03\x04 this is a zip, not Parquet" * 10)
    path = str(tmp_path / "a.parquet")
    items, index = read(path)
    assert [(key, data.kind) for key, data in items] == [(path, "corrupt")]
    assert items[0][1].message.startswith("%s is not a Parquet file" % path) and index == [tars.Entry(path, -1, -1)]
    with pytest.raises(ValueError, match="is not a Parquet file") as error:
        parquet_stream.check_file(path)
    assert "\n" not in str(error.value)
    missing = str(tmp_path / "missing.parquet")
    items, index = read(missing)
    assert [(key, data.kind) for key, data in items] == [(missing, "missing")]
    with pytest.raises(ValueError, match="no such file"):
        parquet_stream.check_file(missing)


def test_a_damaged_page_fails_the_rest_of_the_file_after_the_rows_before_it(tmp_path, monkeypatch):
    monkeypatch.setattr(parquet_stream, "ROWS_AT_A_TIME", 3)  # a batch is a row group: the first is read whole
    images = [bytes([number]) * 3000 for number in range(6)]
    path = img2dataset_parquet(tmp_path / "d.parquet", images, write_page_checksum=True, use_dictionary=False,
                               compression="none")
    content = bytearray((tmp_path / "d.parquet").read_bytes())
    at = content.index(images[4])  # the second row group's (rows 3, 4, 5) image page: its checksum no longer holds
    content[at + 100] ^= 0xFF
    (tmp_path / "d.parquet").write_bytes(bytes(content))
    items, index = read(path)
    assert [data for _, data in items[:3]] == images[:3]
    assert len(items) == 4 and items[3][0] == path and items[3][1].kind == "corrupt"
    assert "its rows from 3 on cannot be read" in items[3][1].message and "\n" not in items[3][1].message
    assert index[3] == tars.Entry(path, 3, -1)
    with pytest.raises(ImageError, match="row group 1 cannot be read") as error:
        parquet_stream.read_row(index[0].key.replace("000000000", "000000004"), tars.Entry("", 4, 3000))
    assert error.value.kind == "corrupt"


def test_rows_of_a_large_file_are_streamed_not_held(tmp_path):
    import pyarrow
    # 40 MiB in 2 row groups of 20 MiB, in pages of 16 rows (1 MiB): a page is the least pyarrow reads at once.
    images = [bytes([number % 256]) * (64 << 10) for number in range(640)]
    path = img2dataset_parquet(tmp_path / "big.parquet", images, row_group_size=320, compression="none",
                               use_dictionary=False, write_batch_size=16, data_page_size=1 << 20)
    peak, index = 0, []
    for number, (_, data) in enumerate(parquet_stream.stream_rows(path, index)):
        assert data == images[number]
        peak = max(peak, pyarrow.total_allocated_bytes())
    assert len(index) == 640
    assert peak < 8 << 20, peak  # a batch's rows (2 MiB) and a page, not a 20 MiB row group's column


def test_a_file_in_a_store_is_read_at_its_version_and_object_changed_when_replaced(s3_store, tmp_path, monkeypatch):
    from parallel.inputs import locations, remote
    from stores import store
    old = [bytes([number]) * 50000 for number in range(8)]
    new = [bytes([number + 100]) * 50000 for number in range(8)]
    img2dataset_parquet(tmp_path / "old.parquet", old, row_group_size=2, compression="none", use_dictionary=False)
    img2dataset_parquet(tmp_path / "new.parquet", new, row_group_size=2, compression="none", use_dictionary=False)
    url = "s3://bucket/parquet/part-0.parquet"
    store().pipe(url[len("s3://"):], (tmp_path / "old.parquet").read_bytes())
    recorded = remote.describe(url)[2]
    parquet_stream.check_file(url, version=recorded, keep=("caption",))
    items, index = read(url, version=recorded, keep=("caption",))
    assert [data for _, data in items] == old and index[2].kept == ("a photo number 2",)
    assert items[5][0] == "parquet://000000005::" + url
    fetched, real = [], remote.fetch
    monkeypatch.setattr(remote, "fetch", lambda url, start=None, stop=None, version=None: fetched.append(
        (start, stop)) or real(url, start, stop, version))
    assert parquet_stream.read_row(items[5][0], index[5]) == old[5]
    # The footer, then the image column chunk of the row's row group (2 rows of 50,000 bytes): one range each.
    assert len(fetched) == 2 and 2 * 50000 <= fetched[1][1] - fetched[1][0] < 3 * 50000, fetched
    monkeypatch.undo()
    # Replaced while it is read: what came before is of the old version only, then ObjectChanged.
    monkeypatch.setattr(locations, "STREAM_BLOCK", 4096)
    monkeypatch.setattr(parquet_stream, "BUFFER_BYTES", 4096)
    monkeypatch.setattr(parquet_stream, "ROWS_AT_A_TIME", 1)
    real, reads = remote.fetch, []

    def fetch(url, start=None, stop=None, version=None):
        reads.append((start, stop))
        if len(reads) == 6:  # after the footer and the first rows
            store().pipe(url[len("s3://"):], (tmp_path / "new.parquet").read_bytes())
        return real(url, start, stop, version)
    monkeypatch.setattr(remote, "fetch", fetch)
    seen = []
    with pytest.raises(remote.ObjectChanged) as changed:
        for item in parquet_stream.stream_rows(url, []):
            seen.append(item)
    assert changed.value.recorded == recorded and 0 < len(seen) < 8 and all(data in old for _, data in seen)
    monkeypatch.undo()
    with pytest.raises(remote.ObjectChanged):  # the version the job recorded, given: refused when opened
        list(parquet_stream.stream_rows(url, [], version=recorded))
