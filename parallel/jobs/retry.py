"""The failed images of a finished output computed again into it: every run retries them, as one process does.

    retry_in_output(config, job, worker, started)   a finished output whose shards are gone: its failed
                                                    images, each at its place in its step, appended and
                                                    merged into their places (path order; a tar job's:
                                                    stream order, the members' order in O.members.parquet);
                                                    the ledger then the errors file say which still fail; a
                                                    text job's O.text.parquet scores them first

An output in a store is read back first (`job.pull_output`), and written whole again, its record last
(`job.publish_output`).
"""

import dataclasses
import logging
import os
import time

import numpy as np

from parallel.engine import extract_rows, member_decoder, run_errors
from parallel.inputs.tars import index_keys
from parallel.jobs import locks
from parallel.jobs.proof import closed_state
from parallel.jobs.shard_record import shard_keys
from parallel.loop import Summary
from parallel.output import ErrorLog, open_writer
from parallel.output.durable import beside, file_digest, fsync
from parallel.output.text_rows import NEXT_SUFFIX, read_rows, replace_rows

log = logging.getLogger("parallel")

_BATCH_ROWS = 1024


def retry_in_output(config, job, worker, started):
    """The failed images of a finished output whose shards are gone, computed again into it (every run retries).

    As one process retries: each image at its place in its step (`extract_rows`), its row appended to the
    output and merged into its place when it is closed, the errors file then the images that still fail.
    One process does it, holding the output's lock; another that comes meanwhile leaves it to that one.

    Args:
      config, job: the Config and its frozen ShardedJob (`job.retried_in_output()`).
      worker: this process's ShardWorker (its runner computes).
      started: `time.perf_counter()` when the run began.

    Returns:
      Summary of the job: already_done its rows, written the rows new, failed the images still failing.
    """
    try:
        with job.named(), job.output_lock():
            todo, paths, still = retry_failed(config, job, worker)
    except locks.Busy:
        log.info("another process is writing %s: it retries the failed images", config.output)
        todo, paths, still = [], [], []
    if todo:
        log.info("%d of the %d failed images computed now", len(paths), len(todo))
    images = len(index_keys(job.members_index())) if job.streamed else job.images  # a tar job's: its members
    summary = Summary(discovered=images, written=len(paths), failed=len(still), already_done=images - len(todo),
                      seconds=time.perf_counter() - started)
    return dataclasses.replace(summary, output=config.output_location, errors_file=config.errors_location,
                               failure_cause=job.failures_cause(len(still)))


def retry_failed(config, job, worker, only=None):
    """`retry_in_output`'s work, under the output's lock: (the failed images without a row [(position, path)],
    the paths computed now, the failures [(path, kind, message)] of those that still fail).

    `only`: a set of paths, the failed images to retry (None: every one the ledger records); the ledger
    records which have a row now, and the errors file is written anew from it: the images computed now
    are not in it, the others' lines are as they were.
    """
    ledger = job.ledger()
    failed = {path for path, _, _ in ledger.failures() if only is None or path in only}
    if not failed:  # nothing to retry: the output is not opened (its writer reads every committed path)
        return [], [], []
    job.pull_output()  # a store's, written again here, then published
    order = True  # the rows in path order
    if job.streamed:  # in stream order: each member's place in the output's index of members
        places = {key: place for place, key in enumerate(index_keys(job.members_index()))}
        order = lambda key: places.get(key, len(places))  # noqa: E731 -- the writer's key of a row
    with run_errors():
        writer = open_writer(job.output, format=config.output_format, column_prefix=config.model.output_name,
                             feature_size=worker.runner.feature_size, settings=config.settings, sort_paths=order)
    with writer:
        todo, computed, still = [], [], []
        for keys, first, total, decode, versions in _groups(job, failed, config.image_column):
            positions = [place for place, key in enumerate(keys) if key in failed and not writer.has_row(key)]
            todo.extend((first + place, keys[place]) for place in positions)  # with a row: of a run killed before
            done, features, failing = extract_rows(config, worker.runner, [keys[place] for place in positions],
                                                   [first + place for place in positions], total, decode=decode,
                                                   versions=versions and [versions[place] for place in positions])
            computed.append((done, features))
            still.extend(failing)
        if job.has_text and (computed or still):  # their text file's rows first: it may hold them before O does
            _rescore_text(job, worker.text, computed, still)
        paths = []
        for done, features in computed:
            for start in range(0, len(done), _BATCH_ROWS):
                writer.write(done[start:start + _BATCH_ROWS], features[start:start + _BATCH_ROWS])
            paths.extend(done)
        # Its rows are committed: recorded before the close merges them into place (a kill at any point after
        # leaves an output the next run closes, nothing computed again). Those of a killed run are recorded too.
        ledger.add_retry(sorted(path for path in failed if writer.has_row(path)), still)
    with ErrorLog(job.output) as log_file:  # the images that still have no row
        for row in ledger.failures():
            log_file.add(*row)
    ledger.add_complete(writer.rows_committed, closed_state(job))
    job.publish_output()
    return todo, paths, still


def _rescore_text(job, text, computed, still):
    """O.text.parquet with the rows of the images computed now scored against them, those of the images that still
    fail without a score, before their rows are in O: written beside it (O.text.parquet.next), recorded in the
    ledger (its SHA-256), then renamed over it. A kill at any point leaves a text file the ledger proves that
    holds for O's rows: the one O was closed with (their rows are not in O yet), or this one.

    Args:
      job: the frozen ShardedJob (its output's lock held).
      text: the worker's TextPass.
      computed: [(paths, float32 [len(paths), D])] of the images that read now.
      still: [(path, kind, message)] of those that still fail.
    """
    keys = [path for paths, _ in computed for path in paths] + [path for path, _, _ in still]
    failing = np.full((len(still), text.runner.embedding_size), np.nan)  # the image tower's size too: one space
    images = np.concatenate([values for _, values in computed] + [failing])
    places = {key: place for place, key in enumerate(keys)}
    rows = read_rows(job.text, keys)
    rows = text.rescored(rows, images[[places[key] for key in rows.keys]])
    target = beside(job.text, NEXT_SUFFIX)
    replace_rows(job.text, target, rows)
    job.ledger().add_text(*file_digest(target))
    os.replace(target, job.text)
    fsync(job.text.parent)


def _groups(job, failed, image_column=None):
    """What `extract_rows` computes the `failed` images in, each at its place in its steps: [(keys, the place of
    the first, the images of its steps, decode, versions)]. The job's images, in steps of the whole job; a tar
    job's members, shard by shard (its steps are its shard's), read by one byte range each from its tars."""
    if not job.streamed:
        manifest = job.load_manifest()
        return [(manifest.paths, 0, job.images, None, manifest.etags)]
    groups = []
    for index, failures in sorted(job.ledger().shards().items()):
        if any(path in failed for path, _, _ in failures):
            keys = shard_keys(job, index)
            groups.append((keys, 0, len(keys), member_decoder(keys, job.members_index(), image_column), None))
    return groups
