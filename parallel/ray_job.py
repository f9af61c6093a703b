"""--distributed ray: the job's shards go to Ray actors, each pulling the next one when it is free.

    driver (this process)            freezes the manifest, starts the actors, hands each free actor
                                     the next shard not committed, shows one progress bar, writes
                                     the output once every shard is committed (distributed.finish)
    actor (one per gpus_per_worker   builds the graph and the Session once (ShardWorker), then
    GPUs, or per CPU with 0)         computes shard after shard; writes its parts to the output's
                                     storage itself and returns only the counts (a Summary)

A faster node takes more shards because its actors come back sooner. An actor that dies (its
process killed, its node lost) is replaced, and its shard goes back to the front of the queue: the
dead attempt's folder is abandoned, and the commit-by-rename protocol (parallel.shards) keeps a
redo, or a late commit of the dead one, to one correct part. Ray itself restarts nothing
(max_restarts=0): the driver decides, so a shard that kills every worker it meets stops the job.

Ray is imported here only, when a job runs: `pip install -e '.[ray]'`.
"""

import collections
import contextlib
import dataclasses
import logging
import os
import socket
import time

from parallel.devices import available_gpus, resolve_devices
from parallel.distributed import ShardWorker, add, committed_summary, conclude, freeze
from parallel.engine import RunError
from parallel.messages import first_line
from parallel.loop import Summary
from parallel.messages import Progress
from parallel.signals import StopRequest

log = logging.getLogger("parallel")

# A shard that takes down this many workers stops the job: one that kills every process that
# computes it (an image that crashes the decoder, a device fault) must not loop forever.
MAX_ATTEMPTS = 3
POLL_SECONDS = 0.5  # how often the driver looks at Ctrl-C while it waits for the actors


def actor_devices(gpus_per_worker, ray_gpu_ids, visible_gpus):
    """The devices of an actor: the GPUs Ray gave it, as TensorFlow numbers them in that process.

    Args:
      gpus_per_worker: GPUs each actor asked for (0: a CPU actor).
      ray_gpu_ids: `ray.get_gpu_ids()` in the actor (Ray set CUDA_VISIBLE_DEVICES to them).
      visible_gpus: GPUs TensorFlow sees in the actor.

    Returns:
      (Devices, note): "gpu:0".."gpu:k-1" of what TensorFlow sees, or cpu:0; `note` says why
      cpu:0 when GPUs were asked for (else "").
    """
    if not gpus_per_worker:
        return resolve_devices(devices="cpu:0", gpu_count=visible_gpus), ""
    if not visible_gpus:
        return (resolve_devices(devices="cpu:0", gpu_count=0),
                "TensorFlow sees no GPU there (logical Ray GPUs?): computing on cpu:0")
    if visible_gpus == len(ray_gpu_ids):  # CUDA_VISIBLE_DEVICES holds exactly Ray's GPUs
        return resolve_devices(gpu_count=visible_gpus), ""
    # Ray was told not to set CUDA_VISIBLE_DEVICES: its ids are then the machine's GPU indices.
    return resolve_devices(gpus=",".join(str(index) for index in ray_gpu_ids), gpu_count=visible_gpus), ""


class ShardActor:
    """A Ray actor's state: one ShardWorker on the actor's own devices (see the module docstring)."""

    def __init__(self, config, job):
        import ray
        gpu_ids = [int(index) for index in ray.get_gpu_ids()]
        devices, note = actor_devices(config.distribution.gpus_per_worker, gpu_ids, available_gpus())
        self.worker = ShardWorker(dataclasses.replace(config, devices=devices), job)
        self.info = {"host": socket.gethostname(), "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                     "gpu_ids": gpu_ids, "devices": devices.describe(), "note": note}

    def ready(self):
        """{host, pid, node, gpu_ids, devices, note}, once the graph and the Session are built."""
        return self.info

    def process(self, index):
        """Summary of shard `index`, computed and committed (ShardWorker.process)."""
        return self.worker.process(index)


def worker_count(nodes, gpus_per_worker):
    """How many actors the cluster's alive nodes hold: gpus_per_worker GPUs each, or 1 CPU each with 0.

    Args:
      nodes: `ray.nodes()`.
      gpus_per_worker: int >= 0.
    """
    resource, each = ("GPU", gpus_per_worker) if gpus_per_worker else ("CPU", 1)
    return sum(int(node["Resources"].get(resource, 0) // each) for node in nodes if node["Alive"])


def run(config):
    """The whole job on a Ray cluster, from this driver (see the module docstring).

    Returns:
      Summary of the job; `interrupted` after Ctrl-C (the shards running then are finished and
      kept, the others are left to a rerun).

    Raises:
      ValueError: no node can hold an actor of `gpus_per_worker` GPUs, or as `freeze`.
      RunError: an actor failed (disk full, bad weights on a node), or a shard took down
        MAX_ATTEMPTS workers; committed shards are kept.
    """
    job = freeze(config, check_folder=True)
    todo = job.missing()
    summary = Summary()
    for index in sorted(set(range(job.shard_count)) - set(todo)):
        summary = add(summary, committed_summary(job, index))
    started = time.perf_counter()
    if todo:  # a job whose shards are all committed needs no cluster to be written
        with _connected(config.distribution.ray_address) as ray, StopRequest() as stop, \
                Progress(config.progress, total=job.images, initial=summary.already_done + summary.failed) as progress:
            summary = ShardPool(ray, config, job).run(todo, summary, stop, progress)
    return conclude(config, job, summary, job.images, started)


@contextlib.contextmanager
def _connected(address):
    """The `ray` module, connected to the cluster at `address` (None: one started here, and stopped after)."""
    import ray
    if ray.is_initialized():  # a caller (a notebook, a test) chose the cluster
        yield ray
        return
    ray.init(address=address)
    try:
        yield ray
    finally:
        ray.shutdown()


class ShardPool:
    """The driver's side of the actors: who is free, which shard each computes, replacements.

    Args:
      ray: the `ray` module, connected (a test passes a fake).
      config: Config of the job.
      job: its frozen ShardedJob.
    """

    def __init__(self, ray, config, job):
        gpus = config.distribution.gpus_per_worker
        self.size = worker_count(ray.nodes(), gpus)
        if not self.size:
            raise ValueError("no node of the Ray cluster has %s for one worker (gpus_per_worker=%d): lower "
                             "--gpus-per-worker, or 0 for CPU workers" % ("%d GPUs" % gpus if gpus else "a CPU", gpus))
        # A GPU actor reserves no CPU: one actor per GPU group must fit however few CPUs Ray counts.
        self.actor_class = ray.remote(num_gpus=gpus, num_cpus=0 if gpus else 1, max_restarts=0)(ShardActor)
        self.ray, self.config, self.job = ray, config, job
        self.running = {}  # ObjectRef -> (actor, its shard, or None while the actor starts)
        self.actors = set()  # alive or starting; killed when no shard is left for them
        self.workers = 0  # actors that became ready

    def run(self, todo, summary, stop, progress):
        """Computes the shards `todo`, or those begun before Ctrl-C.

        Args:
          todo: shard indexes, in the order they are handed out.
          summary: Summary so far (the committed shards'); returned with the new shards' counts.
          stop: StopRequest (its `signal_name` set: no more shards are handed out).
          progress: has `update(images, failed)`, called once per shard.

        Returns:
          Summary; `interrupted` when shards were left; stage times are the mean worker's.
        """
        queue, deaths, told = collections.deque(todo), collections.Counter(), False
        try:
            for _ in range(min(self.size, len(todo))):
                self._start()
            while self._shards_running() or (queue and not stop.signal_name):
                if stop.signal_name and not told:
                    told = True
                    log.warning("no more shards are handed out; waiting for those running (%d) to be committed "
                                "(again to stop at once: they are redone by a rerun)", self._shards_running())
                done, _ = self.ray.wait(list(self.running), num_returns=1, timeout=POLL_SECONDS)
                if not done:
                    continue
                actor, index = self.running.pop(done[0])
                try:
                    result = self.ray.get(done[0])
                except self.ray.exceptions.RayActorError as error:
                    self._replace(actor, index, error, deaths, queue, stopping=bool(stop.signal_name))
                    continue
                except self.ray.exceptions.RayTaskError as error:
                    where = "" if index is None else " on shard %d" % index
                    cause = first_line(error.cause) or type(error.cause).__name__
                    raise RunError("a Ray worker failed%s: %s" % (where, cause)) from error
                if index is None:
                    self.workers += 1
                    log.info("worker %d on %s (pid %d): Ray GPUs %s -> %s%s", self.workers, result["host"],
                             result["pid"], result["gpu_ids"] or "none", result["devices"],
                             "; " + result["note"] if result["note"] else "", extra={"ray_worker": result})
                else:
                    summary = add(summary, result)
                    progress.update(result.discovered, result.failed)
                if queue and not stop.signal_name:  # read here: Ctrl-C may have come during the wait
                    self._submit(actor, queue.popleft())
                else:
                    self._retire(actor)  # its GPUs go back to the cluster
        finally:
            for actor in list(self.actors):
                self._retire(actor)
        # The actors ran side by side: their stage times, summed, over their number are a mean worker's.
        return dataclasses.replace(summary, interrupted=bool(queue),
                                   **{name: getattr(summary, name) / max(self.workers, 1) for name in _STAGE_TIMES})

    def _start(self):
        actor = self.actor_class.remote(self.config, self.job)
        self.actors.add(actor)
        self.running[actor.ready.remote()] = (actor, None)

    def _submit(self, actor, index):
        self.running[actor.process.remote(index)] = (actor, index)

    def _retire(self, actor):
        self.actors.discard(actor)
        self.ray.kill(actor)

    def _shards_running(self):
        return sum(1 for _, index in self.running.values() if index is not None)

    def _replace(self, actor, index, error, deaths, queue, stopping):
        """A dead actor: its shard back at the front of the queue, and a new actor in its place."""
        if error.actor_init_failed:  # an exception in __init__ (bad weights on that node): every try would fail
            raise RunError("a Ray worker could not start: %s" % _last_line(error)) from error
        self._retire(actor)  # dead, or unreachable (ActorUnavailableError): its shard is redone either way
        if index is not None:
            deaths[index] += 1
            if deaths[index] >= MAX_ATTEMPTS:
                raise RunError("shard %d took down %d Ray workers (last: %s)"
                               % (index, deaths[index], _last_line(error))) from error
            queue.appendleft(index)
        log.warning("a Ray worker died%s (%s); %s", "" if index is None else " computing shard %d" % index,
                    _last_line(error), "stopping: not replaced" if stopping else "a new one takes its place")
        if not stopping:
            self._start()


_STAGE_TIMES = ("device_seconds", "reader_wait_seconds", "writer_wait_seconds")


def _last_line(error, most=160):
    """What a RayActorError says happened: its message ends with the cause (an exception's last line)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    line = lines[-1] if lines else type(error).__name__
    return line if len(line) <= most else line[:most] + "..."
