"""A job on one process: the job's images, frozen in its manifest, into one output it resumes.

The protocol is the job layer's (see `parallel.jobs`): check the job against what the output and
its manifest record (`identity.check_job`), freeze the images (`identity.freeze_job`), then the
engine computes the images without a committed row, at their places in the job's list.
"""

import contextlib
import dataclasses
import logging
import time
from pathlib import Path

from parallel.devices.selection import set_float32_precision
from parallel.devices.staging import open_runner
from parallel.engine import disk_full_errors, extract_into, run_errors
from parallel.jobs import locks
from parallel.jobs.identity import check_job, freeze_job, job_record
from parallel.jobs.shards import ShardedJob
from parallel.loop import log_stage_times
from parallel.messages import Progress, counted
from parallel.output import ErrorLog, OutputError, open_writer
from parallel.signals import StopRequest

log = logging.getLogger("parallel")


def run(config):
    """`parallel.jobs.run` for a config without a distribution: the job on this process alone.

    Args, returns and raises: as `parallel.jobs.run`.
    """
    images_root = config.image_root  # a folder, or a prefix of a store
    output = Path(config.output)
    settings = config.settings
    _, current, frozen = check_job(images_root, output, dict(settings, format=config.output_format,
                                                             column_prefix=config.model.output_name),
                                   scan=config.scan, overwrite=config.overwrite, geometry=config.step_geometry)
    weights = config.model.load_weights()  # a bad weights file fails before any output exists
    set_float32_precision(config.model.settings.get("precision"))  # process-global: before the Session
    started = time.perf_counter()
    with contextlib.ExitStack() as stages:
        runner = stages.enter_context(open_runner(config.model, config.devices, config.per_device_batch,
                                                  weights=weights))
        del weights  # the devices hold their copies now
        output.parent.mkdir(parents=True, exist_ok=True)
        stages.enter_context(output_lock(output))
        if config.overwrite:
            ShardedJob(output).remove_parts()  # of a job over several processes, written here before
        with disk_full_errors():
            writer = open_writer(output, format=config.output_format, column_prefix=config.model.output_name,
                                 feature_size=runner.feature_size, settings=settings, overwrite=config.overwrite,
                                 sort_paths=True)
        stages.callback(writer.abort)  # committed rows stay committed and resumable; no-op after close()
        job = freeze_job(frozen, current, writer, images_root, output, job=job_record(config))
        positions = [index for index, path in enumerate(job.paths) if path not in writer.completed]
        todo = [job.paths[index] for index in positions]
        log.info("%s under %s; devices: %s", counted(len(job), "image"), images_root,
                 config.devices.describe(config.per_device_batch))
        log.info("ready in %.1f s (weights to devices, graph, session)", time.perf_counter() - started)
        # The stop request covers the loop only: a signal during start-up or the final merge stops at once.
        with Progress(config.progress, total=len(job), initial=len(job) - len(todo)) as progress, \
                StopRequest() as stop:
            summary = extract_into(config, runner, writer, todo, positions, stop=stop, progress=progress,
                                   total=len(job), versions=job.etags and [job.etags[index] for index in positions])
        log_stage_times(summary)
        if not summary.interrupted:
            with run_errors():
                writer.close()  # parquet, npy: the final merge
    return dataclasses.replace(summary, discovered=len(job), already_done=len(job) - len(todo), output=output,
                               errors_file=ErrorLog.path_for(output))


@contextlib.contextmanager
def output_lock(output):
    """One process writing `output` at a time: a second is refused with one line."""
    path = Path(output).with_name(Path(output).name + ".lock")
    try:
        with locks.exclusive(path):
            yield
    except locks.Busy:
        raise OutputError("another run is writing %s now (it holds %s): wait for it to end, or choose another "
                          "output" % (output, path.name)) from None
