import pytest

from parallel.devices import DeviceError, resolve_devices


def test_default_is_every_gpu_else_the_cpu():
    assert resolve_devices(gpu_count=0).names == ("/device:CPU:0",)
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
        resolve_devices(devices="gpu:0", gpu_count=0)
    assert resolve_devices(gpus="0", gpu_count=1).session_config().allow_soft_placement is False


@pytest.mark.parametrize("text", ["cpu:0,cpu:1", "/cpu:0,CPU:1", "/job:localhost/replica:0/task:0/device:CPU:0,cpu:1"])
def test_several_cpu_devices_become_logical_devices(text):
    devices = resolve_devices(devices=text, gpu_count=0)
    assert devices.names == ("/device:CPU:0", "/device:CPU:1")
    assert devices.cpu_count == 2
    assert devices.session_config().device_count["CPU"] == 2


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
    with pytest.raises(DeviceError, match=message):
        resolve_devices(**kwargs)
