"""Which devices a run uses, checked against the machine before anything is built, and how they compute."""

import dataclasses
import glob
import os
import shutil
import subprocess

import tensorflow as tf
from tensorflow.core.protobuf import rewriter_config_pb2

tf1 = tf.compat.v1

# Images per device per step when the run does not say: a CPU device is busy with a few images, an
# 80 GB GPU needs many (tf_cnn_benchmarks runs VGG16 at 64 per GPU). A GPU that runs out of memory
# halves the step and retries (parallel.devices.compute), so the larger default is safe on a smaller GPU.
CPU_BATCH = 12
GPU_BATCH = 64

# The fix named when the machine has NVIDIA GPUs that TensorFlow cannot use.
GPU_INSTALL = "pip install -e '.[gpu]'"


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

    def session_config(self, precision=None):
        """A `ConfigProto` with exactly these devices and no soft placement.

        Soft placement stays off so that a graph asking for a device the Session does not
        have fails loudly instead of quietly running on the CPU.

        Args:
          precision: the model's "precision" setting. In "fp16" on CPU devices, Grappler's remapper
            is turned off: it fuses a MatMul with its BiasAdd and activation into oneDNN's
            _MklNativeFusedMatMul, whose float16 kernel took 61.6 s for one ConvNeXt-Tiny image on
            an Intel Xeon with AVX-512 FP16 and AMX, against 0.3 s left unfused (the same features
            within float16's rounding). GPUs keep their fusions.
        """
        config = tf1.ConfigProto(allow_soft_placement=False,
                                 device_count={"CPU": self.cpu_count, "GPU": len(self.physical_gpus)})
        if self.physical_gpus:
            config.gpu_options.visible_device_list = ",".join(str(index) for index in self.physical_gpus)
        if precision == "fp16" and any(tf.DeviceSpec.from_string(name).device_type == "CPU" for name in self.names):
            config.graph_options.rewrite_options.remapping = rewriter_config_pb2.RewriterConfig.OFF
        return config

    def default_batch(self):
        """Images per device per step when none is given: GPU_BATCH when every device is a GPU, else CPU_BATCH.

        A step waits for its slowest device, so one CPU device among GPUs sets the CPU's batch.
        """
        if all(tf.DeviceSpec.from_string(name).device_type == "GPU" for name in self.names):
            return GPU_BATCH
        return CPU_BATCH

    def describe(self, per_device_batch=None):
        """One line for the log, naming physical GPUs, e.g. "GPU:2, GPU:3; 64 images per device per step".

        Args:
          per_device_batch: images per device per step, stated after the devices; None leaves it out.
        """
        described = []
        for name in self.names:
            spec = tf.DeviceSpec.from_string(name)
            if spec.device_type == "GPU":
                described.append("GPU:%d" % self.physical_gpus[spec.device_index])
            else:
                described.append("%s:%d" % (spec.device_type, spec.device_index))
        line = ", ".join(described)
        if per_device_batch is not None:
            line += "; %d images per device per step" % per_device_batch
        return line


def available_gpus():
    """Number of GPUs TensorFlow can see on this machine."""
    return len(tf.config.list_physical_devices("GPU"))


def list_nvidia_gpus(dev_folder="/dev", timeout=5.0):
    """The NVIDIA GPUs this machine has, whether or not TensorFlow can use them.

    The driver's device files (`/dev/nvidia0`, ...) answer at once; without them, `nvidia-smi -L`
    is asked, if it is on PATH, for at most `timeout` seconds. A probe that fails or hangs finds none.

    Args:
      dev_folder: where the device files are (tests pass a folder of fake ones).
      timeout: seconds `nvidia-smi -L` may take.

    Returns:
      list of str: the device files found, else nvidia-smi's lines ("GPU 0: NVIDIA A100-SXM4-80GB");
      empty when there is no NVIDIA GPU.
    """
    # nvidia[0-9]* leaves out nvidiactl and nvidia-uvm, which exist without a GPU; sorted by length
    # first, nvidia10 comes after nvidia9.
    found = sorted(glob.glob(os.path.join(glob.escape(dev_folder), "nvidia[0-9]*")), key=lambda path: (len(path), path))
    if found:
        return found
    command = shutil.which("nvidia-smi")
    if command is None:
        return []
    try:
        done = subprocess.run([command, "-L"], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return []
    if done.returncode != 0:  # e.g. "NVIDIA-SMI has failed because it couldn't communicate with the driver"
        return []
    return [line.split(" (UUID")[0].strip() for line in done.stdout.splitlines() if line.startswith("GPU ")]


def resolve_devices(gpus=None, devices=None, gpu_count=None, nvidia_gpus=None):
    """Turns the --gpus / --devices flags into checked `Devices`.

    Args:
      gpus: "0,1,2,3" (physical GPU indices) or None.
      devices: "cpu:0,cpu:1" / "gpu:0" / "/device:GPU:1" / "/job:localhost/replica:0/task:0/device:CPU:0",
        comma-separated, or None. Several CPU devices become that many logical CPU devices.
      gpu_count: GPUs TensorFlow sees; None asks TensorFlow (tests pass a number).
      nvidia_gpus: called with no argument, lists the NVIDIA GPUs the machine has; None:
        `list_nvidia_gpus` (tests pass a fake). Asked only when TensorFlow sees no GPU and a GPU,
        or no device at all, is requested: `--devices cpu:0` never waits for it.

    Returns:
      Devices. With neither flag: every visible GPU, else one CPU.

    Raises:
      DeviceError: both flags, an empty or malformed entry, a repeated device, a GPU that
        is not there (the message lists the devices that are), or a machine with NVIDIA GPUs
        that TensorFlow cannot see (the message names the fix), unless only CPUs are asked for.
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
    if not gpu_count and (devices is None or any(kind == "GPU" for kind, _ in requested)):
        _check_gpus_are_usable((nvidia_gpus or list_nvidia_gpus)(), gpus=gpus, devices=devices)
    missing = [index for kind, index in requested if kind == "GPU" and index >= gpu_count]
    if missing:
        present = ["CPU:0"] + ["GPU:%d" % index for index in range(gpu_count)]
        raise DeviceError("GPU %s not found; this machine has %s (use --devices cpu:0,cpu:1 for data-parallel on "
                          "the CPU)" % (",".join(map(str, missing)), ", ".join(present)))

    physical_gpus = tuple(index for kind, index in requested if kind == "GPU")
    names = []
    for kind, index in requested:
        if kind == "GPU":
            names.append("/device:GPU:%d" % physical_gpus.index(index))
        else:
            names.append("/device:CPU:%d" % index)
    cpu_count = 1 + max([index for kind, index in requested if kind == "CPU"], default=0)
    return Devices(names=tuple(names), physical_gpus=physical_gpus, cpu_count=cpu_count)


def _check_gpus_are_usable(found, gpus, devices):
    """DeviceError when the machine has NVIDIA GPUs (`found`) that TensorFlow does not see.

    Without it, a TensorFlow installed without CUDA would quietly run on the CPU, hundreds of
    times slower, or report a GPU as absent that is plainly there.
    """
    if not found:
        return
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):  # the usual ways of hiding every GPU
        reason, fix = "CUDA_VISIBLE_DEVICES=%r hides them" % hidden, "unset CUDA_VISIBLE_DEVICES"
    else:
        # The usual cause: pip's plain `tensorflow` has no CUDA libraries; tensorflow[and-cuda] brings them.
        reason, fix = "it was installed without CUDA support or cannot load CUDA", GPU_INSTALL
    cause = "this machine has NVIDIA GPUs (%s) but TensorFlow sees none: %s; fix: %s" % (", ".join(found), reason, fix)
    if gpus is not None:
        raise DeviceError("--gpus %s: %s" % (gpus, cause))
    if devices is not None:
        raise DeviceError("--devices %s: %s" % (devices, cause))
    raise DeviceError("%s, or run on the CPU on purpose with --devices cpu:0" % cause)


def set_float32_precision(precision):
    """Makes float32 matmuls and convolutions IEEE float32, or lets them run as TF32.

    On Ampere and newer GPUs, TF32 keeps a 10-bit mantissa (features differ from IEEE float32 by
    about 1e-3 relative) and is faster; elsewhere, the CPU included, it changes nothing.
    TensorFlow allows it by default, so unless a model asks for it, it is turned off.

    Args:
      precision: the model's "precision" setting (`ModelSpec.settings`): "tf32" allows TF32;
        anything else ("fp32", "fp16", "bf16", None) turns it off.
    """
    # TensorFlow holds this in one process-global flag, read when a kernel runs: not per graph nor
    # per Session. So it is set before each run starts its Session, and a later run with another
    # precision, in the same process, sets it again.
    tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")


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
