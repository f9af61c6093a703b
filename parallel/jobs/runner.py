"""The job runner: `run(config)` runs a job on this process alone, or as its part of one spread over several.

    config.distribution None       parallel.jobs.single_host: one process, one output it resumes
    Distribution(kind="static")    parallel.jobs.distributed: this process is one rank of a scheduler's
    Distribution(kind="ray")       parallel.jobs.ray_job: a Ray cluster's actors pull the shards

`parallel.run`, `parallel.Config` and the CLI come here; the engine below knows none of it.
"""

import dataclasses
import shutil
from pathlib import Path

from parallel.inputs.sources import TARS
from parallel.inputs.tars import MEMBERS_SUFFIX
from parallel.jobs import distributed, single_host
from parallel.jobs.config import Config, Distribution
from parallel.jobs.protocol import before_writing, refuse_output_among_inputs
from parallel.locations import is_url

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
    if config.distribution is None and (config.source.kind == TARS or is_url(config.output)):
        return _as_one_rank(config)  # shards of tars; a store has no rename for the single-host commit
    if config.distribution is None:
        return single_host.run(config)
    if config.distribution.kind == "ray":
        from parallel.jobs import ray_job  # Ray itself is imported only when a job runs
        with distributed.advised(config.output):
            return ray_job.run(config)
    return distributed.run(config)


def _as_one_rank(config):
    """A job on one process run as the sharded job with one static rank, resumed shard by shard.

    So run a tar job (shards of tars), and a job whose output is in an object store: stores
    have no rename or append, so the single-host writer's commit (a part per batch, the record
    replaced) cannot run there; the sharded job's (an attempt per shard, a marker last,
    parallel.jobs.store_shards) can, and with one rank its output is the single-host one, byte
    for byte. --overwrite removes the job's files, once every check has passed (one process: no
    other's to erase).
    """
    weights = before_writing(config)  # before --overwrite removes anything
    if config.overwrite and is_url(config.output):
        from parallel.jobs.store_shards import open_job
        with open_job(config.output) as job:
            job.remove_everything()
    elif config.overwrite:
        _remove_job(Path(config.output))
    one = Distribution(kind="static", rank=0, world_size=1)
    return distributed.run(dataclasses.replace(config, overwrite=False, distribution=one), weights=weights,
                           one_host=True)


# What a job writes beside its output O (files, and the folders of a sharded job and of parts).
_JOB_FILES = (".run.json", ".errors.csv", ".paths.csv", ".manifest.parquet", MEMBERS_SUFFIX)
_JOB_FOLDERS = (".shards", ".attempts", ".parts")


def _remove_job(output):
    """--overwrite of a tar job: O and what the job wrote beside it (regular files and real folders only)."""
    for suffix in ("",) + _JOB_FILES:
        path = Path(str(output) + suffix)
        if path.is_file() and not path.is_symlink():
            path.unlink()
    for suffix in _JOB_FOLDERS:
        path = Path(str(output) + suffix)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
