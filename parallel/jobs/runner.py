"""The job runner: `run(config)` runs a job on this process alone, or as its part of one spread over several.

Every job is the sharded job (parallel.jobs.shards); the distribution says only which process
computes which shard:

    config.distribution None       this process alone: rank 0 of 1, holding the output's lock (its
                                   shard size and kept shards those of the Config, as for any job)
    Distribution(kind="static")    parallel.jobs.distributed: this process is one rank of a scheduler's
    Distribution(kind="ray")       parallel.jobs.ray_job: a Ray cluster's actors pull the shards

`parallel.run`, `parallel.Config` and the CLI come here; the engine below knows none of it.
"""

import dataclasses

from parallel.jobs import distributed
from parallel.jobs.config import Config, Distribution
from parallel.jobs.protocol import before_writing, refuse_output_among_inputs, refuse_what_it_cannot_replace

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
        job, an output that is one of the job's inputs), raised before anything is logged,
        written or removed; `parallel.output.OutputError` (also a ValueError) when the output
        cannot be written.
      RunError: the run stopped part-way (disk full, a device error, --strict); committed
        rows are kept.
    """
    refuse_output_among_inputs(config)  # every mode: an input is never written over, nor removed
    refuse_what_it_cannot_replace(config)  # nor a FIFO, a link, a device: before the job is computed
    if config.distribution is None:
        return _alone(config)
    if config.distribution.kind == "ray":
        from parallel.jobs import ray_job  # Ray itself is imported only when a job runs
        with distributed.advised(config.output):
            return ray_job.run(config)
    return distributed.run(config)


def _alone(config):
    """A job on this process alone: the sharded job with one static rank, which holds the output's lock.

    Its shards are computed in order, each in an attempt that commits batch by batch and that the
    next run resumes (a kill costs at most two batches: the one being committed, the one being
    computed); its output is a many-rank job's, byte for byte.
    Its shards are `config.shard_size` images (its one rank's Distribution carries it, as a spread
    job's does); with `config.keep_shards` each stays once its rows are in the output, so that
    `<output>.shards/` is the Parquet dataset a spread job keeps.

    --overwrite removes the job's files once every check has passed and the lock is held: the
    weights are loaded first then (a bad weights file removes nothing); without it they are loaded
    once the output and the images are checked, so that a refused rerun says so at once.
    """
    weights = before_writing(config, load_weights=config.overwrite)
    one = Distribution(kind="static", rank=0, world_size=1, shard_size=config.shard_size,
                       keep_shards=config.keep_shards)
    return distributed.run(dataclasses.replace(config, overwrite=False, distribution=one), weights=weights,
                           one_host=True, overwrite=config.overwrite)
