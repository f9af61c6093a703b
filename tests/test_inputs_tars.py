"""Tars read front to back once: members, their offsets, the damage of a tar accounted for, read back by range."""

import tarfile

import pytest

from parallel.inputs import tar_stream, tars
from parallel.inputs.decode import ImageError
from stores import tar_bytes


def make_tar(path, members, tar_format=tarfile.GNU_FORMAT):
    """Writes a tar of `members` [(name, bytes)]; returns its bytes."""
    path.write_bytes(tar_bytes(members, tar_format))
    return path.read_bytes()


def read(tar):
    index = []
    items = list(tar_stream.stream_members(str(tar), index))
    return items, index


def test_image_members_in_tar_order_with_offsets_others_skipped(tmp_path):
    long_name = "deep/" + "x" * 150 + ".jpg"  # GNU long name, or pax path
    for tar_format in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT):
        members = [("b.jpg", b"B" * 700), ("a.json", b"{}"), ("c.PNG", b"C" * 3), ("empty.png", b"")]
        if tar_format != tarfile.USTAR_FORMAT:
            members.append((long_name, b"L" * 10))
        path = tmp_path / ("t%d.tar" % tar_format)
        content = make_tar(path, members, tar_format)
        items, index = read(path)
        wanted = [(name, data) for name, data in members if not name.endswith(".json")]
        assert [(tars.split_key(key)[0], data) for key, data in items] == wanted
        assert [entry.key for entry in index] == [tars.member_key(name, str(path)) for name, _ in wanted]
        for entry, (_, data) in zip(index, wanted):  # each member is one byte range of the tar
            assert content[entry.offset:entry.offset + entry.size] == data


def test_a_tar_cut_inside_a_member_costs_that_member_and_keeps_those_before(tmp_path):
    path = tmp_path / "t.tar"
    content = make_tar(path, [("a.jpg", b"A" * 600), ("b.jpg", b"B" * 2000), ("c.jpg", b"C" * 10)])
    path.write_bytes(content[:512 + 1024 + 512 + 300])  # a.jpg whole, b.jpg cut after 300 bytes
    items, index = read(path)
    assert items[0][1] == b"A" * 600
    key, failure = items[1]
    assert tars.split_key(key)[0] == "b.jpg" and isinstance(failure, ImageError) and failure.kind == "corrupt"
    assert "truncated" in failure.message and "ends 300 bytes into it" in failure.message
    assert len(items) == 2 and [entry.key for entry in index] == [key for key, _ in items]


def test_a_damaged_header_fails_the_rest_of_the_tar_as_one_row_named_after_it(tmp_path):
    path = tmp_path / "t.tar"
    content = bytearray(make_tar(path, [("a.jpg", b"A" * 10), ("b.jpg", b"B" * 10), ("c.jpg", b"C" * 10)]))
    content[1024 + 5] ^= 0xFF  # b.jpg's header: its checksum no longer holds
    path.write_bytes(bytes(content))
    items, index = read(path)
    assert items[0][1] == b"A" * 10
    assert items[1][0] == str(path) and items[1][1].kind == "corrupt"
    assert "header at byte 1024 has a wrong checksum" in items[1][1].message
    assert (index[1].key, index[1].offset, index[1].size) == (str(path), 1024, -1)


def test_a_tar_that_cannot_be_opened_is_one_failure_of_its_kind(tmp_path):
    items, index = read(tmp_path / "missing.tar")
    assert [(key, failure.kind) for key, failure in items] == [(str(tmp_path / "missing.tar"), "missing")]
    assert index == [tars.Entry(str(tmp_path / "missing.tar"), -1, -1)]


def test_keys_split_at_their_last_separator_and_members_read_back_by_range(tmp_path):
    path = tmp_path / "t.tar"
    make_tar(path, [("odd::name.jpg", b"xyz" * 5), ("b.jpg", b"B")])
    key = tars.member_key("odd::name.jpg", str(path))
    assert key == "tar://odd::name.jpg::%s" % path
    assert tars.split_key(key) == ("odd::name.jpg", str(path))
    with pytest.raises(ValueError, match="not the key of a tar member"):
        tars.split_key("a/b.jpg")
    index = []
    list(tar_stream.stream_members(str(path), index))
    tars.write_index(tmp_path / "index.parquet", index)
    assert tars.read_index(tmp_path / "index.parquet") == index
    assert tars.read_member(key, tmp_path / "index.parquet") == b"xyz" * 5
    assert tars.read_member(key, {entry.key: entry for entry in index}) == b"xyz" * 5
    assert tars.index_keys(tmp_path / "index.parquet", tars={str(path)}) == [entry.key for entry in index]
    assert tars.index_keys(tmp_path / "index.parquet", tars={"other.tar"}) == []
    with pytest.raises(ValueError, match="is not a member in the index"):
        tars.read_member(tars.member_key("other.jpg", str(path)), tmp_path / "index.parquet")


def tar_with_a_huge_member(path, huge):
    """A tar of a.jpg (3 bytes), big.jpg (`huge` bytes, a hole: sparse on disk) and c.jpg (3 bytes).

    Returns the offset of big.jpg's data."""
    with open(path, "wb") as file:
        file.write(make_tar(path.with_suffix(".a"), [("a.jpg", b"AAA")])[:1024])  # its header and data
        header = tarfile.TarInfo("big.jpg")
        header.size = huge
        file.write(header.tobuf(tarfile.GNU_FORMAT))
        offset = file.tell()
        file.seek(offset + -(-huge // 512) * 512)  # the member's bytes: a hole, never written
        file.write(make_tar(path.with_suffix(".c"), [("c.jpg", b"CCC")]))  # c.jpg and the end marker
    return offset


def test_a_member_larger_than_an_image_may_be_is_too_large_and_never_read_into_memory(tmp_path, monkeypatch):
    import tracemalloc
    from parallel.inputs import decode
    monkeypatch.setattr(decode, "MAX_BYTES", 32 << 20, raising=False)
    path = tmp_path / "t.tar"
    offset = tar_with_a_huge_member(path, 256 << 20)  # 8 times the limit
    tracemalloc.start()
    try:
        items, index = read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(tars.split_key(key)[0], data if isinstance(data, bytes) else data.kind) for key, data in items] == [
        ("a.jpg", b"AAA"), ("big.jpg", "too_large"), ("c.jpg", b"CCC")]
    assert "a member of %d bytes, more than the %d an image may take" % (256 << 20, 32 << 20) in items[1][1].message
    assert (index[1].offset, index[1].size) == (offset, 256 << 20)
    assert peak < 16 << 20, peak  # the stream's 8 MiB buffer, not the member's 256 MiB


def test_a_too_large_member_of_a_tar_in_a_store_is_passed_by_without_a_get_of_its_bytes(s3_store, tmp_path,
                                                                                         monkeypatch):
    from parallel.inputs import decode, locations, remote
    from stores import store
    monkeypatch.setattr(decode, "MAX_BYTES", 64 << 10, raising=False)
    monkeypatch.setattr(locations, "STREAM_BLOCK", 16 << 10)
    monkeypatch.setattr(locations, "SEEK_BYTES", 16 << 10)
    path = tmp_path / "t.tar"
    tar_with_a_huge_member(path, 2 << 20)
    store().pipe("bucket/huge/t.tar", path.read_bytes())
    fetched = []
    real = remote.fetch
    monkeypatch.setattr(remote, "fetch", lambda url, start=None, stop=None, **version: fetched.append(
        stop - start) or real(url, start, stop, **version))
    items, _ = read("s3://bucket/huge/t.tar")
    assert [data if isinstance(data, bytes) else data.kind for _, data in items] == [b"AAA", "too_large", b"CCC"]
    assert sum(fetched) < 4 * (16 << 10), fetched  # the headers' blocks; none of the member's 2 MiB


def test_the_values_kept_beside_a_member_stay_with_its_last_copy(tmp_path):
    """A name given twice (`tar -rf`): the entries LaterCopies resolves keep what each copy's sample kept."""
    path = tmp_path / "t.tar"
    make_tar(path, [("s/1.jpg", b"old"), ("s/1.txt", b"first"), ("s/2.jpg", b"two"), ("s/2.txt", b"second"),
                    ("s/1.jpg", b"new"), ("s/1.txt", b"again")])
    entries = []
    copies = tar_stream.LaterCopies(entries)
    items = list(copies.wrap(tar_stream.stream_members(str(path), entries, keep=("txt", "json"))))
    assert [data for _, data in items] == [b"old", b"two", b"new"]
    resolved, _, _ = copies.resolve()
    assert [(tars.split_key(entry.key)[0], entry.kept) for entry in resolved] == [
        ("s/2.jpg", ("second", None)), ("s/1.jpg", ("again", None))]


def test_an_index_is_read_for_a_few_keys_a_row_group_at_a_time(tmp_path, monkeypatch):
    import pyarrow.parquet as pq
    monkeypatch.setattr(tars, "INDEX_ROW_GROUP", 3)
    entries = [tars.Entry(tars.member_key("%d.jpg" % number, "/d/t.tar"), 512 * number, 10 + number,
                          ("caption %d" % number, None if number % 2 else "{}")) for number in range(10)]
    path = tmp_path / "index.parquet"
    tars.write_index(path, entries, ("txt", "json"))
    assert pq.ParquetFile(path).num_row_groups == 4
    assert tars.kept_names(path) == ("txt", "json") and tars.read_index(path) == entries
    wanted = [entries[7].key, entries[1].key, "tar://missing.jpg::/d/t.tar"]
    read, groups = pq.ParquetFile.read_row_group, []
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda file, group, columns, **options: groups.append(
        (group, len(columns))) or read(file, group, columns=columns, **options))
    assert tars.read_index(path, wanted) == [entries[1], entries[7]]  # in the index's order
    assert [group for group, columns in groups if columns > 1] == [0, 2]  # the groups holding them, whole
    assert [group for group, columns in groups if columns == 1] == [0, 1, 2, 3]  # every group's keys
    assert tars.read_index(path, []) == []
