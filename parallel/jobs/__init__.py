"""The job layer, above the engine: what a job is, and how it runs on one process or many.

A job is one set of settings and one list of images, into one output. It has one protocol, for
every source (a folder, a list, a prefix, tars), every output (a local file, an object in a
store), on one process or many; the number of processes only decides who computes which shard:

    0. checks     before anything is written or removed (--overwrite too): the output is none of
                  the files or objects the job reads, none of its names (O, O.run.json, O.shards, ...)
                  is a FIFO, a link or a device, the store can be reached, the weights load
                  (protocol.before_writing; distributed._check_output: a file this program did not
                  write is replaced only with --overwrite, never when it is an input)
    1. identity   what the output's manifest records against this run: other settings, another
                  folder, images added since it started, images changed after their row was written
                  are refused before anything is loaded or written (identity.freeze_sharded)
    2. freeze     the job's images, in path order, frozen in O.manifest.parquet with their sizes,
                  times and versions, and cut into fixed shards (parallel.inputs.manifest); a rerun
                  resumes that list, whatever the folder holds now
    3. compute    each shard in an attempt of this host (attempts): the engine computes its images
                  without a committed row at their places in the job, so the rows are the bits of one
                  uninterrupted run however the job was resumed; the attempt's writer commits batch by
                  batch, and the next process on the host given the shard resumes the attempt of one
                  that died (a kill costs at most two batches, the one being committed and the one
                  being computed; a tar's stream is read again, the members with a row
                  skipped unread by the devices)
    4. commit     the finished attempt's files and their record committed as the shard's group
                  (shards.ShardedJob.commit, through commits)
    5. output     the shards written into O in order, each checked first (assembly): by the job's
                  only process as it goes, each shard removed (unless Config.keep_shards) once its
                  rows are in O and the job's ledger (O.ledger.jsonl, checksummed: ledger) records
                  it; by the process that commits a job's last shard otherwise. A run proves what
                  the ledger claims against O before it trusts it (assembly.prove, proof): every
                  file it reads, by its SHA-256 (a side file) or its size (O's own data); what
                  cannot be proven is rebuilt or computed again, never a failed run. O is then
                  published (a store's uploaded, its record last)
    6. retry      every run computes again the images that failed (one repaired is taken as it is
                  now and recorded in the manifest), each in its step as an uninterrupted run has
                  it, into O itself (retry.retry_in_output: a store's O read back, the rows merged,
                  written whole; a tar job's merged in stream order; a Ray job's by one actor), or
                  into its shard where a whole tar could not be read (its members unknown)

Where a local output and one in an object store differ is one narrow interface, `commits.Commits`
(Delta Lake's LogStore is the model): pull, read, publish, create-if-absent, sizes, remove, a lock,
and a shard's files committed as one group (a rename in a folder; parts then a record last in a
store), listed, read back verified against their SHA-256, set aside, dropped. Everything above it
is one ShardedJob. A job of tars (or of Parquet or TFRecord files: one more source behind
parallel.inputs.streamed) freezes the files, a shard being a fixed group of consecutive files
(identity.tars_per_shard) read front to back once (engine.extract_stream, parallel.inputs.streamed).

    runner.run(config)    this process alone (rank 0 of 1, holding O.lock), or one of many
    protocol              the checks before anything is written or removed, for every mode
    config                Config (one run, what the CLI parses), Distribution (how it is spread)
    identity              job identity and freezing, the same for every number of processes
    commits               the narrow interface, and its local folder (rename is the atomic step)
    store_commits         the same over an object store (a record written last is the atomic step)
    frozen                FrozenJob: the job's manifest frozen and read, the output's lock
    output_state          CommittedOutput: O as committed: its ledger, proof, record, pull and publish
    shards, shard_record  ShardedJob: its shards committed, chosen, checked, set aside; the shard's record
    attempts              the folders where this host computes shards, resumed after a kill
    assembly              the output written from the shards, in order; the ledger proven against it
    ledger                O.ledger.jsonl: what is committed into O, append-only, each line checksummed
    proof                 what a rerun proves of O against its ledger, and what it rebuilds instead
    worker                the shard runner (ShardWorker): the graph built once, each shard computed, committed
    text_pass             a text job's: each shard's captions embedded (resumable) and scored, its labels ranked
    distributed, ranks    this process alone or a static rank (Slurm, torchrun, Kubernetes, TF_CONFIG)
    retry                 a finished output's failed images computed again into it
    ray_job, ray_nodes    a Ray cluster's actors pull shards; what a node offers them (devices, room)
    locks                 flock locks: one writer per output, one manifest writer

May import: the engine (parallel.engine: extract_into, extract_stream, run_errors, RunError), the
input layer (parallel.inputs.manifest, discovery, changes, sources, tars), the device layer, the
output layer, parallel.locations, loop, messages, signals. Nothing below imports this package: the engine knows no job.

The names below are imported on first use (PEP 562).
"""

from parallel.lazy import lazy_exports

# Exported name -> the submodule that defines it.
_EXPORTS = {
    "Config": "parallel.jobs.config", "Distribution": "parallel.jobs.config", "read_labels": "parallel.jobs.config",
    "run": "parallel.jobs.runner",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
