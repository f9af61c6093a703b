"""parallel/queries.py: images given as bytes, by one runner kept open, as `extract` computes their files."""

import io

import numpy as np
import pytest
from PIL import Image

from colour_jobs import MODEL, make_images
from parallel import extract
from parallel.queries import ImageEmbedder


def test_bytes_give_the_features_extract_gives_their_files_and_failures_are_named(tmp_path):
    names = make_images(tmp_path, 5, bad=("a/img_03.png",))
    bomb = io.BytesIO()
    Image.new("1", (400, 300)).save(bomb, "PNG")  # more pixels than max_pixels below: refused unread
    paths, expected = extract(MODEL, [tmp_path / name for name in names if name != "a/img_03.png"])
    with ImageEmbedder(MODEL, max_pixels=100_000) as embedder:
        data = [(tmp_path / name).read_bytes() for name in names]
        features, failures = embedder.images(data + [bomb.getvalue(), b""])
        again, none = embedder.images(data[:1])  # the same runner, a second time
    assert len(paths) == 4 and features.shape == expected.shape
    np.testing.assert_array_equal(features, expected)
    np.testing.assert_array_equal(again, expected[:1])
    assert none == []
    assert [(number, kind) for number, kind, _ in failures] == [(names.index("a/img_03.png"), "not_an_image"),
                                                                (5, "too_large"), (6, "empty")]


def test_every_image_failing_gives_no_rows_and_arguments_are_checked():
    with ImageEmbedder(MODEL) as embedder:
        features, failures = embedder.images([b"not an image"])
        assert features.shape == (0, embedder.feature_size) and len(failures) == 1
    with pytest.raises(ValueError, match="resize must be one of crop, stretch; got 'fit'"):
        ImageEmbedder(MODEL, resize="fit")
    with pytest.raises(ValueError, match="max_pixels must be at least 1; got 0"):
        ImageEmbedder(MODEL, max_pixels=0)
