"""<output>.text.parquet (parallel/output/text_rows.py): written and read back as given, a few rows read or replaced a
row group at a time, shards' files merged, one column read."""

import numpy as np
import pandas as pd
import pytest

from parallel.output import text_rows
from parallel.output.text_rows import (TextRows, column_of, merge_files, read_rows, replace_rows, text_file,
                                       write_rows)


def rows(keys, start=0):
    """TextRows of `keys` with captions (the second failed), probabilities and two labels (the third image failed)."""
    count = len(keys)
    embeddings = np.arange(start, start + 3 * count, dtype=np.float32).reshape(count, 3)
    embeddings[1] = np.nan
    scores = np.linspace(0.1, 0.4, count, dtype=np.float32)
    scores[[1, 2]] = np.nan
    labels = [("cat", "dog")] * count
    labels[2] = None
    label_scores = np.tile(np.float32([0.3, 0.2]), (count, 1))
    label_scores[2] = np.nan
    return TextRows(list(keys), embeddings, [None, "missing"] + [None] * (count - 2), scores, scores / 2, labels,
                    label_scores)


def same(first, second):
    assert first.keys == second.keys and first.errors == second.errors and first.labels == second.labels
    for name in ("embeddings", "scores", "probabilities", "label_scores"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))


def test_rows_are_read_back_as_written_and_read_in_pandas(tmp_path):
    written = rows(["b/1.jpg", "a/\udcff.jpg", "c.jpg", "d.jpg"])  # a name that is not UTF-8: its bytes kept
    write_rows(tmp_path / "t.parquet", written)
    same(read_rows(tmp_path / "t.parquet"), written)
    frame = pd.read_parquet(tmp_path / "t.parquet")
    assert list(frame.columns) == ["key", "key_bytes", "caption_embedding", "caption_error", "caption_score",
                                   "caption_probability", "label_1", "label_2", "label_score_1", "label_score_2"]
    assert frame["caption_embedding"][1] is None and frame["caption_score"].dtype == np.float32
    assert frame["key_bytes"][1] == b"a/\xff.jpg" and pd.isna(frame["label_1"][2])
    labels_only = TextRows(["x"], labels=[("cat",)], label_scores=np.float32([[0.5]]))
    write_rows(tmp_path / "l.parquet", labels_only)
    assert pd.read_parquet(tmp_path / "l.parquet").columns.tolist() == ["key", "key_bytes", "label_1", "label_score_1"]
    assert text_file("out/feats.csv") == "out/feats.csv.text.parquet"


def test_some_rows_are_read_and_replaced_a_row_group_at_a_time_and_files_merged(tmp_path, monkeypatch):
    monkeypatch.setattr(text_rows, "_ROW_GROUP", 2)  # several row groups: each read and written alone
    keys = ["k%d" % number for number in range(5)]
    write_rows(tmp_path / "t.parquet", rows(keys))
    found = read_rows(tmp_path / "t.parquet", ["k4", "k0", "none"])
    assert found.keys == ["k0", "k4"]  # in the file's order
    assert read_rows(tmp_path / "t.parquet", ["none"]).keys == []
    new = rows(["k3", "k1", "k2"], start=100)  # k1's caption failed, k2's image: as anything replaced
    replace_rows(tmp_path / "t.parquet", tmp_path / "t.parquet", new)
    after = read_rows(tmp_path / "t.parquet")
    expected = rows(keys)
    for name in ("embeddings", "scores", "probabilities", "label_scores"):
        getattr(expected, name)[[3, 1, 2]] = getattr(new, name)  # each key's row of `new`, in the file's order
    expected.errors, expected.labels = [None, "missing", None, None, None], [("cat", "dog")] * 2 + [None] + [
        ("cat", "dog")] * 2
    same(after, expected)
    merge_files([tmp_path / "t.parquet", tmp_path / "t.parquet"], tmp_path / "m.parquet")
    merged = read_rows(tmp_path / "m.parquet")
    assert merged.keys == keys * 2 and np.array_equal(merged.scores, np.tile(after.scores, 2), equal_nan=True)
    assert column_of(tmp_path / "m.parquet", "caption_score")[0] == keys * 2
    with pytest.raises(KeyError):
        column_of(tmp_path / "m.parquet", "label_3")
