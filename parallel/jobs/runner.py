"""The job runner: `run(config)` runs a job on this process alone, or as its part of one spread over several.

    config.distribution None       parallel.jobs.single_host: one process, one output it resumes
    Distribution(kind="static")    parallel.jobs.distributed: this process is one rank of a scheduler's
    Distribution(kind="ray")       parallel.jobs.ray_job: a Ray cluster's actors pull the shards

`parallel.run`, `parallel.Config` and the CLI come here; the engine below knows none of it.
"""

import dataclasses
from pathlib import Path

from parallel.jobs import distributed, single_host
from parallel.jobs.config import Config, Distribution
from parallel.output.stores import is_url

__all__ = ["Config", "Distribution", "run"]


def run(config):
    """Extracts features of every image of the job into `config.output`.

    Resumes an output written earlier by the same job (same settings, same images, no image
    added, none changed or removed after its row was written): only images without a
    committed row are computed. Stops cleanly on SIGINT/SIGTERM. With
    `config.distribution`, this process runs its part of a job spread over several.

    Args:
      config: Config.

    Returns:
      Summary (its `exit_status` is what the CLI exits with).

    Raises:
      ValueError: bad inputs (missing or empty folder, bad weights, an output of another
        job), raised before anything is logged or written; `parallel.output.OutputError`
        (also a ValueError) when the output cannot be written.
      RunError: the run stopped part-way (disk full, a device error, --strict); committed
        rows are kept.
    """
    images_root = Path(config.images)
    if not images_root.is_dir():
        raise ValueError("images=%s is not a folder" % images_root)
    if config.distribution is None and is_url(config.output):
        return _run_in_store(config)
    if config.distribution is None:
        return single_host.run(config)
    if config.distribution.kind == "ray":
        if is_url(config.output):
            raise ValueError("--output %s: a Ray job writes to a local path every host sees (an object store "
                             "output is for one host or --distributed static)" % config.output)
        from parallel.jobs import ray_job  # Ray itself is imported only when a job runs
        with distributed.advised(config.output):
            return ray_job.run(config)
    return distributed.run(config)


def _run_in_store(config):
    """A job on this process alone into an object store: the sharded protocol with one process.

    Object stores have no rename or append, so the single-host writer's commit (a part per batch,
    the record replaced) cannot run there; the sharded job's (an attempt per shard, a marker last,
    parallel.jobs.store_shards) can, and with one rank its output is the single-host one, byte for
    byte. A kill loses the shard being computed, not the committed ones.
    """
    if config.overwrite:
        from parallel.jobs.store_shards import open_job
        open_job(config.output).remove_everything()
    distribution = Distribution(kind="static", rank=0, world_size=1)
    return distributed.run(dataclasses.replace(config, overwrite=False, distribution=distribution))
