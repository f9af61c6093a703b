"""--distributed ray: the job's shards go to Ray actors, each pulling the next one when it is free.

    driver (this process)            freezes the manifest, starts the actors, hands each free actor
                                     the next shard not committed, shows one progress bar, writes
                                     the output once every shard is committed (distributed.finish)
    actor (one per gpus_per_worker   builds the graph and the Session once (ShardWorker), then
    GPUs, or per CPU with 0)         computes shard after shard; writes its parts to the output's
                                     storage itself and returns only the counts (a Summary)

A faster node takes more shards because its actors come back sooner. An actor that dies (its
process killed, its node lost) is replaced, and its shard goes back to the front of the queue: the
dead attempt is resumed after its last committed batch by the actor given the shard next, and the
commit-by-rename protocol (parallel.jobs.shards) keeps a redo, or a late commit of the dead one, to one
correct part. Ray itself restarts nothing
(max_restarts=0): the driver decides, so a shard that kills every worker it meets stops the job.

What the driver can check (room for one actor, GPUs TensorFlow can use there, the weights) fails
before a new job's manifest is written; an actor's ValueError or RunError reaches the caller as it
was raised there, so one line and one exit status whichever process found it. Unless --verbose,
what the actors print stays in Ray's log files: the driver shows one progress bar, as one process does.

Ray is imported here only, when a job runs: `pip install -e '.[ray]'`.
"""

import collections
import contextlib
import dataclasses
import logging
import os
import time

from parallel.engine import RunError
from parallel.jobs.distributed import conclude
from parallel.jobs.worker import ShardWorker, add, committed_summary
from parallel.jobs.identity import freeze_sharded
from parallel.jobs.ray_nodes import actor_devices, node_gpus, worker_count
from parallel.jobs.retry import retry_in_output
from parallel.jobs.shards import ShardedJob
from parallel.loop import Summary
from parallel.messages import Progress, first_line
from parallel.signals import StopRequest

log = logging.getLogger("parallel")

# A shard that takes down this many workers stops the job: one that kills every process that
# computes it (an image that crashes the decoder, a device fault) must not loop forever.
MAX_ATTEMPTS = 3
POLL_SECONDS = 0.5  # how often the driver looks at Ctrl-C while it waits for the actors


class ShardActor:
    """A Ray actor's state: one ShardWorker on the actor's own devices (see the module docstring).

    What fails while it starts (bad weights on its node) is raised by `ready()`, not by
    `__init__`: the driver then receives the exception itself, whose first line is the one a
    single process prints, rather than Ray's account of a dead actor.
    """

    def __init__(self, config, job):
        started = time.perf_counter()
        logging.getLogger("parallel").setLevel(logging.INFO if config.distribution.verbose else logging.WARNING)
        self.error = None
        try:
            import ray
            host, gpu_ids, visible_gpus = node_gpus()
            devices = actor_devices(config.distribution.gpus_per_worker, gpu_ids, visible_gpus, host)
            self.worker = ShardWorker(dataclasses.replace(config, devices=devices), job)
            self.info = {"host": host, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                         "gpu_ids": gpu_ids, "devices": devices.describe(),
                         "build_seconds": time.perf_counter() - started}
        except Exception as error:  # noqa: BLE001 -- given to the driver whole, by ready()
            self.error = error

    def ready(self):
        """{host, pid, node, gpu_ids, devices, build_seconds}, once the graph and the Session are built.

        Raises:
          what building them raised (ValueError: bad weights on this node, or no GPU TensorFlow can use).
        """
        if self.error is not None:
            raise self.error
        return self.info

    def process(self, index):
        """Summary of shard `index`, computed and committed (ShardWorker.process); `seconds`: the whole call."""
        started = time.perf_counter()
        summary = self.worker.process(index)
        return dataclasses.replace(summary, seconds=time.perf_counter() - started)

    def retry_output(self):
        """Summary of the job, its finished output's failed images computed again into it (`retry_in_output`)."""
        return retry_in_output(self.worker.config, self.worker.job, self.worker, time.perf_counter())


def run(config):
    """The whole job on a Ray cluster, from this driver (see the module docstring).

    A new job's cluster and weights are checked before its manifest is written: a usage error
    leaves nothing behind.

    Returns:
      Summary of the job; `interrupted` after Ctrl-C (the shards running then are finished and
      kept, the others are left to a rerun).

    Raises:
      ValueError: no node can hold an actor of `gpus_per_worker` GPUs, TensorFlow sees no GPU where
        one would run, the weights cannot be loaded (here, or on a node: its message as one
        process gives it), or as `freeze`.
      RunError: an actor failed after it started (disk full), or a shard took down
        MAX_ATTEMPTS workers; committed shards are kept.
    """
    started = time.perf_counter()
    with ShardedJob(config.output) as job:  # in a folder every host sees, or in a store (staged here until written)
        with contextlib.ExitStack() as cluster:
            pool = None
            if not job.manifest.exists():  # checks first: freezing writes the manifest
                pool = _checked_pool(cluster, config)
            job = freeze_sharded(config, check_folder=True, job=job)
            if job.retried_in_output() and job.assembled_failures():  # its failed images, by one actor, into it
                pool = pool or _checked_pool(cluster, config)
                return pool.retry_in_output(job, started)
            todo = sorted(set(job.missing()) | set(job.retriable()))  # failed images are retried by every run
            summary = Summary()
            for index in sorted(set(range(job.shard_count)) - set(todo)):
                summary = add(summary, committed_summary(job, index))
            if todo:  # a job whose shards are all committed needs no cluster to be written
                pool = pool or _checked_pool(cluster, config)
                with StopRequest() as stop, Progress(config.progress, total=job.images,
                                                     initial=summary.already_done + summary.failed) as progress:
                    summary = pool.run(job, todo, summary, stop, progress)
        return conclude(config, job, summary, job.images, started)


def _checked_pool(cluster, config):
    """A ShardPool on the cluster (entered into the ExitStack `cluster`), once the driver has checked
    what it can: room for one actor, GPUs TensorFlow can use there, and the weights, read here as one
    process reads them."""
    started = time.perf_counter()
    ray = cluster.enter_context(_connected(config.distribution.ray_address, config.distribution.verbose))
    pool = ShardPool(ray, config)
    pool.connect_seconds = time.perf_counter() - started
    pool.check_gpus()
    config.model.load_weights()  # ValueError: bad weights (an actor would load them again on its node)
    return pool


@contextlib.contextmanager
def _connected(address, verbose):
    """The `ray` module, connected to the cluster at `address` (None: one started here, and stopped after).

    Unless `verbose`, the actors' output stays in Ray's log files and Ray logs errors only: one
    progress bar on the driver, as with one process.
    """
    import ray
    if ray.is_initialized():  # a caller (a notebook, a test) chose the cluster
        yield ray
        return
    ray.init(address=address, log_to_driver=verbose, logging_level=logging.INFO if verbose else logging.ERROR)
    try:
        yield ray
    finally:
        ray.shutdown()


class ShardPool:
    """The driver's side of the actors: who is free, which shard each computes, replacements.

    Args:
      ray: the `ray` module, connected (a test passes a fake).
      config: Config of the job.

    Raises:
      ValueError: no node of the cluster can hold one actor.
    """

    def __init__(self, ray, config):
        gpus = config.distribution.gpus_per_worker
        self.size = worker_count(ray.nodes(), gpus)
        if not self.size:
            raise ValueError("no node of the Ray cluster has %s for one worker (gpus_per_worker=%d): lower "
                             "--gpus-per-worker, or 0 for CPU workers" % ("%d GPUs" % gpus if gpus else "a CPU", gpus))
        # A GPU actor reserves no CPU: one actor per GPU group must fit however few CPUs Ray counts.
        # No runtime_env to quiet TensorFlow in the actors: it costs each actor a fresh process (seconds),
        # and unless --verbose what they print stays in Ray's log files (see _connected).
        self.actor_class = ray.remote(num_gpus=gpus, num_cpus=0 if gpus else 1, max_restarts=0)(ShardActor)
        self.ray, self.config, self.job = ray, config, None
        self.running = {}  # ObjectRef -> (actor, its shard, or None while the actor starts)
        self.actors = {}  # alive or starting -> when it was started; killed when no shard is left for them
        self.workers = 0  # actors that became ready
        self.connect_seconds = 0.0  # joining or starting the cluster (set by whoever connected)
        # Summed over the actors: from start to ready, of it graph and weights, computing shards, alive.
        self.clock = collections.Counter()

    def check_gpus(self):
        """Raises actor_devices' ValueError when a worker would have GPUs from Ray that TensorFlow cannot see.

        Asked of one Ray task with a worker's GPUs (on one node, whichever Ray chooses), so that the
        usual case, a cluster of logical GPUs, is refused before anything is written; an actor on
        another node that has none raises the same line when it starts.
        """
        gpus = self.config.distribution.gpus_per_worker
        if gpus:
            probe = self.ray.remote(num_gpus=gpus, num_cpus=0, max_retries=0)(node_gpus)
            host, gpu_ids, visible_gpus = self.ray.get(probe.remote())
            actor_devices(gpus, gpu_ids, visible_gpus, host)

    def run(self, job, todo, summary, stop, progress):
        """Computes the shards `todo` of `job`, or those begun before Ctrl-C.

        Args:
          job: the frozen ShardedJob.
          todo: shard indexes, in the order they are handed out.
          summary: Summary so far (the committed shards'); returned with the new shards' counts.
          stop: StopRequest (its `signal_name` set: no more shards are handed out).
          progress: has `update(images, failed)`, called once per shard.

        Returns:
          Summary; `interrupted` after Ctrl-C (shards were left, or its output is not written yet);
          stage times are the mean worker's.
        """
        self.job = job
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
                    raise _worker_error(error, index) from error
                if index is None:
                    self._ready(actor, result)
                else:
                    self.clock["shards"] += result.seconds
                    summary = add(summary, result)
                    progress.update(result.discovered, result.failed)
                if queue and not stop.signal_name:  # read here: Ctrl-C may have come during the wait
                    self._submit(actor, queue.popleft())
                else:
                    self._retire(actor)  # its GPUs go back to the cluster
        finally:
            for actor in list(self.actors):
                self._retire(actor)
        self._log_clock()
        # The actors ran side by side: their stage times, summed, over their number are a mean worker's.
        return dataclasses.replace(summary, interrupted=bool(queue or stop.signal_name),
                                   **{name: getattr(summary, name) / max(self.workers, 1) for name in _STAGE_TIMES})

    def retry_in_output(self, job, started):
        """The failed images of `job`'s finished output computed again into it by one actor
        (`retry.retry_in_output`): the Summary of the job."""
        self.job = job
        actor = self._start()
        try:
            ready, = list(self.running)
            self._ready(actor, self._get(ready, None))
            self.running.clear()
            summary = self._get(actor.retry_output.remote(), "retry")
        finally:
            self._retire(actor)
        return dataclasses.replace(summary, seconds=time.perf_counter() - started)

    def _get(self, reference, index):
        """What an actor's call returned; what it raised as the driver raises it (`_worker_error`)."""
        try:
            return self.ray.get(reference)
        except self.ray.exceptions.RayActorError as error:
            raise RunError("a Ray worker died%s: %s" % ("" if index is None else " (%s)" % index,
                                                        _last_line(error))) from error
        except self.ray.exceptions.RayTaskError as error:
            raise _worker_error(error, index) from error

    def _start(self):
        actor = self.actor_class.remote(self.config, self.job)
        self.actors[actor] = time.perf_counter()
        self.running[actor.ready.remote()] = (actor, None)
        return actor

    def _ready(self, actor, info):
        self.workers += 1
        self.clock["start"] += time.perf_counter() - self.actors[actor]
        self.clock["build"] += info.get("build_seconds", 0.0)
        log.info("worker %d on %s (pid %d): Ray GPUs %s -> %s", self.workers, info["host"], info["pid"],
                 info["gpu_ids"] or "none", info["devices"], extra={"ray_worker": info})

    def _submit(self, actor, index):
        self.running[actor.process.remote(index)] = (actor, index)

    def _retire(self, actor):
        started = self.actors.pop(actor, None)
        if started is not None:
            self.clock["alive"] += time.perf_counter() - started
        self.ray.kill(actor)

    def _shards_running(self):
        return sum(1 for _, index in self.running.values() if index is not None)

    def _log_clock(self):
        """Where the workers' time went: the stage clock of the summary covers their shards only."""
        if not self.workers:
            return
        mean = {name: seconds / self.workers for name, seconds in self.clock.items()}
        log.info("Ray: cluster ready in %.1f s; %d workers, each on average: %.1f s starting (a process, its "
                 "imports, then %.1f s graph and weights), %.1f s on shards, %.1f s waiting for a shard or for the "
                 "others to finish",
                 self.connect_seconds, self.workers, mean.get("start", 0.0), mean.get("build", 0.0),
                 mean.get("shards", 0.0),
                 max(0.0, mean.get("alive", 0.0) - mean.get("start", 0.0) - mean.get("shards", 0.0)))

    def _replace(self, actor, index, error, deaths, queue, stopping):
        """A dead actor: its shard back at the front of the queue, and a new actor in its place."""
        if error.actor_init_failed:  # Ray could not build the actor (its class, on that node): nor will a retry
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


def _worker_error(error, index):
    """What the driver raises for an exception in an actor (a RayTaskError): a ValueError or a RunError as
    it was raised there (one process gives the same line and exit status), anything else as a RunError."""
    cause = error.cause
    if isinstance(cause, (ValueError, RunError)):
        return cause
    where = "start" if index is None else "retry the failed images" if index == "retry" else "compute shard %d" % index
    return RunError("a Ray worker could not %s: %s" % (where, ": ".join(filter(None, (
        type(cause).__name__, first_line(cause))))))


_STAGE_TIMES = ("device_seconds", "reader_wait_seconds", "writer_wait_seconds")


def _last_line(error, most=160):
    """What a RayActorError says happened: its message ends with the cause (an exception's last line)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    line = lines[-1] if lines else type(error).__name__
    return line if len(line) <= most else line[:most] + "..."
