"""A text tower on the devices (TextRunner): CLIP's, small, against its text tower on the host (search's TextTower)."""

import numpy as np
import pytest

import small_clip
from models.clip import clip, clip_weights
from parallel.devices import resolve_devices
from parallel.devices.text_runner import TextRunner
from parallel.model import TextSpec

SENTENCES = ["a dog on a beach", "", "caption of a/00.png " * 12, "a cat", "two cats on a red sofa in the sun", "x"]


@pytest.fixture(scope="module")
def small_weights(tmp_path_factory):
    """The small CLIP's folder, CLIP ViT-B/32 being it while the module's tests run."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clip.VIT_B32, "model", small_clip.SMALL)
        patch.setattr(clip_weights.VIT_B32, "model", small_clip.SMALL)
        with small_clip.small_clip(tmp_path_factory.mktemp("clip") / "clip-random") as folder:
            yield str(folder)


def cpus(count):
    return resolve_devices(devices=",".join("cpu:%d" % index for index in range(count)), gpu_count=0)


def test_sentences_on_two_devices_are_the_host_tower_s(small_weights):
    """Rows of several lengths (8, 16, 77 tokens), split over devices in steps of 4, each where it was asked."""
    spec = clip.VIT_B32.feature_model("embedding", weights=small_weights).text
    with clip.TextTower("clip_vit_b32", weights=small_weights) as tower:
        alone = tower.embed(spec.tokenize(SENTENCES))
    with TextRunner(spec, cpus(2), per_device_batch=1) as runner:
        ours = runner.embed(SENTENCES)
        assert runner.probability([0.3]) is None  # CLIP has none
        assert runner.embed([]).shape == (0, small_clip.SMALL.projection)
        again = runner.embed(SENTENCES)
    assert ours.dtype == np.float32 and ours.shape == (len(SENTENCES), small_clip.SMALL.projection)
    np.testing.assert_allclose(ours, alone, atol=1e-6)
    assert np.array_equal(ours, again)  # the same sentences in the same order: the same bits
    assert set(spec.lengths) >= {8, 16, 77} and len(set(map(len, map(str.split, SENTENCES)))) > 3


def test_a_tower_of_one_length_and_its_probability():
    """A spec without lengths runs every row on its context length; its probability is the spec's, of float64."""
    import tensorflow as tf

    def mean_tower(token_ids):
        scale = tf.compat.v1.get_variable("text/scale", [], initializer=tf.compat.v1.zeros_initializer())
        ids = tf.cast(token_ids, tf.float32) * scale
        return tf.math.l2_normalize(tf.stack([tf.reduce_mean(ids, 1), tf.reduce_max(ids, 1)], 1), axis=1)

    spec = TextSpec("mean", mean_tower, 4, tokenize=lambda sentences: np.array([[len(s), 1, 0, 0] for s in sentences]),
                    load_weights=lambda: {"text/scale": np.float32(2)}, probability=lambda cosines: cosines / 2)
    assert spec.lengths == (4,)
    with TextRunner(spec, cpus(2), per_device_batch=2) as runner:
        vectors = runner.embed(["ab", "abcd", "", "a"])
        assert runner.probability(np.float32([0.5, 1])).tolist() == [0.25, 0.5]
        with pytest.raises(ValueError, match=r"token_ids must be int \[N, 4\]; got int64 \(2, 3\)"):
            runner.run(np.zeros((2, 3), np.int64))
    ids = spec.tokenize(["ab", "abcd", "", "a"]) * 2.0
    expected = np.stack([ids.mean(axis=1), ids.max(axis=1)], axis=1)
    np.testing.assert_allclose(vectors, expected / np.linalg.norm(expected, axis=1, keepdims=True), rtol=1e-6)
    with pytest.raises(ValueError, match=r"lengths must rise to context_length=4; got \(8, 4\)"):
        TextSpec("mean", mean_tower, 4, tokenize=None, load_weights=None, lengths=(8, 4))
