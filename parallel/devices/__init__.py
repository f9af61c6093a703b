"""The device layer: one model function replicated on every device, and a host batch computed on all of them.

    selection     --gpus / --devices -> checked Devices; the Session config; batch and precision defaults
    replication   data_parallelism(): a function once per device under one variable scope; merged outputs
    batch_split   shard_features(): a host batch split across the per-device placeholders
    placement     where weights live: SharedVariables, or ReplicatedVariables (a resident copy per device)
    compute       the compute stage: the replicated graph and its Session; a batch in, its features out
    staging       on GPUs: each device's next input staged during the current step
    text_runner   a model's text tower on the devices: sentences as vectors of the image tower's space

It knows arrays, devices and model functions, not files, images, outputs or jobs. May import:
parallel.model, parallel.messages, TensorFlow. Nothing here imports the input, output or job layers.

The names below are imported on first use (PEP 562), so `from parallel.devices import Devices`
costs no more than the module that defines it.
"""

from parallel.lazy import lazy_exports

# Exported name -> the submodule that defines it.
_EXPORTS = {
    "CPU_BATCH": "parallel.devices.selection", "GPU_BATCH": "parallel.devices.selection",
    "GPU_INSTALL": "parallel.devices.selection", "DeviceError": "parallel.devices.selection",
    "Devices": "parallel.devices.selection", "available_gpus": "parallel.devices.selection",
    "list_nvidia_gpus": "parallel.devices.selection", "resolve_devices": "parallel.devices.selection",
    "set_float32_precision": "parallel.devices.selection",
    "data_parallelism": "parallel.devices.replication", "merge_outputs": "parallel.devices.replication",
    "merge_results": "parallel.devices.replication",
    "shard_features": "parallel.devices.batch_split", "shard_sizes": "parallel.devices.batch_split",
    "Placement": "parallel.devices.placement", "ReplicatedVariables": "parallel.devices.placement",
    "SharedVariables": "parallel.devices.placement",
    "DeviceRunner": "parallel.devices.compute", "build_graph": "parallel.devices.compute",
    "StagedRunner": "parallel.devices.staging", "open_runner": "parallel.devices.staging",
    "TextRunner": "parallel.devices.text_runner",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
