"""Which devices a run uses, checked against the machine before anything is built."""

import dataclasses

import tensorflow as tf

tf1 = tf.compat.v1


class DeviceError(ValueError):
    """A requested device is malformed or not on this machine."""


@dataclasses.dataclass(frozen=True)
class Devices:
    """The devices of one run, as the graph names them and as the Session must be configured.

    Attributes:
      names: graph device names, one replica each, e.g. ("/device:GPU:0", "/device:GPU:1").
      physical_gpus: the machine's GPU indices behind "/device:GPU:i" (the Session only makes
        these visible, so a run on --gpus 2,3 allocates nothing on GPUs 0 and 1).
      cpu_count: logical CPU devices the Session creates (>= 1).
    """

    names: tuple
    physical_gpus: tuple = ()
    cpu_count: int = 1

    def session_config(self):
        """A `ConfigProto` with exactly these devices and no soft placement.

        Soft placement stays off so that a graph asking for a device the Session does not
        have fails loudly instead of quietly running on the CPU.
        """
        config = tf1.ConfigProto(allow_soft_placement=False,
                                 device_count={"CPU": self.cpu_count, "GPU": len(self.physical_gpus)})
        if self.physical_gpus:
            config.gpu_options.visible_device_list = ",".join(str(index) for index in self.physical_gpus)
        return config

    def describe(self):
        """One line for the log, naming physical GPUs."""
        described = []
        for name in self.names:
            spec = tf.DeviceSpec.from_string(name)
            if spec.device_type == "GPU":
                described.append("GPU:%d" % self.physical_gpus[spec.device_index])
            else:
                described.append("%s:%d" % (spec.device_type, spec.device_index))
        return ", ".join(described)


def available_gpus():
    """Number of GPUs TensorFlow can see on this machine."""
    return len(tf.config.list_physical_devices("GPU"))


def resolve_devices(gpus=None, devices=None, gpu_count=None):
    """Turns the --gpus / --devices flags into checked `Devices`.

    Args:
      gpus: "0,1,2,3" (physical GPU indices) or None.
      devices: "cpu:0,cpu:1" / "gpu:0" / "/device:GPU:1" / "/job:localhost/replica:0/task:0/device:CPU:0",
        comma-separated, or None. Several CPU devices become that many logical CPU devices.
      gpu_count: GPUs on this machine; None asks TensorFlow (tests pass a number).

    Returns:
      Devices. With neither flag: every visible GPU, else one CPU.

    Raises:
      DeviceError: both flags, an empty or malformed entry, a repeated device, or a GPU that
        is not there (the message lists the devices that are).
    """
    if gpus is not None and devices is not None:
        raise DeviceError("give --gpus or --devices, not both (got --gpus %s and --devices %s)" % (gpus, devices))
    if gpu_count is None:
        gpu_count = available_gpus()

    if gpus is not None:
        requested = [("GPU", _index(entry, "--gpus", gpus)) for entry in _entries(gpus, "--gpus")]
    elif devices is not None:
        requested = [_parse_device(entry, devices) for entry in _entries(devices, "--devices")]
    elif gpu_count:
        requested = [("GPU", index) for index in range(gpu_count)]
    else:
        requested = [("CPU", 0)]

    if len(set(requested)) != len(requested):
        raise DeviceError("a device is listed twice in %s" % (gpus if gpus is not None else devices))
    missing = [index for kind, index in requested if kind == "GPU" and index >= gpu_count]
    if missing:
        present = ["CPU:0"] + ["GPU:%d" % index for index in range(gpu_count)]
        raise DeviceError("GPU %s not found; this machine has %s (use --devices cpu:0,cpu:1 for data-parallel on the CPU)"
                          % (",".join(map(str, missing)), ", ".join(present)))

    physical_gpus = tuple(index for kind, index in requested if kind == "GPU")
    names = []
    for kind, index in requested:
        if kind == "GPU":
            names.append("/device:GPU:%d" % physical_gpus.index(index))
        else:
            names.append("/device:CPU:%d" % index)
    cpu_count = 1 + max([index for kind, index in requested if kind == "CPU"], default=0)
    return Devices(names=tuple(names), physical_gpus=physical_gpus, cpu_count=cpu_count)


def _entries(text, flag):
    entries = [entry.strip() for entry in text.split(",")]
    if not text.strip() or any(not entry for entry in entries):
        raise DeviceError("%s %r has an empty entry; expected a comma-separated list" % (flag, text))
    return entries


def _index(entry, flag, text):
    if not entry.isdigit():
        raise DeviceError("%s %r: %r is not a device index" % (flag, text, entry))
    return int(entry)


def _parse_device(entry, text):
    name = entry if entry.startswith("/") else "/device:" + entry
    try:
        spec = tf.DeviceSpec.from_string(name)
    except ValueError:
        raise DeviceError("--devices %r: %r is not a device name like cpu:0 or gpu:1" % (text, entry)) from None
    if spec.job not in (None, "localhost") or spec.task not in (None, 0) or spec.replica not in (None, 0):
        raise DeviceError("--devices %r: %r is not a device of this machine (job localhost, task 0)" % (text, entry))
    if spec.device_type not in ("CPU", "GPU") or spec.device_index is None:
        raise DeviceError("--devices %r: %r must name a CPU or GPU with an index, like cpu:0 or gpu:1" % (text, entry))
    return spec.device_type, spec.device_index
