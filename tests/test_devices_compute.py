"""The compute stage: DeviceRunner (fed with the step) and StagedRunner (inputs staged on the devices).

The staged runner is compared with the unstaged one, bit for bit, on logical CPU devices.
"""

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework import kernels

from parallel.devices import Devices, resolve_devices, staging
from parallel.devices.compute import DeviceRunner, build_graph
from parallel.devices.staging import StagedRunner, StagingAreas, open_runner
from parallel.inputs.reader import Batch, Failure
from parallel.loop import run_loop
from parallel.model import ModelSpec
from partition_graphs import CrossingRecorder

tf1 = tf.compat.v1
SIZE = (16, 16)


def conv_model(images):
    """uint8 [N, 16, 16, 3] -> float32 [N, 16]: convolution, ReLU, pooling and a dense layer.

    Real kernels (oneDNN on this CPU) whose blocking may depend on the batch, unlike a mean.
    """
    kernel = tf1.get_variable("conv/kernel", [3, 3, 3, 8])
    dense = tf1.get_variable("dense/weights", [128, 16])
    hidden = tf.nn.relu(tf.nn.conv2d(tf.cast(images, tf.float32) / 255, kernel, strides=2, padding="SAME"))
    pooled = tf.nn.max_pool2d(hidden, 2, 2, "VALID")  # [N, 4, 4, 8]
    return tf.matmul(tf.reshape(pooled, [-1, 128]), dense)


_rng = np.random.default_rng(7)
WEIGHTS = {"conv/kernel": _rng.normal(size=(3, 3, 3, 8)).astype(np.float32),
           "dense/weights": _rng.normal(size=(128, 16)).astype(np.float32)}
MODEL = ModelSpec(name="conv", fn=conv_model, image_size=SIZE, load_weights=lambda: WEIGHTS, output_name="conv")

# Ragged, a single image, fewer images than devices, more than one step's worth (13 > 2 x 4).
BATCH_SIZES = (7, 1, 2, 6, 5, 3, 13, 4)


def cpu(count):
    return resolve_devices(devices=",".join("cpu:%d" % i for i in range(count)), gpu_count=0)


def random_images(count, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (count,) + SIZE + (3,), dtype=np.uint8)


def host_batches():
    return [random_images(size, seed) for seed, size in enumerate(BATCH_SIZES)]


@pytest.mark.parametrize("num_devices", [1, 2, 3, 4])
def test_staged_rows_are_the_unstaged_rows_bit_for_bit(num_devices):
    batches = host_batches()
    with DeviceRunner(MODEL, cpu(num_devices), per_device_batch=2) as unstaged, \
            StagedRunner(MODEL, cpu(num_devices), per_device_batch=2) as staged:
        expected = [unstaged.run(images) for images in batches]
        returned, returned_after_each = [], []
        for images in batches:
            returned.extend(staged.submit(images))
            returned_after_each.append(len(returned))
        assert returned_after_each == list(range(len(batches)))  # each batch comes back one submit late
        returned.extend(staged.flush())
        assert staged.staged_shards() == [0] * num_devices  # drained
        assert len(returned) == len(batches)
        for features, reference in zip(returned, expected):
            assert features.dtype == np.float32 and features.shape == reference.shape
            np.testing.assert_array_equal(features, reference)
        for images, reference in zip(batches, expected):  # and one batch at a time
            np.testing.assert_array_equal(staged.run(images), reference)
    assert not np.array_equal(expected[0][0], expected[0][1])  # the rows differ: order is checked


def test_the_loop_writes_the_same_rows_through_the_staged_runner():
    batches = [Batch(paths=["%d_%d" % (index, row) for row in range(len(images))], images=images, failures=[])
               for index, images in enumerate(host_batches())]
    batches.insert(3, Batch(paths=[], images=random_images(0), failures=[Failure("bad", "corrupt", "x")]))
    outputs = {}
    for runner_class in (DeviceRunner, StagedRunner):
        written = outputs[runner_class] = []
        sink = SimpleNamespace(put=lambda paths, features, written=written: written.append((paths, features)),
                               finish=lambda written=written: sum(len(paths) for paths, _ in written))
        with runner_class(MODEL, cpu(3), per_device_batch=2) as runner:
            summary = run_loop(batches, runner, sink, SimpleNamespace(add=lambda *failure: None),
                               images=sum(BATCH_SIZES) + 1)
        assert (summary.written, summary.failed, summary.skipped) == (sum(BATCH_SIZES), 1, 0)
    unstaged, staged = outputs[DeviceRunner], outputs[StagedRunner]
    assert [paths for paths, _ in staged] == [paths for paths, _ in unstaged] == [
        batch.paths for batch in batches if batch.paths]
    for (_, features), (_, reference) in zip(staged, unstaged):
        np.testing.assert_array_equal(features, reference)


def fake_out_of_memory(runner, max_rows, after_running=False):
    """Makes every step that feeds more than `max_rows` rows fail as a device out of memory would.

    With `after_running`, the step runs first: the staging areas are left as a real failure
    part-way through a step could leave them (shards taken out, others put in).

    Returns:
      list: the rows each step fed, appended as steps run.
    """
    real_run = runner.session.run
    fed = []

    def run(fetches, feed_dict=None):
        rows = sum(len(value) for value in (feed_dict or {}).values())
        if feed_dict:
            fed.append(rows)
        if rows > max_rows:
            if after_running:
                real_run(fetches, feed_dict)
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")
        return real_run(fetches, feed_dict)

    runner.session.run = run
    return fed


@pytest.mark.parametrize("runner_class, after_running, rows_fed", [
    (DeviceRunner, False, [2, 7, 4, 2, 2, 2, 1]),
    # The failed step was computing the first batch: it is put again (2) before each retry.
    (StagedRunner, False, [2, 7, 2, 4, 2, 2, 2, 2, 1]),
    (StagedRunner, True, [2, 7, 2, 4, 2, 2, 2, 2, 1]),
])
def test_out_of_memory_halves_the_step_and_loses_no_row(caplog, runner_class, after_running, rows_fed):
    first, second = random_images(2, seed=1), random_images(7, seed=2)
    # Every row is finally computed one per device: so is the reference's (oneDNN's last bits depend on the
    # rows a device computes at once, on AVX2 machines at least).
    with DeviceRunner(MODEL, cpu(2), per_device_batch=1) as reference:
        expected = [reference.run(first), reference.run(second)]
    with runner_class(MODEL, cpu(2), per_device_batch=4) as runner:
        fed = fake_out_of_memory(runner, max_rows=2, after_running=after_running)
        returned = runner.submit(first) + runner.submit(second) + runner.flush()
        assert fed == rows_fed and runner.max_rows_per_step == 2
        del runner.session.run  # the real one again
        if runner_class is StagedRunner:
            assert runner.staged_shards() == [0, 0]
    assert len(returned) == 2
    for features, reference_features in zip(returned, expected):
        np.testing.assert_array_equal(features, reference_features)
    assert "out of memory" in caplog.text


@pytest.mark.parametrize("runner_class", [DeviceRunner, StagedRunner])
def test_out_of_memory_at_one_row_per_device_is_raised(runner_class):
    with runner_class(MODEL, cpu(2), per_device_batch=2) as runner:
        fake_out_of_memory(runner, max_rows=1, after_running=True)
        with pytest.raises(tf.errors.ResourceExhaustedError):
            runner.submit(random_images(3))
        assert runner.max_rows_per_step == 2
        del runner.session.run  # the real one again
        if runner_class is StagedRunner:
            assert runner.staged_shards() == [0, 0]


def test_on_gpus_each_replicas_staging_area_is_on_its_gpu():
    """What a StagedRunner builds for --gpus 0,1, checked without GPUs: soft placement is off, so an
    area on another device, or an op without a GPU kernel, would fail (or copy) on a real GPU box."""
    names = resolve_devices(gpus="0,1", gpu_count=2).names
    areas = StagingAreas()
    graph, _, placeholders, outputs = build_graph(MODEL, names, areas.replica_input)
    staging_ops = [op for op in graph.get_operations() if op.type in ("Stage", "Unstage", "StageClear", "StageSize")]
    by_area = {}
    for op in staging_ops:
        by_area.setdefault(op.get_attr("shared_name"), []).append(op)
    assert len(by_area) == 2 and all(len(ops) == 4 for ops in by_area.values())
    for replica, device in enumerate(names):
        [ops] = [ops for ops in by_area.values() if all(op.name.startswith("parallel_%d/" % replica) for op in ops)]
        assert [op.device for op in ops] == [device] * 4, [(op.name, op.device) for op in ops]
        assert outputs[replica].device == device
        # The put reads the host's feed: the copy to the GPU is the edge into the put.
        assert placeholders[replica].device == "/device:CPU:0"
        assert areas.puts[replica].inputs[0] is placeholders[replica]
    for op_type in ("Stage", "Unstage", "StageClear", "StageSize"):
        devices = {kernel.device_type for kernel in kernels.get_registered_kernels_for_op(op_type).kernel}
        assert devices & {"GPU", "DEFAULT"}, (op_type, devices)


def test_staged_weights_never_cross_devices_only_shards_and_outputs_do():
    with StagedRunner(MODEL, cpu(3), per_device_batch=2) as runner:
        recorder = runner.session.run = CrossingRecorder(runner.session)
        runner.run(random_images(13))
        placeholders = {placeholder.op.name for placeholder in runner.placeholders}
        allowed = placeholders | {output.op.name for output in runner.outputs}
    # The host's feeds go to the areas of devices 1 and 2 (device 0 is the host), features come back.
    assert placeholders - {"parallel_0/next_images"} <= recorder.sources
    assert recorder.sources <= allowed, "crossed between devices: %s" % sorted(recorder.sources - allowed)


def test_the_engine_stages_on_gpus_and_feeds_cpus(monkeypatch):
    built = []
    monkeypatch.setattr(staging, "StagedRunner", lambda *args: built.append(args) or "staged")
    gpus = Devices(names=("/device:GPU:0", "/device:GPU:1"), physical_gpus=(2, 3))
    assert open_runner(MODEL, gpus, 64) == "staged" and built == [(MODEL, gpus, 64, None)]
    with open_runner(MODEL, cpu(2), 2) as runner:
        assert type(runner) is DeviceRunner


@pytest.mark.parametrize("runner_class", [DeviceRunner, StagedRunner])
def test_an_empty_batch_is_refused_naming_its_shape(runner_class):
    with runner_class(MODEL, cpu(1), per_device_batch=2) as runner:
        with pytest.raises(ValueError, match=r"a batch needs at least one image; got images of shape \(0, 16, 16, 3\)"):
            runner.submit(random_images(0))


def test_staged_run_refuses_to_run_past_batches_in_flight():
    with StagedRunner(MODEL, cpu(2), per_device_batch=2) as runner:
        runner.submit(random_images(3))
        with pytest.raises(RuntimeError, match="1 batches in flight"):
            runner.run(random_images(1))
        assert len(runner.flush()) == 1
