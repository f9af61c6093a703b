"""The failed images of a finished output computed again into it: every run retries them, as one process does.

    retry_in_output(config, job, worker, started)   a finished output whose shards are gone: its failed
                                                    images, each at its place in its step, appended and
                                                    merged into path order; the ledger then the errors
                                                    file say which still fail
"""

import dataclasses
import logging
import time

from parallel.engine import extract_rows, run_errors
from parallel.jobs import locks
from parallel.jobs.assembly import closed_state
from parallel.loop import Summary
from parallel.output import ErrorLog, open_writer

log = logging.getLogger("parallel")


def retry_in_output(config, job, worker, started):
    """The failed images of a finished output whose shards are gone, computed again into it (every run retries).

    As one process retries: each image at its place in its step (`extract_rows`), its row appended to the
    output and merged into path order when it is closed, the errors file then the images that still fail.
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
    summary = Summary(discovered=job.images, written=len(paths), failed=len(still),
                      already_done=job.images - len(todo), seconds=time.perf_counter() - started)
    return dataclasses.replace(summary, output=config.output_location, errors_file=config.errors_location)


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
    manifest = job.load_manifest()
    job.pull_output()  # a store's, written again here, then published
    with run_errors():
        writer = open_writer(job.output, format=config.output_format, column_prefix=config.model.output_name,
                             feature_size=worker.runner.feature_size, settings=config.settings, sort_paths=True)
    with writer:
        todo = [(position, path) for position, path in enumerate(manifest.paths)
                if path in failed and path not in writer.completed]  # a row of a run killed before its errors
        versions = manifest.etags and [manifest.etags[position] for position, _ in todo]
        paths, features, still = extract_rows(config, worker.runner, [path for _, path in todo],
                                              [position for position, _ in todo], job.images, versions=versions)
        for start in range(0, len(paths), 1024):
            writer.write(paths[start:start + 1024], features[start:start + 1024])
    ledger.add_retry(sorted(path for path in failed if writer.has_row(path)), still)  # those of a killed run too
    with ErrorLog(job.output) as log_file:  # the images that still have no row
        for row in ledger.failures():
            log_file.add(*row)
    ledger.add_complete(writer.rows_committed, closed_state(job.output))
    job.publish_output()
    return todo, paths, still
