"""Tests of parallel/writer.py: exact floats, names, order, crash safety and resume, settings."""

import csv
import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest

from parallel import writer as writer_module
from parallel.writer import FORMATS, ErrorLog, OutputError, format_rows, open_writer, read_csv_paths, sidecar_path

REPOSITORY = Path(__file__).resolve().parents[1]
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


NODE_KINDS = {"fifo": "a FIFO", "character device": "a character device", "symbolic link": "a symbolic link"}


@pytest.fixture
def make_node():
    """make_node(path, kind, target) puts something that is not a regular file at `path` (a link
    points to `target`). A FIFO is held open for writing until the test ends, so that code
    opening it to read fails the test instead of blocking it for ever."""
    descriptors = []

    def make(path, kind, target):
        if kind == "fifo":
            os.mkfifo(path)
            descriptors.append(os.open(path, os.O_RDWR | os.O_NONBLOCK))
        elif kind == "character device":
            if os.geteuid() != 0:
                pytest.skip("os.mknod of a character device needs root")
            os.mknod(path, stat.S_IFCHR | 0o666, os.stat("/dev/null").st_rdev)  # a copy of /dev/null
        else:
            path.symlink_to(target)
    yield make
    for descriptor in descriptors:
        os.close(descriptor)


# -- floats ---------------------------------------------------------------------------

def test_float32_text_is_the_shortest_exact_round_trip():
    special = np.array([0.0, -0.0, 1 / 3, 2 / 3, 0.1, 1.0, -1.0, 42.0, 16777216.0, 16777215.0, 123456789.0, 1e7, 1e-7,
                        5e-5, 1e16, 1e20, 3.4028235e38, -3.4028235e38, 1.1754944e-38, 1e-40, 1.4e-45, -1.4e-45],
                       dtype=np.float32)
    bits = np.random.default_rng(0).integers(0, 2 ** 32, 70_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    values = np.concatenate([special, bits[np.isfinite(bits)][:59_978]]).reshape(-1, 100)
    text = format_rows(["row%d" % index for index in range(len(values))], values)
    lines = text.decode("ascii").splitlines()
    assert len(lines) == len(values)
    tokens = [line.split(",")[1:] for line in lines]
    back = np.array(tokens, dtype=np.float32)
    np.testing.assert_array_equal(back.view(np.uint32), values.view(np.uint32))  # -0.0 keeps its sign
    # Shortest: no more significant digits than NumPy's shortest unique repr of the float32.
    for token, value in zip(tokens[0] + tokens[300][:100], np.concatenate([values[0], values[300]])):
        mantissa = token.lower().split("e")[0].replace("-", "").replace(".", "").strip("0")
        shortest = np.format_float_scientific(value, unique=True).split("e")[0].replace("-", "").replace(".", "")
        assert len(mantissa) <= len(shortest.rstrip("0")) or mantissa == "", (token, value)


def test_nan_and_infinities_are_written_as_text_that_reads_back(tmp_path):
    features = np.array([[np.nan, np.inf, -np.inf, 1.5]], dtype=np.float32)
    output = tmp_path / "special.csv"
    with open_writer(output, feature_size=4, settings=SETTINGS) as writer:
        writer.write(["a.jpg"], features)
    line = output.read_text().splitlines()[1]
    assert line == "a.jpg,NaN,inf,-inf,1.5"
    np.testing.assert_array_equal(read_output(output, "csv")[1], features)
    frame = pd.read_csv(output, index_col="path")
    np.testing.assert_array_equal(frame.to_numpy(np.float32), features)


def test_features_of_other_float_types_are_stored_as_float32(tmp_path):
    features = np.arange(8, dtype=np.float16).reshape(2, 4) / 3
    with open_writer(tmp_path / "half.csv", feature_size=4, settings=SETTINGS) as writer:
        writer.write(["a", "b"], features)
    np.testing.assert_array_equal(read_output(tmp_path / "half.csv", "csv")[1], features.astype(np.float32))


# -- CSV layout and names ---------------------------------------------------------------

def test_csv_header_and_rows_in_the_order_written(tmp_path):
    output = tmp_path / "out.csv"
    batches = [make_batch(index, rows=2, size=3) for index in range(4)]
    with open_writer(output, column_prefix="relu7", feature_size=3, settings=SETTINGS) as writer:
        for paths, features in batches:
            writer.write(paths, features)
    assert output.read_bytes().split(b"\n")[0] == b"path,relu7_0,relu7_1,relu7_2"
    assert_same_content(output, "csv", batches)


def test_path_quoting_is_the_csv_modules_with_its_default_line_ends(tmp_path):
    for name in TRICKY_NAMES:
        with open(tmp_path / "reference.csv", "w", newline="", encoding="utf-8", errors="surrogateescape") as file:
            csv.writer(file).writerow([name, "1.0"])
        reference = (tmp_path / "reference.csv").read_bytes()
        assert reference.endswith(b"\r\n")
        assert format_rows([name], np.ones((1, 1), np.float32)) == reference[:-2] + b"\n", name


def test_names_round_trip_through_the_csv_module_and_pandas(tmp_path):
    output = tmp_path / "names.csv"
    features = np.random.default_rng(1).standard_normal((len(TRICKY_NAMES), 5)).astype(np.float32)
    with open_writer(output, feature_size=5, settings=SETTINGS) as writer:
        writer.write(TRICKY_NAMES[:10], features[:10])
        writer.write(TRICKY_NAMES[10:], features[10:])
    paths, read_features = read_output(output, "csv")
    assert paths == TRICKY_NAMES
    np.testing.assert_array_equal(read_features, features)
    assert os.fsencode(paths[TRICKY_NAMES.index(UNDECODABLE)]) == b"caf\xe9 \xff\xfe.jpg"
    assert b"caf\xe9 \xff\xfe.jpg" in output.read_bytes()  # the file system's bytes, as they were

    frame = pd.read_csv(output, index_col="path", keep_default_na=False, dtype={"path": object},
                        encoding_errors="surrogateescape")
    assert list(frame.index) == TRICKY_NAMES
    np.testing.assert_array_equal(frame.to_numpy(np.float32), features)
    assert frame.loc["NA"].to_numpy(np.float32).tolist() == features[TRICKY_NAMES.index("NA")].tolist()
    # Without keep_default_na pandas turns the image named "NA" into a missing value: documented.
    assert pd.isna(pd.read_csv(output, dtype={"path": object}, encoding_errors="surrogateescape")["path"]).any()


@pytest.mark.parametrize("output_format", ["parquet", "npy"])
def test_names_round_trip_in_parquet_and_npy(tmp_path, output_format):
    output = tmp_path / ("names." + output_format)
    features = np.random.default_rng(2).standard_normal((len(TRICKY_NAMES), 6)).astype(np.float32)
    with open_writer(output, format=output_format, feature_size=6, settings=SETTINGS) as writer:
        writer.write(TRICKY_NAMES[:7], features[:7])
        writer.write(TRICKY_NAMES[7:], features[7:])
    paths, read_features = read_output(output, output_format)
    assert paths == TRICKY_NAMES
    np.testing.assert_array_equal(read_features, features)
    if output_format == "parquet":
        frame = pd.read_parquet(output)
        assert list(frame.columns) == ["path", "path_bytes", "fc7"]
        np.testing.assert_array_equal(np.stack(frame["fc7"]), features)
        assert frame["path"][TRICKY_NAMES.index(UNDECODABLE)] == "caf\\xe9 \\xff\\xfe.jpg"
        assert frame["path"][TRICKY_NAMES.index("Ελληνικά.jpg")] == "Ελληνικά.jpg"
        table = pl.read_parquet(output)
        assert table.schema["fc7"] == pl.Array(pl.Float32, 6)
        np.testing.assert_array_equal(table["fc7"].to_numpy(), features)
    else:
        assert np.load(output, mmap_mode="r").dtype == np.float32


def test_no_name_changes_where_files_are_written(tmp_path):
    folder = tmp_path / "out"
    for output_format in FORMATS:
        with open_writer(folder / ("features." + output_format), format=output_format, feature_size=2,
                         settings=SETTINGS) as writer:
            writer.write(TRICKY_NAMES, np.zeros((len(TRICKY_NAMES), 2), np.float32))
        ErrorLog(folder / ("features." + output_format)).add("../../escape.jpg", "decode", "broken")
    assert sorted(path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*")) == [
        "out", "out/features.csv", "out/features.csv.errors.csv", "out/features.csv.run.json",
        "out/features.npy", "out/features.npy.errors.csv", "out/features.npy.paths.csv", "out/features.npy.run.json",
        "out/features.parquet", "out/features.parquet.errors.csv", "out/features.parquet.run.json"]


def test_read_csv_paths_handles_quotes_newlines_and_raw_bytes():
    data = b'h\nplain,1\n"a,""b""\nc",2\n' + b"\xff\xfe,3\n"
    assert read_csv_paths(data, 2) == ["plain", 'a,"b"\nc', os.fsdecode(b"\xff\xfe")]
    with pytest.raises(OutputError, match="no end"):
        read_csv_paths(b"h\nplain,1", 2)


# -- resume and crash safety -------------------------------------------------------------

@pytest.mark.parametrize("output_format", FORMATS)
def test_resume_after_abort_writes_the_rest_once(tmp_path, output_format):
    batches = [make_batch(index) for index in range(6)]
    reference = tmp_path / ("reference." + output_format)
    run_job(reference, output_format, batches)
    output = tmp_path / ("resumed." + output_format)
    writer = open_writer(output, format=output_format, feature_size=64, settings=SETTINGS)
    for paths, features in batches[:2]:
        writer.write(paths, features)
    writer.abort()
    resumed = open_writer(output, format=output_format, feature_size=64, settings=SETTINGS)
    assert resumed.completed == frozenset(batches[0][0] + batches[1][0])
    assert resumed.rows_committed == 6
    resumed.abort()
    run_job(output, output_format, batches)
    assert_same_content(output, output_format, batches)
    if output_format == "csv":
        assert output.read_bytes() == reference.read_bytes()


@pytest.mark.parametrize("output_format", FORMATS)
def test_rows_written_out_of_order_are_merged_back_into_path_order(tmp_path, output_format, monkeypatch):
    """A rerun that computes images sorting before committed rows (an image repaired after it failed):
    close() writes what one run in path order would have written: the same bytes for CSV and npy,
    the same table for Parquet (whose row groups follow the parts the rows came in)."""
    monkeypatch.setattr(writer_module, "_ROW_GROUP_BYTES", 3 * 4 * 5)  # 3 rows a chunk: several chunks
    rng = np.random.default_rng(7)
    names = ["%s/%02d.jpg" % (folder, index) for folder in ("a", UNDECODABLE, "new\nline") for index in range(4)]
    values = {name: rng.standard_normal(5).astype(np.float32) for name in names}
    runs = [names[1::2], names[::4], [name for name in names[::-1] if name not in names[1::2] + names[::4]]]
    output = tmp_path / ("out." + output_format)
    for run in runs:  # three runs, each closed (the second and third reopen a complete output)
        writer = open_writer(output, format=output_format, feature_size=5, settings=SETTINGS, sort_paths=True)
        for start in range(0, len(run), 2):
            batch = run[start:start + 2]
            writer.write(batch, np.stack([values[name] for name in batch]))
        writer.close()
    reference = tmp_path / "reference" / output.name
    in_order = sorted(names)
    run_job(reference, output_format, [(in_order[start:start + 2], np.stack([values[name] for name in
                                                                          in_order[start:start + 2]]))
                                       for start in range(0, len(in_order), 2)])
    if output_format == "parquet":
        assert pq.read_table(output).equals(pq.read_table(reference))
        assert pq.read_schema(output).equals(pq.read_schema(reference))
    else:
        assert output.read_bytes() == reference.read_bytes()
    paths, features = read_output(output, output_format)
    assert paths == in_order
    np.testing.assert_array_equal(features, np.stack([values[name] for name in in_order]))
    assert open_writer(output, format=output_format, feature_size=5, settings=SETTINGS).completed == set(names)


def test_partial_line_left_by_a_kill_is_dropped(tmp_path):
    batches = [make_batch(index) for index in range(4)]
    reference, output = tmp_path / "reference.csv", tmp_path / "out.csv"
    run_job(reference, "csv", batches)
    writer = open_writer(output, feature_size=64, settings=SETTINGS)
    writer.write(*batches[0])
    writer.abort()
    with open(output, "ab") as file:  # what a kill in the middle of the next write leaves
        file.write(format_rows(*batches[1])[:700])
    run_job(output, "csv", batches)
    assert output.read_bytes() == reference.read_bytes()


class Crash(Exception):
    """Stands for SIGKILL: raised just before the n-th file operation."""


class CrashingModule:
    """Wraps `os` or `shutil` as the writer sees it, crashing before operation number `crash_at`."""

    OPERATIONS = {"open", "write", "fsync", "replace", "ftruncate", "unlink", "link", "rmtree", "copyfile"}

    def __init__(self, module, counter):
        self._module = module
        self._counter = counter

    def __getattr__(self, name):
        real = getattr(self._module, name)
        if name not in self.OPERATIONS:
            return real

        def operation(*args, **kwargs):
            self._counter["done"] += 1
            if self._counter["done"] >= self._counter["crash_at"]:  # a dead process does nothing more
                raise Crash(name)
            return real(*args, **kwargs)
        return operation


def two_phase_job(output, output_format, batches, holder=None):
    """A run that finishes, then a later run for new images appended to the same output."""
    run_job(output, output_format, batches[:2], holder)
    run_job(output, output_format, batches, holder)


@pytest.mark.parametrize("output_format", FORMATS)
def test_a_crash_before_any_file_operation_then_rerun_gives_the_uninterrupted_output(
        tmp_path, monkeypatch, output_format):
    batches = [make_batch(index, rows=2, size=4) for index in range(4)]
    reference = tmp_path / ("reference." + output_format)
    two_phase_job(reference, output_format, batches)
    crash_at = 0
    while True:
        crash_at += 1
        output = tmp_path / ("crash%03d" % crash_at) / ("out." + output_format)
        counter = {"done": 0, "crash_at": crash_at}
        writers = []
        with monkeypatch.context() as patch:
            patch.setattr(writer_module, "os", CrashingModule(os, counter))
            patch.setattr(writer_module, "shutil", CrashingModule(writer_module.shutil, counter))
            try:
                two_phase_job(output, output_format, batches, writers)
                crashed = False
            except Crash:
                crashed = True
        for writer in writers:
            writer._release()  # the kernel closes a killed process's files, nothing more
        if not crashed:
            break
        two_phase_job(output, output_format, batches)
        assert_same_content(output, output_format, batches)
        if output_format == "csv":
            assert output.read_bytes() == reference.read_bytes(), "crash before operation %d" % crash_at
        assert not any(name.endswith(".tmp") for name in os.listdir(output.parent)), crash_at
    assert crash_at > 30  # every operation of both runs was a crash point


KILL_CHILD = r"""
import sys, types
repository = sys.argv[3]
sys.path[:0] = [repository, repository + "/tests"]
# parallel/__init__.py imports TensorFlow, which the writer does not need: a bare package
# object lets `parallel.writer` load alone and the child start in a fraction of a second.
package = types.ModuleType("parallel")
package.__path__ = [repository + "/parallel"]
sys.modules["parallel"] = package
import pyarrow.parquet  # noqa: F401 -- imported before "ready", so that kills land in the job
import test_writer
print("ready", flush=True)
sys.stdin.readline()
test_writer.run_job(sys.argv[1], sys.argv[2], [test_writer.make_batch(index) for index in range(30)])
print("done", flush=True)
"""


def spawn_kill_child(output, output_format):
    return subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(output), output_format, str(REPOSITORY)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("output_format", FORMATS)
def test_sigkill_at_random_moments_then_rerun_gives_the_uninterrupted_output(tmp_path, output_format):
    batches = [make_batch(index) for index in range(30)]
    reference = tmp_path / ("reference." + output_format)
    started = time.perf_counter()
    run_job(reference, output_format, batches)
    job_seconds = time.perf_counter() - started
    delays = np.random.default_rng(12345).uniform(0, 1.3 * job_seconds, 10)
    outputs = [tmp_path / ("kill%02d" % index) / ("out." + output_format) for index in range(len(delays))]
    interrupted = 0
    child = spawn_kill_child(outputs[0], output_format)
    for index, delay in enumerate(delays):
        # The next child starts (imports) while this one is killed and its output recovered.
        next_child = spawn_kill_child(outputs[index + 1], output_format) if index + 1 < len(delays) else None
        assert child.stdout.readline() == "ready\n"
        child.stdin.write("go\n")
        child.stdin.flush()
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stdin.close()
        record_path = sidecar_path(outputs[index])
        if not record_path.exists() or json.loads(record_path.read_text())["state"] != "complete":
            interrupted += 1
        run_job(outputs[index], output_format, batches)
        assert_same_content(outputs[index], output_format, batches)
        if output_format == "csv":
            assert outputs[index].read_bytes() == reference.read_bytes(), "killed after %.3f s" % delay
        child = next_child
    assert interrupted >= 3, "only %d of %d kills landed before the job ended" % (interrupted, len(delays))


# -- settings, foreign files, overwrite, finished outputs ------------------------------------

def test_other_settings_are_refused_naming_the_setting(tmp_path):
    output = tmp_path / "out.csv"
    run_job(output, "csv", [make_batch(0)])
    before = files_under(tmp_path)
    with pytest.raises(OutputError) as raised:
        open_writer(output, feature_size=64, settings=dict(SETTINGS, weights="/weights/other.h5"))
    message = str(raised.value)
    assert "weights='imagenet', not '/weights/other.h5'" in message
    assert "--overwrite" in message and "--output" in message and "\n" not in message
    with pytest.raises(OutputError, match="feature_size='64', not '32'"):
        open_writer(output, feature_size=32, settings=SETTINGS)
    with pytest.raises(OutputError, match="format='csv', not 'npy'"):
        open_writer(output, format="npy", feature_size=64, settings=SETTINGS)
    assert files_under(tmp_path) == before


def test_an_existing_file_without_sidecar_is_refused_unless_overwrite(tmp_path):
    output = tmp_path / "mine.csv"
    output.write_text("precious,data\n")
    with pytest.raises(OutputError, match="not written by this program.*--overwrite"):
        open_writer(output, feature_size=64, settings=SETTINGS)
    assert output.read_text() == "precious,data\n"
    with open_writer(output, feature_size=64, settings=SETTINGS, overwrite=True) as writer:
        assert writer.completed == frozenset()
        writer.write(*make_batch(0))
    assert_same_content(output, "csv", [make_batch(0)])


@pytest.mark.parametrize("output_format", ["csv", "npy"])
def test_overwrite_removes_output_sidecar_parts_and_errors(tmp_path, output_format):
    output = tmp_path / ("out." + output_format)
    writer = open_writer(output, format=output_format, feature_size=64, settings=SETTINGS)
    writer.write(*make_batch(0))
    writer.abort()
    ErrorLog(output).add("bad.jpg", "decode", "truncated")
    with open_writer(output, format=output_format, feature_size=64, settings=dict(SETTINGS, layer="fc6"),
                     overwrite=True) as fresh:
        assert fresh.completed == frozenset()
        assert not ErrorLog.path_for(output).exists()
        fresh.write(*make_batch(1))
    assert_same_content(output, output_format, [make_batch(1)])
    assert json.loads(sidecar_path(output).read_text())["settings"]["layer"] == "fc6"
    assert not Path(str(output) + ".parts").exists()


@pytest.mark.parametrize("kind", NODE_KINDS)
@pytest.mark.parametrize("suffix", ["", ".paths.csv", ".errors.csv", ".run.json", ".tmp", ".run.json.tmp", ".parts"])
def test_overwrite_removes_nothing_when_a_name_is_not_a_regular_file(tmp_path, make_node, suffix, kind):
    output = tmp_path / "job" / "out.npy"
    writer = open_writer(output, format="npy", feature_size=64, settings=SETTINGS)
    writer.write(*make_batch(0))
    writer.abort()
    with ErrorLog(output) as log:
        log.add("bad.jpg", "decode", "truncated")
    elsewhere = tmp_path / "elsewhere"  # what a link points to: an input image, or a folder of them
    elsewhere.mkdir()
    (elsewhere / "precious.jpg").write_bytes(b"\xff\xd8 a photo")
    node = Path(str(output) + suffix)
    if node.is_dir():
        shutil.rmtree(node)
    elif node.exists():
        node.unlink()
    make_node(node, kind, elsewhere if suffix == ".parts" else elsewhere / "precious.jpg")
    before = entries_under(tmp_path)
    with pytest.raises(OutputError) as raised:
        open_writer(output, format="npy", feature_size=64, settings=SETTINGS, overwrite=True)
    message = str(raised.value)
    assert message.startswith("%s is %s; not replacing it: " % (node, NODE_KINDS[kind])), message
    assert message.endswith("choose another --output") and "\n" not in message
    assert entries_under(tmp_path) == before  # checked first: nothing removed, the node still there


@pytest.mark.parametrize("suffix, kind", [("", "fifo"), ("", "character device"), ("", "symbolic link"),
                                          (".run.json", "character device"), (".run.json", "symbolic link")])
def test_an_output_that_is_not_a_regular_file_is_refused_without_suggesting_overwrite(tmp_path, make_node,
                                                                                        suffix, kind):
    output = tmp_path / "out.csv"
    (tmp_path / "precious.jpg").write_bytes(b"\xff\xd8 a photo")
    make_node(Path(str(output) + suffix), kind, tmp_path / "precious.jpg")
    before = entries_under(tmp_path)
    with pytest.raises(OutputError) as raised:
        open_writer(output, feature_size=64, settings=SETTINGS)
    assert str(raised.value) == "%s%s is %s; not replacing it: choose another --output" % (output, suffix,
                                                                                            NODE_KINDS[kind])
    assert entries_under(tmp_path) == before


def test_error_log_does_not_remove_what_is_not_a_regular_file(tmp_path, make_node):
    make_node(ErrorLog.path_for(tmp_path / "out.csv"), "fifo", None)
    with pytest.raises(OutputError, match="out.csv.errors.csv is a FIFO; not replacing it"):
        ErrorLog(tmp_path / "out.csv")
    assert stat.S_ISFIFO(os.lstat(ErrorLog.path_for(tmp_path / "out.csv")).st_mode)


@pytest.mark.parametrize("output_format", FORMATS)
def test_rerunning_a_finished_output_writes_nothing_and_changes_nothing(tmp_path, output_format):
    batches = [make_batch(index) for index in range(3)]
    output = tmp_path / ("out." + output_format)
    run_job(output, output_format, batches)
    before = files_under(tmp_path)
    writer = open_writer(output, format=output_format, feature_size=64, settings=SETTINGS)
    assert writer.completed == frozenset(expected_content(batches)[0])
    writer.close()
    assert files_under(tmp_path) == before


@pytest.mark.parametrize("output_format", FORMATS)
def test_new_images_are_appended_to_a_finished_output(tmp_path, output_format):
    batches = [make_batch(index) for index in range(4)]
    output = tmp_path / ("out." + output_format)
    run_job(output, output_format, batches[:2])
    run_job(output, output_format, batches)
    assert_same_content(output, output_format, batches)
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["out." + output_format, "out.%s.run.json" % output_format] + (["out.npy.paths.csv"] if output_format == "npy"
                                                                          else []))


@pytest.mark.parametrize("output_format", FORMATS)
def test_a_run_without_rows_leaves_a_valid_empty_output(tmp_path, output_format):
    output = tmp_path / ("empty." + output_format)
    open_writer(output, format=output_format, column_prefix="fc7", feature_size=3, settings=SETTINGS).close()
    paths, features = read_output(output, output_format)
    assert paths == [] and features.size == 0
    if output_format == "csv":
        assert output.read_bytes() == b"path,fc7_0,fc7_1,fc7_2\n"
    elif output_format == "npy":
        assert np.load(output).shape == (0, 3)
    else:
        assert pd.read_parquet(output).columns.tolist() == ["path", "path_bytes", "fc7"]


def test_a_finished_output_deleted_by_hand_starts_afresh(tmp_path):
    output = tmp_path / "out.csv"
    run_job(output, "csv", [make_batch(0)])
    output.unlink()
    with open_writer(output, feature_size=64, settings=SETTINGS) as writer:
        assert writer.completed == frozenset()


def test_an_output_changed_by_something_else_is_refused(tmp_path):
    output = tmp_path / "out.csv"
    run_job(output, "csv", [make_batch(0), make_batch(1)])
    output.write_bytes(output.read_bytes()[:100])
    with pytest.raises(OutputError, match="shorter.*--overwrite"):
        open_writer(output, feature_size=64, settings=SETTINGS)


# -- disk full and unwritable folders -------------------------------------------------------

def failing(real, error_number, after):
    """`real`, raising OSError(error_number) from its call number `after` + 1 on."""
    calls = {"count": 0}

    def call(*args, **kwargs):
        calls["count"] += 1
        if calls["count"] > after:
            raise OSError(error_number, os.strerror(error_number))
        return real(*args, **kwargs)
    return call


@pytest.mark.parametrize("output_format, operation, after", [
    ("csv", "write", 0), ("csv", "fsync", 0), ("csv", "fsync", 1), ("csv", "replace", 0),  # data, then sidecar
    ("parquet", "fsync", 0), ("parquet", "replace", 1), ("npy", "fsync", 0), ("npy", "replace", 0)])
def test_disk_full_keeps_the_committed_rows_and_a_rerun_resumes(tmp_path, monkeypatch, output_format, operation,
                                                                 after):
    batches = [make_batch(index) for index in range(4)]
    output = tmp_path / ("out." + output_format)
    writer = open_writer(output, format=output_format, feature_size=64, settings=SETTINGS)
    writer.write(*batches[0])
    with monkeypatch.context() as patch:
        patch.setattr(os, operation, failing(getattr(os, operation), errno.ENOSPC, after=after))
        with pytest.raises(OutputError) as raised:
            writer.write(*batches[1])
    assert str(raised.value) == "disk full while writing %s: 3 rows committed, rerun to resume" % output
    with pytest.raises(OutputError, match="3 rows committed"):
        writer.write(*batches[2])  # a writer that failed refuses more rows
    writer.abort()
    run_job(output, output_format, batches)
    assert_same_content(output, output_format, batches)


def test_disk_full_when_finalising_keeps_the_parts(tmp_path, monkeypatch):
    batches = [make_batch(index) for index in range(2)]
    output = tmp_path / "out.npy"
    writer = open_writer(output, format="npy", feature_size=64, settings=SETTINGS)
    for batch in batches:
        writer.write(*batch)
    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", failing(os.fsync, errno.ENOSPC, after=0))
        with pytest.raises(OutputError, match="disk full while writing .*: 6 rows committed, rerun to resume"):
            writer.close()
    assert not output.exists()
    run_job(output, "npy", batches)
    assert_same_content(output, "npy", batches)


class TmpfsDisk:
    """A tmpfs that the test mounted: full is full (ENOSPC from write(), SIGBUS from a store
    through a memory map), whichever library writes."""

    real = True

    def __init__(self, folder):
        self.folder = folder
        self._ballast = folder / "ballast"

    def leave_free(self, free_bytes):
        """Fills the file system with a ballast file until `free_bytes` (whole pages) are free."""
        status = os.statvfs(self.folder)
        with open(self._ballast, "wb") as file:
            file.write(bytes(status.f_bavail * status.f_frsize - free_bytes))
        status = os.statvfs(self.folder)
        assert status.f_bavail * status.f_frsize == free_bytes

    def free_space(self):
        self._ballast.unlink()


class SimulatedDisk:
    """Without root or tmpfs: os.write fails with ENOSPC once `free_bytes` have been written.
    Only the writer's own writes go through os.write (npy, not pyarrow nor Python file objects)."""

    real = False

    def __init__(self, folder, monkeypatch):
        self.folder = folder
        self._monkeypatch = monkeypatch

    def leave_free(self, free_bytes):
        free = {"bytes": free_bytes}
        real_write = os.write

        def write(descriptor, data):
            if free["bytes"] <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written = real_write(descriptor, memoryview(data)[:free["bytes"]])
            free["bytes"] -= written
            return written
        self._monkeypatch.setattr(os, "write", write)

    def free_space(self):
        self._monkeypatch.undo()


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    """A folder on a file system of its own that a test can fill: a 1 MiB tmpfs, else a SimulatedDisk."""
    folder = tmp_path / "small"
    folder.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)]
    if os.geteuid() != 0 or not shutil.which("mount") or subprocess.run(mount, capture_output=True).returncode:
        yield SimulatedDisk(folder, monkeypatch)
        return
    try:
        yield TmpfsDisk(folder)
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode:
            subprocess.run(["umount", "--lazy", str(folder)], check=True)
            pytest.fail("umount %s failed: a file on it was left open" % folder)


@pytest.mark.parametrize("output_format, free", [
    ("npy", "nothing"), ("npy", "half of the output"), ("npy", "all but the last page of the output"),
    ("npy", "the output but not its paths file"),
    ("parquet", "nothing"), ("parquet", "half of the output"), ("parquet", "all but the last page of the output")])
def test_disk_full_during_the_final_merge_is_an_output_error_and_a_rerun_completes(tmp_path, small_disk,
                                                                                 output_format, free):
    if not small_disk.real and (output_format == "parquet" or "paths" in free):
        pytest.skip("no tmpfs (needs root and mount): pyarrow and the paths file do not write through os.write, "
                    "so a full disk cannot be simulated for them")
    batches = [make_batch(index, rows=8, size=1024) for index in range(4)]
    reference = tmp_path / "reference" / ("out." + output_format)
    run_job(reference, output_format, batches)  # uninterrupted, on the usual file system
    page = os.statvfs(tmp_path).f_frsize
    output_pages = -(-reference.stat().st_size // page)
    free_bytes = {"nothing": 0, "half of the output": output_pages // 2 * page,
                  "all but the last page of the output": (output_pages - 1) * page,
                  "the output but not its paths file": output_pages * page}[free]
    output = small_disk.folder / "job" / ("out." + output_format)
    writer = open_writer(output, format=output_format, feature_size=1024, settings=SETTINGS)
    for batch in batches:
        writer.write(*batch)
    parts = sorted(os.listdir(str(output) + ".parts"))
    small_disk.leave_free(free_bytes)
    with pytest.raises(OutputError) as raised:
        writer.close()  # before the merge wrote without a memory map, a tmpfs got SIGBUS here
    assert str(raised.value) == "disk full while writing %s: 32 rows committed, rerun to resume" % output
    # Nothing that looks finished, no temporary file: the sidecar still says "writing", with its parts.
    assert sorted(os.listdir(output.parent)) == ["out.%s.parts" % output_format, "out.%s.run.json" % output_format]
    assert sorted(os.listdir(str(output) + ".parts")) == parts
    record = json.loads(sidecar_path(output).read_text())
    assert (record["state"], record["rows"], record["parts"]) == ("writing", 32, 4)
    small_disk.free_space()
    run_job(output, output_format, batches)  # the rerun: every row is committed; close() merges
    assert files_under(output.parent) == files_under(reference.parent)


@pytest.mark.parametrize("shape", [(0, 3), (1, 4096), (5, 7), (1000, 3), (12345, 1)])
def test_npy_output_and_parts_have_the_bytes_of_open_memmap_and_numpy_save(tmp_path, monkeypatch, shape):
    features = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    mapped = np.lib.format.open_memmap(tmp_path / "open_memmap.npy", mode="w+", dtype=np.float32, shape=shape)
    mapped[:] = features
    mapped.flush()
    del mapped
    paths = ["image_%d.jpg" % row for row in range(shape[0])]
    half = (shape[0] + 1) // 2
    batches = [batch for batch in [(paths[:half], features[:half]), (paths[half:], features[half:])] if batch[0]]
    output = tmp_path / "job" / "out.npy"
    monkeypatch.setattr(writer_module, "_COPY_BYTES", 1000)  # blocks that split rows and floats
    copied = []
    real_write_npy = writer_module._write_npy

    def write_npy(path, rows, feature_size, blocks):
        real_write_npy(path, rows, feature_size, (copied.append(len(block)) or block for block in blocks))
    with open_writer(output, format="npy", feature_size=shape[1], settings=SETTINGS) as writer:
        for index, (batch_paths, batch_features) in enumerate(batches):
            writer.write(batch_paths, batch_features)
            np.save(tmp_path / "save.npy", batch_features)
            part = tmp_path / "job" / "out.npy.parts" / ("part-%06d.npy" % index)
            assert part.read_bytes() == (tmp_path / "save.npy").read_bytes()
        monkeypatch.setattr(writer_module, "_write_npy", write_npy)
    assert output.read_bytes() == (tmp_path / "open_memmap.npy").read_bytes()
    # The parts are copied a block at a time, never a whole part: memory stays bounded.
    assert sum(copied) == features.nbytes and all(size <= 1000 for size in copied)


def test_a_damaged_npy_part_is_refused_when_merging(tmp_path):
    output = tmp_path / "out.npy"
    writer = open_writer(output, format="npy", feature_size=64, settings=SETTINGS)
    writer.write(*make_batch(0))
    writer.write(*make_batch(1))
    writer.abort()
    part = tmp_path / "out.npy.parts" / "part-000001.npy"
    part.write_bytes(part.read_bytes()[:-4])
    with pytest.raises(OutputError, match="part-000001.npy is damaged: pass --overwrite"):
        open_writer(output, format="npy", feature_size=64, settings=SETTINGS).close()
    assert sorted(os.listdir(tmp_path)) == ["out.npy.parts", "out.npy.run.json"]


def test_missing_parent_folders_are_created(tmp_path):
    output = tmp_path / "a" / "b" / "out.csv"
    run_job(output, "csv", [make_batch(0)])
    assert_same_content(output, "csv", [make_batch(0)])


def test_unwritable_folder_is_a_one_line_output_error(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="cannot create folder"):
        open_writer(tmp_path / "file" / "out.csv", feature_size=4, settings=SETTINGS)
    with pytest.raises(OutputError, match="is a folder"):
        open_writer(tmp_path, feature_size=4, settings=SETTINGS)
    folder = tmp_path / "locked"
    folder.mkdir()
    real_open = os.open

    def denied(path, *args, **kwargs):  # root ignores chmod, so the denial is simulated
        if str(path).startswith(str(folder)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(OutputError) as raised:
        open_writer(folder / "out.csv", feature_size=4, settings=SETTINGS)
    assert str(raised.value) == "cannot write in folder %s: Permission denied: choose another --output" % folder


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_permission_denied_folder(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir(mode=0o500)
    with pytest.raises(OutputError, match="Permission denied"):
        open_writer(folder / "out.csv", feature_size=4, settings=SETTINGS)


# -- arguments ----------------------------------------------------------------------------

@pytest.mark.parametrize("arguments, message", [
    ({"format": "xlsx"}, "format='xlsx'"),
    ({"feature_size": 0}, "got 0"),
    ({"feature_size": 4.0}, "got 4.0"),
    ({"column_prefix": "a,b"}, "got 'a,b'"),
    ({"settings": {"model": 16}}, "'model': 16"),
    ({"settings": {"format": "npy"}}, "settings\\['format'\\]='npy'"),
])
def test_bad_arguments_are_value_errors_naming_the_value(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        open_writer(tmp_path / "out.csv", **dict({"feature_size": 4, "settings": SETTINGS}, **arguments))
    assert list(tmp_path.iterdir()) == []


def test_bad_batches_are_refused_before_anything_is_written(tmp_path):
    output = tmp_path / "out.csv"
    with open_writer(output, feature_size=2, settings=SETTINGS) as writer:
        writer.write(["a.jpg"], np.ones((1, 2), np.float32))
        before = output.read_bytes()
        with pytest.raises(ValueError, match="got shape \\(2, 3\\)"):
            writer.write(["b", "c"], np.ones((2, 3), np.float32))
        with pytest.raises(ValueError, match="'a.jpg' is already"):
            writer.write(["b", "a.jpg"], np.ones((2, 2), np.float32))
        with pytest.raises(ValueError, match="'d' is already"):
            writer.write(["d", "d"], np.ones((2, 2), np.float32))
        with pytest.raises(ValueError, match="dtype int64"):
            writer.write(["e"], np.ones((1, 2), np.int64))
        writer.write([], np.zeros((0, 2), np.float32))
        assert output.read_bytes() == before
    with pytest.raises(ValueError, match="closed"):
        writer.write(["f"], np.ones((1, 2), np.float32))


# -- ErrorLog -----------------------------------------------------------------------------

def test_error_log_lists_the_failures_of_the_last_run(tmp_path):
    output = tmp_path / "out.csv"
    log = ErrorLog(output)
    assert log.path == tmp_path / "out.csv.errors.csv" == ErrorLog.path_for(str(output))
    assert not log.path.exists()  # no failure, no file
    log.add("a,b.jpg", "decode", 'cannot identify image "a,b.jpg"\nsecond line')
    log.add(UNDECODABLE, "missing", "No such file")
    assert log.path.read_text(encoding="utf-8", errors="surrogateescape").startswith("path,kind,message\n")
    with open(log.path, newline="", encoding="utf-8", errors="surrogateescape") as file:
        rows = list(csv.reader(file))  # flushed per row: readable before close
    assert rows == [["path", "kind", "message"], ["a,b.jpg", "decode", 'cannot identify image "a,b.jpg"\nsecond line'],
                    [UNDECODABLE, "missing", "No such file"]]
    log.close()
    assert log.count == 2
    with ErrorLog(output) as rerun:  # the images are retried; this run's failures replace the old list
        assert not rerun.path.exists()
        rerun.add("c.jpg", "decode", "broken")
    assert pd.read_csv(rerun.path)["path"].tolist() == ["c.jpg"]
    ErrorLog(output).close()
    assert not rerun.path.exists()
