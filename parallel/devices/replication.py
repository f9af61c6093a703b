"""Replicate a model function once per device, and merge what the replicas return.

The calling convention is tensor2tensor's `Parallelism`: a `list` argument is split one
element per device, anything else is given to every device unchanged.
"""

import numpy as np
import tensorflow as tf

from parallel.devices.placement import Placement, SharedVariables

tf1 = tf.compat.v1

SCALAR_REDUCTIONS = ("sum", "mean")


def data_parallelism(devices, fn, *args, **kwargs):
    """Calls `fn` once per device, sharing one set of variable names.

    Replaces this loop, with per-device arguments taken from lists:

        outputs = []
        for i, device in enumerate(devices):
            with tf.device(device), tf.name_scope("parallel_%d" % i), \\
                    tf.compat.v1.variable_scope(caller_scope, reuse=i > 0):
                outputs.append(fn(*args_for_device_i, **kwargs_for_device_i))

    Variables must be created with `tf.compat.v1.get_variable`. Where they live is the
    placement's business: a plain list of devices gives `SharedVariables` (replica 0
    creates them on its device and every other replica reads them from there, as
    tensor2tensor does); pass a `ReplicatedVariables` for a resident copy per device,
    which is what inference on several GPUs wants.

    Args:
      devices: a sequence of TensorFlow device names ("/device:GPU:0", "/cpu:1", ...),
        or a `Placement`, which carries its devices.
      fn: builds one replica; returns a tensor, a tuple of tensors, or None.
      *args, **kwargs: a `list` must have one element per device and is split; a
        `tuple` is refused as ambiguous (make it a list to split it, or pass it inside
        a one-element-per-device list to broadcast it); anything else is given to every
        replica.

    Returns:
      A list with one output per device, or, when `fn` returns a tuple of k values, a
      tuple of k such lists.

    Raises:
      ValueError: no devices, a list argument of the wrong length, or a tuple argument.
    """
    placement = devices if isinstance(devices, Placement) else SharedVariables(devices)
    num_devices = len(placement.devices)
    per_device_args = [_split(value, num_devices, "argument %d" % index)
                       for index, value in enumerate(args)]
    per_device_kwargs = {name: _split(value, num_devices, "argument %r" % name)
                         for name, value in kwargs.items()}

    caller_scope = tf1.get_variable_scope()
    outputs = []
    for replica, device in enumerate(placement.devices):
        with tf.device(device), tf.name_scope("parallel_%d" % replica), tf1.variable_scope(
                caller_scope, reuse=True if replica > 0 else None,
                custom_getter=placement.custom_getter(replica)):
            outputs.append(fn(*[values[replica] for values in per_device_args],
                              **{name: values[replica] for name, values in per_device_kwargs.items()}))
    if outputs and isinstance(outputs[0], tuple):
        return tuple(list(per_output) for per_output in zip(*outputs))
    return outputs


def _split(value, num_devices, what):
    """One value per device: a list is split, a tuple refused, anything else repeated."""
    if isinstance(value, list):
        if len(value) != num_devices:
            raise ValueError("%s is a list of %d elements but there are %d devices; a list "
                             "argument gives one element to each device" % (what, len(value), num_devices))
        return value
    if isinstance(value, tuple):
        raise ValueError("%s is a tuple %r: pass a list to give one element per device, or a "
                         "list of %d copies to give it to every device" % (what, value, num_devices))
    return [value] * num_devices


def merge_outputs(per_device, scalar_reduction="sum"):
    """Merges per-device tensors into one, in the graph.

    Args:
      per_device: list of tensors, one per device, all of the same rank. Batch tensors
        `[n_i, ...]` are concatenated in device order to `[sum(n_i), ...]`; rank-0 tensors
        (a loss, a count) cannot be concatenated and are reduced instead.
      scalar_reduction: "sum" or "mean" (an unweighted mean over devices) for rank-0 outputs.

    Returns:
      One tensor, built on the device currently in scope.

    Raises:
      ValueError: empty list, mixed or unknown ranks, or an unknown reduction.
    """
    rank = _common_rank([tensor.shape.rank for tensor in per_device], scalar_reduction)
    if rank == 0:
        total = tf.add_n(per_device)
        return total if scalar_reduction == "sum" else total / len(per_device)
    return tf.concat(per_device, axis=0)


def merge_results(per_device, rows_per_device, scalar_reduction="sum"):
    """Merges per-device values fetched by `Session.run` into one NumPy array.

    Args:
      per_device: list of arrays, one per device that ran. Arrays `[n_i, ...]` are
        concatenated in device order; rank-0 values are reduced.
      rows_per_device: the number of rows each device was fed; "mean" weights each
        device's scalar by it, so uneven shards (the last batch) average correctly.
      scalar_reduction: "sum" or "mean".

    Returns:
      np.ndarray: `[sum(n_i), ...]`, or a scalar.

    Raises:
      ValueError: as `merge_outputs`, or `rows_per_device` of another length.
    """
    per_device = [np.asarray(value) for value in per_device]
    if len(rows_per_device) != len(per_device):
        raise ValueError("rows_per_device has %d entries for %d device results"
                         % (len(rows_per_device), len(per_device)))
    rank = _common_rank([value.ndim for value in per_device], scalar_reduction)
    if rank == 0:
        if scalar_reduction == "sum":
            return np.sum(per_device, axis=0)
        return np.average(per_device, axis=0, weights=rows_per_device)
    return np.concatenate(per_device, axis=0)


def _common_rank(ranks, scalar_reduction):
    if scalar_reduction not in SCALAR_REDUCTIONS:
        raise ValueError("scalar_reduction=%r; expected one of %s" % (scalar_reduction, SCALAR_REDUCTIONS))
    if not ranks:
        raise ValueError("nothing to merge: no per-device outputs")
    if None in ranks or len(set(ranks)) != 1:
        raise ValueError("per-device outputs must all have the same known rank; got ranks %s" % (ranks,))
    return ranks[0]
