import numpy as np
import pytest
import tensorflow as tf

from conftest import cpu_devices, cpu_session
from parallel.devices.batch_split import shard_features, shard_sizes

tf1 = tf.compat.v1


@pytest.mark.parametrize("rows, devices, expected", [
    (7, 3, [3, 2, 2]), (8, 4, [2, 2, 2, 2]), (2, 4, [1, 1]), (1, 3, [1]), (5, 1, [5])])
def test_shard_sizes_are_even_and_skip_devices_without_rows(rows, devices, expected):
    assert shard_sizes(rows, devices) == expected


@pytest.mark.parametrize("rows, devices", [(0, 2), (3, 0)])
def test_shard_sizes_refuses_empty(rows, devices):
    with pytest.raises(ValueError, match=str(min(rows, devices))):
        shard_sizes(rows, devices)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 9])
def test_shards_cover_the_batch_in_order_and_skip_idle_devices(graph, rows):
    devices = cpu_devices(3)
    placeholders, outputs = [], []
    for device in devices:
        with tf.device(device):
            placeholder = tf1.placeholder(tf.float32, [None, 2])
            placeholders.append(placeholder)
            outputs.append(placeholder * 2)
    batch = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    fetches, feed_dict = shard_features(batch, placeholders, outputs)
    assert len(fetches) == min(rows, 3)
    assert list(feed_dict) == placeholders[:len(fetches)]
    np.testing.assert_array_equal(np.concatenate(list(feed_dict.values())), batch)
    with cpu_session(graph, 3) as session:
        np.testing.assert_array_equal(np.concatenate(session.run(fetches, feed_dict)), batch * 2)


def test_shard_features_feeds_views_not_copies(graph):
    placeholders = [tf1.placeholder(tf.uint8, [None, 2]) for _ in range(2)]
    batch = np.zeros((4, 2), np.uint8)
    _, feed_dict = shard_features(batch, placeholders, [p for p in placeholders])
    assert all(np.shares_memory(shard, batch) for shard in feed_dict.values())


def test_shard_features_checks_its_arguments(graph):
    placeholders = [tf1.placeholder(tf.float32, [None]) for _ in range(2)]
    with pytest.raises(ValueError, match="2 placeholders but 1 outputs"):
        shard_features(np.zeros(3), placeholders, placeholders[:1])
    with pytest.raises(ValueError, match="at least one row; got 0"):
        shard_features(np.zeros((0,)), placeholders, placeholders)
