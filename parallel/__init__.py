"""Graph-mode (tf.compat.v1) data-parallel inference: one model function, every device, one sess.run.

    placement = ReplicatedVariables(["/device:GPU:0", "/device:GPU:1"])
    inputs, outputs = data_parallelism(placement, replica_fn)     # replica_fn() -> (placeholder, output)
    placement.load(session, weights)                             # once: a resident copy per device
    fetches, feed_dict = shard_features(batch, inputs, outputs)  # any batch size >= 1
    features = merge_results(session.run(fetches, feed_dict), shard_sizes(len(batch), len(inputs)))

`engine.run(Config(...))` does all of it for a folder of images: reader -> devices -> writer.
"""

from parallel.data_parallelism import data_parallelism, merge_outputs, merge_results
from parallel.devices import DeviceError, Devices, resolve_devices
from parallel.engine import Config, DeviceRunner, ModelSpec, RunError, Summary, build_graph, run
from parallel.placement import Placement, ReplicatedVariables, SharedVariables
from parallel.manifest import Manifest, discover_images
from parallel.reader import ImageReader, load_image
from parallel.shard_features import shard_features, shard_sizes
from parallel.writer import ErrorLog, OutputError, open_writer

__all__ = [
    "Config", "DeviceError", "DeviceRunner", "Devices", "ErrorLog", "ImageReader", "Manifest", "ModelSpec", "OutputError",
    "Placement", "ReplicatedVariables", "RunError", "SharedVariables", "Summary", "build_graph", "data_parallelism",
    "discover_images", "load_image", "merge_outputs", "merge_results", "open_writer", "resolve_devices", "run",
    "shard_features", "shard_sizes",
]
