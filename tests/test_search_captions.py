"""Search over what a job's text tower gave its rows (search/captions.py): caption scores in the index's order, image
to text and text to text, and the filter on the caption score, through search_features.py neighbours."""

import csv
import io
from pathlib import Path

import numpy as np
import pytest

import dataset_files
import search_features
from parallel import jobs
from parallel.output.text_rows import TEXT_SUFFIX, read_rows
from search.captions import Captions, caption_filter, caption_scores
from search.index import Index, SearchError
from text_jobs import NAMES, clip_weights, config, write_datasets, write_images


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """(the index of a job of the small CLIP over a Parquet file of six captioned images, its text rows, weights)."""
    pytest.importorskip("faiss")
    folder = tmp_path_factory.mktemp("captions")
    with clip_weights(folder / "clip") as weights:
        files, column = write_datasets(write_images(folder / "images"), folder / "data")["parquet"]
        output = folder / "feats.parquet"
        jobs.run(config(weights, files, output, text_column=column, shard_size=3))
        assert search_features.main(["--quiet", "index", str(output)]) == 0
        yield Index.load(str(output) + ".index"), read_rows(str(output) + TEXT_SUFFIX), weights


def neighbours(capsys, *argv):
    """The rows `search_features.py neighbours` prints, as dicts."""
    assert search_features.main(["neighbours"] + [str(arg) for arg in argv]) == 0, capsys.readouterr().err
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def test_caption_scores_are_the_text_file_s_in_the_index_s_order(indexed, tmp_path):
    index, rows, _ = indexed
    places = {key: place for place, key in enumerate(rows.keys)}
    assert sorted(places) == sorted(index.paths)
    scores = caption_scores(index)
    assert scores.dtype == np.float32 and np.array_equal(scores, rows.scores[[places[key] for key in index.paths]])
    bound = float(np.median(scores))
    assert caption_filter(index, bound).tolist() == (scores >= bound).tolist()
    other = Index.load(index.folder)
    other.meta["source"]["output"] = str(tmp_path / "plain.npy")  # an output whose job embedded no caption
    with pytest.raises(SearchError, match=r"plain.npy has no caption scores: its job embedded no captions "
                                          r"\(run_inference.py --text-column NAME gives each row one, in "
                                          r"plain.npy.text.parquet\)$"):
        caption_scores(other)


def test_text_to_text_image_to_text_and_the_caption_score_bound(indexed, capsys):
    index, rows, weights = indexed
    sentence = dataset_files.caption("a/03.png")
    found = neighbours(capsys, index.folder, "--caption", sentence, "--weights", weights, "-k", "6")
    assert found[0]["path"] == rows.keys[3] and float(found[0]["score"]) == pytest.approx(1, abs=1e-6)  # its own
    assert [row["path"] for row in found] == [key for key, _ in Captions(index).ranked(
        rows.embeddings[[3]], 6)[0]] and len(found) == 6
    key = rows.keys[1]  # an image of the output, by its key: its row's vector against the captions
    vector = index.stored([index.row(key)])
    expected = rows.embeddings @ vector[0]
    found = neighbours(capsys, index.folder, key, "--captions", "-k", "3")
    assert [row["path"] for row in found] == [rows.keys[place] for place in np.argsort(-expected, kind="stable")[:3]]
    np.testing.assert_allclose([float(row["score"]) for row in found], np.sort(expected)[::-1][:3], atol=1e-6)
    bound = float(np.sort(rows.scores)[2])  # the four highest scores pass
    passing = {key for key, score in zip(rows.keys, rows.scores) if score >= bound}
    found = neighbours(capsys, index.folder, key, "-k", "6", "--min-caption-score", bound)  # image to image
    assert {row["path"] for row in found} == passing and len(found) == 4
    found = neighbours(capsys, index.folder, "--caption", sentence, "--weights", weights, "--min-caption-score", bound)
    assert {row["path"] for row in found} == passing
    with pytest.raises(SystemExit) as refused:
        search_features.main(["neighbours", str(index.folder), "--caption", " "])
    assert refused.value.code == 2
    assert capsys.readouterr().err.endswith("neighbours: --caption ' ' has no words: give a sentence (see --help)\n")


def test_the_python_example_of_docs_search_captions_runs(indexed, monkeypatch, capsys):
    index, rows, _ = indexed
    page = (Path(__file__).resolve().parent.parent / "docs" / "search.md").read_text()
    example = page.split("## Captions")[1].split("```python\n")[1].split("```")[0]
    monkeypatch.chdir(Path(index.folder).parent)
    namespace = {}
    exec(compile(example, "docs/search.md", "exec"), namespace)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "%d of 6 rows pass LAION's bound" % (rows.scores >= 0.28).sum()
    nearest = Captions(index).ranked(index.stored([0]), 3)[0]
    assert lines[1:] == ["%s %s" % (key, round(cosine, 3)) for key, cosine in nearest]


def test_the_caption_keep_rule_and_export_s_caption_bound_read_the_text_file_s_scores(indexed, tmp_path, capsys):
    import pyarrow.parquet as pq
    index, rows, _ = indexed
    scores = dict(zip(rows.keys, rows.scores.tolist()))
    assert len(set(scores.values())) == len(scores)  # no ties: the rule alone chooses
    vectors = index.stored(np.arange(len(index)))
    threshold = float(np.median((vectors @ vectors.T)[np.triu_indices(len(index), 1)]))  # groups of several rows
    removals = tmp_path / "removals.parquet"
    assert search_features.main(["--quiet", "duplicates", str(index.folder), "--threshold", repr(threshold),
                                 "--removals", str(removals), "--keep-rule", "highest-caption-score"]) == 0
    table = pq.read_table(removals).to_pydict()
    groups = {}
    for group, key, kept_key, remove in zip(table["group"], table["key"], table["kept_key"], table["remove"]):
        groups.setdefault(group, []).append(key)
        assert (key != kept_key) == remove
    assert groups and max(map(len, groups.values())) > 1
    for group, keys in groups.items():
        kept = {kept_key for number, kept_key in zip(table["group"], table["kept_key"]) if number == group}
        assert kept == {max(keys, key=scores.get)}
    bound = float(np.sort(rows.scores)[2])  # the four highest pass
    out = tmp_path / "export.parquet"
    assert search_features.main(["--quiet", "export", str(index.folder), "--min-caption-score", repr(bound),
                                 "--out", str(out)]) == 0, capsys.readouterr().err
    exported = pq.read_table(out).to_pydict()
    assert sorted(exported["key"]) == sorted(key for key, score in scores.items() if score >= bound)
    assert exported["caption_score"] == [scores[key] for key in exported["key"]]
