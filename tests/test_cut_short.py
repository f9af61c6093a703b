"""A job cut short once some of its shards were committed, on the paths a kill at a random moment of the command
line seldom reaches: an output in a store, a job of tars, a full disk in the background assembly (a Ray actor
killed mid-shard is tests/test_ray_job.py's). The rerun writes the bytes of the uninterrupted run (the output, its
errors file, its paths file), each image once (a row or an errors-file line), and computes only the shards that
were not committed."""

import collections
import csv
import errno
import io
import os
import threading

import pyarrow.parquet as pq
import pytest

import job_child
from colour_jobs import KillAfter, Killed
from outputs import job_outputs
from parallel import engine, jobs
from parallel.inputs.tars import member_key
from parallel.jobs import assembly, distributed, identity
from parallel.jobs.shards import ShardedJob
from parallel.output import read_record
from stores import image_paths, write_tars
from test_store_shards import store_outputs


@pytest.fixture
def small_shards(monkeypatch):
    """Shards of 4 images (2 steps of 2) for a job of one process: job_images' 24 are 6 shards, the fourth
    (images 12 to 15) starting with a/bad.png."""
    monkeypatch.setattr(identity, "DEFAULT_SHARD_SIZE", 4)


@pytest.fixture
def store_shards(monkeypatch):
    """Shards of 8 images (4 steps of 2) for a job of one process: job_images' 24 are 3 shards, a/bad.png the fifth
    image of the second (images 8 to 15): a store job with few objects to upload."""
    monkeypatch.setattr(identity, "DEFAULT_SHARD_SIZE", 8)


def assert_each_image_once(files, output_format, images):
    """Every one of `images` is exactly one row or one errors-file line of `files` ({suffix: bytes}: job_outputs),
    and the rows are in the order of `images`."""
    if output_format == "parquet":
        rows = pq.read_table(io.BytesIO(files[""]), columns=["path"]).column("path").to_pylist()
    else:
        rows = [row[0] for row in list(csv.reader(io.StringIO(files["" if output_format == "csv" else ".paths.csv"]
                                                            .decode(), newline="")))[1:]]
    failed = [row["path"] for row in csv.DictReader(io.StringIO(files.get(".errors.csv", b"").decode(), newline=""))]
    counts = collections.Counter(rows + failed)
    assert set(counts) == set(images) and set(counts.values()) == {1}, counts
    assert rows == sorted(rows, key=images.index)


@pytest.mark.parametrize("output_format", ["csv", "parquet", "npy"])
def test_a_store_output_killed_mid_shard_keeps_its_shards_and_batches_and_the_rerun_is_exact(
        job_images, single_outputs, s3, store_shards, monkeypatch, output_format):
    name = "out." + output_format
    config = job_child.config(job_images, s3.url(name), output_format)  # this process alone
    with monkeypatch.context() as patch:  # killed in shard 1, its first 3 batches handed to the attempt's writer
        patch.setattr(distributed, "StopRequest", lambda: KillAfter(7))
        with pytest.raises(Killed):
            jobs.run(config)
    committed = sorted({path.split("/")[1] for path in s3.objects() if path.endswith("/_shard.json")})
    assert committed == ["shard-000000"] and name not in s3.objects()
    summary = jobs.run(config)
    # Shard 0, and the 5 rows of shard 1's first 3 batches, resumed from its attempt (a/bad.png is the sixth image
    # of those batches: its failure is the attempt's too).
    assert (summary.written, summary.failed, summary.already_done) == (10, 1, 13)
    files = store_outputs(s3, name)
    assert files == single_outputs[output_format]
    assert_each_image_once(files, output_format, image_paths(job_images))


@pytest.mark.parametrize("output_format", ["csv", "npy"])
def test_a_tar_job_killed_mid_shard_keeps_its_rows_and_the_rerun_is_exact(job_images, tmp_path, monkeypatch,
                                                                            output_format):
    tars = write_tars(job_images, tmp_path / "tars", 8)  # 24 images: a tar of 8 a shard, a/bad.png in the second
    monkeypatch.setattr(identity, "TAR_SHARD_BYTES", 1)
    single, output = tmp_path / ("single." + output_format), tmp_path / ("out." + output_format)
    jobs.run(job_child.config(tuple(map(str, tars)), single, output_format))
    config = job_child.config(tuple(map(str, tars)), output, output_format)
    with monkeypatch.context() as patch:  # killed in shard 1, two of its four batches handed to the writer
        patch.setattr(distributed, "StopRequest", lambda: KillAfter(6))
        with pytest.raises(Killed):
            jobs.run(config)
    job = ShardedJob(output)
    assert [index for index in range(3) if (job.shard_folder(index) / "_shard.json").exists()] == [0]
    summary = jobs.run(config)
    # Shard 0, and the 4 members of shard 1's two batches committed in its attempt: read past, not computed.
    assert (summary.written, summary.failed, summary.already_done) == (11, 1, 12)
    assert job_outputs(output) == job_outputs(single)
    suffix = ".members.parquet"  # the index of every member's bytes in its tar
    assert (tmp_path / (output.name + suffix)).read_bytes() == (tmp_path / (single.name + suffix)).read_bytes()
    names = image_paths(job_images)
    keys = [member_key(name, str(tars[position // 8])) for position, name in enumerate(names)]
    assert_each_image_once(job_outputs(output), output_format, keys)


def _disk_fills_while_appending(patch, shard, free_bytes):
    """The disk fills while `shard` (its folder's name) is appended to the output: from then on the thread that
    appends it has `free_bytes` left for os.write, and a write that does not fit writes what fits, then fails
    with ENOSPC (as tests/faults.SimulatedDisk's); the devices' thread goes on writing its attempt meanwhile."""
    free, real_write, real_copy = {}, os.write, assembly._copy_rows

    def write(descriptor, data):
        left = free.get(threading.get_ident())
        if left is None:
            return real_write(descriptor, data)
        if left <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written = real_write(descriptor, memoryview(data).cast("B")[:left])
        free[threading.get_ident()] = left - written
        return written

    def copy_rows(features, writer, column_prefix):
        if shard in str(features):
            free[threading.get_ident()] = free_bytes
        return real_copy(features, writer, column_prefix)

    patch.setattr(os, "write", write)
    patch.setattr(assembly, "_copy_rows", copy_rows)


# What the appending thread may still write once shard 3's rows start: its first row and that row's commit record
# (csv 65 + 272 bytes; npy a part of 128 + 24, and 271), then part of the second row (checked: 13 rows in O).
FREE_BYTES = {"csv": 370, "npy": 480}


@pytest.mark.parametrize("output_format", ["csv", "npy"])  # their writers write through os.write; pyarrow does not
def test_a_full_disk_while_the_background_assembly_appends_a_shard_then_a_rerun_is_exact(
        job_images, single_outputs, tmp_path, small_shards, monkeypatch, output_format):
    output = tmp_path / ("out." + output_format)
    config = job_child.config(job_images, output, output_format)
    with monkeypatch.context() as patch:
        patch.setattr(assembly, "_BATCH_ROWS", 1)  # a write a row, so that the disk fills between two of a shard's
        _disk_fills_while_appending(patch, "shard-000003", FREE_BYTES[output_format])
        with pytest.raises(engine.RunError, match=r"^disk full while writing \S*out\.%s" % output_format):
            jobs.run(config)
    assert read_record(output)["rows"] == 13  # shards 0 to 2 in it, and the first of shard 3's 3 rows
    job = ShardedJob(output)
    assert sorted(job.ledger().shards()) == [0, 1, 2] and job.shard_folder(3).is_dir()
    # The error is raised once shard 4 is committed, or at once if the catch-up of shard 2 took shard 3 along.
    committed = [index for index in range(6) if index < 3 or job.is_committed(index)]
    assert committed in ([0, 1, 2, 3], [0, 1, 2, 3, 4])
    summary = jobs.run(config)
    assert (summary.written + summary.already_done, summary.failed) == (23, 1)
    assert summary.written == 4 * (6 - len(committed))  # the shards left, of 4 images that read each
    assert job_outputs(output) == single_outputs[output_format]
    assert_each_image_once(job_outputs(output), output_format, image_paths(job_images))
    assert not job.shards.exists() and not job.attempts.exists()
