"""Graph-mode (tf.compat.v1) data-parallel inference: one model function, every device, one sess.run.

    placement = ReplicatedVariables(["/device:GPU:0", "/device:GPU:1"])
    inputs, outputs = data_parallelism(placement, replica_fn)     # replica_fn() -> (placeholder, output)
    placement.load(session, weights)                             # once: a resident copy per device
    fetches, feed_dict = shard_features(batch, inputs, outputs)  # any batch size >= 1
    features = merge_results(session.run(fetches, feed_dict), shard_sizes(len(batch), len(inputs)))

`run(Config(...))` does all of it for a folder of images, into an output file it can resume:
reader -> devices -> writer. `extract(model, images)` gives the features in memory.

The names below are imported on first use (PEP 562): `import parallel` or `import parallel.model`
imports no TensorFlow, so that models, the output layer and tools that only read outputs load fast.
"""

from parallel import native_log
from parallel.lazy import lazy_exports

# Quiet by default: the first `import tensorflow` (this package's modules', a model's) prints only what
# TF_CPP_MIN_LOG_LEVEL lets through, 3 unless the user set it (parallel/native_log.py).
native_log.quiet_first_import()

# Exported name -> the submodule that defines it.
_EXPORTS = {
    "data_parallelism": "parallel.devices.replication", "merge_outputs": "parallel.devices.replication",
    "merge_results": "parallel.devices.replication",
    "DeviceError": "parallel.devices.selection", "Devices": "parallel.devices.selection",
    "resolve_devices": "parallel.devices.selection",
    "RunError": "parallel.engine", "extract": "parallel.engine",
    "Config": "parallel.jobs.config", "Distribution": "parallel.jobs.config", "run": "parallel.jobs.runner",
    "Summary": "parallel.loop", "run_loop": "parallel.loop",
    "DeviceRunner": "parallel.devices.compute", "build_graph": "parallel.devices.compute",
    "StagedRunner": "parallel.devices.staging", "open_runner": "parallel.devices.staging",
    "ModelSpec": "parallel.model",
    "Placement": "parallel.devices.placement", "ReplicatedVariables": "parallel.devices.placement",
    "SharedVariables": "parallel.devices.placement",
    "Manifest": "parallel.inputs.manifest", "discover_images": "parallel.inputs.manifest",
    "ImageError": "parallel.inputs.decode", "load_image": "parallel.inputs.decode",
    "ImageReader": "parallel.inputs.reader",
    "shard_features": "parallel.devices.batch_split", "shard_sizes": "parallel.devices.batch_split",
    "ErrorLog": "parallel.output", "OutputError": "parallel.output", "open_writer": "parallel.output",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

