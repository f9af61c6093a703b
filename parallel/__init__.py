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

import sys
import types

from parallel.lazy import lazy_exports

# Exported name -> the submodule that defines it.
_EXPORTS = {
    "data_parallelism": "parallel.data_parallelism", "merge_outputs": "parallel.data_parallelism",
    "merge_results": "parallel.data_parallelism",
    "DeviceError": "parallel.devices", "Devices": "parallel.devices", "resolve_devices": "parallel.devices",
    "RunError": "parallel.engine", "extract": "parallel.engine",
    "Config": "parallel.jobs.config", "Distribution": "parallel.jobs.config", "run": "parallel.jobs.runner",
    "Summary": "parallel.loop", "run_loop": "parallel.loop",
    "DeviceRunner": "parallel.runner", "build_graph": "parallel.runner",
    "StagedRunner": "parallel.staging", "open_runner": "parallel.staging",
    "ModelSpec": "parallel.model",
    "Placement": "parallel.placement", "ReplicatedVariables": "parallel.placement",
    "SharedVariables": "parallel.placement",
    "Manifest": "parallel.manifest", "discover_images": "parallel.manifest",
    "ImageError": "parallel.decode", "load_image": "parallel.decode",
    "ImageReader": "parallel.reader",
    "shard_features": "parallel.shard_features", "shard_sizes": "parallel.shard_features",
    "ErrorLog": "parallel.output", "OutputError": "parallel.output", "open_writer": "parallel.output",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)


class _Package(types.ModuleType):
    """Keeps `parallel.data_parallelism` and `parallel.shard_features` the functions.

    Importing a submodule binds it on its package under its own name. Two submodules are named
    after the function they export; when this file imported them eagerly, the function was bound
    last and won. Importing lazily, the engine's `import parallel.shard_features` would come
    last, and `from parallel import shard_features` would give the module.
    """

    def __setattr__(self, name, value):
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
