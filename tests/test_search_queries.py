"""search/queries.py: queries as vectors with an embedder given (no TensorFlow), and their ranked rows."""

import numpy as np
import pytest

from search.index import Index, SearchError
from search.queries import Kept, check_text_queries, neighbour_lines, query_vectors, ranked
from search_data import clustered, write_npy
from services import kept_job  # noqa: F401 -- a fixture


class Embedder:
    """Each image's vector is row 5's (raw, as the output holds it); bytes b"bad" fail; sentences are refused."""

    def __init__(self, row):
        self.row, self.seen = row, []

    def images(self, images):
        self.seen.append(list(images))
        good = [data for data in images if data != b"bad"]
        failures = [(number, "not_an_image", "no image data") for number, data in enumerate(images) if data == b"bad"]
        return np.tile(self.row, (len(good), 1)), failures


@pytest.fixture
def index(tmp_path):
    write_npy(tmp_path / "f.npy", clustered(100))
    return Index.build(tmp_path / "f.npy", tmp_path / "f.index")


def test_keys_vectors_and_image_files_in_order(index, tmp_path):
    rows = clustered(100)
    np.save(tmp_path / "q.npy", rows[[7, 8]])
    (tmp_path / "new.jpg").write_bytes(b"image bytes")
    embedder, said = Embedder(rows[5]), []
    resolved = query_vectors(index, ["img/00003.jpg", str(tmp_path / "q.npy"), str(tmp_path / "new.jpg")], [],
                             embedder, say=said.append)
    assert [label for label, _, _ in resolved] == ["img/00003.jpg", "%s[0]" % (tmp_path / "q.npy"), "%s[1]" % (
        tmp_path / "q.npy"), str(tmp_path / "new.jpg")]
    assert embedder.seen == [[b"image bytes"]] and len(said) == 1 and "computed by the model" in said[0]
    found = ranked(index, np.stack([vector for _, _, vector in resolved]), k=2)
    assert [lists[0][0] for lists in found] == [3, 7, 8, 5] and all(len(lists) == 2 for lists in found)
    assert found[0][0][1] == pytest.approx(1.0, abs=1e-5)
    assert len(ranked(index, index.stored([0]), k=1000)[0]) == 100  # never more than the rows


def test_an_unreadable_image_and_a_sentence_on_an_image_model_are_one_line(index, tmp_path):
    (tmp_path / "bad.jpg").write_bytes(b"bad")
    with pytest.raises(SearchError, match=r"cannot read the image .*bad.jpg \(not_an_image: no image data\)"):
        query_vectors(index, [str(tmp_path / "bad.jpg")], [], Embedder(clustered(100)[5]))
    with pytest.raises(SearchError, match="a text query needs an output of a model with a text tower"):
        check_text_queries(index)
    with pytest.raises(SearchError, match="'nope.jpg' is not a path in the index, a .npy file or an image file"):
        query_vectors(index, ["nope.jpg"], [], None)


def test_the_values_kept_beside_rows_are_read_for_the_rows_asked_only(kept_job, monkeypatch):
    import csv
    import io
    from parallel.inputs import tars
    folder, expected = kept_job
    kept = Kept(Index.load(folder))
    assert kept.names == ("txt", "json")
    read, asked = tars.read_index, []
    monkeypatch.setattr(tars, "read_index", lambda path, keys: asked.append(set(keys)) or read(path, keys))
    keys = sorted(expected)[2:6]
    assert kept.of(keys + ["not/a/row.jpg"]) == {key: expected[key] for key in keys}
    assert asked == [set(keys + ["not/a/row.jpg"])]  # the index read for these rows, never whole
    assert kept.of([]) == {} and len(asked) == 1
    lines = neighbour_lines([("q", [(key, 1.0 - number / 10) for number, key in enumerate(keys)])], kept)
    rows = list(csv.DictReader(io.StringIO("".join(lines))))
    assert list(rows[0]) == ["query", "rank", "score", "path", "kept:txt", "kept:json"]
    assert [(row["path"], row["kept:txt"], row["kept:json"]) for row in rows] == [
        (key, expected[key]["txt"] or "", expected[key]["json"] or "") for key in keys]


def test_an_output_without_kept_values_shows_none(index, tmp_path):
    from parallel.inputs.tars import MEMBERS_SUFFIX, Entry, write_index
    kept = Kept(index)  # an output of a folder: no members index
    assert kept.names == () and kept.of(["img/00001.jpg"]) == {}
    assert neighbour_lines([("q", [("img/00001.jpg", 0.5)])], kept) == ["query,rank,score,path\n",
                                                                         "q,1,0.500000,img/00001.jpg\n"]
    write_index(str(tmp_path / "f.npy") + MEMBERS_SUFFIX, [Entry("img/00001.jpg", 0, 3)])  # tars without --keep
    assert Kept(index).names == () and Kept(index).of(["img/00001.jpg"]) == {}


def test_a_model_s_probability_is_a_column_after_the_score_for_the_queries_that_have_one(index):
    """SigLIP's sentences have a probability of each neighbour (`probabilities`), an image query none: the column
    is there when one query has it, empty for the others; without any, the lines are as they were."""
    from search.queries import probabilities

    class Embedder:
        def probability(self, cosines):
            return 1 / (1 + np.exp(-(10 * cosines - 10)))

    kept = Kept(index)
    lists = [[(1, 0.5)], [(2, 0.9), (3, 0.25)]]
    chances = probabilities(Embedder(), lists, first=1)  # the first list an image's, the second a sentence's
    assert chances[0] is None and np.allclose(chances[1], [1 / (1 + np.exp(1.0)), 1 / (1 + np.exp(7.5))])
    assert probabilities(object(), lists) == [None, None]  # an embedder without one (CLIP's)
    lines = neighbour_lines([("img/00001.jpg", [("img/00001.jpg", 0.5)], chances[0]),
                             ("a dog", [("img/00002.jpg", 0.9), ("img/00003.jpg", 0.25)], chances[1])], kept)
    assert lines == ["query,rank,score,probability,path\n", "img/00001.jpg,1,0.500000,,img/00001.jpg\n",
                     "a dog,1,0.900000,0.268941,img/00002.jpg\n", "a dog,2,0.250000,0.000552779,img/00003.jpg\n"]
    assert neighbour_lines([("q", [("img/00001.jpg", 0.5)], None)], kept) == ["query,rank,score,path\n",
                                                                               "q,1,0.500000,img/00001.jpg\n"]
