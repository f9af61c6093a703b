"""search/queries.py: queries as vectors with an embedder given (no TensorFlow), and their ranked rows."""

import numpy as np
import pytest

from search.index import Index, SearchError
from search.queries import check_text_queries, query_vectors, ranked
from search_data import clustered, write_npy


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
