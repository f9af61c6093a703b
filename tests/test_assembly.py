"""The output written from the shards in order: one process writes it as it goes, a shard at a time, and
removes each shard once its rows are in it; a kill at any step leaves a state the rerun completes."""

import random
import shutil
import threading

import pytest
from PIL import Image

import job_child
from colour_jobs import Killed, StopAfter
from stores import BUCKET, store, write_tars
from outputs import job_outputs
from parallel import jobs
from parallel.inputs.tars import MEMBERS_SUFFIX
from parallel.jobs import assembly, distributed, identity, ledger
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
    elif moment == "ledger recorded":
        monkeypatch.setattr(ledger.Ledger, "add_shard", on_shard_three(ledger.Ledger.add_shard,
                                                                       lambda args: args[1] == 3))
    else:  # the shard removed: the next step would be shard 4
        monkeypatch.setattr(ShardedJob, "remove_shard", on_shard_three(ShardedJob.remove_shard,
                                                                       lambda args: args[1] == 3))


@pytest.mark.parametrize("moment", ["rows appended", "ledger recorded", "shard removed"])
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


# -- a rerun proves what the ledger claims before it trusts it (the files a person or a disk changed) -----------

def _stopped(job_states, output, output_format):
    """A copy at `output` of a run stopped in shard 4 (shards of 4, steps of 2; job_states' "mid-job"): shards 0 to
    3 in the output and removed, shard 4's attempt with one batch committed."""
    job = ShardedJob(_copied(job_states, "mid-job", output, output_format))
    assert sorted(job.ledger().shards()) == [0, 1, 2, 3] and not job.shard_folder(3).exists()
    return job


def _copied(job_states, state, output, output_format):
    """`output`, a copy of job_states' job in `state` (its files in the folder of `output`, empty until then)."""
    source = job_states[state, output_format][0]
    assert output.name == "out." + output_format and not any(output.parent.glob("out.*"))
    shutil.copytree(source, output.parent, dirs_exist_ok=True)
    return output


def _flip(path, offset=None):
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if offset is None else offset] ^= 0x01
    path.write_bytes(bytes(data))


def _rerun_is_exact(job_images, output, output_format, single_outputs):
    summary = jobs.run(job_child.config(job_images, output, output_format))
    assert (summary.written + summary.already_done, summary.failed) == (23, 1)
    assert job_outputs(output) == single_outputs[output_format]
    again = jobs.run(job_child.config(job_images, output, output_format))  # and then it is done
    assert (again.written, again.already_done, again.failed) == (0, 23, 1)
    assert job_outputs(output) == single_outputs[output_format]
    return summary


@pytest.mark.parametrize("output_format", FORMATS)
def test_a_finished_output_deleted_by_hand_is_written_again(job_images, single_outputs, job_states, tmp_path,
                                                            small_shards, output_format):
    output = _copied(job_states, "finished", tmp_path / ("out." + output_format), output_format)
    output.unlink()  # the ordinary way to get it written again
    summary = _rerun_is_exact(job_images, output, output_format, single_outputs)
    assert summary.written == 23


@pytest.mark.parametrize("output_format", FORMATS)
def test_the_output_deleted_mid_job_has_its_shards_computed_again(job_images, single_outputs, job_states, tmp_path,
                                                                  small_shards, caplog, output_format):
    output = tmp_path / ("out." + output_format)
    _stopped(job_states, output, output_format)
    for suffix in ("", ".parts", ".paths.csv"):  # whatever of it there is
        path = tmp_path / ("out.%s%s" % (output_format, suffix))
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    with caplog.at_level("WARNING", logger="parallel"):
        _rerun_is_exact(job_images, output, output_format, single_outputs)
    assert "shards 0, 1, 2, 3" in caplog.text


@pytest.mark.parametrize("damage", ["a part flipped", "its digests flipped", "the parts removed"])
@pytest.mark.parametrize("output_format", ["parquet", "npy"])
def test_a_damaged_part_of_the_output_has_its_rows_computed_again(job_images, single_outputs, job_states, tmp_path,
                                                                 small_shards, output_format, damage):
    output = tmp_path / ("out." + output_format)
    _stopped(job_states, output, output_format)
    parts = tmp_path / ("out.%s.parts" % output_format)
    if damage == "a part flipped":
        _flip(parts / ("part-000000." + output_format))
    elif damage == "its digests flipped":
        _flip(parts / "part-000000.sha256", 3)
    else:
        shutil.rmtree(parts)
    _rerun_is_exact(job_images, output, output_format, single_outputs)


@pytest.mark.parametrize("damage", ["a line flipped", "cut by 20 bytes", "removed"])
def test_a_damaged_ledger_has_what_it_no_longer_proves_computed_again(job_images, single_outputs, job_states,
                                                                     tmp_path, small_shards, caplog, damage):
    output = tmp_path / "out.csv"
    job = _stopped(job_states, output, "csv")
    ledger = job.ledger().path
    if damage == "a line flipped":  # shard 3's, which holds the failed image
        lines = ledger.read_bytes().split(b"\n")
        lines[3] = lines[3].replace(b'"shard":3', b'"shard":4')
        ledger.write_bytes(b"\n".join(lines))
    elif damage == "cut by 20 bytes":
        ledger.write_bytes(ledger.read_bytes()[:-20])
    else:
        ledger.unlink()
    with caplog.at_level("WARNING", logger="parallel"):
        summary = _rerun_is_exact(job_images, output, "csv", single_outputs)
    if damage != "removed":
        assert "failed their check" in caplog.text
        assert summary.written == 3 + 2 + 4  # shard 3 again (its failure too), the rest of shard 4, shard 5


@pytest.mark.parametrize("output_format", FORMATS)
def test_a_record_damaged_mid_job_has_the_output_written_afresh_not_refused_for_ever(
        job_images, single_outputs, job_states, tmp_path, small_shards, caplog, output_format):
    """Its record is what a writer resumes by (committed rows, bytes, parts): without it nothing of the output
    holds, and the shards in it are computed again; never "pass --overwrite", never a failed run."""
    output = tmp_path / ("out." + output_format)
    _stopped(job_states, output, output_format)
    (tmp_path / ("out.%s.run.json" % output_format)).write_text("{not JSON")
    with caplog.at_level("WARNING", logger="parallel"):
        summary = _rerun_is_exact(job_images, output, output_format, single_outputs)
    assert "is written afresh: its out.%s.run.json is damaged" % output_format in caplog.text
    assert summary.written == 23 - 2  # all but shard 4's batch, committed in its attempt


@pytest.mark.parametrize("damage", ["deleted", "not JSON"])
@pytest.mark.parametrize("output_format", FORMATS)
def test_a_finished_output_s_record_deleted_or_damaged_is_written_again_from_the_ledger(
        job_images, single_outputs, job_states, tmp_path, small_shards, caplog, output_format, damage):
    """docs/outputs.md: a side file deleted is written again by the rerun; the record is rebuilt from what the ledger
    recorded of the output closed (its bytes' SHA-256), nothing computed again, and the output is this job's: never
    refused as "not written by this program"."""
    output = _copied(job_states, "finished", tmp_path / ("out." + output_format), output_format)
    record = tmp_path / ("out.%s.run.json" % output_format)
    written = record.read_bytes()
    record.unlink() if damage == "deleted" else record.write_text("{not JSON")
    with caplog.at_level("WARNING", logger="parallel"):
        summary = _rerun_is_exact(job_images, output, output_format, single_outputs)
    assert summary.written == 0 and record.read_bytes() == written
    assert "written again from its ledger" in caplog.text


def test_an_output_of_someone_else_beside_no_ledger_of_its_name_is_still_refused(job_images, tmp_path):
    output = tmp_path / "out.csv"
    output.write_text("theirs\n")
    with pytest.raises(ValueError, match="exists and was not written by this program"):
        jobs.run(job_child.config(job_images, output, "csv"))
    assert output.read_text() == "theirs\n" and sorted(path.name for path in tmp_path.iterdir()) == ["out.csv"]


@pytest.mark.parametrize("images", ["folder", "tars"])
def test_a_ledger_of_the_previous_version_is_proven_anew_not_refused_nor_computed_again(job_images, tmp_path,
                                                                                      images):
    """Its entries record sizes only, and no digest of a shard's images: the side files are proven anew (the errors
    file written again from the ledger, the index of members read whole), and the ledger records their SHA-256."""
    if images == "tars":
        write_tars(job_images, tmp_path / "tars", 8)
    source = str(tmp_path / "tars" / "*.tar") if images == "tars" else job_images
    output = tmp_path / "out.csv"
    jobs.run(job_child.config(source, output, "csv"))
    written = _outputs(output)
    book = ledger.Ledger(output.with_name("out.csv.ledger.jsonl"))
    earlier = []
    for entry in book.entries:
        entry = {key: value for key, value in entry.items() if key not in ("seq", "images")}
        if "complete" in entry:
            closed = entry["complete"]
            entry = {"complete": {"rows": closed["rows"], "record": closed["record"],
                                  "files": {suffix: size for suffix, (size, _) in closed["files"].items()}}}
        earlier.append(entry)
    book.rewrite(earlier)
    summary = jobs.run(job_child.config(source, output, "csv"))
    assert (summary.written, summary.already_done, summary.failed) == (0, 23, 1)
    assert _outputs(output) == written
    closed = ledger.Ledger(output.with_name("out.csv.ledger.jsonl")).complete()
    assert all(digest for suffix, (_, digest) in closed["files"].items() if suffix not in ("", ".paths.csv"))


def test_a_damaged_attempt_is_computed_again_not_refused(job_images, single_outputs, job_states, tmp_path,
                                                         small_shards, caplog):
    output = tmp_path / "out.csv"
    job = _stopped(job_states, output, "csv")
    attempt, = job.attempts.glob("shard-000004.*")
    _flip(attempt / "features.parquet.run.json", 5)
    with caplog.at_level("WARNING", logger="parallel"):
        _rerun_is_exact(job_images, output, "csv", single_outputs)
    assert "cannot be resumed" in caplog.text


def test_an_attempt_s_merged_file_changed_before_its_commit_is_computed_again(job_images, single_outputs, tmp_path,
                                                                              small_shards, monkeypatch, caplog):
    output = tmp_path / "out.parquet"
    real_commit = ShardedJob.commit

    def commit(self, index, *args, **kwargs):
        if index == 2:
            raise Killed("between the attempt's merge and its commit")
        return real_commit(self, index, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(ShardedJob, "commit", commit)
        with pytest.raises(Killed):
            jobs.run(job_child.config(job_images, output, "parquet"))
    attempt, = ShardedJob(output).attempts.glob("shard-000002.*")
    _flip(attempt / SHARD_FEATURES, 64)  # one bit of a value: the file still reads
    with caplog.at_level("WARNING", logger="parallel"):
        _rerun_is_exact(job_images, output, "parquet", single_outputs)
    assert "not the file completed" in caplog.text


# -- the invariant, fuzzed: a job's files damaged at random, then rerun ------------------------------------------

_DAMAGES = ("delete", "cut", "flip")


def _outputs(output):
    """What a user reads of a job: the output, its paths file (npy), its errors file, a tar job's index of members."""
    files = job_outputs(output)
    members = output.with_name(output.name + MEMBERS_SUFFIX)
    if members.exists():
        files[MEMBERS_SUFFIX] = members.read_bytes()
    return files


@pytest.fixture(scope="module")
def job_states(job_images, single_outputs, tmp_path_factory):
    """{(state, format): (a folder holding a job left in that state, its images, the outputs of its uninterrupted
    run, its images that fail)}, in shards of 4: "mid-job" (stopped in shard 4: shards 0 to 3 in the output and
    gone, an attempt at shard 4), "finished" (an image failed), "finished clean" (none did); and of a job over 3
    tars (one shard, a/bad.png a member that fails), "finished" (its index of members beside the output) and
    "retry killed" (a rerun killed between the ledger's `retried` line and its closing line)."""
    clean = tmp_path_factory.mktemp("clean") / "images"
    shutil.copytree(job_images, clean)
    (clean / "a" / "bad.png").unlink()
    tars = tmp_path_factory.mktemp("tars")
    write_tars(job_images, tars, 8)
    states = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(identity, "DEFAULT_SHARD_SIZE", 4)
        for output_format in FORMATS:
            for state in ("mid-job", "finished", "finished clean"):
                folder = tmp_path_factory.mktemp("state")
                output = folder / ("out." + output_format)
                images = clean if state == "finished clean" else job_images
                with pytest.MonkeyPatch.context() as stop:
                    if state == "mid-job":
                        stop.setattr(distributed, "StopRequest", lambda: StopAfter(9))
                    summary = jobs.run(job_child.config(images, output, output_format))
                assert summary.interrupted == (state == "mid-job")
                reference = job_outputs(output) if state == "finished clean" else single_outputs[output_format]
                states[state, output_format] = folder, images, reference, 0 if state == "finished clean" else 1
        for state in ("tars finished", "tars retry killed"):
            folder = tmp_path_factory.mktemp("state")
            output, images = folder / "out.csv", str(tars / "*.tar")
            jobs.run(job_child.config(images, output, "csv"))
            reference = _outputs(output)
            if state == "tars retry killed":
                with pytest.MonkeyPatch.context() as kill:
                    kill.setattr(ledger.Ledger, "add_retry", _then_killed(ledger.Ledger.add_retry))
                    with pytest.raises(Killed):
                        jobs.run(job_child.config(images, output, "csv"))
            states[state, "csv"] = folder, images, reference, 1
    return states


def _then_killed(real):
    def call(*args, **kwargs):
        real(*args, **kwargs)
        raise Killed("after %s" % real.__name__)
    return call


def _job_files(folder):
    return sorted(path for path in folder.rglob("*") if path.is_file() and not path.name.endswith(".lock"))


def _snapshot(folder):
    return {path: path.read_bytes() for path in _job_files(folder)}


def _damaged(data, damage, rng):
    """`data` (bytes) deleted (None), cut at random or with one bit flipped."""
    if damage == "delete" or not data:
        return None
    if damage == "cut":
        return data[:rng.randrange(len(data))]
    data = bytearray(data)
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return bytes(data)


def _own_data(name, output_name):
    """Whether the file `name` is the output's own data, a bit flipped inside which is the disk's to catch."""
    return name in (output_name, output_name + ".paths.csv")


# Seeds 0-39 less the ten that draw a file, a damage and an outcome (refused; or rows written again: all, some or
# none) another seed draws: 6, 10 and 19 (out.csv cut, all written again, as 15), 8 and 39 (the manifest cut,
# refused, as 38), 3 (the ledger cut, none, as 26), 9 (a part's digests cut, some, as 11), 17 (a part cut, some,
# as 30), 31 (the manifest deleted, none, as 4), 21 (the manifest flipped, refused, as 34).
FUZZ_SEEDS = [0, 1, 2, 4, 5, 7, 11, 12, 13, 14, 15, 16, 18, 20, 22, 23, 24, 25, 26, 27, 28, 29, 30, 32, 33, 34, 35,
              36, 37, 38]


@pytest.mark.parametrize("seed", FUZZ_SEEDS)
def test_a_job_with_any_one_file_damaged_reruns_to_the_uninterrupted_output_or_refuses_in_one_line(
        job_states, tmp_path, small_shards, seed):
    """Whatever file is deleted, cut or flipped: the next rerun gives the uninterrupted run's files, or refuses in one
    line (exit 2) with nothing changed. Never a failed run (exit 1): what cannot be proven is not trusted."""
    rng = random.Random(seed)
    state, output_format = rng.choice(sorted(job_states))
    source, images, reference, failing = job_states[state, output_format]
    folder = tmp_path / "job"
    shutil.copytree(source, folder)
    output = folder / ("out." + output_format)
    target, damage = rng.choice(_job_files(folder)), rng.choice(_DAMAGES)
    if damage == "flip" and _own_data(target.name, output.name):
        damage = "cut"
    damaged = _damaged(target.read_bytes(), damage, rng)
    target.unlink() if damaged is None else target.write_bytes(damaged)
    what = "%s of a %s %s job: %s" % (damage, state, output_format, target.relative_to(folder))
    before = _snapshot(folder)
    try:
        summary = jobs.run(job_child.config(images, output, output_format))
    except ValueError as refusal:  # exit 2: one line, and nothing changed
        assert "\n" not in str(refusal), what
        assert _snapshot(folder) == before, what
        return
    assert summary.exit_status == (3 if failing else 0) and not summary.pending_shards, what
    assert _outputs(output) == reference, what
    again = jobs.run(job_child.config(images, output, output_format))
    assert (again.written, again.already_done, again.failed) == (0, 23, failing), what
    assert _outputs(output) == reference, what


@pytest.fixture(scope="module")
def store_states(job_images, s3_store):
    """{state: the URL of a job left in that state in the loopback store}, in shards of 5 on one rank: "stopped"
    (shards 0 to 2 committed in the store, none in the output yet), "finished" (a/bad.png failed)."""
    states = {}
    for state in ("stopped", "finished"):
        url = "s3://%s/fuzz-states/%s/out.csv" % (BUCKET, state)
        with pytest.MonkeyPatch.context() as stop:
            if state == "stopped":
                stop.setattr(distributed, "StopRequest", lambda: StopAfter(10))
            jobs.run(job_child.config(job_images, url, "csv", _one_rank()))
        states[state] = url
    return states


def _one_rank():
    return jobs.Distribution(kind="static", rank=0, world_size=1, shard_size=5, wait_seconds=5)


@pytest.mark.parametrize("seed", range(3))
def test_a_store_job_with_any_one_object_damaged_reruns_to_the_uninterrupted_output_or_refuses_in_one_line(
        job_images, single_outputs, store_states, seed):
    """The same, for an output in a store: its objects (the output's, the shards' parts and records) copied to a
    prefix of their own, one of them deleted, cut or flipped."""
    rng = random.Random(seed)
    state = rng.choice(sorted(store_states))
    fs, source = store(), store_states[state][len("s3://"):].rpartition("/")[0]
    prefix = "%s/fuzz-%d" % (BUCKET, seed)
    names = sorted(name[len(source) + 1:] for name in fs.find(source))
    for name in names:
        fs.pipe_file("%s/%s" % (prefix, name), fs.cat_file("%s/%s" % (source, name)))
    target, damage = rng.choice(names), rng.choice(_DAMAGES)
    if damage == "flip" and _own_data(target, "out.csv"):
        damage = "cut"
    damaged = _damaged(fs.cat_file("%s/%s" % (prefix, target)), damage, rng)
    fs.rm_file("%s/%s" % (prefix, target)) if damaged is None else fs.pipe_file("%s/%s" % (prefix, target), damaged)
    what = "%s of a %s store job: %s" % (damage, state, target)
    url = "s3://%s/out.csv" % prefix

    def objects():
        fs.invalidate_cache()
        return {name: fs.cat_file(name) for name in fs.find(prefix)}

    before = objects()
    try:
        summary = jobs.run(job_child.config(job_images, url, "csv", _one_rank()))
    except ValueError as refusal:
        assert "\n" not in str(refusal), what
        assert objects() == before, what
        return
    assert summary.exit_status == 3 and not summary.pending_shards, what
    fs.invalidate_cache()
    written = {suffix: fs.cat_file("%s/out.csv%s" % (prefix, suffix)) for suffix in ("", ".errors.csv")}
    assert written == single_outputs["csv"], what
    again = jobs.run(job_child.config(job_images, url, "csv", _one_rank()))
    assert (again.written, again.already_done, again.failed) == (0, 23, 1), what
