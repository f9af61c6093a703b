"""search/export.py, search/export_tars.py and `export`: the rows selected (a query and a threshold, a removals file,
labels) as Parquet; their images as WebDataset tars that a job reads as its input, each image the bytes its row was
computed from (the features of a job over the export are those of the rows selected), resumed after a kill
without writing a finished tar again; an image that changed is not written."""

import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import search_features
from parallel import jobs
from parallel.inputs.manifest import Manifest, manifest_path
from search import export_tars
from search.export import select_rows
from search.index import Index
from search.removals import table_columns, write_removals
from parallel.output.text_rows import TEXT_SUFFIX, TextRows, write_rows
from search.kinds import SearchError
from search_data import SETTINGS, clustered, near_copy, write_npy
from services import kept_job, png  # noqa: F401 -- kept_job: a fixture


@pytest.fixture
def folder_job(tmp_path):
    """An output of 12 rows img/00000.jpg ... (row 11 a near-copy of row 4), each a PNG file under tmp_path/images,
    the manifest a job writes beside it, and its index."""
    images = tmp_path / "images"
    (images / "img").mkdir(parents=True)
    for row in range(12):
        (images / "img" / ("%05d.jpg" % row)).write_bytes(png((20 + row, 16), row))
    vectors = clustered(12)
    vectors[11] = near_copy(vectors[4])
    write_npy(tmp_path / "f.npy", vectors, settings=dict(SETTINGS, images=str(images.resolve())))
    Manifest.scan(images).save(manifest_path(tmp_path / "f.npy"))
    return Index.build(tmp_path / "f.npy", tmp_path / "f.index"), images


def _export(*argv):
    return search_features.main(["--quiet", "export"] + [str(value) for value in argv])


def _members(tar_path):
    with tarfile.open(tar_path) as tar:
        return [(member.name, tar.extractfile(member).read()) for member in tar.getmembers()]


def test_rows_near_a_query_and_not_removed_are_selected(folder_job, tmp_path):
    index, _ = folder_job
    unit = index.stored(range(len(index)))
    selection = select_rows(index, unit[[4]], threshold=0.5)
    expected = np.flatnonzero(unit @ unit[4] >= 0.5)
    assert selection.rows.tolist() == expected.tolist() and 11 in selection.rows.tolist()
    assert selection.captions is None and selection.labels is None
    np.testing.assert_allclose(selection.scores, (unit @ unit[4])[expected], atol=1e-6)
    write_removals(tmp_path / "r.parquet", table_columns([1, 1], ["img/00004.jpg", "img/00011.jpg"],
                                                         ["img/00004.jpg", "img/00004.jpg"], [False, True],
                                                         [np.nan, 0.99]), {})
    assert _export(index.folder, "img/00004.jpg", "--threshold", "0.5", "--removals", tmp_path / "r.parquet",
                   "--out", tmp_path / "e.parquet") == 0
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.column("row").to_pylist() == [row for row in expected.tolist() if row != 11]
    assert table.column("key").to_pylist() == ["img/%05d.jpg" % row for row in table.column("row").to_pylist()]


def test_a_selection_that_needs_what_is_not_given_is_refused_first(folder_job, tmp_path, capsys):
    index, _ = folder_job
    (tmp_path / "new.png").write_bytes(png((20, 16), 99))
    for argv, words in (([index.folder, "img/00004.jpg"], "give --threshold"),
                        ([index.folder, "--threshold", "0.5"], "give a QUERY or --text"),
                        ([index.folder, "--min-caption-score", "0.28"], "has no caption scores"),
                        ([index.folder, tmp_path / "new.png", "--threshold", "0.5", "--min-caption-score", "0.28"],
                         "has no caption scores")):  # before the new image is given to the model
        assert _export(*argv, "--out", tmp_path / "e.parquet", "--images-out", tmp_path / "tars") == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and words in error, error
    assert not (tmp_path / "e.parquet").exists() and not (tmp_path / "tars").exists()


NAMES = ("cat", "dog", "car", "tree", "boat")


def _labelled(index, failed=5):
    """Writes a text file of labels (the best 3 of NAMES a row, cosines falling, row `failed` a failed image's)
    beside the indexed output, as a job run with --labels --labels-top 3 does; returns (labels, scores) by row."""
    random = np.random.default_rng(7)
    labels = [tuple(random.permutation(NAMES)[:3].tolist()) for _ in range(len(index))]
    scores = np.sort(random.uniform(0.05, 0.35, (len(index), 3)).astype(np.float32), axis=1)[:, ::-1].copy()
    labels[failed], scores[failed] = None, np.nan
    write_rows(Path(index.meta["source"]["output"] + TEXT_SUFFIX), TextRows(list(index.paths), labels=labels,
                                                                       label_scores=scores))
    return labels, scores


def _by_hand(labels, scores, names, rank, least=-1.0):
    """{row: (label, score)}: each row's best-ranked label of `names` among its best `rank`, at `least` or more."""
    chosen = {}
    for row, row_labels in enumerate(labels):
        for place in range(rank if row_labels else 0):
            if row_labels[place] in names and scores[row, place] >= least:
                chosen[row] = (row_labels[place], float(scores[row, place]))
                break
    return chosen


def test_rows_are_selected_by_their_labels_as_by_hand(folder_job, tmp_path):
    index, _ = folder_job
    labels, scores = _labelled(index)
    for flags, names, rank, least in (
            (["--label", "dog"], {"dog"}, 1, -1.0),
            (["--label", "dog", "--label", "car", "--label-rank", "2"], {"dog", "car"}, 2, -1.0),
            (["--label", "tree", "--label-rank", "3", "--min-label-score", "0.2"], {"tree"}, 3, 0.2),
            (["--label", "boat", "--label", "cat", "--label", "car", "--label-rank", "3"], {"boat", "cat", "car"}, 3,
             -1.0)):  # rows with two of them (asserted below): each its best-ranked
        expected = _by_hand(labels, scores, names, rank, least)
        assert 0 < len(expected) < len(index), flags  # each selection leaves rows out, the failed one at least
        assert _export(index.folder, *flags, "--out", tmp_path / "e.parquet") == 0
        table = pq.read_table(tmp_path / "e.parquet")
        assert table.column("row").to_pylist() == sorted(expected), flags
        assert table.column("label").to_pylist() == [expected[row][0] for row in sorted(expected)]
        np.testing.assert_array_equal(table.column("label_score").to_numpy(),
                                      np.float32([expected[row][1] for row in sorted(expected)]))
    assert sum(len({"boat", "cat", "car"} & set(names)) > 1 for names in labels if names) > 2
    near = select_rows(index, index.stored([4]), threshold=0.5, labels=jobs_label_bound(("dog", "cat"), 3))
    both = set(_by_hand(labels, scores, {"dog", "cat"}, 3)) & set(np.flatnonzero(
        index.stored(range(len(index))) @ index.stored([4])[0] >= 0.5).tolist())
    assert near.rows.tolist() == sorted(both) and near.scores is not None


def jobs_label_bound(names, rank):
    from search.captions import LabelBound
    return LabelBound(names, rank)


def test_a_label_selection_that_cannot_be_made_is_refused_first(folder_job, tmp_path, capsys):
    index, _ = folder_job
    assert _export(index.folder, "--label", "dog", "--out", tmp_path / "e.parquet") == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "has no labels: its job embedded no labels (run_inference.py --labels FILE" \
        in error, error
    for flags in (["--min-label-score", "0.2"], ["--label-rank", "2"]):
        with pytest.raises(SystemExit) as stopped:
            _export(index.folder, *flags, "--out", tmp_path / "e.parquet")
        error = capsys.readouterr().err
        assert stopped.value.code == 2 and error.count("\n") == 1 and "--label-rank and --min-label-score bound a " \
            "--label NAME" in error, error
    _labelled(index)
    for argv, words in ((["--label", "dgo"], "--label 'dgo': no row of %s has it among its best 1 label (they "
                                            "have: boat, car, cat, dog, tree)" % index.meta["source"]["output"]),
                        (["--label", "dog", "--label-rank", "4"], "--label-rank 4: the rows of %s have their best "
                                                                   "3 labels only" % index.meta["source"]["output"])):
        assert _export(index.folder, *argv, "--out", tmp_path / "e.parquet", "--images-out", tmp_path / "tars") == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and words in error, error
    assert not (tmp_path / "e.parquet").exists() and not (tmp_path / "tars").exists()
    with pytest.raises(SearchError, match="label rank 0: give 1 or more"):
        jobs_label_bound(("dog",), 0)


def test_images_are_written_as_webdataset_tars_and_a_killed_export_resumes(folder_job, tmp_path, monkeypatch):
    index, images = folder_job
    written, real_write = [], export_tars._write_tar

    def killed_after_two(path, *args):
        if len(written) == 2:
            raise KeyboardInterrupt  # a kill while the third tar is written: its temporary is all it leaves
        written.append(path.name)
        return real_write(path, *args)
    monkeypatch.setattr(export_tars, "_write_tar", killed_after_two)
    argv = [index.folder, "--images-out", tmp_path / "tars", "--shard-size", "5", "--out", tmp_path / "e.parquet"]
    assert _export(*argv) == 130
    first = os.stat(tmp_path / "tars" / "00000.tar")
    assert sorted(os.listdir(tmp_path / "tars")) == ["00000.tar", "00001.tar", "_export.json"]
    monkeypatch.setattr(export_tars, "_write_tar", real_write)
    (images / "img" / "00007.jpg").write_bytes(png((30, 30), 99))  # changed since it was indexed
    assert _export(*argv) == 0
    again = os.stat(tmp_path / "tars" / "00000.tar")
    assert (again.st_ino, again.st_mtime_ns) == (first.st_ino, first.st_mtime_ns)  # proven, not written again
    assert sorted(os.listdir(tmp_path / "tars")) == ["00000.tar", "00001.tar", "00002.tar", "_export.json"]
    samples = [member for shard in range(3) for member in _members(tmp_path / "tars" / ("%05d.tar" % shard))]
    assert [name for name, _ in samples[:2]] == ["000000000.png", "000000000.json"]
    images_written = {name[:9]: data for name, data in samples if name.endswith(".png")}
    assert sorted(images_written) == ["%09d" % row for row in range(12)]  # the first run wrote row 7's tar
    assert all(images_written["%09d" % row] == (images / "img" / ("%05d.jpg" % row)).read_bytes()
               for row in range(5))
    assert {name: json.loads(data) for name, data in samples if name.endswith(".json")}["000000011.json"] == {
        "key": "img/00011.jpg", "row": 11}
    # A fresh export finds row 7's image changed: it is named, not written, and its number left out.
    assert _export(index.folder, "--images-out", tmp_path / "fresh", "--shard-size", "5") == 0
    fresh = [name for shard in range(3) for name, _ in _members(tmp_path / "fresh" / ("%05d.tar" % shard))]
    assert "000000007.png" not in fresh and "000000008.png" in fresh
    samples = pq.read_table(index.folder / "export.parquet").column("sample").to_pylist()
    assert samples[7] is None and samples[8] == "000000008"
    assert _export(index.folder, "--images-out", tmp_path / "fresh", "--shard-size", "4") == 2  # another export


def test_an_export_read_back_as_a_job_s_input_gives_the_selected_rows_features(kept_job, tmp_path):
    from colour_jobs import config_for, read_rows
    folder, expected = kept_job
    index = Index.load(folder)
    chosen = sorted(expected)[1::2]
    write_removals(tmp_path / "r.parquet", table_columns(
        [1] * 4, sorted(set(expected) - set(chosen)), [chosen[0]] * 4, [True] * 4, [0.9] * 4), {})
    assert _export(folder, "--removals", tmp_path / "r.parquet", "--images-out", tmp_path / "subset",
                   "--out", tmp_path / "subset.parquet") == 0
    table = pq.read_table(tmp_path / "subset.parquet").to_pylist()
    assert [line["key"] for line in table] == chosen
    assert [(line["kept:txt"], line["kept:json"]) for line in table] == [
        (expected[key]["txt"], expected[key]["json"]) for key in chosen]
    jobs.run(config_for(tmp_path, str(tmp_path / "subset" / "*.tar"), output=tmp_path / "again.csv",
                        keep=("txt", "json")))
    _, before = read_rows(folder.parent / "f.csv")
    _, after = read_rows(tmp_path / "again.csv")
    before = {key: vector for key, vector in before}
    sample_of = {line["sample"]: line["key"] for line in table}
    assert len(after) == len(chosen)
    for key, vector in after:
        original = sample_of[key.split("://", 1)[1].split("::")[0][:9]]
        assert vector.tobytes() == before[original].tobytes()
    from search.queries import Kept
    again = Index.load(_index_of(tmp_path / "again.csv"))
    assert {sample_of[key.split("://", 1)[1][:9]]: value for key, value in Kept(again).of(again.paths).items()} == {
        key: expected[key] for key in chosen}


def _index_of(output):
    assert search_features.main(["--quiet", "index", str(output)]) == 0
    return str(output) + ".index"


def test_the_tar_layout_is_img2dataset_s(folder_job, tmp_path):
    index, images = folder_job
    assert _export(index.folder, "--images-out", tmp_path / "tars", "--shard-size", "100") == 0
    with tarfile.open(tmp_path / "tars" / "00000.tar") as tar:
        members = tar.getmembers()
    assert [member.name for member in members[:4]] == ["000000000.png", "000000000.json", "000000001.png",
                                                      "000000001.json"]
    assert all(member.isfile() and member.mtime == 0 and member.mode == 0o644 for member in members)
