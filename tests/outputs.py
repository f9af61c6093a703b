"""Writing and reading outputs in tests: tricky names, deterministic batches, a job run to its end,
and an output read back without the writer's code.

No pytest and no TensorFlow here: the kill child of tests/test_output_writers.py imports this module.
"""

import csv
import json
import os
import stat
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from parallel.output import open_writer

SETTINGS = {"model": "vgg16", "layer": "fc7", "weights": "imagenet"}
UNDECODABLE = os.fsdecode(b"caf\xe9 \xff\xfe.jpg")  # Latin-1 bytes: not UTF-8
TRICKY_NAMES = [
    "plain.jpg", "with space.jpg", " leading space.jpg", "a,b.jpg", 'say "cheese".jpg', '"quoted".jpg',
    "new\nline.jpg", "windows\r\nline.jpg", "carriage\rreturn.jpg", "=SUM(A1).jpg", "+1.jpg", "-1.jpg", "@at.jpg",
    "日本語/写真.jpg", "Ελληνικά.jpg", "emoji 🙂👍🏽.jpg", "NA", "nan", "null", "#comment.jpg",
    "semi;colon.jpg",
    "tab\there.jpg", "back\\slash.jpg", "../../escape.jpg", "/absolute.jpg", UNDECODABLE,
    os.fsdecode(b"dir\x80/\xc3(.png"),
]


def make_batch(index, rows=3, size=64):
    """Deterministic batch `index`: paths (some tricky) and float32 [rows, size]."""
    paths = ["batch%02d/image_%d.jpg" % (index, row) for row in range(rows)]
    paths[index % rows] = "batch%02d/%s" % (index, TRICKY_NAMES[index % len(TRICKY_NAMES)])
    features = np.random.default_rng(index).standard_normal((rows, size)).astype(np.float32)
    return paths, features


def run_job(output, output_format, batches, holder=None, settings=SETTINGS):
    """Writes every path of `batches` not committed yet, as a resumed run would; then closes."""
    writer = open_writer(output, format=output_format, feature_size=batches[0][1].shape[1], settings=settings)
    if holder is not None:
        holder.append(writer)
    for paths, features in batches:
        todo = [index for index, path in enumerate(paths) if path not in writer.completed]
        if todo:
            writer.write([paths[index] for index in todo], features[todo])
    writer.close()


def read_output(output, output_format):
    """(paths, float32 [N, D]) of a finished output, decoded without the writer's code."""
    output = Path(output)
    if output_format == "csv":
        with open(output, newline="", encoding="utf-8", errors="surrogateescape") as file:
            rows = list(csv.reader(file))
        return [row[0] for row in rows[1:]], np.array([row[1:] for row in rows[1:]], dtype=np.float32)
    if output_format == "parquet":
        table = pq.read_table(output)
        paths = [raw.decode("utf-8", "surrogateescape") for raw in table.column("path_bytes").to_pylist()]
        size = table.schema.field("fc7").type.list_size
        return paths, np.array(table.column("fc7").to_pylist(), dtype=np.float32).reshape(len(paths), size)
    with open(str(output) + ".paths.csv", newline="", encoding="utf-8", errors="surrogateescape") as file:
        rows = list(csv.reader(file))
    return [row[0] for row in rows[1:]], np.load(output)


def expected_content(batches):
    return ([path for paths, _ in batches for path in paths],
            np.concatenate([features for _, features in batches]))


def assert_same_content(output, output_format, batches):
    paths, features = read_output(output, output_format)
    expected_paths, expected_features = expected_content(batches)
    assert paths == expected_paths
    np.testing.assert_array_equal(features.view(np.uint32), expected_features.view(np.uint32))


def files_under(folder):
    return {path.relative_to(folder).as_posix(): path.read_bytes()
            for path in sorted(Path(folder).rglob("*")) if path.is_file()}


def entries_under(folder):
    """{relative path: (file type, device number, content)} of everything under `folder`, links
    not followed: a regular file's bytes, a link's target."""
    entries = {}
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(root, name)
            status = os.lstat(path)
            content = (path.read_bytes() if stat.S_ISREG(status.st_mode)
                       else os.readlink(path) if stat.S_ISLNK(status.st_mode) else None)
            entries[path.relative_to(folder).as_posix()] = (stat.S_IFMT(status.st_mode), status.st_rdev, content)
    return entries


def job_outputs(output):
    """The files a user reads: the output, its paths file (npy) and its errors file."""
    files = {}
    for suffix in ("", ".paths.csv", ".errors.csv"):
        path = Path(str(output) + suffix)
        if path.exists():
            files[suffix] = path.read_bytes()
    return files


def committed_rows(output):
    """The rows a job writing `output` has committed so far, wherever they are: in the output (as its record
    counts them), in committed shards not yet in it, and in attempts (their writers commit batch by batch);
    -1 before any of these exists. For tests that wait for a run to commit rows, or count what a stopped run
    kept."""
    from parallel.jobs.shard_record import SHARD_RECORD
    from parallel.output import read_record
    output = Path(output)
    counts = []
    record = read_record(output)
    if record is not None:
        counts.append(record["rows"])
    for folder in sorted(Path(str(output) + ".shards").glob("shard-*")):
        try:
            counts.append(int(json.loads((folder / SHARD_RECORD).read_text(encoding="utf-8"))["rows"]))
        except (OSError, ValueError, KeyError):
            pass  # being committed: counted in its attempt, or next time
    attempts = Path(str(output) + ".attempts")
    if any(attempts.glob("shard-*")):
        counts.append(attempt_rows(attempts))
    return sum(counts) if counts else -1


def attempt_rows(folder):
    """The rows the shard attempts in `folder` (an output's attempts folder) have committed, batch by batch."""
    from parallel.jobs.shard_record import SHARD_FEATURES
    from parallel.output import read_record
    rows = 0
    for attempt in sorted(Path(folder).glob("shard-*")):
        try:
            record = read_record(attempt / SHARD_FEATURES)
        except ValueError:
            record = None
        rows += record["rows"] if record is not None else 0
    return rows
