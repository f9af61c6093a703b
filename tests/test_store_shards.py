"""A job whose output is in an object store (parallel.jobs.commits.ObjectCommits), against an S3-compatible server on
127.0.0.1 (moto) that s3fs reaches over real HTTP: the bytes of a local run, on one host and on three static
ranks, through kills, unfinished attempts and attempts computed twice."""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hangs import HANG_SECONDS
import job_child
from parallel import jobs
from parallel.jobs.identity import job_record
from parallel.jobs.commits import FolderCommits
from parallel.jobs.shards import ShardedJob

CHILD = str(Path(job_child.__file__))
FORMATS = ("csv", "parquet", "npy")
SUFFIXES = ("", ".paths.csv", ".errors.csv")


def store_outputs(s3, name):
    """{suffix: bytes} of the files a user reads, from the store (as tests/outputs.job_outputs reads them locally)."""
    objects = s3.objects()
    return {suffix: s3.filesystem.cat_file("%s/%s%s" % (s3.bucket, name, suffix)) for suffix in SUFFIXES
            if name + suffix in objects}


def static(rank, world_size, shard_size=5, keep_shards=False):
    return jobs.Distribution(kind="static", rank=rank, world_size=world_size, shard_size=shard_size,
                             keep_shards=keep_shards, wait_seconds=5)


def run_rank(job_images, url, output_format, rank, world_size, **options):
    return jobs.run(job_child.config(job_images, url, output_format, static(rank, world_size, **options)))


def child(zygote, job_images, url, output_format, env, *flags):
    """The job child in a process of its own (forked from the session's job_child_zygote: tests/conftest.py)."""
    return zygote.spawn([CHILD, str(job_images), url, output_format, *flags], stderr=subprocess.PIPE, env=env)


@pytest.mark.parametrize("output_format", FORMATS)
def test_one_host_writes_the_bytes_of_a_local_run_into_the_store(job_images, single_outputs, s3, output_format):
    name = "runs/out." + output_format
    summary = jobs.run(job_child.config(job_images, s3.url(name), output_format))
    assert (summary.written, summary.failed, str(summary.output)) == (23, 1, s3.url(name))
    assert store_outputs(s3, name) == single_outputs[output_format]
    extra = [".paths.csv"] if output_format == "npy" else []
    # The shards go once the output is written, an image failed or not: its failures are retried into it.
    assert s3.objects() == sorted(
        name + suffix for suffix in ["", ".errors.csv", ".ledger.jsonl", ".manifest.parquet", ".run.json"] + extra)
    again = jobs.run(job_child.config(job_images, s3.url(name), output_format))  # finished: bad.png tried again
    assert (again.written, again.already_done, again.failed, again.exit_status) == (0, 23, 1, 3)
    assert store_outputs(s3, name) == single_outputs[output_format]


@pytest.mark.parametrize("output_format", FORMATS)
def test_three_ranks_one_after_another_give_the_local_bytes(job_images, single_outputs, s3, output_format):
    url = s3.url("out." + output_format)
    first = run_rank(job_images, url, output_format, 0, 3)
    assert first.pending_shards == (1, 2, 4) and "out." + output_format not in s3.objects()
    run_rank(job_images, url, output_format, 1, 3)
    last = run_rank(job_images, url, output_format, 2, 3)
    assert last.pending_shards == () and (last.written, last.failed) == (4, 1)
    assert store_outputs(s3, "out." + output_format) == single_outputs[output_format]


def test_a_rank_killed_mid_shard_resumes_on_another_world_size(job_images, single_outputs, s3, tmp_path,
                                                                job_child_zygote):
    url = s3.url("out.npy")
    marker = tmp_path / "steps"
    marker.write_text("")
    slow = child(job_child_zygote, job_images, url, "npy", s3.env, "--distributed", "static", "--rank", "1",
                 "--world-size", "2", "--shard-size", "5", "--step-seconds", "0.5", "--marker", str(marker))
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while shard_three_rows(url) < 2:  # shard 1 committed (3 steps), a batch of shard 3 committed in its attempt
        assert slow.poll() is None and time.monotonic() < deadline, slow.communicate()
        time.sleep(0.05)
    slow.send_signal(signal.SIGKILL)
    slow.wait()
    kept = shard_three_rows(url)  # in its attempt on this host, outside the killed process's staging folder
    job = ShardedJob(url)
    job.freeze(job_record(job_child.config(job_images, url, "npy", static(1, 2))), None)
    assert job.is_committed(1) and not job.is_committed(3) and 2 <= kept < 5
    summaries = [run_rank(job_images, url, "npy", rank, 3) for rank in range(3)]  # now on 3 processes
    # Shard 3 (rank 0 of 3) resumed after its committed rows; shard 1 (rank 1 of 3) is kept.
    assert [summary.already_done for summary in summaries] == [kept, 5, 0]
    assert store_outputs(s3, "out.npy") == single_outputs["npy"]


def shard_three_rows(url):
    """The rows the attempts at shard 3 of the job writing `url` have committed on this host, batch by batch."""
    from parallel.jobs.store_commits import attempts_folder
    from parallel.output import read_record
    records = [read_record(folder / "features.parquet") for folder in attempts_folder(url).glob("shard-000003.*")]
    return sum(record["rows"] for record in records if record is not None)


def frozen_job(job_images, url, output_format="csv"):
    job = ShardedJob(url)
    job.freeze(job_record(job_child.config(job_images, url, output_format, static(0, 1))), None)
    return job


def test_an_attempt_without_its_marker_or_with_a_wrong_one_is_never_read(job_images, single_outputs, s3, tmp_path,
                                                                          caplog):
    url = s3.url("out.csv")
    run_rank(job_images, url, "csv", 0, 3)  # shards 0 and 3
    job = frozen_job(job_images, url)
    junk = tmp_path / "junk"
    junk.write_bytes(b"half a part")
    prefix = "out.csv.shards/shard-000001/"
    # Sorting before any real attempt: a part uploaded by a process killed before its marker...
    job.commits.store.upload(prefix + "0000000000000000-killed/features.parquet", junk)
    # ...an attempt whose marker lists other sizes than its parts' (a part replaced afterwards)...
    job.commits.store.upload(prefix + "0000000000000001-changed/features.parquet", junk)
    job.commits.store.upload(prefix + "0000000000000001-changed/_errors.csv", junk)
    sizes = {"features.parquet": {"size": 1, "sha256": "0"}, "_errors.csv": {"size": 11, "sha256": "0"}}
    job.commits.store.write(prefix + "0000000000000001-changed/_shard.json", json.dumps(
        {"job": job.identity, "shard": 1, "images": job.shard_digest(1), "rows": 5, "failed": 0,
         "files": sizes}).encode())
    # ...and one of another job.
    job.commits.store.upload(prefix + "0000000000000002-other/features.parquet", junk)
    job.commits.store.upload(prefix + "0000000000000002-other/_errors.csv", junk)
    job.commits.store.write(prefix + "0000000000000002-other/_shard.json", json.dumps({"job": "another"}).encode())
    assert not job.is_committed(1) and job.missing() == [1, 2, 4]
    assert "its features.parquet is not the size its _shard.json records" in caplog.text
    assert "it was computed for another job" in caplog.text
    run_rank(job_images, url, "csv", 1, 3)
    run_rank(job_images, url, "csv", 2, 3)
    assert store_outputs(s3, "out.csv") == single_outputs["csv"]


def test_two_attempts_at_one_shard_leave_one_correct_result(job_images, single_outputs, s3, monkeypatch):
    """Two processes that both found shard 2 not committed, and both finished it: every reader chooses the same
    attempt (the first in name order), and either gives the same bytes."""
    url = s3.url("out.csv")
    run_rank(job_images, url, "csv", 0, 1, keep_shards=True)
    job = frozen_job(job_images, url)
    first = job.chosen(2)

    def second_attempt(name_time):
        """Commits a copy of shard 2 as a process that checked before the first marker existed would."""
        copy = job.new_attempt(2)
        for part in ("features.parquet", "_errors.csv"):
            job.commits.store.download("out.csv.shards/shard-000002/%s/%s" % (first, part), copy / part)
        with monkeypatch.context() as patch:
            patch.setattr(job, "is_committed", lambda index: False)
            patch.setattr("time.time_ns", lambda: name_time)
            return job.commit(2, copy, copy / "_errors.csv")

    assert second_attempt(int(first.split("-")[0], 16) + 1) is False  # sorts after: the first stays chosen
    assert second_attempt(0) is True  # sorts first: chosen now, by this process and any other
    finished = sorted({name.split("/")[2] for name in job.commits.store.list("out.csv.shards/shard-000002/")})
    assert len(finished) == 3 and frozen_job(job_images, url).chosen(2) == finished[0] != first
    assert store_outputs(s3, "out.csv") == single_outputs["csv"]
    for name in ("out.csv", "out.csv.errors.csv", "out.csv.run.json"):  # written again from the chosen attempts
        s3.filesystem.rm("%s/%s" % (s3.bucket, name))
    again = run_rank(job_images, url, "csv", 0, 1)
    assert again.already_done == 23 and store_outputs(s3, "out.csv") == single_outputs["csv"]
    attempt = job.new_attempt(2)  # a retried task, late: shard 2 is committed already
    (attempt / "features.parquet").write_bytes(b"a duplicate")
    before = job.commits.store.list("out.csv.shards/shard-000002/")
    assert frozen_job(job_images, url).commit(2, attempt, attempt / "none.csv") is False
    assert job.commits.store.list("out.csv.shards/shard-000002/") == before and not attempt.exists()


def test_a_shard_whose_part_changed_in_the_store_is_set_aside_and_computed_again(job_images, single_outputs, s3,
                                                                                   caplog):
    url = s3.url("out.parquet")
    run_rank(job_images, url, "parquet", 0, 2)  # shards 0, 2, 4
    job = frozen_job(job_images, url, "parquet")
    errors = "out.parquet.shards/shard-000002/%s/_errors.csv" % job.chosen(2)
    job.commits.store.write(errors, job.commits.store.read(errors).replace(b"path", b"PATH"))  # same size, other bytes
    last = run_rank(job_images, url, "parquet", 1, 2)  # commits shards 1 and 3, finds shard 2 changed, computes it
    assert last.pending_shards == () and store_outputs(s3, "out.parquet") == single_outputs["parquet"]
    assert "shard 2 of %s is set aside as %s/out.parquet.shards/shard-000002/" % (url, url.rpartition("/")[0]) \
        in caplog.text and "its _errors.csv does not match its _shard.json" in caplog.text
    assert not job.commits.store.list("out.parquet.shards/")  # the output is written: its shards go


@pytest.mark.parametrize("shard, part", [(2, "features.parquet"), (0, "_errors.csv")])
def test_a_committed_shard_whose_part_changed_in_the_store_at_the_rerun_is_set_aside_and_computed_again(
        job_images, single_outputs, s3, monkeypatch, caplog, shard, part):
    """Read back verified as it is used: shard 2 (with a/bad.png) to retry its failed image, shard 0 to count its
    rows. Changed in the store (the same size), each is named, set aside and computed again: never exit 1."""
    from colour_jobs import StopAfter
    from parallel.jobs import distributed
    url = s3.url("out.csv")
    with monkeypatch.context() as patch:  # stopped in shard 3: shards 0 to 2 committed in the store
        patch.setattr(distributed, "StopRequest", lambda: StopAfter(10))
        assert run_rank(job_images, url, "csv", 0, 1).interrupted
    job = frozen_job(job_images, url)
    name = "out.csv.shards/shard-%06d/%s/%s" % (shard, job.chosen(shard), part)
    data = bytearray(job.commits.store.read(name))
    data[len(data) // 2] ^= 0x01
    job.commits.store.write(name, bytes(data))
    with caplog.at_level("WARNING", logger="parallel"):
        summary = run_rank(job_images, url, "csv", 0, 1)
    assert (summary.pending_shards, summary.failed) == ((), 1)
    assert "shard %d of %s is set aside as" % (shard, url) in caplog.text and "it was changed in the store" in caplog.text
    assert store_outputs(s3, "out.csv") == single_outputs["csv"]


def test_usage_errors_are_refused_with_nothing_written(job_images, s3, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="the bucket %s-none does not exist" % s3.bucket):
        jobs.run(job_child.config(job_images, "s3://%s-none/out.csv" % s3.bucket, "csv"))
    s3.filesystem.pipe_file("%s/theirs.csv" % s3.bucket, b"someone else's")
    with pytest.raises(ValueError, match=r"^s3://\S+/theirs.csv exists and was not written by this program"):
        jobs.run(job_child.config(job_images, s3.url("theirs.csv"), "csv"))
    assert s3.objects() == ["theirs.csv"] and list(tmp_path.iterdir()) == []


def test_a_rank_of_another_job_is_refused_naming_the_store_s_objects(job_images, s3):
    url = s3.url("out.csv")
    run_rank(job_images, url, "csv", 0, 3)
    with pytest.raises(ValueError, match=r"^s3://\S+/out.csv was cut into shards of 5 images, not 4"):
        run_rank(job_images, url, "csv", 1, 3, shard_size=4)
    s3.filesystem.pipe_file("%s/out.csv.manifest.parquet" % s3.bucket, b"damaged")
    with pytest.raises(ValueError, match=r"s3://\S+/out.csv.manifest.parquet"):
        run_rank(job_images, url, "csv", 1, 3)


def test_overwrite_on_one_host_starts_the_store_output_afresh(job_images, single_outputs, s3):
    import dataclasses
    url = s3.url("out.csv")
    run_rank(job_images, url, "csv", 0, 3)  # a job of shards of 5, left unfinished
    config = job_child.config(job_images, url, "csv")
    jobs.run(dataclasses.replace(config, overwrite=True))
    assert store_outputs(s3, "out.csv") == single_outputs["csv"]
    assert not [name for name in s3.objects() if ".shards/" in name]  # bad.png is retried in the output


def test_a_job_sent_to_another_process_stages_in_a_folder_of_its_own(job_images, s3):
    """What a Ray worker receives (pickled): the store and the frozen job; its staging folder is its own."""
    import gc
    import pickle
    from parallel.jobs.identity import freeze_sharded
    url = s3.url("out.csv")
    run_rank(job_images, url, "csv", 0, 3)  # shards 0 and 3 committed
    config = job_child.config(job_images, url, "csv", static(1, 3))
    job = freeze_sharded(config, check_folder=False)
    copy = pickle.loads(pickle.dumps(job))
    assert copy.output.parent != job.output.parent and copy.output.parent.is_dir() and copy.manifest.exists()
    assert (copy.location, copy.shard_count, copy.identity) == (job.location, job.shard_count, job.identity)
    assert copy.shard_images(2).paths == job.shard_images(2).paths
    assert copy.missing() == job.missing() == [1, 2, 4]
    staging = copy.output.parent
    del copy
    gc.collect()
    assert not staging.exists()  # removed with the object


def test_a_local_output_is_still_the_rename_protocol(tmp_path):
    assert type(ShardedJob(tmp_path / "out.csv").commits) is FolderCommits


def test_the_store_stopped_mid_run_stops_with_one_line_and_a_rerun_resumes(job_images, single_outputs, s3, tmp_path,
                                                                          job_child_zygote):
    """The child reaches the store through a server of its own, stopped once shard 0 is committed; the objects
    (moto keeps them per process, whichever server serves them) are still there for the rerun."""
    import s3_server
    server, endpoint = s3_server.start()
    url = s3.url("out.csv")
    marker = tmp_path / "steps"
    marker.write_text("")
    running = child(job_child_zygote, job_images, url, "csv",
                    dict(s3_server.environment(endpoint), AWS_MAX_ATTEMPTS="1"),
                    "--distributed", "static", "--rank", "0", "--world-size", "1", "--shard-size", "5",
                    "--step-seconds", "0.3", "--marker", str(marker))
    try:
        deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
        while not any(name.endswith("/_shard.json") for name in s3.objects()):
            assert running.poll() is None and time.monotonic() < deadline, running.communicate()
            time.sleep(0.1)
    finally:
        server.stop()
    _, error = running.communicate(timeout=HANG_SECONDS)
    assert running.returncode == 1, error
    failed = [line for line in error.splitlines() if line.startswith("failed:")]
    assert len(failed) == 1 and "the store is not reachable" in failed[0] and "rerun" in failed[0], error
    rerun = run_rank(job_images, url, "csv", 0, 1)
    assert rerun.already_done >= 5 and store_outputs(s3, "out.csv") == single_outputs["csv"]  # shard 0 was kept


def test_an_image_changed_after_its_row_is_refused_naming_the_shard_in_the_store(job_images, s3, tmp_path):
    import shutil
    images = tmp_path / "images"
    shutil.copytree(job_images, images)
    url = s3.url("out.csv")
    run_rank(images, url, "csv", 0, 3)  # shards 0 and 3 committed
    first = sorted(path for path in images.rglob("*.png"))[0]
    first.write_bytes(first.read_bytes() + b"\0")  # an image of shard 0, changed after its row
    with pytest.raises(ValueError, match=r"Remove s3://\S+/out.csv.shards/shard-000000 and rerun to recompute it"):
        run_rank(images, url, "csv", 0, 3)


def test_two_processes_freezing_at_once_both_take_the_first_manifest(job_images, s3, monkeypatch):
    """What replaces the manifest's lock: a conditional PUT; the process that loses the race reads the winner's."""
    url = s3.url("out.csv")
    config = job_child.config(job_images, url, "csv", static(0, 2, shard_size=None))
    first, second = ShardedJob(url), ShardedJob(url)  # neither sees a manifest yet
    create = second.commits.store.create

    def racing_create(name, local):
        first.freeze(job_record(config), config.scan, shard_size=5)  # the other process gets there first
        return create(name, local)

    monkeypatch.setattr(second.commits.store, "create", racing_create)
    recorded = second.freeze(job_record(config), config.scan, default_shard_size=4)
    assert recorded["shard_size"] == second.shard_size == first.shard_size == 5
    assert second.manifest.read_bytes() == s3.filesystem.cat_file("%s/out.csv.manifest.parquet" % s3.bucket)
