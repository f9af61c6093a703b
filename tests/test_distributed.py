"""One job over several processes (static ranks): the output is byte-identical to a single-host run's,
whatever the kills, the reruns and the number of processes."""

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from PIL import Image

import job_child
from colour_jobs import config_for, make_images
from hangs import HANG_SECONDS
from outputs import job_outputs as outputs
from parallel import engine, jobs
from parallel.jobs import locks
from parallel.jobs.identity import job_record
from parallel.jobs.shards import ShardedJob

FORMATS = ("csv", "parquet", "npy")


def start_child(zygote, job_images, output, output_format, *flags, env=None, step_seconds=None):
    """tests/job_child.py in a process of its own (a rank), forked from `zygote` (the session's job_child_zygote:
    tests/forked_children.py, TensorFlow imported once), once it has begun its first step if `step_seconds` is
    given (its steps that long: a process that computes while the test does something else). It exits as the
    command line does (exit_now: without TensorFlow's teardown, which only delays the status)."""
    from forked_children import as_exec_leaves_sigint
    marker = Path(str(output) + ".steps")
    if step_seconds is not None:
        marker.write_text("")
        flags += ("--step-seconds", str(step_seconds), "--marker", str(marker))
    launch = ("import sys; sys.path.insert(0, %r); import job_child; from parallel.signals import exit_now; "
              "exit_now(job_child.main())" % str(Path(job_child.__file__).parent))
    child = zygote.spawn(["-c", launch, job_images, output, output_format, *flags], stderr=subprocess.PIPE, env=env,
                         sigint=as_exec_leaves_sigint())
    if step_seconds is not None:
        wait_for_steps(child, marker, 1)
    return child


def wait_for_steps(child, marker, steps):
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while marker.read_text().count("step") < steps:
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.05)


def static(rank, world_size, shard_size=5, keep_shards=False):
    return jobs.Distribution(kind="static", rank=rank, world_size=world_size, shard_size=shard_size,
                               keep_shards=keep_shards, wait_seconds=5)


def run_rank(job_images, output, output_format, rank, world_size, **options):
    return jobs.run(job_child.config(job_images, output, output_format, static(rank, world_size, **options)))


def slow_rank(zygote, job_images, output, output_format, rank, world_size, steps):
    """A rank in a process of its own (shards of 5, steps of 0.5 s), once it has begun its `steps`-th step."""
    child = start_child(zygote, job_images, output, output_format, "--distributed", "static", "--rank", str(rank),
                        "--world-size", str(world_size), "--shard-size", "5", step_seconds=0.5)
    wait_for_steps(child, Path(str(output) + ".steps"), steps)
    return child


@pytest.mark.parametrize("output_format", FORMATS)
def test_ranks_one_after_another_give_the_single_host_output(job_images, single_outputs, tmp_path, output_format):
    output = tmp_path / ("out." + output_format)
    first = run_rank(job_images, output, output_format, 0, 3)
    assert first.pending_shards == (1, 2, 4) and not output.exists()  # shards 0 and 3 are rank 0's
    assert "3 shards to come from other processes (1, 2, 4)" in first.line()
    run_rank(job_images, output, output_format, 1, 3)
    last = run_rank(job_images, output, output_format, 2, 3)
    assert last.pending_shards == () and (last.discovered, last.written, last.failed) == (5, 4, 1)
    assert outputs(output) == single_outputs[output_format]
    assert not ShardedJob(output).attempts.exists()
    assert not ShardedJob(output).shards.exists()  # a/bad.png is retried in the output itself: no shard stays
    again = run_rank(job_images, output, output_format, 1, 3)  # any rank's rerun retries the failed image
    assert (again.written, again.already_done, again.failed) == (0, 23, 1)
    assert outputs(output) == single_outputs[output_format]


def test_a_parquet_output_of_many_row_groups_is_the_single_host_one(job_images, tmp_path, monkeypatch):
    from parallel.output import parts_writer
    monkeypatch.setattr(parts_writer, "_ROW_GROUP_BYTES", 4 * 4 * 6)  # row groups of 4 rows: 6 of them
    single = tmp_path / "single.parquet"
    jobs.run(job_child.config(job_images, single, "parquet", per_device_batch=3))
    sharded = tmp_path / "sharded.parquet"
    for rank in range(2):
        run_rank(job_images, sharded, "parquet", rank, 2)
    assert __import__("pyarrow.parquet", fromlist=["ParquetFile"]).ParquetFile(sharded).num_row_groups == 6
    assert sharded.read_bytes() == single.read_bytes()


def test_the_default_shards_start_where_a_single_process_s_steps_start(job_images, tmp_path, caplog, monkeypatch):
    """A model whose rows depend on how many images share a step (as oneDNN's and cuDNN's may, in their
    last bits) still gives the single-process bytes: the default shard size is a multiple of the step, and
    shards of another size compute the steps they straddle whole (at a cost, said in a warning)."""
    from parallel.inputs.manifest import read_job
    from parallel.jobs import identity
    monkeypatch.setattr(identity, "DEFAULT_SHARD_SIZE", 10)  # several shards of 24 images

    def run(output, distribution=None):
        return jobs.run(job_child.config(job_images, output, "csv", distribution, devices="cpu:0,cpu:1",
                                           per_device_batch=3, batch_dependent=True))  # 6 images a step
    run(tmp_path / "single.csv")
    for rank in range(2):
        run(tmp_path / "sharded.csv", jobs.Distribution(kind="static", rank=rank, world_size=2))
    assert read_job(str(tmp_path / "sharded.csv") + ".manifest.parquet")["shard_size"] == 6
    assert (tmp_path / "sharded.csv").read_bytes() == (tmp_path / "single.csv").read_bytes()
    with caplog.at_level("WARNING", logger="parallel"):  # shards of 5: steps straddle shards, and it is said
        for rank in range(2):
            run(tmp_path / "unaligned.csv", static(rank, 2, shard_size=5))
    assert "shards of 5 images are not a multiple of the 6 images of a step" in caplog.text
    assert (tmp_path / "unaligned.csv").read_bytes() == (tmp_path / "single.csv").read_bytes()


def test_a_rank_killed_mid_shard_then_rerun_loses_nothing(job_images, single_outputs, tmp_path, job_child_zygote):
    output = tmp_path / "out.parquet"
    # Shard 1 committed, shard 3 under way.
    slow = slow_rank(job_child_zygote, job_images, output, "parquet", 1, 2, steps=4)
    job = ShardedJob(output)
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while not attempt_rows(job):  # a batch of shard 3 committed in its attempt
        assert slow.poll() is None and time.monotonic() < deadline, slow.communicate()
        time.sleep(0.02)
    slow.send_signal(signal.SIGKILL)
    slow.wait()
    kept = attempt_rows(job)  # the attempt may have committed another batch meanwhile
    assert job.is_committed(1) and not job.is_committed(3) and 0 < kept < 5
    run_rank(job_images, output, "parquet", 0, 2)
    assert not output.exists()  # shard 3 is missing
    rerun = run_rank(job_images, output, "parquet", 1, 2)
    assert (rerun.already_done, rerun.written) == (5 + kept, 5 - kept)  # shard 1 kept, shard 3 resumed
    assert outputs(output) == single_outputs["parquet"]
    assert not job.attempts.exists()


def attempt_rows(job):
    """Rows committed in the attempts of `job` now (their writers' records)."""
    from parallel.output import read_record
    records = [read_record(folder / "features.parquet") for folder in job.attempts.glob("shard-*")]
    return sum(record["rows"] for record in records if record is not None)


def test_a_job_resumes_on_another_number_of_processes(job_images, single_outputs, tmp_path):
    output = tmp_path / "out.npy"
    run_rank(job_images, output, "npy", 0, 3)  # shards 0 and 3; then the job moves to 2 processes
    first = run_rank(job_images, output, "npy", 0, 2)  # shards 0, 2, 4: 0 is done
    assert (first.already_done, first.pending_shards) == (5, (1,))
    run_rank(job_images, output, "npy", 1, 2)  # shards 1, 3: 3 is done
    assert outputs(output) == single_outputs["npy"]


def test_ranks_from_slurm_variables_at_once_one_of_them_twice_give_one_correct_part(job_images, single_outputs,
                                                                                     tmp_path, monkeypatch, caplog,
                                                                                     job_child_zygote):
    """Rank 1 in a process of its own (shards 1 and 4 in steps of 0.2 s); in this one while it computes, rank 1 again
    (the same shards at once), then ranks 0 and 2: each takes its rank and the world size from Slurm's variables.
    Then a late duplicate attempt: one correct part each time."""
    output = tmp_path / "out.csv"
    child = start_child(job_child_zygote, job_images, output, "csv", "--distributed", "static", "--shard-size", "5",
                        "--keep-shards",
                        env=dict(os.environ, SLURM_PROCID="1", SLURM_NTASKS="3"), step_seconds=0.2)
    statuses = {}
    monkeypatch.setenv("SLURM_NTASKS", "3")
    with caplog.at_level("INFO", logger="parallel"):
        for rank in (1, 0, 2):
            monkeypatch.setenv("SLURM_PROCID", str(rank))
            distribution = jobs.Distribution(kind="static", shard_size=5, keep_shards=True, wait_seconds=5)
            statuses[rank] = jobs.run(job_child.config(job_images, output, "csv", distribution)).exit_status
    log = child.communicate(timeout=HANG_SECONDS)[1]
    assert (statuses, child.returncode) == ({1: 0, 0: 0, 2: 3}, 0), log  # rank 2's shard holds the bad image
    assert "rank 1 of 3 (from Slurm (SLURM_PROCID, SLURM_NTASKS))" in log
    assert [line.split(":")[0] for line in caplog.messages if "(from Slurm (SLURM_PROCID, SLURM_NTASKS))" in line] \
        == ["rank %d of 3 (from Slurm (SLURM_PROCID, SLURM_NTASKS))" % rank for rank in (1, 0, 2)]
    assert outputs(output) == single_outputs["csv"]
    job = ShardedJob(output)
    job.freeze(job_record(job_child.config(job_images, output, "csv", static(0, 1))), None)
    attempt = job.new_attempt(2)  # a retried task, late: shard 2 is committed already
    (attempt / "features.parquet").write_bytes(b"a duplicate")
    before = (job.shard_folder(2) / "features.parquet").read_bytes()
    assert job.commit(2, attempt, attempt / "none.csv") is False
    assert (job.shard_folder(2) / "features.parquet").read_bytes() == before and not attempt.exists()


def test_a_stray_tf_config_without_distributed_changes_nothing(job_images, single_outputs, tmp_path, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}')
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    output = tmp_path / "out.csv"
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)  # anyone's wait in this process, recorded instead of slept
    summary = jobs.run(job_child.config(job_images, output, "csv"))
    assert (summary.written, summary.pending_shards) == (23, ())
    assert waits == []  # never waited for workers (nor for a manifest another process writes)
    assert outputs(output) == single_outputs["csv"]
    assert not ShardedJob(output).shards.exists()


def test_ranks_never_disagree_about_the_job(job_images, tmp_path):
    output = tmp_path / "out.csv"
    run_rank(job_images, output, "csv", 0, 2)
    # --distributed refuses --overwrite: the refusals name what works instead.
    remove = "remove %s and every out.csv.* beside it" % output
    with pytest.raises(ValueError, match="was written with other settings \\(format='csv', not 'parquet'") as refused:
        run_rank(job_images, output, "parquet", 1, 2)
    assert str(refused.value).endswith(": %s to start afresh or choose another --output" % remove)
    with pytest.raises(ValueError, match="cut into shards of 5 images, not 7") as refused:
        run_rank(job_images, output, "csv", 1, 2, shard_size=7)
    assert str(refused.value).endswith(": leave --shard-size out, or %s" % remove)
    summary = jobs.run(job_child.config(job_images, output, "csv"))  # one process finishes it: the same job
    assert (summary.discovered, summary.written, summary.already_done + summary.failed) == (24, 10, 14)
    assert summary.pending_shards == () and not ShardedJob(output).shards.exists()
    summary = jobs.run(dataclasses.replace(job_child.config(job_images, output, "csv"), overwrite=True))
    assert summary.written == 23 and not ShardedJob(output).shards.exists()  # --overwrite: a job of its own


@pytest.mark.parametrize("options, message", [
    (dict(per_device_batch=3), "per_device_batch=2, this process 3 \\(--batch-size\\)"),
    (dict(devices="cpu:0,cpu:1"), "devices=1, this process 2"),
])
def test_a_rank_with_another_step_geometry_is_refused_naming_it(job_images, tmp_path, options, message):
    """Ranks computing other numbers of images per device per step would give rows that differ in float
    rounding: refused with one line naming the setting and both values, before anything is written."""
    output = tmp_path / "out.csv"
    run_rank(job_images, output, "csv", 0, 2)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ValueError, match="is computed with another step geometry than this process's \\(" + message):
        jobs.run(job_child.config(job_images, output, "csv", static(1, 2), **options))
    assert sorted(os.listdir(tmp_path)) == before


def test_a_worker_that_sees_other_devices_than_the_job_s_is_refused(job_images, tmp_path):
    """A Ray actor whose devices differ from the job's (it fell back to another count) computes nothing."""
    from parallel.devices import resolve_devices
    from parallel.jobs.worker import ShardWorker
    from parallel.jobs.identity import freeze_sharded as freeze
    config = job_child.config(job_images, tmp_path / "out.csv", "csv", static(0, 1))
    job = freeze(config, check_folder=False)
    with pytest.raises(ValueError, match="another step geometry than this worker's \\(devices=1, this process 2"):
        ShardWorker(config, job, devices=resolve_devices(devices="cpu:0,cpu:1", gpu_count=0))


def test_a_rank_waits_for_the_manifest_then_fails_clearly(job_images, tmp_path):
    output = tmp_path / "out.csv"
    distribution = jobs.Distribution(kind="static", rank=0, world_size=1, wait_seconds=0.5)
    with locks.exclusive(Path(str(output) + ".manifest.parquet.lock")):
        with pytest.raises(ValueError, match="another process has been writing .*manifest.parquet for 0 s"):
            jobs.run(job_child.config(job_images, output, "csv", distribution))


def test_a_second_single_host_run_on_the_same_output_is_refused(job_images, tmp_path):
    output = tmp_path / "out.csv"
    with locks.exclusive(Path(str(output) + ".lock")):
        with pytest.raises(ValueError, match="another run is writing .*out.csv now"):
            jobs.run(job_child.config(job_images, output, "csv"))


def test_overwrite_removes_nothing_while_another_run_writes_the_output(job_images, tmp_path):
    """The lock comes first: --overwrite removes a job's files only once no other run can be writing them."""
    output = tmp_path / "out.csv"
    jobs.run(job_child.config(job_images, output, "csv"))
    def files():
        return {path.name: path.read_bytes() for path in tmp_path.iterdir() if path.suffix != ".lock"}

    before = files()
    with locks.exclusive(Path(str(output) + ".lock")):
        with pytest.raises(ValueError, match="another run is writing .*out.csv now"):
            jobs.run(dataclasses.replace(job_child.config(job_images, output, "csv"), overwrite=True))
        assert files() == before and len(before) == 5  # the output, its errors, record, manifest, ledger


def test_an_image_list_file_gives_the_folder_s_output(job_images, single_outputs, tmp_path):
    listing = tmp_path / "list.txt"
    names = sorted(str(path.relative_to(job_images)) for path in job_images.rglob("*.png"))
    listing.write_text("# my images\n" + "\n".join(reversed(names)) + "\n\n")
    output = tmp_path / "out.csv"
    summary = jobs.run(job_child.config(job_images, output, "csv", images_from=listing))
    assert (summary.written, summary.failed) == (23, 1)
    assert outputs(output) == single_outputs["csv"]


def test_kept_shards_read_as_a_parquet_folder_and_a_single_host_rerun_retries_failures(job_images, tmp_path):
    import pandas as pd
    import polars as pl
    root = tmp_path / "images"
    shutil.copytree(job_images, root)
    output = tmp_path / "out.csv"
    for rank in range(2):
        run_rank(root, output, "csv", rank, 2, keep_shards=True)
    shards = ShardedJob(output).shards
    frame = pd.read_parquet(shards)  # _errors.csv files are skipped
    assert len(frame) == 23 and sorted(frame["path"]) == sorted(frame["path"].unique())
    assert pl.read_parquet(str(shards / "*" / "features.parquet"))["colour"].to_numpy().shape == (23, 6)
    Image.new("RGB", (12, 10), (1, 2, 3)).save(root / "a" / "bad.png")  # repaired
    summary = jobs.run(job_child.config(root, output, "csv"))
    assert (summary.written, summary.failed, summary.already_done) == (1, 0, 23)
    paths = [line.split(",")[0] for line in output.read_text().splitlines()[1:]]
    assert len(paths) == 24 and paths == sorted(paths)


@pytest.mark.parametrize("message, advice", [
    ("x changed since the job writing o started: 1 image added (a.png). Pass --overwrite to start afresh, or "
     "choose another --output", "Remove o and every o.* beside it to start afresh, or choose another --output"),
    ("o was written with other settings (layer): pass --overwrite to replace it or choose another --output",
     "remove o and every o.* beside it to start afresh or choose another --output"),
    ("o.parts holds x, which this program did not write: move it away or pass --overwrite",
     "move it away or remove o and every o.* beside it"),
    ("o: another phrasing of --overwrite", "another phrasing of removing o and every o.* beside it"),
    ("o is damaged: pass overwrite=True to start afresh", "remove o and every o.* beside it to start afresh"),
])
def test_distributed_advice_never_advises_overwrite(message, advice):
    from parallel.jobs.distributed import distributed_advice
    assert distributed_advice(message, Path("o")).endswith(advice)


@pytest.mark.parametrize("kind", ["folder", "foreign file"])
def test_an_output_the_job_could_never_write_is_refused_before_anything_is_written(job_images, tmp_path, kind):
    output = tmp_path / "out.csv"
    if kind == "folder":
        output.mkdir()
    else:
        output.write_text("someone's notes")
    with pytest.raises(ValueError, match="is a folder; give a file name" if kind == "folder"
                       else "exists and was not written by this program .*: choose another output$"):
        run_rank(job_images, output, "csv", 0, 1)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.csv"]


def test_a_sigtermed_rank_keeps_the_rows_of_its_shard_under_way_and_the_rerun_resumes_them(job_images, single_outputs,
                                                                                          tmp_path, job_child_zygote):
    """The attempt under way when SIGTERM comes keeps the batches its writer committed: they count as
    written, and the rerun resumes the attempt after them (a stop costs at most a batch, not a shard)."""
    output = tmp_path / "out.csv"
    # Shard 0 (3 steps) committed, shard 1 under way.
    child = slow_rank(job_child_zygote, job_images, output, "csv", 0, 1, steps=4)
    child.send_signal(signal.SIGTERM)
    log = child.communicate(timeout=HANG_SECONDS)[1]
    job = ShardedJob(output)
    committed = [index for index in range(5) if job.is_committed(index)]
    assert child.returncode == 130 and committed and len(committed) < 5, log
    written = int(re.search(r"24 images: ([0-9]+) written, 0 failed, 0 already done", log).group(1))
    assert written > 5 * len(committed), log  # rows of the shard under way among them
    rerun = run_rank(job_images, output, "csv", 0, 1)
    assert (rerun.already_done, rerun.written + rerun.failed) == (written, 24 - written)
    assert outputs(output) == single_outputs["csv"]


# --- a changing folder and damaged files: the job always finishes, and never with an image lost ---------------


def copy_images(job_images, tmp_path):
    root = tmp_path / "images"
    shutil.copytree(job_images, root)
    return root


def single_run(root, tmp_path, output_format="csv"):
    """outputs() of a single process's run over `root` as it is now."""
    output = tmp_path / "single" / ("out." + output_format)
    jobs.run(job_child.config(root, output, output_format))
    return outputs(output)


def test_an_image_removed_before_its_shard_runs_never_blocks_the_job(job_images, tmp_path, caplog):
    """Rank 1 finds a/12.png (shard 1) gone: it fails as missing, and every later run finishes the job."""
    root = copy_images(job_images, tmp_path)
    output = tmp_path / "out.csv"
    run_rank(root, output, "csv", 2, 3)  # freezes the manifest
    (root / "a" / "12.png").unlink()
    assert run_rank(root, output, "csv", 1, 3).failed == 1  # shard 1: a/12.png missing; shard 4
    with caplog.at_level("WARNING", logger="parallel"):
        last = run_rank(root, output, "csv", 0, 3)  # rank 0 checks the folder: a/12.png has no row
    assert "1 images changed or were removed since the job started; none has a row yet" in caplog.text
    assert last.pending_shards == () and output.exists()
    errors = outputs(output)[".errors.csv"].decode()
    assert "a/12.png,missing," in errors and "a/bad.png," in errors
    assert outputs(output)[""] == single_run(root, tmp_path)[""]
    for world_size in (3, 1):  # and every rerun, on any number of processes
        assert run_rank(root, output, "csv", 0, world_size).pending_shards == ()


def test_an_image_changed_after_its_row_was_written_names_the_shard_to_recompute(job_images, tmp_path):
    root = copy_images(job_images, tmp_path)
    output = tmp_path / "out.csv"
    run_rank(root, output, "csv", 1, 3)  # shards 1 and 4
    Image.new("RGB", (12, 10), (1, 2, 3)).save(root / "a" / "12.png")  # shard 1, which has its row
    job = ShardedJob(output)
    with pytest.raises(ValueError, match="1 image changed after its row was written \\(a/12.png\\). Remove "
                                         "%s and rerun to recompute it; or choose another --output$"
                                         % job.shard_folder(1)) as refusal:
        run_rank(root, output, "csv", 0, 3)
    assert "--overwrite" not in str(refusal.value)
    shutil.rmtree(job.shard_folder(1))
    for rank in range(3):
        run_rank(root, output, "csv", rank, 3)
    assert outputs(output) == single_run(root, tmp_path)


def test_a_manifest_made_anew_over_the_shards_of_the_old_one_loses_no_image(job_images, tmp_path):
    """The manifest deleted, an image added, the same command rerun: the shards whose images moved are redone."""
    root = copy_images(job_images, tmp_path)
    output = tmp_path / "out.csv"
    for rank in (0, 1):
        run_rank(root, output, "csv", rank, 3)  # shards 0, 3 and 1, 4
    ShardedJob(output).manifest.unlink()
    Image.new("RGB", (12, 10), (9, 8, 7)).save(root / "b" / "00.png")  # shard 2 onwards move by one image
    for rank in (2, 0, 1):
        run_rank(root, output, "csv", rank, 3)
    summary = run_rank(root, output, "csv", 0, 1)
    assert summary.pending_shards == () and (summary.already_done, summary.failed) == (24, 1)
    assert outputs(output) == single_run(root, tmp_path)


def test_a_shard_whose_features_were_replaced_by_another_s_is_recomputed(job_images, single_outputs, tmp_path):
    output = tmp_path / "out.parquet"
    for rank in (0, 1):
        run_rank(job_images, output, "parquet", rank, 3)
    job = ShardedJob(output)
    shutil.copy(job.shard_folder(3) / "features.parquet", job.shard_folder(1) / "features.parquet")  # 5 rows each
    last = run_rank(job_images, output, "parquet", 2, 3)  # finds shard 1 changed (its size) and sets it aside
    assert last.pending_shards == (1,) and not output.exists()
    assert list(job.shards.glob("_rejected-shard-000001.*"))
    assert run_rank(job_images, output, "parquet", 1, 3).pending_shards == ()  # shard 1 recomputed
    assert outputs(output) == single_outputs["parquet"]


def test_one_flipped_byte_in_the_manifest_is_refused_with_the_way_out(job_images, single_outputs, tmp_path):
    from test_inputs_manifest import flip_a_byte, rewrite
    output = tmp_path / "out.npy"
    for rank in (0, 1):
        run_rank(job_images, output, "npy", rank, 3)
    job = ShardedJob(output)
    rewrite(job.manifest, change_paths=flip_a_byte)  # a/08.png becomes a`08.png
    damaged = "manifest.parquet is damaged \\(checksum\\): remove it and rerun: it is made anew from the images"
    with pytest.raises(ValueError, match=damaged):  # rank 0 checks the whole list before it starts
        run_rank(job_images, output, "npy", 0, 3)
    with pytest.raises(engine.RunError, match=damaged + ", and the rows of images that did not change are "
                                                        "kept$"):  # rank 2 computes its own shard, checked alone
        run_rank(job_images, output, "npy", 2, 3)
    assert not output.exists()
    job.manifest.unlink()
    assert run_rank(job_images, output, "npy", 2, 3).pending_shards == ()  # every shard still matches
    assert outputs(output) == single_outputs["npy"]


def test_an_emptied_errors_file_of_a_shard_loses_no_failed_image(job_images, single_outputs, tmp_path):
    output = tmp_path / "out.csv"
    for rank in (1, 2):
        run_rank(job_images, output, "csv", rank, 3)  # shard 2 holds a/bad.png
    job = ShardedJob(output)
    (job.shard_folder(2) / "_errors.csv").write_bytes(b"")
    assert run_rank(job_images, output, "csv", 0, 3).pending_shards == (2,)  # set aside, not assembled
    assert (job.shards / "_rejected-shard-000002.1").is_dir() and not output.exists()
    assert run_rank(job_images, output, "csv", 2, 3).pending_shards == ()
    assert outputs(output) == single_outputs["csv"]


def test_a_full_disk_inside_a_shard_is_a_run_error_and_a_rerun_finishes(tmp_path, monkeypatch):
    import errno

    from parallel.output.parquet_writer import ParquetWriter
    images = tmp_path / "images"
    make_images(images, 4)
    distribution = jobs.Distribution(kind="static", rank=0, world_size=1, shard_size=2, wait_seconds=5)
    config = config_for(tmp_path, images, distribution=distribution)

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with monkeypatch.context() as patch:
        patch.setattr(ParquetWriter, "_finish", full)  # a shard's merge of its parts fills the disk
        with pytest.raises(engine.RunError, match="^disk full while writing .*shard-000000.*features.parquet: "
                                                  "[0-9]+ rows committed, rerun to resume$"):
            jobs.run(config)
    summary = jobs.run(config)  # shard 0's attempt is resumed: its rows were committed before the merge failed
    assert (summary.written, summary.already_done, summary.pending_shards) == (2, 2, ())
