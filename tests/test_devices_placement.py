import collections

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

from conftest import DENSE_WEIGHTS, cpu_devices, cpu_session, dense_model
from parallel.devices.batch_split import shard_features
from parallel.devices.placement import ReplicatedVariables, SharedVariables
from parallel.devices.replication import data_parallelism
from partition_graphs import cross_device_sources

tf1 = tf.compat.v1


def build(graph, placement):
    def replica():
        inputs = tf1.placeholder(tf.float32, [None, 4], name="inputs")
        return inputs, dense_model(inputs)
    placeholders, outputs = data_parallelism(placement, replica)
    session = cpu_session(graph, len(placement.devices))
    placement.load(session, DENSE_WEIGHTS)
    fetches, feed_dict = shard_features(np.ones((6, 4), np.float32), placeholders, outputs)
    return session, fetches, feed_dict


def test_replicated_weights_never_cross_devices_only_shards_and_outputs_do(graph):
    session, fetches, feed_dict = build(graph, ReplicatedVariables(cpu_devices(3)))
    sources = cross_device_sources(session, fetches, feed_dict)
    # Feeds arrive through the host and results go back to it.
    allowed = {"parallel_%d/inputs" % i for i in range(3)} | {fetch.op.name for fetch in fetches}
    assert sources, "three devices must at least exchange their inputs and outputs"
    assert sources <= allowed, "crossed between devices: %s" % sorted(sources - allowed)


def test_shared_weights_do_cross_devices_on_every_step(graph):
    # The layout the old scripts used: the measurement above must be able to fail.
    session, fetches, feed_dict = build(graph, SharedVariables(cpu_devices(3)))
    sources = cross_device_sources(session, fetches, feed_dict)
    assert any("ReadVariableOp" in source for source in sources)


def test_weights_are_variables_never_graph_constants(graph):
    big = {"dense/weights": np.ones((1000, 1000), np.float32)}

    def model(inputs):
        return tf.matmul(inputs, tf1.get_variable("dense/weights", [1000, 1000]))
    placement = ReplicatedVariables(cpu_devices(2))
    data_parallelism(placement, model, [tf1.placeholder(tf.float32, [None, 1000])] * 2)
    with cpu_session(graph, 2) as session:
        placement.load(session, big)
        assert graph.as_graph_def().ByteSize() < 100_000  # 4 MB of weights are nowhere in it
        for copy in placement.variables()["dense/weights"]:
            np.testing.assert_array_equal(session.run(copy), big["dense/weights"])


@pytest.mark.parametrize("placement_class", [ReplicatedVariables, SharedVariables])
def test_a_shaped_variable_starts_from_its_placeholder_and_one_made_from_a_value_is_assigned(graph, placement_class):
    """A variable made with its shape is loaded by its own initializer (from the host placeholder of its name):
    no zeros are built for it and no second assign, and its uses share one read; one made from a value (no shape
    given) is loaded by an assign."""
    values = dict(DENSE_WEIGHTS, **{"offset": np.array([0.5, -0.5, 2.0], np.float32),
                                    "scale": np.array([2.0, 3.0, -1.0], np.float32)})

    def model(inputs):
        offset = tf1.get_variable("offset", initializer=tf.constant([0.0, 0.0, 0.0]))
        scale = tf1.get_variable("scale", shape=[3])  # shaped, and used twice
        return (dense_model(inputs) + offset) * scale + scale
    placement = placement_class(cpu_devices(2))
    outputs = data_parallelism(placement, model, [tf.ones([1, 4])] * 2)
    checked = {}  # the op that says which variables are not initialized, built once the model is
    with cpu_session(graph, 2) as session:
        checked["before"] = sorted(session.run(tf1.report_uninitialized_variables(tf1.global_variables() +
                                                                                  tf1.local_variables())))
        placement.load(session, values)
        checked["after"] = session.run(tf1.report_uninitialized_variables(tf1.global_variables() +
                                                                          tf1.local_variables())).tolist()
        for name, copies in placement.variables().items():
            assert len(copies) == (2 if placement_class is ReplicatedVariables else 1)
            for copy in copies:
                np.testing.assert_array_equal(session.run(copy), values[name])
        expected = (np.ones((1, 4), np.float32) @ values["dense/weights"] + values["dense/biases"] +
                    values["offset"]) * values["scale"] + values["scale"]
        for output in session.run(outputs):
            np.testing.assert_allclose(output, expected, rtol=1e-6)
    operations = graph.get_operations()
    assert [op.name for op in operations if op.type == "Fill" or "zeros" in op.name] == []
    feeds = sorted(op.name for op in operations if op.type == "Placeholder")
    assert feeds == ["load_weights/dense_biases", "load_weights/dense_weights", "load_weights/offset",
                     "load_weights/scale"]
    assigns = [op for op in operations if op.type == "AssignVariableOp"]
    shaped = 3 * len(placement.variables()["dense/weights"])
    offsets = len(placement.variables()["offset"])
    # The shaped copies' initializers, and the offset's copies: their initializer and the load's assign each.
    assert len(assigns) == shaped + 2 * offsets
    assert all(op.device == "/device:CPU:0" for op in operations if op.name.startswith("load_weights/") and
               op.type == "Placeholder")
    # Each copy a resource variable, in its collections: the first trainable and global, the others local. None
    # asks whether it is initialized at build (TensorFlow's creator builds an op for that: made only for the
    # offset's copies here, and for the check above), yet the check works: every copy before the load, none after.
    copies = [copy for name in sorted(placement.variables()) for copy in placement.variables()[name]]
    assert all(isinstance(copy, resource_variable_ops.ResourceVariable) for copy in copies)
    assert set(tf1.trainable_variables()) == {copies[0] for copies in placement.variables().values()}
    assert set(tf1.global_variables() + tf1.local_variables()) == set(copies)
    assert [op.name for op in operations if op.type == "VarIsInitializedOp" and
            not op.name.startswith("report_uninitialized_variables")] == [
        "%s/IsInitialized/VarIsInitializedOp" % copy.op.name for copy in placement.variables()["offset"]]
    assert checked == {"before": sorted(copy.op.name.encode() for copy in copies), "after": []}
    # Each shaped copy is read by one op, whichever replicas use it and however often (TensorFlow's creator
    # builds a read for each use): the scale's reads are the dense weights' count.
    reads = collections.Counter(op.inputs[0].op.name for op in operations if op.type == "ReadVariableOp")
    assert {reads[copy.op.name] for name in ("dense/weights", "dense/biases", "scale")
            for copy in placement.variables()[name]} == {1}


def test_load_names_what_is_missing_unexpected_or_misshapen(graph):
    placement = ReplicatedVariables(cpu_devices(2))
    data_parallelism(placement, dense_model, [tf.zeros([1, 4])] * 2)
    with cpu_session(graph, 2) as session:
        with pytest.raises(ValueError, match=r"missing \['dense/biases'\], unexpected \['extra'\]"):
            placement.load(session, {"dense/weights": DENSE_WEIGHTS["dense/weights"], "extra": np.zeros(1)})
        with pytest.raises(ValueError, match=r"dense/weights has shape \[4, 3\] but the weights give \[3, 4\]"):
            placement.load(session, dict(DENSE_WEIGHTS, **{"dense/weights": np.zeros((3, 4), np.float32)}))


def test_placement_needs_devices():
    with pytest.raises(ValueError, match=r"devices=\(\)"):
        ReplicatedVariables([])
