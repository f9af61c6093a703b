"""The output written from the shards in order: one process writes it as it goes, a shard at a time, and
removes each shard once its rows are in it; a kill at any step leaves a state the rerun completes."""

import shutil
import threading
import types

import pytest
from PIL import Image

import job_child
from colour_jobs import Killed, StopAfter
from outputs import job_outputs
from parallel import jobs
from parallel.jobs import assembly, distributed, identity
from parallel.jobs.shard_record import SHARD_FEATURES
from parallel.jobs.shards import ShardedJob

FORMATS = ["csv", "parquet", "npy"]


@pytest.fixture
def small_shards(monkeypatch):
    """A job of one process cut into shards of 4 images (2 steps of 2): job_images' 24 are 6 shards, the
    fourth holding a/bad.png."""
    monkeypatch.setattr(identity, "DEFAULT_SHARD_SIZE", 4)


@pytest.mark.parametrize("output_format", FORMATS)
def test_one_process_writes_the_output_shard_by_shard_removing_each(job_images, single_outputs, tmp_path,
                                                                    small_shards, monkeypatch, output_format):
    output = tmp_path / ("out." + output_format)
    seen, threads = [], set()
    real_append = assembly.Assembly._append

    def append(self, index):
        real_append(self, index)
        job = ShardedJob(output)
        kept = [path.name for path in job.shards.glob("shard-*") if path.name <= "shard-%06d" % index]
        seen.append((index, self._writer.rows_committed, kept))  # later shards may be committed meanwhile
        threads.add(threading.current_thread().name)

    monkeypatch.setattr(assembly.Assembly, "_append", append)
    summary = jobs.run(job_child.config(job_images, output, output_format))
    assert (summary.written, summary.failed, summary.already_done) == (23, 1, 0)
    # Each shard goes into the output as soon as it is committed, then goes: no second copy of the rows.
    assert seen == [(0, 4, []), (1, 8, []), (2, 12, []), (3, 15, []), (4, 19, []), (5, 23, [])]
    assert threads == {"assembly"}  # beside the devices: each while the next shard is computed
    assert job_outputs(output) == single_outputs[output_format]
    assert not ShardedJob(output).shards.exists() and not ShardedJob(output).attempts.exists()


def _kill_at(monkeypatch, moment):
    """Kills the run at `moment` of appending shard 3 (the one with a failed image) to the output."""
    def on_shard_three(real, test):
        def wrapped(*args, **kwargs):
            result = real(*args, **kwargs)
            if test(args):
                raise Killed(moment)
            return result
        return wrapped

    if moment == "rows appended":
        monkeypatch.setattr(assembly, "_copy_rows", on_shard_three(assembly._copy_rows,
                                                                 lambda args: "shard-000003" in str(args[0])))
    elif moment == "errors appended":
        monkeypatch.setattr(assembly, "_append_errors", on_shard_three(assembly._append_errors, lambda args: args[2]))
    elif moment == "record written":
        monkeypatch.setattr(assembly, "replace_atomically", on_shard_three(
            assembly.replace_atomically, lambda args: b'"shards": 4' in args[1]))
    else:  # the shard removed: the next step would be shard 4
        monkeypatch.setattr(assembly, "shutil", types.SimpleNamespace(rmtree=on_shard_three(
            shutil.rmtree, lambda args: "shard-000003" in str(args[0]))))


@pytest.mark.parametrize("moment", ["rows appended", "errors appended", "record written", "shard removed"])
@pytest.mark.parametrize("output_format", ["csv", "npy"])
def test_a_kill_at_each_step_of_a_shard_s_append_then_a_rerun_gives_the_uninterrupted_output(
        job_images, single_outputs, tmp_path, small_shards, monkeypatch, moment, output_format):
    output = tmp_path / ("out." + output_format)
    with monkeypatch.context() as patch:
        _kill_at(patch, moment)
        with pytest.raises(Killed):
            jobs.run(job_child.config(job_images, output, output_format))
    # Shard 3 is appended in the background while shard 4 is computed: the kill is raised once shard 4 is
    # committed, or at once if the catch-up of shard 2 took shard 3 along before shard 4 was computed.
    job = ShardedJob(output)
    committed = [index for index in range(6) if job.is_committed(index)]
    assert committed in ([0, 1, 2, 3], [0, 1, 2, 3, 4])
    summary = jobs.run(job_child.config(job_images, output, output_format))
    assert (summary.written + summary.already_done, summary.failed) == (23, 1)
    assert summary.written == 4 * (6 - len(committed))  # the shards left, of 4 images that read each
    assert job_outputs(output) == single_outputs[output_format]
    assert not ShardedJob(output).shards.exists()


def test_a_committed_shard_that_does_not_check_out_at_its_turn_is_computed_again(
        job_images, single_outputs, tmp_path, small_shards, monkeypatch, caplog):
    output = tmp_path / "out.parquet"
    with monkeypatch.context() as patch:  # a run killed once shards 0 and 1 were committed, before they were in O
        patch.setattr(assembly.Assembly, "catch_up", lambda self: 0)
        patch.setattr(distributed, "StopRequest", lambda: StopAfter(5))
        assert jobs.run(job_child.config(job_images, output, "parquet")).interrupted
    features = ShardedJob(output).shard_folder(1) / SHARD_FEATURES
    data = bytearray(features.read_bytes())
    data[64] ^= 0x01  # one bit of a value: the file still reads, its SHA-256 is another
    features.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="parallel"):
        summary = jobs.run(job_child.config(job_images, output, "parquet"))
    assert "shard 1 of" in caplog.text and "computing shard 1 again now" in caplog.text
    assert (summary.written + summary.already_done, summary.failed) == (23, 1)
    assert job_outputs(output) == single_outputs["parquet"]


def test_an_image_that_failed_in_a_shard_already_in_the_output_is_retried_once_the_output_is_written(
        job_images, tmp_path, small_shards, monkeypatch):
    root = tmp_path / "images"
    shutil.copytree(job_images, root)
    output = tmp_path / "out.csv"
    with monkeypatch.context() as patch:  # stopped in shard 4: shard 3, with a/bad.png, is in the output
        patch.setattr(distributed, "StopRequest", lambda: StopAfter(9))
        stopped = jobs.run(job_child.config(root, output, "csv"))
    assert stopped.interrupted and stopped.failed == 1 and output.exists()
    Image.new("RGB", (12, 10), (1, 2, 3)).save(root / "a" / "bad.png")  # repaired
    summary = jobs.run(job_child.config(root, output, "csv"))
    assert (summary.written + summary.already_done, summary.failed) == (24, 0)
    clean = tmp_path / "clean.csv"
    jobs.run(job_child.config(root, clean, "csv"))
    assert job_outputs(output) == job_outputs(clean)
