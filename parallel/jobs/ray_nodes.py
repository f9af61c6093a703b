"""What a Ray node offers the job's actors: how many fit on the cluster, and the devices of each.

    worker_count(ray.nodes(), gpus_per_worker)     actors of gpus_per_worker GPUs (or one CPU) that fit
    actor_devices(gpus_per_worker, ...)            an actor's devices, as TensorFlow numbers them there
    node_gpus()                                    what Ray gave the process this runs in, and what
                                                   TensorFlow sees there

Ray is imported by `node_gpus` alone, which runs in a Ray worker.
"""

import socket

from parallel.devices.selection import available_gpus, resolve_devices


def actor_devices(gpus_per_worker, ray_gpu_ids, visible_gpus, host="its node"):
    """The devices of an actor: the GPUs Ray gave it, as TensorFlow numbers them in that process.

    The rule of --gpus: GPUs asked for and not there are an error, never a silent fall-back to the
    CPU (a CPU worker is asked for with gpus_per_worker=0).

    Args:
      gpus_per_worker: GPUs each actor asked for (0: a CPU actor).
      ray_gpu_ids: `ray.get_gpu_ids()` in the actor (Ray set CUDA_VISIBLE_DEVICES to them).
      visible_gpus: GPUs TensorFlow sees in the actor.
      host: the actor's host, for the message.

    Returns:
      Devices: "gpu:0".."gpu:k-1" of what TensorFlow sees, or cpu:0 for a CPU actor.

    Raises:
      ValueError: GPUs asked for, and TensorFlow sees none there (Ray's GPUs are logical ones, from
        `ray start --num-gpus` on a machine without any, or TensorFlow there lacks CUDA).
    """
    if not gpus_per_worker:
        return resolve_devices(devices="cpu:0", gpu_count=visible_gpus)
    if not visible_gpus:
        raise ValueError("Ray gives each worker GPUs (gpus_per_worker=%d), but TensorFlow on %s sees none (Ray's GPU "
                         "ids there: %s; logical GPUs of ray start --num-gpus, or a TensorFlow without CUDA): pass "
                         "--gpus-per-worker 0 for CPU workers, or pip install -e '.[gpu]' on the nodes"
                         % (gpus_per_worker, host, ray_gpu_ids))
    if visible_gpus == len(ray_gpu_ids):  # CUDA_VISIBLE_DEVICES holds exactly Ray's GPUs
        return resolve_devices(gpu_count=visible_gpus)
    # Ray was told not to set CUDA_VISIBLE_DEVICES: its ids are then the machine's GPU indices.
    return resolve_devices(gpus=",".join(str(index) for index in ray_gpu_ids), gpu_count=visible_gpus)


def node_gpus():
    """(host, Ray's GPU ids, GPUs TensorFlow sees) of the Ray worker process this runs in."""
    import ray
    return socket.gethostname(), [int(index) for index in ray.get_gpu_ids()], available_gpus()


def worker_count(nodes, gpus_per_worker):
    """How many actors the cluster's alive nodes hold: gpus_per_worker GPUs each, or 1 CPU each with 0.

    Args:
      nodes: `ray.nodes()`.
      gpus_per_worker: int >= 0.
    """
    resource, each = ("GPU", gpus_per_worker) if gpus_per_worker else ("CPU", 1)
    return sum(int(node["Resources"].get(resource, 0) // each) for node in nodes if node["Alive"])
