"""What --images names: a folder, a prefix of a store, tars (a path, braces quoted or expanded, a glob)."""

import pytest

from parallel.inputs import sources
from parallel.inputs.sources import FOLDER, PARQUET, PREFIX, TARS, parse_images


def test_a_folder_a_prefix_and_tars(tmp_path, monkeypatch):
    assert parse_images(tmp_path) == sources.Source(FOLDER, str(tmp_path.resolve()))
    assert parse_images("s3://bucket/photos") == sources.Source(PREFIX, "s3://bucket/photos/")
    for number in range(3):
        (tmp_path / ("%06d.tar" % number)).write_bytes(b"")
    tars = tuple(str(tmp_path / ("%06d.tar" % number)) for number in range(3))
    monkeypatch.chdir(tmp_path)
    quoted = parse_images("{000000..000002}.tar")
    assert quoted == sources.Source(TARS, "", tars)
    assert parse_images(["000002.tar", "000000.tar", "000001.tar"]) == quoted  # what the shell passes unquoted
    assert parse_images("*.tar") == quoted
    assert quoted.description == "3 tars %s .. %s (list %s)" % (tars[0], tars[2], quoted.description[-17:-1])
    assert parse_images("s3://b/s/{0..1}.tar").files == ("s3://b/s/0.tar", "s3://b/s/1.tar")
    assert parse_images("000001.tar").description == tars[1]


@pytest.mark.parametrize("values, message", [
    (["photos", "a.tar"], "got 2 values, of which photos is not a .tar, .parquet or .tfrecord, nor a file of one by its first bytes: quote"),
    ("nowhere", "images=nowhere is not a folder"),
    ("none-*.tar", "names no tar"),
    ("a::b.tar", "whose path holds '::'"),
])
def test_what_is_refused_says_why(tmp_path, monkeypatch, values, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("*", r"\*")):
        parse_images(values)


def test_a_tar_job_scans_its_tars_not_their_members(tmp_path):
    (tmp_path / "1.tar").write_bytes(b"x" * 1024)
    manifest = parse_images([str(tmp_path / "1.tar"), str(tmp_path / "2.tar")]).scan()
    assert manifest.paths == [str(tmp_path / "1.tar"), str(tmp_path / "2.tar")]
    assert list(manifest.sizes) == [1024, -1] and manifest.etags == ["", ""]  # 2.tar fails as missing when read


@pytest.mark.parametrize("values", ["ftp://host/photos/", "ftp://host/shards/000000.tar", ["ftp://h/0.tar", "1.tar"],
                                    "sftp://host/shards/{0..3}.tar"])
def test_a_url_of_a_scheme_that_is_not_a_store_is_refused_naming_those_that_are(values):
    with pytest.raises(ValueError, match=r"^images=s?ftp://.*: s?ftp:// is not a store this program reads; images may "
                                         r"be local paths or in s3://, s3a://, gs://, gcs://, http:// or https://$"):
        parse_images(values)


def test_a_wids_index_or_a_list_naming_such_a_url_is_refused_too(tmp_path):
    import json
    from parallel.inputs.sorting import read_list
    index = tmp_path / "index.json"
    index.write_text(json.dumps({"shardlist": [{"url": "ftp://host/0.tar"}]}))
    with pytest.raises(ValueError, match="^images=ftp://host/0.tar: ftp:// is not a store"):
        parse_images(str(index))
    listing = tmp_path / "list.txt"
    listing.write_text("a.jpg\nftp://host/b.jpg\n")
    with pytest.raises(ValueError, match="^--images-from %s lists ftp://host/b.jpg: ftp:// is not a store" % listing):
        read_list(listing, tmp_path)


def test_tars_of_which_none_exists_are_a_usage_error_and_a_pattern_with_gaps_is_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for values in ("000000.tar", "{000000..000002}.tar", ["000000.tar", "000001.tar"]):  # a typo; nothing there
        with pytest.raises(ValueError, match=r"^images=.* names no tar that exists: .*000000.tar: no such file$"):
            parse_images(values).scan()
    (tmp_path / "000001.tar").write_bytes(b"x" * 1024)
    gaps = parse_images("{000000..000002}.tar").scan()  # a gap of a numbered series: its tars fail as missing
    assert list(gaps.sizes) == [-1, 1024, -1]
    with pytest.raises(ValueError, match=r"^images=.*none-\*.tar names no tar: the glob .*none-\*.tar matches none$"):
        parse_images(["000001.tar", "none-*.tar"])  # each glob must match


def test_a_prefix_without_an_image_object_is_a_usage_error_as_an_empty_folder_is(s3_store):
    from stores import store
    store().pipe("bucket/no-images/readme.txt", b"not an image")
    for prefix in ("s3://bucket/no-images/", "s3://bucket/nothing-here/"):
        with pytest.raises(ValueError, match="^images=%s holds no image: no object under it has an image extension$"
                           % prefix):
            parse_images(prefix).scan()


def test_a_prefix_of_parquet_or_tfrecord_files_and_no_image_names_the_pattern_that_takes_them(s3_store):
    """A store prefix img2dataset wrote into was "no image" without a word of its files: the line names them and
    the pattern to pass, which takes them."""
    from stores import store
    for name in ("00000.parquet", "00001.parquet", "00000_stats.json", ".cache/x.parquet"):
        store().pipe("bucket/img2dataset/" + name, b"")
    with pytest.raises(ValueError) as refused:
        parse_images("s3://bucket/img2dataset/").scan()
    assert str(refused.value) == ("images=s3://bucket/img2dataset/ holds no image but 2 Parquet files: pass "
                                  "images='s3://bucket/img2dataset/*.parquet'")
    assert parse_images("s3://bucket/img2dataset/*.parquet") == sources.Source(
        PARQUET, "", ("s3://bucket/img2dataset/00000.parquet", "s3://bucket/img2dataset/00001.parquet"))
    store().pipe("bucket/mixed/a/0.tfrecord", b"")
    store().pipe("bucket/mixed/1.tar", b"")
    with pytest.raises(ValueError) as refused:
        parse_images("s3://bucket/mixed").scan()
    assert str(refused.value) == ("images=s3://bucket/mixed/ holds no image but 1 tar and 1 TFRecord file: pass "
                                  "images='s3://bucket/mixed/*.tar' or images='s3://bucket/mixed/**/*.tfrecord'")
    assert parse_images("s3://bucket/mixed/**/*.tfrecord").files == ("s3://bucket/mixed/a/0.tfrecord",)


def test_files_of_no_known_ending_are_taken_by_their_first_bytes(tmp_path, monkeypatch, s3_store):
    import gzip
    import io
    import tarfile

    import pyarrow as pa
    import pyarrow.parquet as pq
    from parallel.inputs.sources import PARQUET, TFRECORD, sniff
    from parallel.inputs.tfrecord_stream import masked_crc
    from stores import store
    data = b"an Example's bytes"
    header = len(data).to_bytes(8, "little")
    record = header + masked_crc(header).to_bytes(4, "little") + data + masked_crc(data).to_bytes(4, "little")
    (tmp_path / "imagenet").mkdir()
    for number in range(3):  # TensorFlow's ImageNet names: no ending
        (tmp_path / "imagenet" / ("train-%05d-of-00003" % number)).write_bytes(record * 2)
    (tmp_path / "packed").write_bytes(gzip.compress(record))
    pq.write_table(pa.table({"jpg": [b"x"]}), tmp_path / "table")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("a.jpg"))
    (tmp_path / "archive").write_bytes(buffer.getvalue())
    (tmp_path / "notes").write_text("neither\n" * 100)
    assert [sniff(tmp_path / name) for name in ("packed", "table", "archive", "notes", "absent")] == [
        TFRECORD, PARQUET, TARS, None, None]
    monkeypatch.chdir(tmp_path)
    names = tuple(str(tmp_path / "imagenet" / ("train-%05d-of-00003" % number)) for number in range(3))
    assert parse_images("imagenet/train-*") == sources.Source(TFRECORD, "", names)
    assert parse_images("imagenet/train-{00000..00002}-of-00003") == parse_images(list(names))  # the shell's
    assert parse_images("table") == sources.Source(PARQUET, "", (str(tmp_path / "table"),))
    store().pipe("bucket/sniffed/train-00000-of-00001", record)
    assert parse_images("s3://bucket/sniffed/train-*").kind == TFRECORD
    with pytest.raises(ValueError, match="images=notes is a file, not a folder: .* images_from="):
        parse_images("notes")
    (tmp_path / "photos [2019]").mkdir()  # a folder whose name looks like a pattern is the folder
    assert parse_images("photos [2019]") == sources.Source(FOLDER, str((tmp_path / "photos [2019]").resolve()))
    (tmp_path / "imagenet" / "README").write_text("the ImageNet files\n")
    with pytest.raises(ValueError, match="got 1 value, of which imagenet/R\\* is not a .tar, .parquet or .tfrecord, "
                                         "nor a file of one by its first bytes"):
        parse_images("imagenet/R*")


def test_a_folder_of_files_and_no_image_is_those_files_as_its_pattern_names_them(tmp_path, monkeypatch):
    """A folder img2dataset wrote (00000.parquet, 00000_stats.json) was "no images": it is the job of its glob."""
    monkeypatch.chdir(tmp_path)
    for name in ("00000.parquet", "00001.parquet", "00000_stats.json"):
        (tmp_path / "pq" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "pq" / name).write_bytes(b"")
    assert parse_images("pq/") == parse_images("pq/*.parquet") == parse_images("pq") == sources.Source(
        PARQUET, "", (str(tmp_path / "pq" / "00000.parquet"), str(tmp_path / "pq" / "00001.parquet")))
    assert parse_images("pq", folder_of_files=False) == sources.Source(FOLDER, str(tmp_path / "pq"))  # images_from=
    assert parse_images("pq", own=str(tmp_path / "pq" / "00001.parquet")).files == (
        str(tmp_path / "pq" / "00000.parquet"),)


def test_a_pattern_over_files_of_two_kinds_is_refused_naming_one_of_each(tmp_path, monkeypatch):
    """'data/*' over a Parquet file and a tar ran as a job of the first one's kind, the other failing as damaged."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for name in ("b.parquet", "a.tar", "notes"):
        (tmp_path / "data" / name).write_bytes(b"")
    with pytest.raises(ValueError) as refused:
        parse_images("data/*")
    assert str(refused.value) == "images=data/* takes files of one kind; got Parquet files and tars (%s, %s)" % (
        tmp_path / "data" / "b.parquet", tmp_path / "data" / "a.tar")
    assert parse_images("data/*.tar").files == (str(tmp_path / "data" / "a.tar"),)
    (tmp_path / "data" / "a.tar").unlink()
    assert parse_images("data/*").kind == PARQUET  # "notes", of no kind by its bytes, fails as one when read
