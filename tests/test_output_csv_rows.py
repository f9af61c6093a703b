"""Tests of parallel/output/csv_rows.py: exact floats, quoting as the csv module does, names read back."""

import csv
import os

import numpy as np
import pytest
from outputs import TRICKY_NAMES

from parallel.output import OutputError, csv_rows, format_rows, read_csv_paths


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


def test_path_quoting_is_the_csv_modules_with_its_default_line_ends(tmp_path):
    for name in TRICKY_NAMES:
        with open(tmp_path / "reference.csv", "w", newline="", encoding="utf-8", errors="surrogateescape") as file:
            csv.writer(file).writerow([name, "1.0"])
        reference = (tmp_path / "reference.csv").read_bytes()
        assert reference.endswith(b"\r\n")
        assert format_rows([name], np.ones((1, 1), np.float32)) == reference[:-2] + b"\n", name


def test_read_csv_paths_handles_quotes_newlines_and_raw_bytes():
    data = b'h\nplain,1\n"a,""b""\nc",2\n' + b"\xff\xfe,3\n"
    assert read_csv_paths(data, 2) == ["plain", 'a,"b"\nc', os.fsdecode(b"\xff\xfe")]
    with pytest.raises(OutputError, match="no end"):
        read_csv_paths(b"h\nplain,1", 2)


def test_the_format_pool_has_a_thread_for_each_core_this_process_may_use():
    assert csv_rows._FORMAT_THREADS == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("threads", [1, 2, 7])
def test_rows_are_the_same_bytes_however_many_chunks_they_are_formatted_in(monkeypatch, threads):
    features = np.random.default_rng(5).standard_normal((61, 33)).astype(np.float32)
    paths = ["image_%d.jpg" % row for row in range(len(features))]
    expected = b"".join(csv_rows._format_floats(features[row:row + 1])[0] for row in range(len(features)))
    monkeypatch.setattr(csv_rows, "_FORMAT_THREADS", threads)  # 61 rows: 1, 2 or 7 chunks
    lines = format_rows(paths, features).split(b"\n")[:-1]
    assert [line.split(b",", 1)[0].decode() for line in lines] == paths
    assert b"".join(line.split(b",", 1)[1] for line in lines) == expected
