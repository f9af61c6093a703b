"""The job protocol's rules (parallel.jobs.protocol), the same for every source and output: a usage error writes
and removes nothing, --overwrite never destroys an input, a store output never strands, a store job leaves no
staging folder. The cheap colour model of tests/job_child.py; stores on the loopback S3 server."""

import dataclasses
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import job_child
from faults import in_place_of
from outputs import entries_under, job_outputs
from parallel import jobs
from parallel.engine import RunError
from parallel.jobs.shards import ShardedJob
from parallel.jobs.store_commits import STAGING_PREFIX
from stores import upload, write_tars


def snapshot(folder):
    """{relative path: bytes} of every file under `folder`."""
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(Path(folder).rglob("*"))
            if path.is_file()}


@pytest.fixture
def tars(job_images, tmp_path):
    """The job's images as five tars of five members (the last of four) in tmp_path/shards."""
    return write_tars(job_images, tmp_path / "shards", 5)


def tar_config(tars, output, output_format="csv", **changes):
    return dataclasses.replace(job_child.config(tuple(tars), output, output_format), **changes)


def test_overwrite_never_writes_over_a_tar_the_job_reads(tars, tmp_path):
    before = snapshot(tmp_path / "shards")
    for config in (tar_config(tars[:1], tars[0], overwrite=True), tar_config(tars, tars[3], overwrite=True)):
        with pytest.raises(ValueError, match=r"^output=\S+000\d+\.tar is what images= names .* which the job reads"):
            jobs.run(config)
    assert snapshot(tmp_path / "shards") == before  # no tar removed, no file beside them


@pytest.mark.parametrize("what", ["weights", "images_from"])
def test_overwrite_never_writes_over_the_weights_or_the_list_file(job_images, tmp_path, what):
    listed = tmp_path / "list.txt"
    listed.write_text("a/01.png\nb/00.png\n")
    weights = tmp_path / "colour.npy"
    weights.write_bytes(b"the weights")
    config = job_child.config(job_images, listed if what == "images_from" else weights, "csv", images_from=listed)
    config = dataclasses.replace(config, overwrite=True,
                                 model=dataclasses.replace(config.model, files=(str(weights),)))
    with pytest.raises(ValueError, match=r"^output=\S+ is what %s= names" % what):
        jobs.run(config)
    assert (listed.read_text(), weights.read_bytes()) == ("a/01.png\nb/00.png\n", b"the weights")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["colour.npy", "list.txt"]


def test_overwrite_with_bad_weights_keeps_the_finished_output_of_a_tar_job(tars, tmp_path):
    output = tmp_path / "out.csv"
    assert jobs.run(tar_config(tars, output)).written == 23
    before = snapshot(tmp_path)

    def unreadable():
        raise ValueError("weights=colour.npy is not a weights file")

    config = tar_config(tars, output, overwrite=True)
    with pytest.raises(ValueError, match="is not a weights file"):
        jobs.run(dataclasses.replace(config, model=dataclasses.replace(config.model, load_weights=unreadable)))
    assert snapshot(tmp_path) == before


def _never_loaded():
    pytest.fail("the weights were loaded: the run got past its checks")


def _with_a_node(output, suffix, kind, make_node):
    """Puts `kind` (a FIFO, a symbolic link, a folder) at the job's name `output` + `suffix` (`faults.in_place_of`);
    a link points to an image beside the output's folder (a folder of them, for a folder's name). Returns (the
    node's path, what the refusal calls it)."""
    node = Path(str(output) + suffix)
    what = in_place_of(node, kind, make_node, output.parent.parent / "elsewhere",
                       link_to_folder=suffix in (".shards", ".attempts", ".parts"))
    return node, what


@pytest.mark.parametrize("overwrite", [False, True], ids=["resume", "overwrite"])
@pytest.mark.parametrize("suffix, kind", [("", "fifo"), ("", "symbolic link"), (".errors.csv", "fifo"),
                                          (".run.json", "symbolic link"), (".manifest.parquet", "fifo"),
                                          (".paths.csv", "folder"), (".shards", "symbolic link")])
def test_a_job_name_held_by_a_fifo_a_link_or_a_folder_is_refused_before_anything_is_loaded(
        job_images, tmp_path, make_node, suffix, kind, overwrite):
    """A name the job writes, replaces or removes (--overwrite) that is no regular file (its folders: no real
    folder) is one line naming it, with or without --overwrite, before the weights are loaded: nothing written or
    removed, the node and what it points to untouched."""
    output = tmp_path / "results" / "out.csv"
    output.parent.mkdir()
    node, what = _with_a_node(output, suffix, kind, make_node)
    before = entries_under(tmp_path)
    config = job_child.config(job_images, output, "csv")
    config = dataclasses.replace(config, overwrite=overwrite,
                                 model=dataclasses.replace(config.model, load_weights=_never_loaded))
    with pytest.raises(ValueError) as refusal:
        jobs.run(config)
    assert str(refusal.value) == "%s is %s; not replacing it: move it away or choose another --output" % (node, what)
    assert entries_under(tmp_path) == before


@pytest.mark.parametrize("distributed, overwrite", [(False, False), (False, True), (True, False)],
                         ids=["resume", "overwrite", "static rank"])
def test_a_finished_job_whose_errors_file_became_a_fifo_keeps_every_file(job_images, tmp_path, make_node,
                                                                       distributed, overwrite):
    """Unchecked, --overwrite removed the job's files and computed it again, then stopped on the FIFO (exit 1); a
    rerun blocked for ever opening it to read the failures to retry: refused first, every file kept."""
    output = tmp_path / "results" / "out.csv"
    assert jobs.run(job_child.config(job_images, output, "csv")).failed == 1
    node, what = _with_a_node(output, ".errors.csv", "fifo", make_node)
    before = entries_under(tmp_path)
    distribution = jobs.Distribution(kind="static", rank=0, world_size=1) if distributed else None
    config = job_child.config(job_images, output, "csv", distribution)
    config = dataclasses.replace(config, overwrite=overwrite,
                                 model=dataclasses.replace(config.model, load_weights=_never_loaded))
    with pytest.raises(ValueError, match="^%s is %s; not replacing it: move it away or choose another --output$"
                       % (re.escape(str(node)), what)):
        jobs.run(config)
    assert entries_under(tmp_path) == before


def test_the_command_line_refuses_an_output_that_is_a_symbolic_link_with_exit_2(job_images, tmp_path, make_node,
                                                                                capsys):
    """--overwrite onto a link to an image: one line, exit 2, before the weights are read (they are no weights)."""
    import run_inference
    output = tmp_path / "results" / "out.csv"
    output.parent.mkdir()
    node, _ = _with_a_node(output, "", "symbolic link", make_node)
    weights = tmp_path / "vgg16.npy"
    weights.write_bytes(b"never read: the output is checked first")
    before = entries_under(tmp_path)
    status = run_inference.main([str(arg) for arg in ("--images", job_images, "--output", output, "--weights",
                                                      weights, "--devices", "cpu:0", "--overwrite")])
    assert status == 2
    assert capsys.readouterr().err == ("run_inference: error: %s is a symbolic link; not replacing it: move it away "
                                       "or choose another --output\n" % node)
    assert entries_under(tmp_path) == before


def _unwritable(tmp_path, where):
    """An output the job cannot write beside, and (the folder that refuses, why): under /proc, which takes no new
    file even from root; under a regular file (a folder of it to create, or not); in a folder without write
    permission (root writes there: not made as root)."""
    if where == "proc":
        if not os.path.isdir("/proc/self"):
            pytest.skip("no /proc on this system")
        return Path("/proc/out.csv"), ("/proc", "takes no new file (No such file or directory)")
    if where == "read-only folder":
        if os.geteuid() == 0:
            pytest.skip("root writes in a folder without write permission")
        folder = tmp_path / "locked"
        folder.mkdir()
        folder.chmod(0o555)
        return folder / "new" / "out.csv", (folder, "takes no new file (Permission denied)")
    (tmp_path / "notes").write_text("a file, not a folder")
    output = tmp_path / "notes" / ("out.csv" if where == "under a file" else "new/out.csv")
    return output, (tmp_path / "notes", "is a file, not a folder")


@pytest.mark.parametrize("output_format, distribution, overwrite", [
    ("csv", None, False), ("parquet", None, True),
    ("npy", jobs.Distribution(kind="static", rank=0, world_size=1), False),
], ids=["csv", "parquet-overwrite", "npy-static-rank"])
@pytest.mark.parametrize("where", ["proc", "under a file", "under a file, new folder", "read-only folder"])
def test_an_output_the_job_cannot_write_is_one_line_naming_it_before_anything_is_loaded(
        job_images, tmp_path, where, output_format, distribution, overwrite):
    """Unchecked, the job failed as it took its lock (exit 1, "FileNotFoundError ... out.csv.lock") or wrote its
    manifest: refused first, for every format and mode, saying which folder refuses and why."""
    output, (folder, why) = _unwritable(tmp_path, where)
    before = entries_under(tmp_path)
    config = job_child.config(job_images, output, output_format, distribution)
    config = dataclasses.replace(config, overwrite=overwrite,
                                 model=dataclasses.replace(config.model, load_weights=_never_loaded))
    with pytest.raises(ValueError) as refusal:
        jobs.run(config)
    assert str(refusal.value) == "output=%s cannot be written: %s %s; choose another output" % (output, folder, why)
    assert entries_under(tmp_path) == before


def test_overwrite_never_writes_over_a_tar_or_an_image_in_the_store(job_images, tars, s3):
    upload(job_images, s3.url("photos"))
    upload(tars[0].parent, s3.url("shards"))
    before = {name: s3.filesystem.cat_file(s3.bucket + "/" + name) for name in s3.objects()}
    prefix_job = dataclasses.replace(job_child.config(s3.url("photos/"), s3.url("photos/a/01.png"), "csv"),
                                     overwrite=True)
    tar_job = tar_config([s3.url("shards/000000.tar"), s3.url("shards/000001.tar")], s3.url("shards/000001.tar"),
                         overwrite=True)
    for config, message in ((prefix_job, "is an image under images="), (tar_job, "is what images= names")):
        with pytest.raises(ValueError, match=message):
            jobs.run(config)
    assert {name: s3.filesystem.cat_file(s3.bucket + "/" + name) for name in s3.objects()} == before


def test_a_store_output_whose_record_failed_to_upload_is_finished_by_the_rerun(job_images, single_outputs, s3,
                                                                                monkeypatch):
    """The output uploaded, then its record's upload fails (a 503), as a process killed between the two leaves it."""
    from parallel.output.stores import ObjectStore, StoreError
    from test_store_shards import store_outputs
    url = s3.url("out.parquet")
    upload_object = ObjectStore.upload

    def failing(store, name, local):
        if name.endswith(".run.json"):
            raise StoreError("cannot write %s: 503 Slow Down" % store.url(name))
        return upload_object(store, name, local)

    monkeypatch.setattr(ObjectStore, "upload", failing)
    with pytest.raises(RunError, match="503 Slow Down"):
        jobs.run(job_child.config(job_images, url, "parquet"))
    assert "out.parquet" in s3.objects() and "out.parquet.run.json" not in s3.objects()
    monkeypatch.setattr(ObjectStore, "upload", upload_object)
    rerun = jobs.run(job_child.config(job_images, url, "parquet"))
    assert (rerun.written, rerun.already_done, rerun.failed) == (0, 23, 1)
    assert store_outputs(s3, "out.parquet") == single_outputs["parquet"]
    again = jobs.run(job_child.config(job_images, url, "parquet"))
    assert (again.written, again.already_done) == (0, 23)


def _staging_folders(pid):
    return sorted(Path(tempfile.gettempdir()).glob("%s%d-*" % (STAGING_PREFIX, pid)))


def test_a_store_job_leaves_no_staging_folder_and_removes_those_of_dead_processes(job_images, s3):
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    dead = Path(tempfile.mkdtemp(prefix="%s%d-" % (STAGING_PREFIX, ended.pid)))  # as a killed process leaves it
    (dead / "out.csv").write_text("a full copy of an output")
    summary = jobs.run(job_child.config(job_images, s3.url("out.csv"), "csv"))
    assert summary.written == 23
    assert _staging_folders(os.getpid()) == [] and not dead.exists()


def test_one_host_speaks_of_the_job_not_of_ranks(tars, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="parallel")
    jobs.run(tar_config(tars, tmp_path / "out.csv"))
    assert "5 tars in 1 shard" in caplog.text and "rank" not in caplog.text


def _batch_dependent(images, output, output_format="csv", distribution=None):
    """A job whose rows depend on how many images share a step (as a real model's may, in their last bits)."""
    return job_child.config(images, output, output_format, distribution, devices="cpu:0,cpu:1", per_device_batch=3,
                            batch_dependent=True)


@pytest.fixture
def repaired(job_images, tmp_path):
    """(folder whose a/bad.png is unreadable, the repaired image's bytes, a clean run's output bytes)."""
    from PIL import Image
    broken = tmp_path / "broken"
    clean = tmp_path / "clean"
    shutil.copytree(job_images, broken)
    shutil.copytree(job_images, clean)
    Image.new("RGB", (12, 10), (200, 30, 90)).save(clean / "a" / "bad.png")
    jobs.run(_batch_dependent(clean, tmp_path / "clean.csv"))
    return broken, (clean / "a" / "bad.png").read_bytes(), (tmp_path / "clean.csv").read_bytes()


def test_a_failed_image_repaired_and_retried_gives_the_bytes_of_a_clean_run(repaired, tmp_path):
    broken, image, clean = repaired
    output = tmp_path / "out.csv"
    first = jobs.run(_batch_dependent(broken, output))
    assert (first.written, first.failed) == (23, 1)
    rows = dict(line.split(",", 1) for line in output.read_text().splitlines()[1:])
    step_mate = "b/01.png," + rows["b/01.png"]  # shares a step of 6 with a/bad.png (a/00 .. a/22, a/bad, b/01)
    assert step_mate in clean.decode()  # the failure did not change its step-mates' rows
    (broken / "a" / "bad.png").write_bytes(image)
    rerun = jobs.run(_batch_dependent(broken, output))
    assert (rerun.written, rerun.failed, rerun.already_done) == (1, 0, 23)
    assert output.read_bytes() == clean


@pytest.mark.parametrize("where", ["local", "store"])
def test_a_failed_image_is_retried_by_a_one_host_store_or_sharded_job(repaired, tmp_path, s3, where):
    """The sharded protocol (an output in a store, static ranks) retries failed images as one process does: into
    the output itself, its shards gone once it is written (in the store, the output read back, the image's row
    merged in its place, written whole), bytes of a clean run."""
    broken, image, clean = repaired
    output = s3.url("out.csv") if where == "store" else tmp_path / "out.csv"
    distribution = None if where == "store" else jobs.Distribution(kind="static", rank=0, world_size=1,
                                                                   shard_size=6)
    first = jobs.run(_batch_dependent(broken, output, distribution=distribution))
    assert (first.written, first.failed) == (23, 1)
    # The failed image is retried in the output itself: no copy of its rows stays beside it.
    if where == "local":
        assert not ShardedJob(output).shards.exists()
    else:
        assert not [name for name in s3.objects() if ".shards/" in name]
    (broken / "a" / "bad.png").write_bytes(image)
    rerun = jobs.run(_batch_dependent(broken, output, distribution=distribution))
    # The repaired image changed: the manifest takes it as it is now; only the image is computed.
    assert (rerun.written, rerun.already_done, rerun.failed) == (1, 23, 0)
    written = s3.filesystem.cat_file(output[len("s3://"):]) if where == "store" else output.read_bytes()
    assert written == clean
    again = jobs.run(_batch_dependent(broken, output, distribution=distribution))
    assert (again.written, again.failed, again.already_done) == (0, 0, 24)


@pytest.mark.parametrize("where", ["local", "store"])
def test_a_tar_member_that_failed_is_retried_into_the_output_in_its_place_and_no_shard_stays(job_images, tmp_path, s3,
                                                                                            monkeypatch, where):
    """A member that failed once (a flaky read: it decodes now) is computed again by the rerun into the output
    itself, in stream order (tars whose members are in reverse path order), its shards gone once the output was
    written."""
    import tarfile
    from parallel.inputs import streams
    names = sorted((path.relative_to(job_images).as_posix() for path in job_images.rglob("*.png")), reverse=True)
    tars = []
    for number, start in enumerate(range(0, len(names), 5)):
        tars.append(tmp_path / "shards" / ("%06d.tar" % number))
        tars[-1].parent.mkdir(exist_ok=True)
        with tarfile.open(tars[-1], "w", format=tarfile.GNU_FORMAT) as tar:
            for name in names[start:start + 5]:
                tar.add(job_images / name, arcname=name)
    clean = tmp_path / "clean.csv"
    jobs.run(tar_config(tars, clean))  # a/bad.png fails here too: it is not an image
    output = s3.url("tars.csv") if where == "store" else tmp_path / "out.csv"
    flaky = (job_images / "a" / "02.png").read_bytes()  # in the last tar, before a/00.png
    real = streams.decode_bytes_row
    with monkeypatch.context() as patch:
        patch.setattr(streams, "decode_bytes_row", lambda data, *args: ("corrupt", "a flaky read") if data == flaky
                      else real(data, *args))
        first = jobs.run(tar_config(tars, output))
    assert (first.written, first.failed) == (22, 2)

    def read(suffix):
        return s3.filesystem.cat_file(str(output)[len("s3://"):] + suffix) if where == "store" else \
            Path(str(output) + suffix).read_bytes()

    assert b"a flaky read" in read(".errors.csv")
    if where == "local":
        assert not ShardedJob(output).shards.exists()
    else:
        assert not [name for name in s3.objects() if ".shards/" in name]
    rerun = jobs.run(tar_config(tars, output))
    assert (rerun.written, rerun.already_done, rerun.failed) == (1, 22, 1)
    assert read("") == clean.read_bytes() and read(".errors.csv") == Path(str(clean) + ".errors.csv").read_bytes()
    assert read("").index(b"a/02.png") > read("").index(b"b/01.png")  # in its place in stream order, not path order
    again = jobs.run(tar_config(tars, output))
    assert (again.written, again.already_done, again.failed) == (0, 23, 1)


def test_a_tar_appended_to_before_its_shard_ran_finishes_and_reruns_as_already_done(tars, tmp_path):
    """Killed after freezing (the manifest written, no shard committed); the tar is then appended to."""
    import io
    import tarfile
    from parallel.jobs.identity import freeze_sharded
    output = tmp_path / "out.csv"
    config = tar_config(tars, output)
    with freeze_sharded(dataclasses.replace(config, distribution=jobs.Distribution(kind="static", rank=0,
                                                                                   world_size=1)),
                        check_folder=True):
        pass
    with tarfile.open(tars[4], "a") as tar:  # tar -rf: one more member
        with open(tars[0], "rb") as first:
            member = tarfile.open(fileobj=first).extractfile("a/00.png").read()
        info = tarfile.TarInfo("c/new.png")
        info.size = len(member)
        tar.addfile(info, io.BytesIO(member))
    summary = jobs.run(config)
    assert (summary.written, summary.failed) == (24, 1)
    again = jobs.run(config)
    assert (again.written, again.already_done, again.failed, again.exit_status) == (0, 24, 1, 3)


def test_a_tar_with_a_member_name_twice_keeps_the_last_copy_and_finishes(job_images, tmp_path):
    """As `tar -rf` leaves a tar after appending a newer copy of a member: tar's own rule, the last copy counts."""
    import io
    import tarfile
    from PIL import Image
    newer = io.BytesIO()
    Image.new("RGB", (12, 10), (10, 200, 30)).save(newer, format="PNG")
    names = ["a/00.png", "a/02.png", "b/01.png"]

    def write(path, members):
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    originals = [(name, (job_images / name).read_bytes()) for name in names]
    appended = write(tmp_path / "appended" / "000000.tar", originals + [("a/00.png", newer.getvalue())])
    expected = write(tmp_path / "expected" / "000000.tar", originals[1:] + [("a/00.png", newer.getvalue())])
    for tar in (appended, expected):
        summary = jobs.run(tar_config([tar], tar.parent / "out.csv"))
        assert (summary.written, summary.failed, summary.discovered) == (3, 0, 3)
    text = (appended.parent / "out.csv").read_text().replace(str(appended.parent), "X")
    assert text == (expected.parent / "out.csv").read_text().replace(str(expected.parent), "X")
    from parallel.inputs.tars import read_member
    index = appended.parent / "out.csv.members.parquet"
    assert read_member("tar://a/00.png::%s" % appended, index) == newer.getvalue()  # the last copy's bytes
    again = jobs.run(tar_config([appended], appended.parent / "out.csv"))
    assert (again.written, again.already_done) == (0, 3)
    assert list(appended.parent.glob("out.csv.attempts/*")) == []


@pytest.mark.parametrize("damage", ["bit", "value"])
def test_a_committed_local_shard_changed_on_disk_is_recomputed_and_the_output_is_exact(job_images, single_outputs,
                                                                                       tmp_path, damage):
    """One bit flipped in a committed shard's features.parquet (same size), or one value rewritten (a valid file):
    found by the SHA-256 (or the size) its record lists before the output is written from it."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    output = tmp_path / "out.csv"

    def rank(number):
        distribution = jobs.Distribution(kind="static", rank=number, world_size=2, shard_size=5)
        return jobs.run(job_child.config(job_images, output, "csv", distribution))

    rank(0)  # shards 0, 2 and 4 committed
    features = Path(str(output) + ".shards") / "shard-000000" / "features.parquet"
    if damage == "bit":
        data = bytearray(features.read_bytes())
        table = pq.read_table(features)
        needle = np.asarray(table.column("colour")[0].values, np.float32)[:1].tobytes()
        at = bytes(data).find(needle)
        assert at > 0
        data[at + 1] ^= 0x10  # inside the first row's first value: a valid file, another number
        features.write_bytes(bytes(data))
    else:
        table = pq.read_table(features)
        values = np.asarray(table.column("colour").combine_chunks().values, np.float32).copy()
        values[3] += 1.0
        column = pa.FixedSizeListArray.from_arrays(pa.array(values), 6)
        pq.write_table(table.set_column(table.schema.get_field_index("colour"), "colour", column), features)
    last = rank(1)  # commits 1 and 3, then writes the output: shard 0 is found changed and computed again
    if damage == "value":  # the size told at once: shard 0 is missing for rank 1; rank 0's rerun computes it
        assert last.pending_shards == (0,)
        rank(0)
    assert job_outputs(output) == single_outputs["csv"]


def test_a_usage_error_of_a_tar_job_creates_no_output_folder(tmp_path):
    """No tar of the job exists (a mistyped name): one line, and the output's new folder is never made."""
    output = tmp_path / "new" / "folder" / "out.csv"
    with pytest.raises(ValueError, match="nosuch"):
        jobs.run(tar_config([tmp_path / "nosuch.tar"], output))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where", ["local", "store"])
@pytest.mark.parametrize("failing", ["GET", "GET and HEAD"])
def test_an_object_that_answered_503_is_retried_when_the_store_is_fixed(job_images, http_server, s3, tmp_path,
                                                                        monkeypatch, where, failing):
    """Images over HTTP, one answering 503 on every try of the first run. Its GET only: the rerun computes it
    alone (its shard committed anew with its row, the finished output reopened and written afresh). Its HEAD
    too (the job recorded no version of it): the rerun records the one it has now, and computes its shard
    again whole. Either way, the bytes of a clean run."""
    from parallel.inputs import remote
    monkeypatch.setattr(remote, "BACKOFF_SECONDS", 0.01)
    names = sorted(path.relative_to(job_images).as_posix() for path in job_images.rglob("*.png"))[:12]
    for name in names:
        (http_server.root / name).parent.mkdir(exist_ok=True)
        (http_server.root / name).write_bytes((job_images / name).read_bytes())
    listing = tmp_path / "urls.txt"
    listing.write_text("".join("%s/%s\n" % (http_server.url, name) for name in names))
    output = s3.url("out.csv") if where == "store" else tmp_path / "out.csv"
    distribution = None if where == "store" else jobs.Distribution(kind="static", rank=0, world_size=1,
                                                                   shard_size=6)

    def run(target):
        config = job_child.config(tmp_path, target, "csv", distribution, images_from=listing, devices="cpu:0,cpu:1",
                                  per_device_batch=3, batch_dependent=True)
        return jobs.run(config)

    run(tmp_path / "clean.csv" if where == "store" else tmp_path / "clean-sharded.csv")  # nothing fails
    clean = (tmp_path / ("clean.csv" if where == "store" else "clean-sharded.csv")).read_bytes()
    broken = "%s/%s" % (http_server.url, names[4])
    if failing == "GET":
        real = remote.decode_url_row
        monkeypatch.setattr(remote, "decode_url_row", lambda url, *args, **options: (
            ("unreachable", "503 Slow Down, every try") if url == broken else real(url, *args, **options)))
    else:
        http_server.failures["/" + names[4]] = 1000
    first = run(output)
    assert (first.written, first.failed) == (11, 1)
    http_server.failures.clear()  # the store is fixed
    if failing == "GET":
        monkeypatch.setattr(remote, "decode_url_row", real)
    rerun = run(output)
    assert (rerun.failed, rerun.written + rerun.already_done) == (0, 12)
    if failing == "GET":
        assert (rerun.written, rerun.already_done) == (1, 11)  # the failed image alone
    written = s3.filesystem.cat_file(output[len("s3://"):]) if where == "store" else output.read_bytes()
    assert written == clean


def test_a_tar_missing_at_the_first_run_and_created_later_is_computed(job_images, tars, tmp_path):
    """A pattern names a tar that is not there yet (a failure of the tar); once it exists, the rerun reads it."""
    pattern = str(tmp_path / "shards" / "{000000..000004}.tar")
    output = tmp_path / "out.csv"
    last = tars[4].read_bytes()
    tars[4].unlink()
    first = jobs.run(tar_config([pattern], output))
    assert (first.written, first.failed) == (19, 2)  # 4 tars of 5 images (a/bad.png among them), the missing tar
    tars[4].write_bytes(last)
    rerun = jobs.run(tar_config([pattern], output))
    assert (rerun.failed, rerun.written + rerun.already_done) == (1, 23)  # its 4 members, a/bad.png among them
    reference = tmp_path / "reference.csv"
    jobs.run(tar_config(tars, reference))
    assert output.read_bytes() == reference.read_bytes()
