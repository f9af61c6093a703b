import numpy as np
import pytest
import tensorflow as tf

from conftest import DENSE_WEIGHTS, cpu_devices, cpu_session, dense_model
from parallel.devices.placement import ReplicatedVariables
from parallel.devices.replication import data_parallelism, merge_outputs, merge_results

tf1 = tf.compat.v1


def test_one_replica_per_device_with_its_own_name_scope(graph):
    devices = cpu_devices(3)
    outputs = data_parallelism(devices, lambda: tf.constant(1.0) + 1)
    assert len(outputs) == 3
    for index, (output, device) in enumerate(zip(outputs, devices)):
        assert output.op.name.startswith("parallel_%d/" % index)
        assert output.device == device


def test_list_arguments_are_split_and_others_broadcast(graph):
    outputs = data_parallelism(cpu_devices(2), lambda x, y, scale=1: (x + y) * scale,
                               [tf.constant(1.0), tf.constant(10.0)], tf.constant(100.0), scale=[2.0, 3.0])
    with cpu_session(graph, 2) as session:
        assert session.run(outputs) == [202.0, 330.0]


def test_wrong_list_length_names_both_lengths(graph):
    with pytest.raises(ValueError, match="list of 3 elements but there are 2 devices"):
        data_parallelism(cpu_devices(2), lambda x: x, [1, 2, 3])


def test_tuples_are_refused_rather_than_silently_broadcast(graph):
    with pytest.raises(ValueError, match="tuple"):
        data_parallelism(cpu_devices(2), lambda x: x, (1, 2))


def test_tuple_outputs_become_a_tuple_of_lists(graph):
    first, second = data_parallelism(cpu_devices(2), lambda: (tf.constant(1), tf.constant(2)))
    assert len(first) == len(second) == 2


def test_variables_are_shared_across_replicas_under_the_caller_scope(graph):
    with tf1.variable_scope("model"):
        data_parallelism(cpu_devices(3), dense_model, [tf.zeros([1, 4])] * 3)
    names = sorted(variable.op.name for variable in tf1.global_variables())
    assert names == ["model/dense/biases", "model/dense/weights"]


def test_replicated_placement_gives_every_device_a_copy_under_one_namespace(graph):
    placement = ReplicatedVariables(cpu_devices(3))
    data_parallelism(placement, dense_model, [tf.zeros([1, 4])] * 3)
    variables = placement.variables()
    assert sorted(variables) == ["dense/biases", "dense/weights"]
    for copies in variables.values():
        assert [copy.device for copy in copies] == cpu_devices(3)
    assert tf1.trainable_variables() == [variables["dense/weights"][0], variables["dense/biases"][0]]


@pytest.mark.parametrize("num_devices", [1, 2, 3])
def test_replicas_compute_what_one_device_computes(graph, num_devices):
    inputs = np.random.default_rng(0).standard_normal((num_devices * 2, 4)).astype(np.float32)
    expected = inputs @ DENSE_WEIGHTS["dense/weights"] + DENSE_WEIGHTS["dense/biases"]
    placement = ReplicatedVariables(cpu_devices(num_devices))
    shards = [tf.constant(shard) for shard in np.split(inputs, num_devices)]
    merged = merge_outputs(data_parallelism(placement, dense_model, shards))
    with cpu_session(graph, num_devices) as session:
        placement.load(session, DENSE_WEIGHTS)
        np.testing.assert_allclose(session.run(merged), expected, rtol=1e-6)


def test_scalar_outputs_are_reduced_not_concatenated(graph):
    per_device = data_parallelism(cpu_devices(2), lambda x: tf.reduce_sum(x), [tf.ones([2]), tf.ones([3])])
    total, mean = merge_outputs(per_device, "sum"), merge_outputs(per_device, "mean")
    with cpu_session(graph, 2) as session:
        assert session.run([total, mean]) == [5.0, 2.5]


def test_merge_outputs_refuses_mixed_ranks_and_unknown_reductions(graph):
    with pytest.raises(ValueError, match="same known rank"):
        merge_outputs([tf.zeros([2]), tf.zeros([])])
    with pytest.raises(ValueError, match="'median'"):
        merge_outputs([tf.zeros([])], "median")


def test_merge_results_concatenates_batches_and_weights_scalar_means():
    np.testing.assert_array_equal(merge_results([np.zeros((2, 3)), np.ones((1, 3))], [2, 1]),
                                  np.array([[0, 0, 0], [0, 0, 0], [1, 1, 1]]))
    # Device 0 averaged 3 rows to 1.0 and device 1 averaged 1 row to 5.0: the batch mean is 2.0.
    assert merge_results([np.float32(1.0), np.float32(5.0)], [3, 1], "mean") == 2.0
    assert merge_results([np.float32(1.0), np.float32(5.0)], [3, 1], "sum") == 6.0
    with pytest.raises(ValueError, match="2 entries for 1 device"):
        merge_results([np.zeros(2)], [1, 1])
