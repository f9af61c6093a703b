"""The job layer, above the engine: what a job is, and how it runs on one process or many.

A job is one set of settings and one list of images, into one output. Its protocol, the same on
one host and on many, for every source and every output:

    0. checks     before anything is written or removed (--overwrite too): the output is none of
                  the files or objects the job reads, the store can be reached, the weights load
                  (protocol.before_writing)
    1. identity   check what the output (and its manifest) records against this run: other
                  settings, another folder, images added since it started are refused before
                  anything is loaded or written (identity.check_job, identity.job_record).
    2. freeze     the job's images, in path order, are frozen in O.manifest.parquet with their
                  sizes and times (identity.freeze_job, or freeze_sharded for the variation below;
                  parallel.inputs.manifest); a rerun resumes that list, whatever the
                  folder holds now, and refuses images changed after their row was written.
    3. compute    the engine (parallel.engine.extract_into) computes the images without a
                  committed row, at their places in the frozen list, so the rows are the bits
                  of one uninterrupted run however the job was resumed.
    4. commit     rows are committed batch by batch (parallel.output); the output is whole
                  once every image has a row or an error.
    5. retry      every run computes again the images that failed (one repaired is taken as it is
                  now and recorded in the manifest), each in its step as an uninterrupted run has
                  it, so its row, and its step-mates', are the bytes of a clean run.

The one variation, a job spread over processes: the frozen list is cut into fixed shards, each
computed as a single-host job (steps 3 and 4) in its own attempt folder, which the next process
given the shard resumes if this one dies (ShardedJob.attempt), and committed by rename;
whoever commits the last shard writes the output (shards, shard_record). An output in an object
store (s3://) is always this variation, on one process too, with a commit that needs no rename
(store_shards). Static ranks
(distributed, ranks) and Ray actors (ray_job) only decide which process computes which shard.
A job of tars is always this variation, on one host a single rank: the manifest freezes the tars,
a shard is a fixed group of consecutive tars (identity.tars_per_shard), and the process computing it
reads each front to back once (engine.extract_stream, parallel.inputs.tars); their members, known
only then, are its images, recorded with the shard.

    runner.run(config)    one process (single_host) or many (distributed, ray_job)
    protocol              the checks before anything is written or removed, for every mode
    config                Config (one run, what the CLI parses), Distribution (how it is spread)
    identity              job identity and freezing: one process, and sharded (one module, both ways)
    single_host           a job on one process into one output it resumes
    shards, shard_record  the sharded job: its files, the commit by rename, the shard's record
    store_shards          the sharded job in an object store: attempts, a marker last, no rename
    distributed, ranks    static ranks (Slurm, torchrun, Kubernetes, TF_CONFIG); ShardWorker
    ray_job               a Ray cluster's actors pull shards
    locks                 flock locks: one writer per output, one manifest writer

May import: the engine (parallel.engine: extract_into, extract_stream, run_errors, RunError), the
input layer (parallel.inputs.manifest, discovery, changes, sources, tars), the device layer, the
output layer, parallel.locations, loop, messages, signals. Nothing below imports this package: the engine knows no job.

The names below are imported on first use (PEP 562).
"""

from parallel.lazy import lazy_exports

# Exported name -> the submodule that defines it.
_EXPORTS = {
    "Config": "parallel.jobs.config", "Distribution": "parallel.jobs.config",
    "run": "parallel.jobs.runner",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
