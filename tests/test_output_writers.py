"""Tests of the writers of every format (parallel/output/base.py and the format classes): floats,
names, order, crash safety and resume, finished outputs, a full disk, bad batches."""

import errno
import importlib
import json
import os
import pkgutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow.parquet as pq
import pytest
from faults import Crash, crash_file_operations, failing
from forked_children import zygote_fixture
from outputs import (SETTINGS, TRICKY_NAMES, UNDECODABLE, assert_same_content, expected_content, files_under,
                     make_batch, read_output, run_job)

import parallel.output
from parallel.output import FORMATS, ErrorLog, OutputError, format_rows, open_writer, parts_writer, sidecar_path

REPOSITORY = Path(__file__).resolve().parents[1]
# Every module of the output layer: a crash may come before any file operation of any of them.
OUTPUT_MODULES = [importlib.import_module("parallel.output." + module.name)
                  for module in pkgutil.iter_modules(parallel.output.__path__)]


# -- floats ---------------------------------------------------------------------------

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
    close() writes what one run in path order would have written, the same bytes."""
    monkeypatch.setattr(parts_writer, "_ROW_GROUP_BYTES", 3 * 4 * 5)  # 3 rows a chunk: several chunks
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
    assert output.read_bytes() == reference.read_bytes()
    paths, features = read_output(output, output_format)
    assert paths == in_order
    np.testing.assert_array_equal(features, np.stack([values[name] for name in in_order]))
    assert open_writer(output, format=output_format, feature_size=5, settings=SETTINGS).completed == set(names)


def test_parquet_row_groups_do_not_depend_on_the_batches_the_rows_came_in(tmp_path, monkeypatch):
    """A sharded job writes its output from shards of thousands of rows, a single process from batches
    of a dozen, a resumed one from what was left: the same rows make the same file."""
    monkeypatch.setattr(parts_writer, "_ROW_GROUP_BYTES", 4 * 4 * 5)  # row groups of 4 rows
    rng = np.random.default_rng(3)
    paths = ["%03d.jpg" % index for index in range(23)]
    features = rng.standard_normal((23, 5)).astype(np.float32)
    files = []
    for sizes in ((23,), (1,) * 23, (5, 5, 5, 5, 3), (3, 11, 2, 7), (4, 4, 4, 4, 4, 3)):
        output = tmp_path / ("out-%d.parquet" % len(files))
        bounds = np.cumsum((0,) + sizes)
        run_job(output, "parquet", [(paths[start:stop], features[start:stop])
                                    for start, stop in zip(bounds[:-1], bounds[1:])])
        assert [pq.ParquetFile(output).metadata.row_group(group).num_rows
                for group in range(pq.ParquetFile(output).num_row_groups)] == [4, 4, 4, 4, 4, 3]
        files.append(output.read_bytes())
    assert all(data == files[0] for data in files)


@pytest.mark.parametrize("output_format", ["parquet", "npy"])
@pytest.mark.parametrize("when", ["resumed", "merged"])
def test_a_committed_part_changed_on_disk_is_never_merged_and_its_rows_are_computed_again(tmp_path, output_format,
                                                                                          when, caplog):
    """One bit flipped in a committed part: found by the SHA-256 written with it, when a run resumes the output,
    or just before the merge; that part and the later ones are set aside and their rows computed again."""
    batches = [make_batch(index) for index in range(6)]
    output = tmp_path / ("out." + output_format)
    writer = open_writer(output, format=output_format, feature_size=64, settings=SETTINGS)
    for paths, features in batches[:4 if when == "resumed" else 6]:
        writer.write(paths, features)
    part = next(output.parent.glob("*.parts")) / ("part-000002." + output_format)
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x01
    part.write_bytes(bytes(data))
    if when == "merged":
        with pytest.raises(OutputError, match="part-000002.%s is not the file committed .*rerun" % output_format):
            writer.close()
    else:
        writer.abort()  # as a kill leaves it
    with caplog.at_level("WARNING", logger="parallel"):
        run_job(output, output_format, batches)
    assert_same_content(output, output_format, batches)
    if when == "resumed":
        assert "part-000002.%s is not the file committed" % output_format in caplog.text


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


def two_phase_job(output, output_format, batches, holder=None):
    """A run that finishes, then a later run for new images appended to the same output."""
    run_job(output, output_format, batches[:2], holder)
    run_job(output, output_format, batches, holder)


@pytest.mark.parametrize("output_format", FORMATS)
def test_a_crash_before_any_file_operation_then_rerun_gives_the_uninterrupted_output(
        tmp_path, monkeypatch, output_format):
    batches = [make_batch(index, rows=2, size=4) for index in range(3)]  # 61 to 148 crash points, by format
    reference = tmp_path / ("reference." + output_format)
    two_phase_job(reference, output_format, batches)
    crash_at = 0
    while True:
        crash_at += 1
        output = tmp_path / ("crash%03d" % crash_at) / ("out." + output_format)
        counter = {"done": 0, "crash_at": crash_at}
        writers = []
        with monkeypatch.context() as patch:
            crash_file_operations(patch, OUTPUT_MODULES, counter)
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
import sys
repository = sys.argv[3]
sys.path[:0] = [repository, repository + "/tests"]
import pyarrow.parquet  # noqa: F401 -- imported before "ready", so that kills land in the job
import outputs  # imports the writers (not TensorFlow: `parallel` imports lazily)
from parallel.output import open_writer
print("ready", flush=True)
writer = open_writer(sys.argv[1], format=sys.argv[2], feature_size=64, settings=outputs.SETTINGS)
for paths, features in [outputs.make_batch(index) for index in range(30)]:
    sys.stdin.readline()  # the parent's "go": the batch is written now, and the child may be killed in it
    writer.write(paths, features)
    print("committed", flush=True)
sys.stdin.readline()
writer.close()
print("done", flush=True)
"""


# The kill children, each a real process forked from one that imported the writers once (tests/forked_children.py).
zygote = zygote_fixture(("pyarrow.parquet", "outputs", "parallel.output"))


def spawn_kill_child(zygote, output, output_format):
    return zygote.spawn(["-c", KILL_CHILD, str(output), output_format, str(REPOSITORY)], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE)


@pytest.mark.parametrize("output_format", FORMATS)
def test_sigkill_at_random_moments_then_rerun_gives_the_uninterrupted_output(tmp_path, output_format, zygote):
    """Ten kills, each inside a batch of the job's 30 (or its final merge) chosen at random: the child commits a
    batch only when told to, so every kill lands where it was meant to, however loaded the machine."""
    batches = [make_batch(index) for index in range(30)]
    reference = tmp_path / ("reference." + output_format)
    started = time.perf_counter()
    run_job(reference, output_format, batches)
    batch_seconds = (time.perf_counter() - started) / (len(batches) + 1)
    rng = np.random.default_rng(12345)
    kill_points = rng.choice(len(batches) + 1, 10, replace=False)  # in batch k, or in the merge (k = 30)
    delays = rng.uniform(0, 1.5 * batch_seconds, len(kill_points))  # into it, or just after it
    outputs = [tmp_path / ("kill%02d" % index) / ("out." + output_format) for index in range(len(kill_points))]
    interrupted = 0
    for index, (kill_point, delay) in enumerate(zip(kill_points, delays)):
        child = spawn_kill_child(zygote, outputs[index], output_format)
        assert child.stdout.readline() == "ready\n"
        for _ in range(kill_point):
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline() == "committed\n"
        child.stdin.write("go\n")  # batch kill_point (or the merge) starts: it is killed in it, or just after
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
            assert outputs[index].read_bytes() == reference.read_bytes(), "killed in batch %d" % kill_point
    assert interrupted >= 9, "only %d of %d kills landed before the job ended" % (interrupted, len(kill_points))


# -- finished outputs ----------------------------------------------------------------------

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


# -- disk full ------------------------------------------------------------------------------

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


# -- bad batches ----------------------------------------------------------------------------

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
