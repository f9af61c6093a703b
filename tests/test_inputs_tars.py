"""Tars read front to back once: members, their offsets, the damage of a tar accounted for, read back by range."""

import io
import tarfile

import pytest

from parallel.inputs import tars
from parallel.inputs.decode import ImageError


def make_tar(path, members, tar_format=tarfile.GNU_FORMAT):
    """Writes a tar of `members` [(name, bytes)]; returns its bytes."""
    with tarfile.open(path, "w", format=tar_format) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path.read_bytes()


def read(tar):
    index = []
    items = list(tars.stream_members(str(tar), index))
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
    list(tars.stream_members(str(path), index))
    tars.write_index(tmp_path / "index.parquet", index)
    assert tars.read_index(tmp_path / "index.parquet") == index
    assert tars.read_member(key, tmp_path / "index.parquet") == b"xyz" * 5
    assert tars.read_member(key, {entry.key: entry for entry in index}) == b"xyz" * 5
    assert tars.index_keys(tmp_path / "index.parquet", tars={str(path)}) == [entry.key for entry in index]
    assert tars.index_keys(tmp_path / "index.parquet", tars={"other.tar"}) == []
    with pytest.raises(ValueError, match="is not a member in the index"):
        tars.read_member(tars.member_key("other.jpg", str(path)), tmp_path / "index.parquet")
