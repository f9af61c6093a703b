"""search.vectors: an output's rows in batches, in every format, read back as the writer was given them."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from outputs import SETTINGS, expected_content, make_batch, run_job
from parallel.output import open_writer
from search.vectors import read_output

BATCHES = [make_batch(index, rows=5, size=16) for index in range(7)]  # tricky names included


def _read_all(source, batch_rows):
    parts = list(source.batches(batch_rows))
    assert all(1 <= len(paths) <= batch_rows and vectors.shape == (len(paths), 16) for paths, vectors in parts)
    return [path for paths, _ in parts for path in paths], np.concatenate([vectors for _, vectors in parts])


@pytest.mark.parametrize("output_format", ["csv", "parquet", "npy"])
def test_every_format_reads_back_the_rows_and_the_settings(tmp_path, output_format):
    output = tmp_path / ("features." + output_format)
    run_job(output, output_format, BATCHES)
    source = read_output(output)
    expected_paths, expected_vectors = expected_content(BATCHES)
    assert (source.count, source.feature_size, source.complete) == (35, 16, True)
    assert source.settings["layer"] == SETTINGS["layer"] and source.settings["weights"] == SETTINGS["weights"]
    for batch_rows in (1, 4, 100):
        paths, vectors = _read_all(source, batch_rows)
        assert paths == expected_paths
        np.testing.assert_array_equal(vectors, expected_vectors)
    assert source.paths() == expected_paths


def test_skip_leaves_out_the_rows_already_indexed(tmp_path):
    output = tmp_path / "features.npy"
    run_job(output, "npy", BATCHES)
    expected_paths, expected_vectors = expected_content(BATCHES)
    skip = set(expected_paths[:20])
    parts = list(read_output(output).batches(6, skip=skip))
    paths = [path for batch, _ in parts for path in batch]
    assert paths == expected_paths[20:]
    np.testing.assert_array_equal(np.concatenate([vectors for _, vectors in parts]), expected_vectors[20:])


def test_a_csv_being_written_is_read_up_to_its_committed_rows(tmp_path):
    output = tmp_path / "features.csv"
    writer = open_writer(output, format="csv", feature_size=16, settings=SETTINGS)
    for paths, features in BATCHES[:3]:
        writer.write(paths, features)
    with open(output, "ab") as file:
        file.write(b"partial,1.0,2")  # a killed writer's partial line: not committed
    source = read_output(output)
    assert (source.count, source.complete) == (15, False)
    paths, _ = _read_all(source, 4)
    assert paths == expected_content(BATCHES[:3])[0]
    writer.close()


def test_a_kept_shards_folder_reads_its_shards_in_order(tmp_path):
    folder = tmp_path / "out.parquet.shards"
    expected_paths, expected_vectors = expected_content(BATCHES)
    for shard in range(3):
        (folder / ("shard-%06d" % shard)).mkdir(parents=True)
        rows = slice(shard * 12, (shard + 1) * 12)
        table = pa.table({"path": expected_paths[rows], "path_bytes": [name.encode("utf-8", "surrogateescape")
                                                                         for name in expected_paths[rows]],
                          "fc7": pa.FixedSizeListArray.from_arrays(pa.array(expected_vectors[rows].ravel()), 16)})
        pq.write_table(table, folder / ("shard-%06d" % shard) / "features.parquet")
    (folder / "_rejected-shard-000009.1").mkdir()
    (tmp_path / "out.parquet.run.json").write_text(json.dumps(
        {"version": 1, "settings": dict(SETTINGS, format="parquet"), "state": "writing", "rows": 0, "bytes": 0,
         "parts": 0}))
    source = read_output(folder)
    assert (source.format, source.count, source.feature_size, source.settings["layer"]) == ("shards", 35, 16, "fc7")
    paths, vectors = _read_all(source, 5)
    assert paths == expected_paths
    np.testing.assert_array_equal(vectors, expected_vectors)


def test_what_is_not_an_output_is_refused_with_its_name(tmp_path):
    with pytest.raises(ValueError, match="missing.npy is not a file"):
        read_output(tmp_path / "missing.npy")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="notes.txt: not a .csv, .parquet or .npy output"):
        read_output(tmp_path / "notes.txt")
    (tmp_path / "bad.csv").write_text("name,x\n")
    with pytest.raises(ValueError, match="bad.csv cannot be read as an output"):
        read_output(tmp_path / "bad.csv")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="without committed shards"):
        read_output(tmp_path / "empty")
    np.save(tmp_path / "lonely.npy", np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="its paths file"):
        read_output(tmp_path / "lonely.npy")


@pytest.mark.parametrize("output_format", ["csv", "parquet"])
def test_an_output_shorter_than_its_record_is_damaged(tmp_path, output_format):
    output = tmp_path / ("features." + output_format)
    plain = [(["img/%02d-%d.jpg" % (index, row) for row in range(5)], features) for index, (_, features)
             in enumerate(BATCHES)]  # names without newlines: the CSV's lines are its rows
    run_job(output, output_format, plain)
    if output_format == "csv":  # cut at a line boundary: every line left is a whole row
        output.write_bytes(b"".join(output.read_bytes().splitlines(keepends=True)[:-4]))
    else:
        pq.write_table(pq.read_table(output).slice(0, 31), output)
    with pytest.raises(ValueError, match=r"features.%s cannot be read as an output \(31 rows, but its record "
                                         r"features.%s.run.json says 35 are committed: write it again\)"
                                         % ((output_format,) * 2)):
        read_output(output)
