"""A committed shard checks out against the manifest, or is set aside: parallel.jobs.shards and parallel.jobs.shard_record,
on hand-made shards (no engine)."""

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parallel.inputs.manifest import Manifest
from parallel.jobs.shard_record import (SHARD_ERRORS, SHARD_FEATURES, SHARD_RECORD, content_problem, job_identity,
                                        quick_problem, set_aside)
from parallel.jobs.shards import ShardedJob

PATHS = ["a.png", "b.png", "c.png", "d.png", "e.png", "f\udce9.png", "g.png"]  # shards of 3: abc def g
JOB = {"model": "colour", "format": "csv"}


def write_features(path, paths):
    """A shard's features.parquet as the engine writes it: path, path_bytes, a feature list column."""
    raw = [name.encode("utf-8", "surrogateescape") for name in paths]
    table = pa.table({"path": [name.decode("utf-8", "replace") for name in raw],
                      "path_bytes": pa.array(raw, pa.binary()),
                      "colour": pa.array([[float(len(name))] * 2 for name in paths], pa.list_(pa.float32(), 2))})
    pq.write_table(table, path)


def write_errors(path, paths):
    path.write_text("path,kind,message\n" + "".join("%s,missing,gone\n" % name for name in paths), encoding="utf-8",
                    errors="surrogateescape")


@pytest.fixture
def job(tmp_path):
    """A frozen job of 7 images in shards of 3."""
    job = ShardedJob(tmp_path / "out.csv")
    job.freeze(JOB, lambda: Manifest(PATHS, [1] * 7, [10] * 7), shard_size=3)
    return job


def commit(job, index, failed=()):
    """Commits shard `index` as a worker would: its rows, and `failed` in its errors file."""
    attempt = job.new_attempt(index)
    paths = job.shard_images(index).paths
    write_features(attempt / SHARD_FEATURES, [path for path in paths if path not in failed])
    errors = attempt / "errors.csv"
    if failed:
        write_errors(errors, failed)
    return job.commit(index, attempt, errors)


def test_a_committed_shard_carries_its_record_and_checks_out(job):
    assert commit(job, 1, failed=["e.png"])
    record = json.loads((job.shard_folder(1) / SHARD_RECORD).read_text())
    files = record.pop("files")
    assert record == {"job": job.identity, "shard": 1, "images": job.shard_images(1).digest(), "rows": 2, "failed": 1}
    assert sorted(files) == ["_errors.csv", "features.parquet"] and all(len(file["sha256"]) == 64
                                                                      for file in files.values())
    assert quick_problem(job.shard_folder(1), job.identity, 1, job.shard_digest(1)) is None
    assert job.is_committed(1) and job.missing() == [0, 2]
    assert ShardedJob(job.output).is_committed(1)  # a job not frozen here reads what the manifest records


def test_an_attempt_that_is_not_its_shard_is_never_committed(job):
    attempt = job.new_attempt(0)
    write_features(attempt / SHARD_FEATURES, ["a.png", "c.png"])  # b.png neither written nor failed
    with pytest.raises(ValueError, match="shard 0 of .*out.csv was not committed: 1 of its images are in neither "
                                         "features.parquet nor _errors.csv \\(b.png first\\)"):
        job.commit(0, attempt, attempt / "errors.csv")
    assert not job.shard_folder(0).exists()


@pytest.mark.parametrize("damage, problem", [
    (lambda folder: (folder / SHARD_RECORD).unlink(), "it has no _shard.json"),
    (lambda folder: (folder / SHARD_RECORD).write_text("{"), "its _shard.json cannot be read"),
    (lambda folder: (folder / SHARD_ERRORS).write_text(""), "its _errors.csv is not the size its _shard.json records"),
    (lambda folder: write_features(folder / SHARD_FEATURES, ["d.png"]), "its features.parquet is not the size its _shard.json records"),
    (lambda folder: (folder / SHARD_FEATURES).unlink(), "its features.parquet is missing"),
])
def test_a_damaged_shard_is_set_aside_when_it_is_counted(job, caplog, damage, problem):
    commit(job, 1, failed=["e.png"])
    damage(job.shard_folder(1))
    with caplog.at_level("WARNING", logger="parallel"):
        assert job.missing() == [0, 1, 2]
    rejected = job.shards / "_rejected-shard-000001.1"
    assert rejected.is_dir() and not job.shard_folder(1).exists()
    assert "shard 1 of %s is set aside as %s, to be computed again: %s" % (job.output, rejected, problem) in caplog.text
    assert commit(job, 1, failed=["e.png"]) and job.is_committed(1)  # the rerun's copy takes its place


def test_a_shard_of_another_job_or_manifest_or_index_is_not_this_one(job):
    commit(job, 0)
    folder, digest = job.shard_folder(0), job.shard_digest(0)
    assert quick_problem(folder, "another", 0, digest) == ("it was computed for another job (another setting or "
                                                           "shard size)")
    assert quick_problem(folder, job.identity, 1, digest) == "its _shard.json says shard 0"
    assert quick_problem(folder, job.identity, 0, job.shard_digest(1)) == ("its images are not the manifest's (the "
                                                                           "manifest was made anew since)")


def test_the_job_s_identity_is_its_record_and_shard_size_not_its_images():
    recorded = {"job": JOB, "shard_size": 3, "images": 7}
    assert job_identity(recorded) == job_identity(dict(recorded, images=8, shards=["x"]))
    assert job_identity(recorded) != job_identity(dict(recorded, shard_size=4))
    assert job_identity(recorded) != job_identity(dict(recorded, job=dict(JOB, format="npy")))


def test_content_problem_requires_rows_and_errors_to_be_exactly_the_shard_s_images(tmp_path):
    features, errors = tmp_path / SHARD_FEATURES, tmp_path / SHARD_ERRORS
    shard = ["a.png", "b.png", "c.png"]

    def problem(rows, failed=None):
        write_features(features, rows)
        if failed is None:
            errors.unlink(missing_ok=True)
        else:
            write_errors(errors, failed)
        return content_problem(features, errors, shard)

    assert problem(shard) is None and problem(["a.png", "c.png"], ["b.png"]) is None
    assert problem(["b.png", "a.png", "c.png"]) == ("row 0 of features.parquet is b.png, not a.png: not in the "
                                                   "manifest's order")
    assert problem(["a.png", "c.png"], []) == ("1 of its images are in neither features.parquet nor _errors.csv "
                                               "(b.png first)")
    assert problem(shard + ["d.png"]) == "features.parquet holds d.png, not an image of this shard"
    assert problem(shard + ["a.png"]) == "features.parquet holds a row twice"
    assert problem(["a.png", "c.png"], ["b.png", "b.png"]) == "_errors.csv lists an image twice"
    assert problem(shard, ["z.png"]) == "_errors.csv holds z.png, not an image of this shard"
    assert problem(shard, ["b.png"]) == "b.png is both a row and a failure"


def test_the_assembly_sets_aside_every_shard_that_is_not_the_manifest_s_and_writes_nothing(job):
    from parallel.engine import RunError
    for index in range(3):
        commit(job, index)
    write_features(job.shard_folder(1) / SHARD_FEATURES, ["a.png", "b.png", "c.png"])  # shard 0's rows, same count
    record = json.loads((job.shard_folder(1) / SHARD_RECORD).read_text())
    del record["files"]  # as an earlier version wrote it: no sizes or digests, the rows' names still checked
    (job.shard_folder(1) / SHARD_RECORD).write_text(json.dumps(record))
    with pytest.raises(RunError, match="nothing was written to .*out.csv: 1 shard did not match the manifest and was "
                                       "set aside: shard 1 \\(features.parquet holds a.png, not an image of this "
                                       "shard\\), now .*_rejected-shard-000001.1. Rerun to recompute it"):
        job.assemble("csv", "colour", {"model": "colour"})
    assert not job.output.exists() and job.missing() == [1]
    commit(job, 1)
    assert job.assemble("csv", "colour", {"model": "colour"}, keep_shards=True)
    rows = job.output.read_text(encoding="utf-8", errors="surrogateescape").splitlines()[1:]
    assert [line.split(",")[0] for line in rows] == PATHS


def test_set_aside_takes_the_next_free_name_and_kept_shards_still_read_as_a_dataset(job):
    for index in range(3):
        commit(job, index)
    assert set_aside(job.shard_folder(2)).name == "_rejected-shard-000002.1"
    commit(job, 2)
    assert set_aside(job.shard_folder(2)).name == "_rejected-shard-000002.2"
    assert set_aside(job.shard_folder(2)) is None  # gone already
    commit(job, 2)
    frame = pd.read_parquet(job.shards)  # _shard.json, _errors.csv and _rejected-* are skipped
    assert len(frame) == 7


def dead_attempt(job, index, name, content=None):
    """An attempt at shard `index` left by a process that died (its lock free), holding `content` as its job."""
    from parallel.jobs.attempts import ATTEMPT_JOB
    folder = job.attempts / ("shard-%06d.%s" % (index, name))
    folder.mkdir(parents=True)
    (folder / ATTEMPT_JOB).write_text(job._attempt_job(index) if content is None else content, encoding="utf-8")
    (folder / "rows").write_text(name)
    return folder


def test_a_dead_process_s_attempt_at_the_same_images_is_resumed_and_a_stale_one_removed(job):
    from parallel.jobs import locks
    from parallel.jobs.attempts import ATTEMPT_LOCK
    alive = dead_attempt(job, 1, "a-host.0")  # first in name order, but its process holds its lock
    stale = dead_attempt(job, 1, "old-host.1", content=job._attempt_job(1).replace(job.shard_digest(1), "0" * 64))
    other_shard = dead_attempt(job, 2, "old-host.2")
    resumable = dead_attempt(job, 1, "old-host.3")
    with locks.exclusive(alive / ATTEMPT_LOCK):
        with job.attempt(1, resume=True) as folder:
            assert (folder / "rows").read_text() == "old-host.3" and not resumable.exists() and not stale.exists()
            assert folder.name.startswith("shard-000001.") and folder != resumable
    assert (alive / "rows").exists() and other_shard.exists()


def test_a_resumable_attempt_is_kept_when_its_block_raises_and_a_fresh_one_is_not(job):
    with pytest.raises(KeyboardInterrupt):
        with job.attempt(0, resume=True) as kept:
            (kept / "rows").write_text("batch 1")
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        with job.attempt(2) as fresh:
            raise KeyboardInterrupt
    assert (kept / "rows").exists() and not fresh.exists()
    with job.attempt(0, resume=True) as again:
        assert (again / "rows").read_text() == "batch 1"


def test_an_attempt_killed_while_it_was_being_committed_is_not_resumed(job):
    from parallel.jobs.attempts import COMMITTING
    folder = dead_attempt(job, 0, "old-host.4")
    (folder / COMMITTING).mkdir()
    with job.attempt(0, resume=True) as fresh:
        assert not (fresh / "rows").exists() and not folder.exists()


def test_a_committed_shard_whose_failed_image_was_repaired_is_renewed_not_set_aside(job):
    assert commit(job, 1, failed=["e.png"])
    before = job.shard_digest(1)
    repaired = Manifest(PATHS, [1, 1, 1, 1, 2, 1, 1], [10] * 7)  # e.png changed: size 1 -> 2
    job.save_manifest(job.load_manifest().updated(repaired, ["e.png"]))
    assert job.shard_digest(1) != before
    assert not job.renew_record(1, "0" * 64)  # not the images it was committed for: left to be set aside
    assert job.renew_record(1, before) and not job.renew_record(0, before)  # shard 0 is not committed
    record = json.loads((job.shard_folder(1) / SHARD_RECORD).read_text())
    assert record["images"] == job.shard_digest(1) and (record["rows"], record["failed"]) == (2, 1)
    assert job.is_committed(1) and job.retriable() == [1]  # its failed image is retried, its rows kept
    assert sorted(path.name for path in job.shard_folder(1).iterdir()) == ["_errors.csv", "_shard.json",
                                                                         "features.parquet"]
