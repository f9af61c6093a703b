"""Jobs over images in a store and in tars: the same rows as the same images in a folder, on one
process or many, through kills and resumes (real S3 and HTTP on loopback; the colour model)."""

import csv
import dataclasses
import io
import json
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import pyarrow.parquet as pq

import pytest

from hangs import HANG_SECONDS
import job_child
from outputs import attempt_rows, committed_rows, job_outputs
from parallel import engine, jobs
from parallel.inputs.tars import read_index, read_member, split_key
from parallel.jobs.store_commits import attempts_folder
from stores import serve, store, upload, write_tars

CHILD = str(Path(job_child.__file__))


def rows(output):
    """[(key, features as text)] of a CSV output, in order."""
    with open(output, newline="") as file:
        return [(row[0], tuple(row[1:])) for row in list(csv.reader(file))[1:]]


def errors(output):
    path = Path(str(output) + ".errors.csv")
    if not path.exists():
        return []
    with open(path, newline="") as file:
        return [(row["path"], row["kind"]) for row in csv.DictReader(file)]


def member(key):
    """The member name of a tar key ("a/00.png"): the folder key of the same image."""
    return split_key(key)[0]


@pytest.fixture(scope="module")
def folder_output(job_images, tmp_path_factory):
    output = tmp_path_factory.mktemp("folder") / "out.csv"
    jobs.run(job_child.config(job_images, output, "csv"))
    return output


@pytest.fixture(scope="module")
def local_tars(job_images, tmp_path_factory):
    """The 24 images as 3 tars of 8 (each with a .json member that is not an image)."""
    extra = {number: [("meta/%d.json" % number, b'{"caption": "x"}')] for number in range(3)}
    return write_tars(job_images, tmp_path_factory.mktemp("tars") / "shards", 8, extra)


def test_a_prefix_of_a_store_gives_the_folder_s_output_byte_for_byte(job_images, folder_output, s3_store, tmp_path):
    upload(job_images, "s3://bucket/prefix-job/photos/")
    store().pipe("bucket/prefix-job/photos/notes.txt", b"not an image name: never listed")
    output = tmp_path / "out.csv"
    summary = jobs.run(job_child.config("s3://bucket/prefix-job/photos/", output, "csv"))
    assert (summary.written, summary.failed) == (23, 1)
    assert output.read_bytes() == folder_output.read_bytes()  # keys relative to the prefix, as to a folder
    assert Path(str(output) + ".errors.csv").read_bytes() == Path(str(folder_output) + ".errors.csv").read_bytes()


def test_local_tars_give_the_folder_s_rows_in_order_and_one_process_resumes(job_images, folder_output, local_tars,
                                                                             tmp_path):
    pattern = str(local_tars[0].parent / "{000000..000002}.tar")
    output = tmp_path / "out.csv"
    summary = jobs.run(job_child.config(pattern, output, "csv"))
    assert (summary.written, summary.failed) == (23, 1)
    got = rows(output)
    assert [member(key) for key, _ in got] == [key for key, _ in rows(folder_output)]
    assert [features for _, features in got] == [features for _, features in rows(folder_output)]
    assert [(member(key), kind) for key, kind in errors(output)] == errors(folder_output)
    assert got[0][0] == "tar://a/00.png::%s" % local_tars[0]
    # Any image read back by one byte range, from the index written beside the output.
    index = Path(str(output) + ".members.parquet")
    assert read_member(got[9][0], index) == (job_images / "a" / member(got[9][0]).split("/", 1)[1]).read_bytes()
    assert len(read_index(index)) == 24
    again = jobs.run(job_child.config(pattern, output, "csv"))  # finished: nothing to do
    assert (again.written, again.already_done, again.failed) == (0, 23, 1)


def test_tars_in_a_store_and_tars_expanded_by_the_shell_are_the_same_job(job_images, folder_output, local_tars, s3_store,
                                                                         tmp_path):
    for tar in local_tars:
        store().pipe("bucket/tar-job/%s" % tar.name, tar.read_bytes())
    output = tmp_path / "out.csv"
    summary = jobs.run(job_child.config("s3://bucket/tar-job/*.tar", output, "csv"))
    assert (summary.written, summary.failed) == (23, 1)
    got = rows(output)
    assert [features for _, features in got] == [features for _, features in rows(folder_output)]
    assert got[0][0] == "tar://a/00.png::s3://bucket/tar-job/000000.tar"
    assert read_member(got[20][0], Path(str(output) + ".members.parquet")) == \
        (job_images / member(got[20][0])).read_bytes()
    # The shell's expansion of the pattern (several --images values) is the job the pattern was.
    listed = tuple("s3://bucket/tar-job/%06d.tar" % number for number in range(3))
    again = jobs.run(job_child.config(listed, output, "csv"))
    assert (again.written, again.already_done, again.failed) == (0, 23, 1)


@pytest.fixture(scope="module")
def s3_tars(local_tars, s3_store):
    """The 3 tars in the store, under s3://bucket/ranks/: the pattern."""
    for tar in local_tars:
        store().pipe("bucket/ranks/%s" % tar.name, tar.read_bytes())
    return "s3://bucket/ranks/{000000..000002}.tar"


@pytest.fixture(scope="module")
def s3_tars_single(s3_tars, tmp_path_factory):
    """What one process's job over the store's 3 tars, into a local Parquet output, leaves a user: job_files."""
    single = tmp_path_factory.mktemp("single") / "single.parquet"
    jobs.run(job_child.config(s3_tars, single, "parquet"))
    return job_files(single)


@pytest.fixture(scope="module")
def local_tars_single(local_tars, tmp_path_factory):
    """What one process's job over the 3 local tars (their folder's *.tar), into a CSV output, leaves a user."""
    single = tmp_path_factory.mktemp("single") / "single.csv"
    jobs.run(job_child.config(str(local_tars[0].parent / "*.tar"), single, "csv"))
    return job_files(single)


def static(rank, world_size, shard_size=1):
    """Rank `rank` of `world_size`, a tar a shard (these tars are tiny: by default they would share one)."""
    return jobs.Distribution(kind="static", rank=rank, world_size=world_size, shard_size=shard_size, wait_seconds=5)


def job_files(output):
    """{suffix: bytes} of what a tar job leaves a user: the output, its errors and members index, its record."""
    suffixes = ("", ".errors.csv", ".members.parquet", ".run.json")
    if str(output).startswith("s3://"):
        fs, name = store(), str(output)[len("s3://"):]
        return {suffix: fs.cat_file(name + suffix) for suffix in suffixes if fs.exists(name + suffix)}
    return {suffix: Path(str(output) + suffix).read_bytes() for suffix in suffixes
            if Path(str(output) + suffix).exists()}


@pytest.mark.parametrize("into", ["local", "store"])
def test_tars_in_a_store_on_three_ranks_one_killed_mid_tar_resumed_on_two_are_one_process_s_bytes(s3_tars, tmp_path,
                                                                                                   into,
                                                                                                   s3_tars_single,
                                                                                                   job_child_zygote):
    output = tmp_path / "out.parquet" if into == "local" else "s3://bucket/%s/out.parquet" % tmp_path.name
    shard_1 = str(output) + ".shards/shard-000001"
    exists = Path.exists if into == "local" else (lambda path: store().exists(str(path)[len("s3://"):]))
    marker = tmp_path / "steps"
    marker.write_text("")
    child = job_child_zygote.spawn([CHILD, s3_tars, str(output), "parquet", "--distributed", "static", "--rank", "1",
                                    "--world-size", "3", "--shard-size", "1", "--step-seconds", "0.5", "--marker",
                                    str(marker)], stderr=subprocess.PIPE)
    # A store job's attempts are on this host, outside its staging folder, as a local one's are beside it.
    attempts = Path(str(output) + ".attempts") if into == "local" else attempts_folder(str(output))
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while attempt_rows(attempts) < 2:  # tar 1 (4 steps of 2 images) under way, its first batch committed
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not exists(Path(shard_1) if into == "local" else shard_1)
    kept = attempt_rows(attempts)  # the rows its attempt committed, resumed by the rerun on this host
    assert 2 <= kept <= 7
    for rank in (0, 2):
        jobs.run(job_child.config(s3_tars, output, "parquet", static(rank, 3)))
    assert not exists(output)  # tar 1 is missing
    # Resumed without --shard-size: the shard size the job was frozen with (a tar a shard) is taken.
    first = jobs.run(job_child.config(s3_tars, output, "parquet", static(0, 2, None)))  # tars 0 and 2: done
    assert (first.written, first.already_done, first.pending_shards) == (0, 16, (1,))
    last = jobs.run(job_child.config(s3_tars, output, "parquet", static(1, 2, None)))  # tar 1: its attempt resumed
    assert (last.written, last.already_done, last.failed) == (7 - kept, kept, 1)  # a/bad.png is in tar 1
    mine, theirs = job_files(output), s3_tars_single
    assert set(mine) == set(theirs) == {"", ".errors.csv", ".members.parquet", ".run.json"}
    assert {suffix: mine[suffix] for suffix in ("", ".errors.csv", ".members.parquet")} == \
        {suffix: theirs[suffix] for suffix in ("", ".errors.csv", ".members.parquet")}
    keys = pq.read_table(io.BytesIO(mine[""]), columns=["path"]).column("path").to_pylist()
    assert keys[8] == "tar://a/16.png::s3://bucket/ranks/000001.tar"
    if into == "store":  # an image read back by one byte range, with the index in the store
        local_index = tmp_path / "members.parquet"
        local_index.write_bytes(mine[".members.parquet"])
        assert read_member(keys[8], local_index) == store().cat_file("bucket/ranks/000001.tar")[
            read_index(local_index)[8].offset:][:read_index(local_index)[8].size]
        again = jobs.run(job_child.config(s3_tars, output, "parquet"))  # one host: finished, nothing computed
        assert (again.written, again.already_done, again.failed) == (0, 23, 1)


def test_a_damaged_tar_costs_only_its_own_images_each_accounted_for(job_images, local_tars, tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for tar in local_tars:
        (shards / tar.name).write_bytes(tar.read_bytes())
    middle = (shards / "000001.tar").read_bytes()
    (shards / "000001.tar").write_bytes(middle[:512 * 7 + 100])  # 3 members whole (2 blocks each), the 4th cut
    (shards / "000003.tar").write_bytes(b"a text file, not a tar" * 30)
    output = tmp_path / "out.csv"
    summary = jobs.run(job_child.config(shards / "*.tar", output, "csv"))
    assert summary.exit_status == 3
    keys = [key for key, _ in rows(output)]
    failed = errors(output)
    index = [entry.key for entry in read_index(Path(str(output) + ".members.parquet"))]
    assert sorted(keys + [key for key, _ in failed]) == sorted(index)  # every image: a row or an error
    assert sum(key.endswith("000000.tar") for key in keys) == 8 and sum(key.endswith("000002.tar") for key in keys) == 8
    assert [member(key) for key in keys if key.endswith("000001.tar")] == ["a/16.png", "a/18.png", "a/20.png"]
    assert [(key, kind) for key, kind in failed if key.endswith("000001.tar")] == [
        ("tar://a/22.png::%s" % (shards / "000001.tar"), "corrupt")]  # the rest of the tar was never there
    assert (str(shards / "000003.tar"), "corrupt") in failed


def test_an_object_changed_after_its_row_was_written_refuses_the_rerun(job_images, s3_store, tmp_path):
    upload(job_images / "a", "s3://bucket/changing/photos/")
    output = tmp_path / "out.csv"
    jobs.run(job_child.config("s3://bucket/changing/photos/", output, "csv"))
    data = store().cat("bucket/changing/photos/00.png")
    store().pipe("bucket/changing/photos/00.png", data[:-1] + bytes([data[-1] ^ 1]))  # same size: its ETag tells
    with pytest.raises(ValueError, match=r"1 image changed after its row was written \(00.png\)"):
        jobs.run(job_child.config("s3://bucket/changing/photos/", output, "csv"))
    store().pipe("bucket/changing/photos/00.png", data)
    store().pipe("bucket/changing/photos/zz.png", data)
    with pytest.raises(ValueError, match=r"1 image added \(zz.png\)"):
        jobs.run(job_child.config("s3://bucket/changing/photos/", output, "csv"))


def test_a_tar_replaced_after_its_shard_was_committed_is_refused_naming_the_shard(local_tars, s3_store, tmp_path):
    for tar in local_tars:
        store().pipe("bucket/replaced/%s" % tar.name, tar.read_bytes())
    pattern = "s3://bucket/replaced/*.tar"
    output = tmp_path / "out.csv"
    jobs.run(job_child.config(pattern, output, "csv", static(0, 1)))
    store().pipe("bucket/replaced/000001.tar", local_tars[0].read_bytes())
    with pytest.raises(ValueError, match="000001.tar"):
        jobs.run(job_child.config(pattern, output, "csv"))


def test_an_image_list_of_urls_retries_a_throttled_store_then_records_it(job_images, folder_output, http_server,
                                                                          monkeypatch, tmp_path):
    from parallel.inputs import remote
    monkeypatch.setattr(remote, "BACKOFF_SECONDS", 0.01)
    names = ["a/00.png", "a/02.png", "b/01.png", "b/03.png"]
    for name in names:
        (http_server.root / name).parent.mkdir(exist_ok=True)
        (http_server.root / name).write_bytes((job_images / name).read_bytes())
    listing = tmp_path / "urls.txt"
    listing.write_text("".join("%s/%s\n" % (http_server.url, name) for name in names))
    http_server.failures.update({"/a/02.png": remote.TRIES - 1, "/b/03.png": 100})
    output = tmp_path / "out.csv"
    summary = jobs.run(job_child.config(tmp_path, output, "csv", images_from=listing))
    assert (summary.written, summary.failed) == (3, 1)
    assert errors(output) == [(http_server.url + "/b/03.png", "unreachable")]
    expected = dict(rows(folder_output))
    assert rows(output) == [(http_server.url + "/" + name, expected[name]) for name in names[:3]]


def test_overwrite_starts_a_tar_job_afresh_on_one_process(local_tars, tmp_path):
    pattern = str(local_tars[0].parent / "*.tar")
    output = tmp_path / "out.csv"
    first = jobs.run(job_child.config(pattern, output, "csv"))
    before = job_outputs(output)
    again = jobs.run(dataclasses.replace(job_child.config(pattern, output, "csv"), overwrite=True))
    assert (first.written, again.written, again.already_done) == (23, 23, 0)
    assert job_outputs(output) == before and Path(str(output) + ".members.parquet").exists()


def test_a_store_stopped_mid_run_stops_it_with_one_error_and_the_rerun_resumes(job_images, folder_output, http_server,
                                                                               monkeypatch, tmp_path):
    import threading

    from parallel import engine
    from parallel.inputs import remote
    monkeypatch.setattr(remote, "BACKOFF_SECONDS", 0.01)
    names = [key for key, _ in rows(folder_output)] + ["a/bad.png"]
    for name in names:
        (http_server.root / name).parent.mkdir(exist_ok=True)
        (http_server.root / name).write_bytes((job_images / name).read_bytes())
    listing = tmp_path / "urls.txt"
    listing.write_text("".join("%s/%s\n" % (http_server.url, name) for name in names))
    output, marker = tmp_path / "out.csv", tmp_path / "steps"
    marker.write_text("")

    def stop_the_store():
        while marker.read_text().count("step") < 1:
            time.sleep(0.01)
        http_server.shutdown()
        http_server.server_close()

    stopper = threading.Thread(target=stop_the_store)
    stopper.start()
    with pytest.raises(engine.RunError, match="cannot connect to the store of http://127.0.0.1.*rerun the same command"):
        jobs.run(job_child.config(tmp_path, output, "csv", images_from=listing, step_seconds=0.2, marker=marker))
    stopper.join()
    done = committed_rows(output)  # in the attempt at its shard, which the rerun resumes
    blamed = list(Path(str(output) + ".attempts").glob("*/*errors.csv")) + list(tmp_path.glob("out.csv.errors.csv"))
    assert 0 < done < 23 and blamed == []  # no image is blamed for the store
    again = serve(http_server.root, http_server.server_address[1])  # the store is back
    try:
        rerun = jobs.run(job_child.config(tmp_path, output, "csv", images_from=listing))
    finally:
        again.shutdown()
        again.server_close()
    assert (rerun.already_done, rerun.written, rerun.failed) == (done, 23 - done, 1)
    expected = dict(rows(folder_output))
    assert rows(output) == [(http_server.url + "/" + name, expected[name]) for name in sorted(expected)]


def test_small_tars_share_a_shard_of_a_fixed_group_on_any_number_of_processes(local_tars, tmp_path):
    from parallel.inputs.manifest import read_job
    pattern = str(local_tars[0].parent / "*.tar")
    alone = tmp_path / "alone.csv"
    jobs.run(job_child.config(pattern, alone, "csv", static(0, 1)))  # a tar a shard
    grouped = tmp_path / "grouped.csv"
    summary = jobs.run(job_child.config(pattern, grouped, "csv"))  # by their sizes: these tiny tars, one shard
    assert (summary.written, summary.failed) == (23, 1)
    assert [read_job(str(output) + ".manifest.parquet")["shard_size"] for output in (alone, grouped)] == [1, 3]
    pairs = tmp_path / "pairs.csv"  # 2 tars a shard, on 2 processes: shards [0, 1] and [2]
    assert jobs.run(job_child.config(pattern, pairs, "csv", static(1, 2, 2))).pending_shards == (0,)
    jobs.run(job_child.config(pattern, pairs, "csv", static(0, 2, 2)))
    readable = [{suffix: files for suffix, files in job_files(output).items() if suffix != ".run.json"}
                for output in (alone, grouped, pairs)]
    assert readable[0] == readable[1] == readable[2] and set(readable[0]) == {"", ".errors.csv", ".members.parquet"}


def test_a_group_of_tars_killed_mid_way_is_resumed_after_its_committed_batches(local_tars, tmp_path, local_tars_single,
                                                                                job_child_zygote):
    pattern = str(local_tars[0].parent / "*.tar")
    output, marker = tmp_path / "out.csv", tmp_path / "steps"
    marker.write_text("")
    child = job_child_zygote.spawn([CHILD, pattern, str(output), "csv", "--distributed", "static", "--rank", "0",
                                    "--world-size", "1", "--shard-size", "2", "--step-seconds", "0.3", "--marker",
                                    str(marker)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while marker.read_text().count("step") < 6 or committed_rows(output) < 1:  # tar 1 of the group under way
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not output.exists() and not (tmp_path / "out.csv.shards" / "shard-000000").exists()
    kept = committed_rows(output)  # the batches the attempt committed: its members are read past by the rerun
    assert kept > 0
    again = jobs.run(job_child.config(pattern, output, "csv"))  # one host: the recorded 2 tars a shard
    assert (again.written, again.failed, again.already_done) == (23 - kept, 1, kept)
    assert {suffix: files for suffix, files in job_files(output).items() if suffix != ".run.json"} == \
        {suffix: files for suffix, files in local_tars_single.items() if suffix != ".run.json"}


def test_a_tar_job_into_a_store_output_on_one_host_is_the_local_run_s_bytes(local_tars, local_tars_single, s3_store,
                                                                           tmp_path):
    pattern = str(local_tars[0].parent / "*.tar")
    output = "s3://bucket/%s/out.csv" % tmp_path.name
    summary = jobs.run(job_child.config(pattern, output, "csv"))
    assert (summary.written, summary.failed, summary.exit_status) == (23, 1, 3)
    mine, theirs = job_files(output), local_tars_single
    assert {suffix: mine[suffix] for suffix in ("", ".errors.csv", ".members.parquet")} == \
        {suffix: theirs[suffix] for suffix in ("", ".errors.csv", ".members.parquet")}
    # and the shard of the failed member, kept: every rerun retries it
    assert sorted(name for name in store().find("bucket/%s" % tmp_path.name) if ".shards/" not in name) == sorted(
        "bucket/%s/out.csv%s" % (tmp_path.name, suffix)
        for suffix in ("", ".errors.csv", ".ledger.jsonl", ".members.parquet", ".manifest.parquet", ".run.json"))


def wids_index(urls):
    """A webdataset (wids) shard index of `urls`, as widsindex writes one."""
    return json.dumps({"__kind__": "wids-shard-index-v1", "wids_version": 1, "name": "test",
                       "shardlist": [{"url": url, "nsamples": 9} for url in urls]}).encode()


def test_a_wids_shard_index_names_the_tars_of_the_job_locally_and_in_a_store(job_images, folder_output, local_tars,
                                                                             s3_store, tmp_path):
    index = local_tars[0].parent / "index.json"
    index.write_bytes(wids_index([tar.name for tar in local_tars]))  # relative to the index's folder
    store().pipe("bucket/wids/index.json", wids_index(["%06d.tar" % number for number in range(3)]))
    for tar in local_tars:
        store().pipe("bucket/wids/%s" % tar.name, tar.read_bytes())
    for images, pattern in (str(index), str(local_tars[0].parent / "*.tar")), ("s3://bucket/wids/index.json",
                                                                               "s3://bucket/wids/*.tar"):
        output = tmp_path / ("%d.csv" % len(images))
        summary = jobs.run(job_child.config(images, output, "csv"))
        assert (summary.written, summary.failed) == (23, 1)
        assert [features for _, features in rows(output)] == [features for _, features in rows(folder_output)]
        again = jobs.run(job_child.config(pattern, output, "csv"))  # the index's tars are the pattern's: one job
        assert (again.written, again.already_done, again.failed) == (0, 23, 1)
    index.unlink()  # the tars' folder is the module's
    bad = tmp_path / "index.json"
    bad.write_bytes(b'{"shards": []}')
    with pytest.raises(ValueError, match="^images=.*index.json is not a readable wids shard index"):
        jobs.run(job_child.config(str(bad), tmp_path / "bad.csv", "csv"))
    assert not list(tmp_path.glob("bad.csv*"))


def test_a_mistyped_tar_or_a_scheme_that_is_no_store_is_a_usage_error_with_nothing_written(local_tars, tmp_path):
    output = tmp_path / "out.csv"
    mistyped = tmp_path / "shards" / "000000.tar"
    for images, message in ((str(mistyped), r"names no tar that exists: .*000000.tar: no such file"),
                            (str(tmp_path / "shards" / "*.tar"), "matches none"),
                            ("ftp://127.0.0.1/shards/000000.tar", "ftp:// is not a store this program reads")):
        with pytest.raises(ValueError, match=message):
            jobs.run(job_child.config(images, output, "csv"))
    assert sorted(path.name for path in tmp_path.iterdir()) == []  # nothing written, nothing to resume
    mistyped.parent.mkdir()
    mistyped.write_bytes(local_tars[0].read_bytes())  # the tar the user meant, there now: computed
    summary = jobs.run(job_child.config(str(mistyped), output, "csv"))
    assert (summary.written, summary.failed, summary.exit_status) == (8, 0, 0)


def test_a_tar_replaced_in_the_store_while_the_job_reads_it_leaves_no_row_of_either_version(local_tars, s3_store,
                                                                                             tmp_path, monkeypatch):
    from parallel.inputs import locations, remote
    store().pipe("bucket/swapped/000000.tar", local_tars[0].read_bytes())
    monkeypatch.setattr(locations, "STREAM_BLOCK", 4096)  # several ranged GETs: the replacement lands in between
    real, reads = remote.fetch, []

    def fetch(url, start=None, stop=None, version=None):
        data = real(url, start, stop, version)
        reads.append(url)
        if len(reads) == 1:
            store().pipe("bucket/swapped/000000.tar", local_tars[1].read_bytes())
        return data
    monkeypatch.setattr(remote, "fetch", fetch)
    output = tmp_path / "out.csv"
    config = job_child.config("s3://bucket/swapped/000000.tar", output, "csv")
    with pytest.raises(engine.RunError, match="000000.tar changed since the job listed it .*rerun the same command"):
        jobs.run(config)
    assert not output.exists() and not list(tmp_path.glob("out.csv.shards/*/features*"))
    assert not list(tmp_path.glob("out.csv.attempts/*"))  # nothing of the attempt kept
    monkeypatch.setattr(remote, "fetch", real)
    rerun = jobs.run(config)  # the tar as it is now: its new version recorded, then read
    with tarfile.open(local_tars[1]) as tar:
        members = [member.name for member in tar.getmembers() if member.name.endswith(".png")]
    rows = [line.split(",")[0] for line in output.read_text().splitlines()[1:]]
    assert rerun.written + rerun.failed == len(members) and all(key.split("::")[0][len("tar://"):] in members
                                                                 for key in rows)
