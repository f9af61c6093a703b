"""Image datasets written the way the tools that publish them write them, for the tests of Parquet and TFRecord inputs.

    write_files(layout, root, folder, per_file)  -> paths: the images under root, in sorted order, as files of
                                                   `per_file` rows in `folder`, in one of LAYOUTS:
        hf            Parquet by datasets: its Image feature (struct<bytes, path>), Dataset.to_parquet
        img2dataset   Parquet of img2dataset's columns: key, jpg, caption, url, width, height, status
        imagenet      TFRecord of tf.train.Example as TensorFlow's ImageNet scripts write them: image/encoded,
                      image/class/label, image/filename, image/format, image/height, image/width
        wds_tfrecord  TFRecord of img2dataset's tfrecord output (jpg, key, txt), GZIP-compressed

Each image's caption is "caption of <name>", its label its number in the sorted order, its own key
(img2dataset's) "%09d" of that number: what the tests of --keep find beside its row.
"""

from pathlib import Path

from stores import image_paths

LAYOUTS = ("hf", "img2dataset", "imagenet", "wds_tfrecord")
SUFFIXES = {"hf": ".parquet", "img2dataset": ".parquet", "imagenet": ".tfrecord", "wds_tfrecord": ".tfrecord.gz"}


def write_files(layout, root, folder, per_file, pattern="*.png"):
    """The images under `root` (sorted folder keys) as files of `layout` holding `per_file` rows each: their paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    names = image_paths(root, pattern)
    paths = []
    for number, start in enumerate(range(0, len(names), per_file)):
        path = folder / ("%06d%s" % (number, SUFFIXES[layout]))
        rows = [(position, name, (Path(root) / name).read_bytes())
                for position, name in enumerate(names[start:start + per_file], start)]
        {"hf": _hf, "img2dataset": _img2dataset, "imagenet": _tfrecord, "wds_tfrecord": _tfrecord}[layout](
            path, rows, layout)
        paths.append(path)
    return paths


def caption(name):
    return "caption of %s" % name


def _hf(path, rows, layout):
    import datasets
    features = datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")})
    data = {"image": [{"bytes": data, "path": Path(name).name} for _, name, data in rows],
            "caption": [caption(name) for _, name, _ in rows]}
    datasets.Dataset.from_dict(data, features=features).to_parquet(str(path))


def _img2dataset(path, rows, layout):
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.table({"key": ["%09d" % position for position, _, _ in rows],
                      "jpg": pa.array([data for _, _, data in rows], pa.binary()),
                      "caption": [caption(name) for _, name, _ in rows],
                      "url": ["https://example.com/%s" % name for _, name, _ in rows],
                      "width": pa.array([12] * len(rows), pa.int32()), "height": pa.array([10] * len(rows), pa.int32()),
                      "status": ["success"] * len(rows)})
    pq.write_table(table, path, row_group_size=3)


def _tfrecord(path, rows, layout):
    import tensorflow as tf

    def feature(value):
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value if isinstance(value, bytes)
                                                                     else value.encode()]))
    options = tf.io.TFRecordOptions("GZIP") if str(path).endswith(".gz") else None
    with tf.io.TFRecordWriter(str(path), options) as writer:
        for position, name, data in rows:
            if layout == "imagenet":
                values = {"image/encoded": data, "image/class/label": position, "image/filename": name,
                          "image/format": "PNG", "image/height": 10, "image/width": 12}
            else:
                values = {"jpg": data, "key": "%09d" % position, "txt": caption(name)}
            example = tf.train.Example(features=tf.train.Features(feature={key: feature(value)
                                                                           for key, value in values.items()}))
            writer.write(example.SerializeToString())
