"""TFRecord files read front to back once: records as TensorFlow writes them (ImageNet's and img2dataset's features,
plain and GZIP), their keys, kept features, offsets read back, damaged records and files accounted for, a store's."""

import pytest
import tensorflow as tf

from image_files import noise_jpeg
from parallel.inputs import locations, remote, tars, tfrecord_stream
from parallel.inputs.decode import ImageError
from parallel.inputs.streams import StreamReader
from parallel.inputs.tfrecord_stream import check_file, read_record, record_key, stream_records


def jpegs(tmp_path, count):
    """`count` small distinct JPEG files' bytes."""
    return [noise_jpeg(tmp_path / ("%d.jpg" % number), (16 + number, 12), seed=number).read_bytes()
            for number in range(count)]


def example(**features):
    """A serialized tf.train.Example of `features` (bytes, str, int, float, or a list of them)."""
    def feature(value):
        values = value if isinstance(value, list) else [value]
        if all(isinstance(item, int) for item in values) and values:
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        if all(isinstance(item, float) for item in values) and values:
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[item.encode() if isinstance(item, str) else item for item in values]))
    return tf.train.Example(features=tf.train.Features(
        feature={name.replace("__", "/"): feature(value) for name, value in features.items()})).SerializeToString()


def imagenet(images):
    """Records in ImageNet's features, as TensorFlow's scripts write them."""
    return [example(image__encoded=data, image__class__label=number + 1, image__filename="n0144_%d.JPEG" % number,
                    image__format="JPEG", image__height=12, image__width=16 + number)
            for number, data in enumerate(images)]


def write(path, records, compression=None):
    with tf.io.TFRecordWriter(str(path), tf.io.TFRecordOptions(compression) if compression else None) as writer:
        for record in records:
            writer.write(record)
    return str(path)


def read(path, **options):
    index = []
    items = list(stream_records(str(path), index, **options))
    assert [entry.key for entry in index] == [key for key, _ in items]  # an entry for every item, in order
    return items, index


def outcome(data):
    return data if isinstance(data, bytes) else data.kind


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_imagenet_records_yield_their_jpegs_keyed_by_filename_read_back_by_their_entries(tmp_path, compression):
    images = jpegs(tmp_path, 4)
    path = write(tmp_path / "train-00000-of-00001", imagenet(images), compression)
    items, index = read(path, keep=("image/class/label", "image/format", "absent"))
    assert [data for _, data in items] == images
    assert [key for key, _ in items] == [record_key("n0144_%d.JPEG" % number, path) for number in range(4)]
    assert tars.split_key(items[1][0]) == ("n0144_1.JPEG", path) and tars.is_member(items[1][0])
    assert [entry.kept for entry in index] == [(str(number + 1), "JPEG", None) for number in range(4)]
    assert [entry.size for entry in index] == [len(record) for record in imagenet(images)]
    assert index[0].offset == 0 and index[1].offset == 16 + index[0].size  # the uncompressed stream's offsets
    for entry, data in zip(index, images):
        assert read_record(entry.key, entry) == data
    check_file(path, keep=("image/class/label",))
    with StreamReader(stream_records(path, []), batch_size=3, size=(8, 8)) as reader:  # as the job reads it
        batches = list(reader)
    assert [list(batch.paths) for batch in batches] == [[key for key, _ in items[:3]], [items[3][0]]]
    assert not any(batch.failures for batch in batches)
    # A record read back that is no longer the one of its key (the file written again): "changed".
    write(path, [example(image__encoded=images[0], image__filename="n0144_9.JPEG")], compression)
    with pytest.raises(ImageError, match="is no longer 'n0144_0.JPEG' \\(its key now: 'n0144_9.JPEG'\\)") as changed:
        read_record(index[0].key, tars.Entry(index[0].key, 0, len(example(image__encoded=images[0],
                                                                            image__filename="n0144_9.JPEG"))))
    assert changed.value.kind == "changed"


def test_img2dataset_records_keyed_by_their_key_feature_and_odd_keys_by_their_number(tmp_path):
    images = jpegs(tmp_path, 6)
    keys = ["000000001", "", "#2", "a::b", "000000001", "000000005"]
    records = [example(jpg=data, key=key, txt="a cat %d" % number, tags=["x", "é"], score=0.5)
               for number, (data, key) in enumerate(zip(images, keys))]
    path = write(tmp_path / "00000.tfrecord", records)
    items, index = read(path, keep=("txt", "tags", "score"))
    assert [tars.split_key(key)[0] for key, _ in items] == ["000000001", "#1", "#2", "#3", "#4", "000000005"]
    assert [data for _, data in items] == images
    assert index[0].kept == ("a cat 0", '["x", "é"]', "0.5")
    assert read_record(index[5].key, index[5]) == images[5] and read_record(index[3].key, index[3]) == images[3]
    # a named feature instead of one found by name
    path = write(tmp_path / "named.tfrecord", [example(photo=data, name="n%d" % number, key=str(number))
                                               for number, data in enumerate(images[:2])])
    items, index = read(path, image_column="photo")
    assert [data for _, data in items] == images[:2] and tars.split_key(items[1][0])[0] == "1"
    assert read_record(index[1].key, index[1], image_column="photo") == images[1]


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_a_record_without_image_bytes_is_missing_and_one_too_large_is_not_read(tmp_path, monkeypatch, compression):
    monkeypatch.setattr(locations, "SEEK_BYTES", 1024)  # passed by with a seek, or read through in blocks
    images = jpegs(tmp_path, 3)
    records = [example(jpg=images[0], key="a"), example(jpg=[], key="b"), example(key="c", txt="no image"),
               example(jpg=images[1] + bytes(5000), key="d"), example(jpg=images[2], key="e")]
    path = write(tmp_path / "t.tfrecord", records, compression)
    items, index = read(path, max_bytes=4000)
    assert [(tars.split_key(key)[0], outcome(data)) for key, data in items] == [
        ("a", images[0]), ("b", "missing"), ("c", "missing"), ("#3", "too_large"), ("e", images[2])]
    assert "record 1 has no image bytes" in items[1][1].message
    assert items[3][1].message == "record 3: %d bytes, more than the 4000 an image may take; not read" % len(records[3])
    assert (index[3].offset, index[3].size) == (sum(16 + len(record) for record in records[:3]), len(records[3]))
    with pytest.raises(ImageError, match="has no image bytes") as failure:
        read_record(index[1].key, index[1])
    assert failure.value.kind == "missing"


def damaged(tmp_path, compression=None):
    """A file of 4 records a..d: (path, its bytes, the records' offsets, the images)."""
    images = jpegs(tmp_path, 4)
    records = [example(jpg=data, key=key) for data, key in zip(images, "abcd")]
    path = write(tmp_path / "t.tfrecord", records, compression)
    offsets = [sum(16 + len(record) for record in records[:number]) for number in range(4)]
    return path, bytearray(open(path, "rb").read()), offsets, images


def test_a_record_whose_data_has_a_wrong_crc_fails_alone_and_reading_goes_on(tmp_path):
    path, content, offsets, images = damaged(tmp_path)
    content[offsets[1] + 12 + 40] ^= 0xFF  # a byte of b's data
    not_an_example = b"\xff" * 30  # framed with its right CRCs, as TFRecordWriter would
    frame = (len(not_an_example).to_bytes(8, "little") + tfrecord_stream.masked_crc(len(not_an_example).to_bytes(
        8, "little")).to_bytes(4, "little") + not_an_example + tfrecord_stream.masked_crc(not_an_example).to_bytes(
        4, "little"))
    content[offsets[2]:offsets[3]] = frame
    open(path, "wb").write(bytes(content))
    items, index = read(path)
    assert [(tars.split_key(key)[0], outcome(data)) for key, data in items] == [
        ("a", images[0]), ("#1", "corrupt"), ("#2", "corrupt"), ("d", images[3])]
    assert "data of the record at byte %d has a wrong CRC" % offsets[1] in items[1][1].message
    assert "is not a tf.train.Example" in items[2][1].message
    with pytest.raises(ImageError, match="t.tfrecord: damaged TFRecord: the data of the record at byte %d has a "
                                         "wrong CRC" % offsets[1]):
        read_record(index[1].key, index[1])


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_a_file_cut_short_fails_from_there_after_the_records_before(tmp_path, compression):
    path, content, offsets, images = damaged(tmp_path)
    cut = bytes(content[:offsets[2] + 30])  # c cut 18 bytes into its data
    if compression:
        import gzip
        packed = gzip.compress(bytes(content))
        cut = packed[:len(packed) * 3 // 4]  # within c or d
    open(path, "wb").write(cut)
    items, index = read(path)
    assert [outcome(data) for _, data in items[:-1]] == images[:len(items) - 1] and len(items) >= 3
    assert items[-1][0] == path and items[-1][1].kind == "corrupt" and index[-1].size == -1
    assert items[-1][1].message.startswith("damaged GZIP data" if compression else "damaged TFRecord")
    if not compression:
        assert len(items) == 3 and (index[2].offset, items[2][1].message) == (offsets[2], (
            "damaged TFRecord: the file ends 30 bytes into the record of %d bytes at byte %d"
            % (offsets[3] - offsets[2] - 16, offsets[2])))


def damaged_gzip(tmp_path, count=12, record=5):
    """A GZIP TFRecord file of `count` records whose compressed data has one byte changed, inside the data of
    record `record` (stored blocks: a byte of the stream is a byte of the records), or in its trailer's CRC-32
    (None): (path, the images)."""
    import gzip
    images = jpegs(tmp_path, count)
    records = [example(jpg=data, key="%02d" % number) for number, data in enumerate(images)]
    plain = open(write(tmp_path / "plain.tfrecord", records), "rb").read()
    packed = bytearray(gzip.compress(plain, compresslevel=0, mtime=0))
    if record is None:
        packed[-8] ^= 0xFF
    else:  # past GZIP's 10-byte header and the stored block's 5-byte one, 40 bytes into the record's data
        packed[10 + 5 + sum(16 + len(data) for data in records[:record]) + 12 + 40] ^= 0xFF
    (tmp_path / "t.tfrecord.gz").write_bytes(bytes(packed))
    return str(tmp_path / "t.tfrecord.gz"), images


def test_a_gzip_file_damaged_inside_its_data_counts_each_record_once(tmp_path):
    """The record's wrong CRC, then GZIP's own CRC at the end: 12 records were 13 items, one image counted twice."""
    path, images = damaged_gzip(tmp_path)
    items, index = read(path)
    assert [(tars.split_key(key)[0], outcome(data)) for key, data in items] == [
        ("#5", "corrupt") if number == 5 else ("%02d" % number, data) for number, data in enumerate(images)]
    assert "data of the record at byte %d has a wrong CRC" % index[5].offset in items[5][1].message
    path, images = damaged_gzip(tmp_path, record=None)  # the trailer alone: a failure of the file, after them
    items, index = read(path)
    assert [outcome(data) for _, data in items] == [*images, "corrupt"] and items[-1][0] == path
    assert items[-1][1].message.startswith("damaged GZIP data at or after byte %d of the records: CRC check failed"
                                           % index[-1].offset)


def test_a_wrong_crc_of_a_length_fails_the_rest_of_the_file(tmp_path):
    path, content, offsets, images = damaged(tmp_path)
    content[offsets[2] + 3] ^= 0x01
    open(path, "wb").write(bytes(content))
    items, index = read(path)
    assert [outcome(data) for _, data in items] == images[:2] + ["corrupt"]
    assert index[2] == tars.Entry(path, offsets[2], -1)
    assert items[2][1].message.startswith("damaged TFRecord: the length of the record at byte %d has a wrong CRC"
                                          % offsets[2])


def test_a_file_that_is_not_a_tfrecord_or_has_no_image_feature_is_one_failure_and_one_line(tmp_path):
    not_tfrecord = tmp_path / "photo.tfrecord"
    not_tfrecord.write_bytes(jpegs(tmp_path, 1)[0])
    no_image = write(tmp_path / "labels.tfrecord", [example(label=3, key="a")])
    for path, kind, message in [
            (str(not_tfrecord), "corrupt", "is not a TFRecord file: damaged TFRecord: the length of the record at "
                                           "byte 0 has a wrong CRC"),
            (no_image, "unreadable", "has no image feature (a bytes_list named image/encoded, jpg"),
            (str(tmp_path / "gone.tfrecord"), "missing", "cannot be read: no such file")]:
        items, index = read(path)
        assert [(key, data.kind) for key, data in items] == [(path, kind)]
        assert index[0].key == path and index[0].size == -1
        with pytest.raises(ValueError) as error:
            check_file(path)
        assert str(error.value).startswith(path) and message in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match="labels.tfrecord has no image feature .* its features: key, label; pass "
                                         "--image-column"):
        check_file(no_image)
    with pytest.raises(ValueError, match="the feature 'label' of .* is a int64_list, not the bytes_list of an image"):
        check_file(no_image, image_column="label")
    good = write(tmp_path / "good.tfrecord", [example(jpg=b"J", key="a")])
    with pytest.raises(ValueError, match="good.tfrecord has no feature 'caption' to keep; its features: jpg, key"):
        check_file(good, keep=("key", "caption"))
    with pytest.raises(ValueError, match="has no feature 'photo'"):
        check_file(good, image_column="photo")
    with pytest.raises(ValueError, match="not the key of a TFRecord's record"):
        read_record(tars.member_key("a.jpg", good), tars.Entry("x", 0, 1))


def test_a_file_in_the_store_is_read_at_its_version_and_read_back_by_one_range(s3_store, tmp_path, monkeypatch):
    from stores import store
    images = jpegs(tmp_path, 3)
    for name, compression in (("plain.tfrecord", None), ("packed.tfrecord.gz", "GZIP")):
        local = write(tmp_path / name, imagenet(images), compression)
        store().pipe("bucket/tfr/" + name, open(local, "rb").read())
        url = "s3://bucket/tfr/" + name
        recorded = remote.describe(url)[2]
        check_file(url, version=recorded)
        items, index = read(url, version=recorded)
        assert [data for _, data in items] == images and tars.split_key(items[0][0]) == ("n0144_0.JPEG", url)
        fetched = []
        real = remote.fetch
        monkeypatch.setattr(remote, "fetch", lambda url, start=None, stop=None, **version: fetched.append(
            (start, stop)) or real(url, start, stop, **version))
        monkeypatch.setattr(tfrecord_stream, "fetch", remote.fetch)
        assert read_record(index[2].key, index[2]) == images[2]
        if compression is None:
            assert fetched == [(index[2].offset, index[2].offset + index[2].size + 16)]
        monkeypatch.undo()
        store().pipe("bucket/tfr/" + name, open(write(tmp_path / "new", imagenet(images[:1])), "rb").read())
        with pytest.raises(remote.ObjectChanged):
            list(stream_records(url, [], version=recorded))
        with pytest.raises(remote.ObjectChanged):
            check_file(url, version=recorded)
        with pytest.raises(ImageError) as replaced:  # the record at that offset is no longer the key's
            read_record(index[0].key, tars.Entry(index[0].key, index[0].offset, index[0].size + 1))
        assert replaced.value.kind == "corrupt"
