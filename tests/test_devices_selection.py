import configparser
import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

from hangs import HANG_SECONDS
from parallel import jobs
from parallel.devices import (CPU_BATCH, GPU_BATCH, GPU_INSTALL, DeviceError, list_nvidia_gpus, resolve_devices,
                              set_float32_precision)

SETUP_CFG = Path(__file__).resolve().parent.parent / "setup.cfg"


def no_nvidia_gpus():
    return []


def test_default_is_every_gpu_else_the_cpu():
    assert resolve_devices(gpu_count=0, nvidia_gpus=no_nvidia_gpus).names == ("/device:CPU:0",)
    gpus = resolve_devices(gpu_count=2)
    assert gpus.names == ("/device:GPU:0", "/device:GPU:1") and gpus.physical_gpus == (0, 1)


def test_gpus_flag_maps_physical_indices_to_visible_devices():
    devices = resolve_devices(gpus="2,3", gpu_count=4)
    assert devices.names == ("/device:GPU:0", "/device:GPU:1")
    assert devices.session_config().gpu_options.visible_device_list == "2,3"
    assert devices.describe() == "GPU:2, GPU:3"


def test_absent_gpu_is_an_error_listing_what_is_there_never_a_cpu_fallback():
    with pytest.raises(DeviceError, match=r"GPU 1 not found; this machine has CPU:0, GPU:0"):
        resolve_devices(gpus="0,1", gpu_count=1)
    with pytest.raises(DeviceError, match=r"GPU 0 not found; this machine has CPU:0 \("):
        resolve_devices(devices="gpu:0", gpu_count=0, nvidia_gpus=no_nvidia_gpus)
    assert resolve_devices(gpus="0", gpu_count=1).session_config().allow_soft_placement is False


@pytest.mark.parametrize("text", ["cpu:0,cpu:1", "/cpu:0,CPU:1", "/job:localhost/replica:0/task:0/device:CPU:0,cpu:1"])
def test_several_cpu_devices_become_logical_devices(text):
    devices = resolve_devices(devices=text, gpu_count=0)
    assert devices.names == ("/device:CPU:0", "/device:CPU:1")
    assert devices.cpu_count == 2
    assert devices.session_config().device_count["CPU"] == 2


@pytest.mark.parametrize("precision, devices, gpus, fused", [
    ("fp16", "cpu:0", 0, False), ("fp16", "cpu:0,cpu:1", 0, False), ("fp32", "cpu:0", 0, True),
    ("bf16", "cpu:0", 0, True), (None, "cpu:0", 0, True), ("fp16", "gpu:0", 1, True), ("fp16", "gpu:0,cpu:0", 1, False)])
def test_fp16_on_a_cpu_leaves_matmuls_unfused_and_nothing_else_changes(precision, devices, gpus, fused):
    # oneDNN's fused float16 MatMul (Grappler's remapper makes it) ran ConvNeXt-Tiny 200 times slower than unfused.
    from tensorflow.core.protobuf import rewriter_config_pb2
    config = resolve_devices(devices=devices, gpu_count=gpus, nvidia_gpus=lambda: list(range(gpus))).session_config(
        precision)
    off = config.graph_options.rewrite_options.remapping == rewriter_config_pb2.RewriterConfig.OFF
    assert off is not fused


@pytest.mark.parametrize("kwargs, message", [
    (dict(gpus="0,", gpu_count=1), "empty entry"),
    (dict(gpus="a", gpu_count=1), "'a' is not a device index"),
    (dict(devices="tpu:0"), "must name a CPU or GPU"),
    (dict(devices="cpu"), "not a device name like cpu:0"),
    (dict(devices="/job:worker/task:1/device:CPU:0"), "not a device of this machine"),
    (dict(devices="cpu:0,cpu:0"), "listed twice"),
    (dict(gpus="0", devices="cpu:0"), "not both"),
])
def test_malformed_flags_are_clear_errors(kwargs, message):
    kwargs.setdefault("gpu_count", 0)
    kwargs.setdefault("nvidia_gpus", no_nvidia_gpus)
    with pytest.raises(DeviceError, match=message):
        resolve_devices(**kwargs)


# ----------------------------------------------------------------------------- NVIDIA GPUs TensorFlow cannot see

@pytest.fixture
def fake_machine(tmp_path, monkeypatch):
    """A fake /dev folder and a fake nvidia-smi, first on PATH, that records each call.

    `fake_machine.dev` holds no device file until a test adds one; `fake_machine.smi(script)`
    writes the body of nvidia-smi; `fake_machine.smi_calls()` counts its runs.
    """
    dev, bin_folder, calls = tmp_path / "dev", tmp_path / "bin", tmp_path / "nvidia-smi.calls"
    dev.mkdir()
    bin_folder.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-modeset"):  # there without a GPU: never counted
        (dev / name).touch()
    monkeypatch.setenv("PATH", str(bin_folder) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    def smi(body):
        script = bin_folder / "nvidia-smi"
        script.write_text("#!/bin/sh\necho \"$@\" >> %s\n%s\n" % (calls, body))
        script.chmod(0o755)

    def smi_calls():
        return calls.read_text().splitlines() if calls.exists() else []

    machine = functools.partial(list_nvidia_gpus, dev_folder=str(dev))
    machine.dev, machine.smi, machine.smi_calls = dev, smi, smi_calls
    return machine


A100S = ("echo 'GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-6b2e1c0a-0000-0000-0000-000000000000)'\n"
         "echo 'GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-6b2e1c0a-0000-0000-0000-000000000001)'")


def test_the_device_files_list_the_gpus_without_asking_nvidia_smi(fake_machine):
    for name in ("nvidia10", "nvidia1", "nvidia0", "nvidia9"):
        (fake_machine.dev / name).touch()
    fake_machine.smi(A100S)
    assert fake_machine() == [str(fake_machine.dev / name) for name in ("nvidia0", "nvidia1", "nvidia9", "nvidia10")]
    assert fake_machine.smi_calls() == []


def test_without_device_files_nvidia_smi_lists_the_gpus(fake_machine):
    fake_machine.smi(A100S)
    assert fake_machine() == ["GPU 0: NVIDIA A100-SXM4-80GB", "GPU 1: NVIDIA A100-SXM4-80GB"]
    assert fake_machine.smi_calls() == ["-L"]


@pytest.mark.parametrize("body", [
    "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; exit 9",
    "echo 'No devices were found'",
    None,  # no nvidia-smi on PATH
])
def test_no_device_file_and_no_gpu_from_nvidia_smi_is_no_gpu(fake_machine, body):
    if body is not None:
        fake_machine.smi(body)
    assert fake_machine() == []


def test_a_hanging_nvidia_smi_costs_at_most_the_timeout(fake_machine, monkeypatch):
    """This nvidia-smi names a GPU, but only once the test would have hung (HANG_SECONDS): finding none, the probe
    gave up on it, after the timeout it asked for, whatever the machine's load."""
    fake_machine.smi("exec %s -c 'import time; time.sleep(%d); print(\"GPU 0: NVIDIA A100-SXM4-80GB\")'"
                     % (sys.executable, HANG_SECONDS))
    asked, real_run = [], subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *args, **options: asked.append(options.get("timeout"))
                        or real_run(*args, **options))
    assert list_nvidia_gpus(dev_folder=str(fake_machine.dev), timeout=0.5) == []
    assert asked == [0.5]


INSTALL = r"it was installed without CUDA support or cannot load CUDA; fix: pip install -e '\.\[gpu\]'"


@pytest.mark.parametrize("flags, message", [
    (dict(gpus="0,1"), r"^--gpus 0,1: this machine has NVIDIA GPUs \(GPU 0: NVIDIA A100-SXM4-80GB, GPU 1: "
                       r"NVIDIA A100-SXM4-80GB\) but TensorFlow sees none: " + INSTALL + "$"),
    (dict(gpus="3"), "^--gpus 3: this machine has NVIDIA GPUs .*" + INSTALL + "$"),
    (dict(devices="gpu:0"), "^--devices gpu:0: this machine has NVIDIA GPUs .*" + INSTALL + "$"),
    (dict(), "^this machine has NVIDIA GPUs .*" + INSTALL + ", or run on the CPU on purpose with --devices cpu:0$"),
])
def test_gpus_that_tensorflow_cannot_see_stop_the_run_naming_the_fix(fake_machine, flags, message):
    fake_machine.smi(A100S)
    with pytest.raises(DeviceError, match=message):
        resolve_devices(gpu_count=0, nvidia_gpus=fake_machine, **flags)


def test_the_fix_the_error_names_installs_tensorflow_with_cuda_and_the_same_bound():
    setup = configparser.ConfigParser()
    setup.read(SETUP_CFG)
    extra = GPU_INSTALL.split("[")[1].split("]")[0]
    required = [line for line in setup["options"]["install_requires"].split() if line.startswith("tensorflow")]
    assert GPU_INSTALL == "pip install -e '.[gpu]'"
    assert setup["options.extras_require"][extra].split() == [required[0].replace("tensorflow", "tensorflow[and-cuda]")]


def test_gpus_hidden_by_cuda_visible_devices_are_named_as_such(fake_machine, monkeypatch):
    (fake_machine.dev / "nvidia0").touch()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    with pytest.raises(DeviceError, match=r"TensorFlow sees none: CUDA_VISIBLE_DEVICES='-1' hides them; fix: unset "
                                          r"CUDA_VISIBLE_DEVICES, or run on the CPU on purpose with --devices cpu:0$"):
        resolve_devices(gpu_count=0, nvidia_gpus=fake_machine)


def test_the_probe_is_asked_only_when_tensorflow_sees_no_gpu_and_one_may_be_wanted(fake_machine):
    (fake_machine.dev / "nvidia0").touch()

    def must_not_probe():
        raise AssertionError("the NVIDIA probe ran")

    # The CPU on purpose: the machine's GPUs are not looked for.
    assert resolve_devices(devices="cpu:0,cpu:1", gpu_count=0, nvidia_gpus=must_not_probe).cpu_count == 2
    # TensorFlow sees GPUs: nothing to diagnose.
    assert resolve_devices(gpu_count=2, nvidia_gpus=must_not_probe).physical_gpus == (0, 1)
    assert resolve_devices(gpus="1", gpu_count=2, nvidia_gpus=must_not_probe).physical_gpus == (1,)
    # No NVIDIA GPU on the machine: the CPU, as before.
    (fake_machine.dev / "nvidia0").unlink()
    assert resolve_devices(gpu_count=0, nvidia_gpus=fake_machine).names == ("/device:CPU:0",)


# ----------------------------------------------------------------------------- batch size by device kind

def test_the_default_batch_follows_the_device_kind():
    assert resolve_devices(gpus="0,1", gpu_count=2).default_batch() == GPU_BATCH == 64
    assert resolve_devices(devices="cpu:0,cpu:1", gpu_count=0).default_batch() == CPU_BATCH == 12
    # A step waits for its slowest device: one CPU among GPUs gets the CPU's batch.
    assert resolve_devices(devices="gpu:0,cpu:0", gpu_count=1).default_batch() == CPU_BATCH


@pytest.mark.parametrize("devices, per_device_batch, expected", [
    (dict(gpus="0,1,2,3", gpu_count=4), None, 64),
    (dict(devices="cpu:0", gpu_count=0), None, 12),
    (dict(gpus="0,1,2,3", gpu_count=4), 5, 5),  # an explicit batch wins
    (dict(devices="cpu:0", gpu_count=0), 100, 100),
])
def test_a_config_without_a_batch_takes_the_devices_default(tmp_path, devices, per_device_batch, expected):
    config = jobs.Config(model=None, images=tmp_path, output=tmp_path / "out.csv",
                           devices=resolve_devices(**devices), per_device_batch=per_device_batch)
    assert config.per_device_batch == expected
    assert config.host_batch == expected * len(config.devices.names)


def test_the_log_line_states_the_batch_size():
    devices = resolve_devices(gpus="2,3", gpu_count=4)
    assert devices.describe(64) == "GPU:2, GPU:3; 64 images per device per step"
    assert devices.describe() == "GPU:2, GPU:3"


# ----------------------------------------------------------------------------- fp32 is IEEE float32: no TF32

@pytest.fixture
def tensor_float_32():
    """Puts the process-global TF32 flag back as it was."""
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    yield
    tf.config.experimental.enable_tensor_float_32_execution(before)


@pytest.mark.parametrize("precision, enabled", [
    ("tf32", True), ("fp32", False), ("tf32", True), ("bf16", False), ("fp16", False), (None, False),
])
def test_only_tf32_allows_tensor_float_32(tensor_float_32, precision, enabled):
    tf.config.experimental.enable_tensor_float_32_execution(not enabled)
    set_float32_precision(precision)
    assert tf.config.experimental.tensor_float_32_execution_enabled() is enabled
