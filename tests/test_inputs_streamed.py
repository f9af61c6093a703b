"""Jobs over Parquet and TFRecord files (parallel.inputs.streamed): the same job as the images as files.

Files written as datasets, img2dataset and TensorFlow's ImageNet scripts write them (tests/dataset_files.py),
computed by job_child's colour model: the features of the folder's images, byte for byte, on one
process and on three static ranks, from local files and from the loopback S3 store; a kill costs a
batch; mistakes are one line; what --keep keeps is beside each row.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dataset_files import LAYOUTS, SUFFIXES, caption, write_files
from hangs import HANG_SECONDS
import job_child
from outputs import attempt_rows
from parallel import jobs
from parallel.inputs.sources import parse_images
from parallel.inputs.tars import MEMBERS_SUFFIX, kept_names, read_index, read_member, split_key
from stores import store, tar_bytes, write_tars

CHILD = str(Path(job_child.__file__))
CLI_CHILD = str(Path(__file__).resolve().parent / "cli_child.py")


def rows(output):
    """[(key, features as text)] of a CSV output, in order."""
    with open(output, newline="") as file:
        return [(row[0], tuple(row[1:])) for row in list(csv.reader(file))[1:]]


def errors(output):
    path = Path(str(output) + ".errors.csv")
    with open(path, newline="") as file:
        return [(row["path"], row["kind"]) for row in csv.DictReader(file)]


def job_files(output):
    """{suffix: bytes} of what a job leaves a user: the output, its errors and members index, its record."""
    suffixes = ("", ".errors.csv", MEMBERS_SUFFIX, ".run.json")
    if str(output).startswith("s3://"):
        fs, name = store(), str(output)[len("s3://"):]
        return {suffix: fs.cat_file(name + suffix) for suffix in suffixes if fs.exists(name + suffix)}
    return {suffix: Path(str(output) + suffix).read_bytes() for suffix in suffixes
            if Path(str(output) + suffix).exists()}


def static(rank, world_size):
    """Rank `rank` of `world_size`, a file a shard (these files are tiny: by default they would share one)."""
    return jobs.Distribution(kind="static", rank=rank, world_size=world_size, shard_size=1, wait_seconds=5)


@pytest.fixture(scope="module")
def folder_output(job_images, tmp_path_factory):
    output = tmp_path_factory.mktemp("folder") / "out.csv"
    jobs.run(job_child.config(job_images, output, "csv"))
    return output


@pytest.fixture(scope="module", params=LAYOUTS)
def dataset(request, job_images, tmp_path_factory):
    """(layout, the pattern of its 3 files of 8 images: 23 PNGs and a file that is none)."""
    layout = request.param
    files = write_files(layout, job_images, tmp_path_factory.mktemp(layout), 8)
    return layout, str(files[0].parent / ("{000000..000002}" + SUFFIXES[layout]))


def own_key(layout, position, name):
    """The <id> of a key: the dataset's own key where it has one, else the row's number in its file."""
    if layout == "img2dataset" or layout == "wds_tfrecord":
        return "%09d" % position
    return name if layout == "imagenet" else "#%d" % (position % 8)


def test_each_layout_gives_the_folder_s_features_byte_for_byte_and_reads_a_row_back(dataset, folder_output,
                                                                                     job_images, tmp_path):
    layout, pattern = dataset
    output = tmp_path / "out.csv"
    summary = jobs.run(job_child.config(pattern, output, "csv"))
    assert (summary.written, summary.failed) == (23, 1)
    got, reference = rows(output), rows(folder_output)
    assert [features for _, features in got] == [features for _, features in reference]
    names = sorted(key for key, _ in reference + [("a/bad.png", None)])
    prefix = "parquet://" if SUFFIXES[layout] == ".parquet" else "tfrecord://"
    expected = ["%s%s::%s" % (prefix, own_key(layout, names.index(name), name),
                              pattern.replace("{000000..000002}", "%06d" % (names.index(name) // 8)))
                for name, _ in reference]
    assert [key for key, _ in got] == expected
    assert [kind for _, kind in errors(output)] == ["not_an_image"] and split_key(errors(output)[0][0])[0] == \
        own_key(layout, names.index("a/bad.png"), "a/bad.png")
    index = Path(str(output) + MEMBERS_SUFFIX)
    for row in (0, 9, 22):  # read back by its entry in the index, the file not read again
        assert read_member(got[row][0], index) == (job_images / reference[row][0]).read_bytes()
    again = jobs.run(job_child.config(pattern, output, "csv"))  # finished: nothing to do
    assert (again.written, again.already_done, again.failed) == (0, 23, 1)


def ranks_give_one_process_s_bytes(pattern, output, folder_output, tmp_path):
    """Runs the job over `pattern` on one process, and on 3 static ranks into `output`; asserts the same bytes
    and the folder's features."""
    single = tmp_path / "single.parquet"
    jobs.run(job_child.config(pattern, single, "parquet"))
    for rank in (2, 0, 1):
        jobs.run(job_child.config(pattern, output, "parquet", static(rank, 3)))
    mine, theirs = job_files(output), job_files(single)
    assert set(mine) == set(theirs) == {"", ".errors.csv", MEMBERS_SUFFIX, ".run.json"}
    assert {suffix: mine[suffix] for suffix in ("", ".errors.csv", MEMBERS_SUFFIX)} == \
        {suffix: theirs[suffix] for suffix in ("", ".errors.csv", MEMBERS_SUFFIX)}
    features = np.array(pq.read_table(single).column("colour").to_pylist(), np.float32)
    reference = np.array([features for _, features in rows(folder_output)], np.float32)  # CSV's text: float32s exactly
    assert features.shape == (23, 6) and np.array_equal(features, reference)


def test_three_static_ranks_are_one_process_s_bytes(dataset, folder_output, tmp_path):
    ranks_give_one_process_s_bytes(dataset[1], tmp_path / "ranks.parquet", folder_output, tmp_path)


@pytest.mark.parametrize("layout", ["hf", "wds_tfrecord"])  # a Parquet layout and a TFRecord one stand for their kinds
def test_three_static_ranks_are_one_process_s_bytes_in_a_store(layout, job_images, s3_store, folder_output, tmp_path):
    for path in write_files(layout, job_images, tmp_path / "data", 8):
        store().pipe("bucket/%s-%s/%s" % (layout, tmp_path.name, path.name), path.read_bytes())
    prefix = "s3://bucket/%s-%s/" % (layout, tmp_path.name)  # the output beside the files its glob names
    ranks_give_one_process_s_bytes(prefix + "*" + SUFFIXES[layout], prefix + "ranks.parquet", folder_output, tmp_path)


@pytest.mark.parametrize("layout", ["img2dataset", "wds_tfrecord"])
def test_a_process_killed_mid_file_costs_at_most_a_batch_and_the_rerun_is_one_run_s_bytes(layout, job_images,
                                                                                          tmp_path,
                                                                                          job_child_zygote):
    (path,) = write_files(layout, job_images, tmp_path / "data", 24)  # one file: one shard of 12 steps
    single = tmp_path / "single.parquet"
    jobs.run(job_child.config(str(path), single, "parquet"))
    output = tmp_path / "out.parquet"
    marker = tmp_path / "steps"
    marker.write_text("")
    child = job_child_zygote.spawn([CHILD, str(path), str(output), "parquet", "--step-seconds", "0.5", "--marker",
                                    str(marker)], stderr=subprocess.PIPE)
    attempts = Path(str(output) + ".attempts")
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while attempt_rows(attempts) < 2:  # a batch of the file committed
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    kept = attempt_rows(attempts)
    assert 2 <= kept < 23
    rerun = jobs.run(job_child.config(str(path), output, "parquet"))
    assert (rerun.written, rerun.already_done, rerun.failed) == (23 - kept, kept, 1)
    mine, theirs = job_files(output), job_files(single)
    assert {suffix: mine[suffix] for suffix in ("", ".errors.csv", MEMBERS_SUFFIX)} == \
        {suffix: theirs[suffix] for suffix in ("", ".errors.csv", MEMBERS_SUFFIX)}


def test_a_damaged_record_fails_alone_and_a_file_cut_short_fails_from_there(job_images, folder_output, tmp_path):
    files = write_files("imagenet", job_images, tmp_path / "data", 8)
    data = bytearray(files[0].read_bytes())
    data[200] ^= 0xFF  # in the first record's data: its checksum no longer holds
    files[0].write_bytes(bytes(data))
    files[2].write_bytes(files[2].read_bytes()[:-100])  # the last record cut short
    output = tmp_path / "out.csv"
    summary = jobs.run(job_child.config(str(tmp_path / "data" / "*.tfrecord"), output, "csv"))
    failed = errors(output)
    assert summary.failed == len(failed) == 3  # the damaged record, bad.png, the file's cut end
    assert failed[0] == ("tfrecord://#0::%s" % files[0], "corrupt")
    assert failed[-1] == (str(files[2]), "corrupt")
    reference = rows(folder_output)
    got = rows(output)
    assert [features for _, features in got] == [features for _, features in reference[1:-1]]


# -- a finished job's files changed, or a rerun killed in its retry: the next rerun proves or rebuilds, never exit 1 --

@pytest.fixture(scope="module")
def finished_streams(job_images, tmp_path_factory):
    """{kind: (its images, a folder holding its finished job out.csv, {suffix: bytes} of what the job left)}: tars,
    Parquet (hf) and TFRecord (wds_tfrecord) of the 24 files (a/bad.png fails), and tars of the 23 images alone."""
    states = {}
    for kind in ("tars", "hf", "wds_tfrecord", "clean tars"):
        data = tmp_path_factory.mktemp("data")
        if kind.endswith("tars"):
            write_tars(job_images, data, 8, pattern="[0-9]*.png" if kind == "clean tars" else "*.png")
            images = str(data / "*.tar")
        else:
            write_files(kind, job_images, data, 8)
            images = str(data / ("*" + SUFFIXES[kind]))
        folder = tmp_path_factory.mktemp("finished")
        jobs.run(job_child.config(images, folder / "out.csv", "csv"))
        states[kind] = images, folder, job_files(folder / "out.csv")
    return states


def finished_copy(finished_streams, kind, tmp_path):
    """(its images, the output of a copy of the finished job of `kind`, what the job left)."""
    images, folder, reference = finished_streams[kind]
    shutil.copytree(folder, tmp_path / "job")
    return images, tmp_path / "job" / "out.csv", reference


def rerun_is_done(images, output, reference, failed=1):
    """Reruns the job: its 23 images done, `failed` failing, the files of the job's uninterrupted run; then done."""
    summary = jobs.run(job_child.config(images, output, "csv"))
    assert (summary.written + summary.already_done, summary.failed) == (23, failed)
    assert job_files(output) == reference
    again = jobs.run(job_child.config(images, output, "csv"))
    assert (again.written, again.already_done, again.failed) == (0, 23, failed)
    return summary


@pytest.mark.parametrize("kind, damage", [("tars", "deleted"), ("tars", "cut"), ("tars", "appended to"),
                                          ("clean tars", "made empty"), ("hf", "deleted"), ("wds_tfrecord", "cut")])
def test_a_finished_job_s_errors_file_changed_is_written_again_from_the_ledger(finished_streams, tmp_path, kind,
                                                                                damage):
    images, output, reference = finished_copy(finished_streams, kind, tmp_path)
    errors_file = Path(str(output) + ".errors.csv")
    if damage == "deleted":
        errors_file.unlink()
    elif damage == "cut":
        errors_file.write_bytes(errors_file.read_bytes()[:-5])
    elif damage == "appended to":
        errors_file.write_bytes(errors_file.read_bytes() + b"tar://x.png::y.tar,corrupt,z\n")
    else:
        errors_file.write_bytes(b"")  # where the job had none: no image failed
    summary = rerun_is_done(images, output, reference, failed=0 if kind == "clean tars" else 1)
    assert summary.written == 0  # nothing computed: the rows are proven, the errors file written again


@pytest.mark.parametrize("kind, where", [("tars", "footer"), ("tars", "data page"), ("hf", "data page")])
def test_a_byte_changed_in_a_finished_job_s_index_of_members_is_found_and_the_job_computed_again(
        finished_streams, tmp_path, caplog, kind, where):
    """The index is what a retry reads each member back by, in its order: its SHA-256 proves it; changed, with its
    shards gone, the job is computed again (a size kept, a footer still read, changes nothing to that)."""
    images, output, reference = finished_copy(finished_streams, kind, tmp_path)
    index = Path(str(output) + MEMBERS_SUFFIX)
    data = bytearray(index.read_bytes())
    data[len(data) - 20 if where == "footer" else 10] ^= 0x01
    index.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="parallel"):
        summary = rerun_is_done(images, output, reference)
    assert summary.written == 23 and "its index of members is not the one it was closed with" in caplog.text


@pytest.mark.parametrize("kind, signal_name", [("tars", "SIGKILL"), ("hf", "SIGTERM")])
def test_a_rerun_killed_while_it_retries_a_failed_image_is_finished_by_the_next(finished_streams, tmp_path, kind,
                                                                                signal_name, job_child_zygote):
    """Killed (or stopped) between the ledger's `retried` line and its closing line: the job child sends itself
    the signal at that moment (job_child.py). The index of members the output was closed with still proves it."""
    from parallel.jobs.ledger import Ledger
    images, output, reference = finished_copy(finished_streams, kind, tmp_path)
    child = job_child_zygote.spawn([CHILD, images, str(output), "csv"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE,
                                   env=dict(os.environ, JOB_CHILD_SIGNAL_AFTER_RETRIED=signal_name))
    _, stderr = child.communicate()
    assert child.returncode == (-signal.SIGKILL if signal_name == "SIGKILL" else 130), stderr
    assert "retried" in Ledger(Path(str(output) + ".ledger.jsonl")).entries[-1]
    rerun_is_done(images, output, reference)


def test_a_retried_member_s_row_a_killed_retry_left_unmerged_goes_to_its_place_in_the_members_order(
        finished_streams, job_images, tmp_path, monkeypatch):
    """A member that failed once (a read that failed) has its row appended by the next run's retry; a kill before
    that retry closes the output leaves the row last. The run after puts it in its place: the job's own bytes."""
    from colour_jobs import Killed
    from parallel.inputs import streams
    from parallel.output import CsvWriter
    images, _, reference = finished_streams["tars"]
    output = tmp_path / "out.csv"
    flaky = (job_images / "a/02.png").read_bytes()
    decode = streams.decode_bytes_row
    with monkeypatch.context() as patch:
        patch.setattr(streams, "decode_bytes_row", lambda data, *rest: ("unreadable", "a read that failed")
                      if data == flaky else decode(data, *rest))
        first = jobs.run(job_child.config(images, output, "csv"))
    assert (first.written, first.failed) == (22, 2)

    def killed(self):
        raise Killed("the retry's rows appended, the output not closed")
    with monkeypatch.context() as patch:
        patch.setattr(CsvWriter, "close", killed)
        with pytest.raises(Killed):
            jobs.run(job_child.config(images, output, "csv"))
    rerun_is_done(images, output, reference)


def run_cli(zygote, *flags, cwd):
    """The command line (cli_child: the colour model in VGG16's place), in a process of its own: (exit status,
    stderr)."""
    done = zygote.spawn([CLI_CHILD, *map(str, flags), "--quiet", "--devices", "cpu:0", "--batch-size", "1"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd)
    _, stderr = done.communicate()
    return done.returncode, stderr


def test_a_file_of_another_kind_or_without_an_image_column_is_one_line_and_exit_2(job_images, tmp_path,
                                                                                   job_child_zygote):
    import pyarrow as pa
    (tmp_path / "text.parquet").write_text("not a parquet file\n" * 50)
    pq.write_table(pa.table({"name": ["a"], "pixels": pa.array([b"x"], pa.binary())}), tmp_path / "plain.parquet")
    (tmp_path / "text.tfrecord").write_text("not a tfrecord file\n" * 50)
    output = tmp_path / "out.csv"
    status, error = run_cli(job_child_zygote, "--images", tmp_path / "text.parquet", "--output", output, cwd=tmp_path)
    assert status == 2 and error.count("\n") == 1 and "is not a Parquet file" in error, error
    assert str(tmp_path / "text.parquet") in error and not output.exists()
    assert not Path(str(output) + ".manifest.parquet").exists()
    # The others, as the library raises them for the command line: one line, before anything is written.
    for images, said, options in (("text.tfrecord", "is not a TFRecord file", {}),
                                  ("plain.parquet", "has no image column .* pass --image-column NAME", {}),
                                  ("plain.parquet", "has no column 'nothing' to keep",
                                   {"image_column": "pixels", "keep": ("nothing",)})):
        with pytest.raises(ValueError, match=said) as refused:
            jobs.run(job_child.config(str(tmp_path / images), output, "csv", **options))
        assert "\n" not in str(refused.value) and not Path(str(output) + ".manifest.parquet").exists()
    summary = jobs.run(job_child.config(str(tmp_path / "plain.parquet"), output, "csv", image_column="pixels",
                                        keep=("name",)))
    assert (summary.written, summary.failed, summary.exit_status) == (0, 1, 3)  # b"x": a row, not an image
    assert read_index(Path(str(output) + MEMBERS_SUFFIX))[0].kept == ("a",)


def kept_rows(output):
    """{key: {name: value}} of what --keep kept beside the rows of `output`."""
    index = Path(str(output) + MEMBERS_SUFFIX)
    names = kept_names(index)
    return {entry.key: dict(zip(names, entry.kept)) for entry in read_index(index)}


def test_what_keep_names_is_beside_each_row_from_tars_parquet_and_tfrecord(job_images, tmp_path):
    names = sorted(path.relative_to(job_images).as_posix() for path in job_images.rglob("*.png"))
    # A WebDataset sample: its members one after the other, a sibling before its image or after it.
    members = [("a/00.txt", b"a <b>caption</b>"), ("a/00.png", (job_images / "a/00.png").read_bytes()),
               ("a/00.json", json.dumps({"url": "u0"}).encode()), ("a/02.png", (job_images / "a/02.png").read_bytes()),
               ("a/02.cls", b"7"), ("a/04.png", (job_images / "a/04.png").read_bytes()), ("a/04.txt", b"four")]
    tar = tmp_path / "samples.tar"
    tar.write_bytes(tar_bytes(members))
    output = tmp_path / "tars.csv"
    jobs.run(job_child.config(str(tar), output, "csv", keep=("txt", "json")))
    kept = kept_rows(output)
    assert kept == {"tar://a/00.png::%s" % tar: {"txt": "a <b>caption</b>", "json": '{"url": "u0"}'},
                    "tar://a/02.png::%s" % tar: {"txt": None, "json": None},
                    "tar://a/04.png::%s" % tar: {"txt": "four", "json": None}}
    # Parquet: datasets' caption column; img2dataset's caption and url.
    for layout, keep in (("hf", ("caption",)), ("img2dataset", ("caption", "url"))):
        (path,) = write_files(layout, job_images, tmp_path / layout, 24)
        output = tmp_path / ("%s.parquet" % layout)
        jobs.run(job_child.config(str(path), output, "parquet", keep=keep))
        keys = pq.read_table(output, columns=["path"]).column("path").to_pylist()
        kept = kept_rows(output)
        for key, name in zip(keys, [name for name in names if name != "a/bad.png"]):
            assert kept[key]["caption"] == caption(name)
        if layout == "img2dataset":
            assert kept[keys[0]]["url"] == "https://example.com/%s" % names[0]
            plain = tmp_path / "plain.parquet"  # the features never depend on what is kept beside them
            jobs.run(job_child.config(str(path), plain, "parquet"))
            assert plain.read_bytes() == output.read_bytes() and not kept_names(str(plain) + MEMBERS_SUFFIX)
    # TFRecord: ImageNet's label.
    (path,) = write_files("imagenet", job_images, tmp_path / "imagenet", 24)
    output = tmp_path / "imagenet.csv"
    jobs.run(job_child.config(str(path), output, "csv", keep=("image/class/label",)))
    kept = kept_rows(output)
    assert [kept[key]["image/class/label"] for key, _ in rows(output)] == \
        [str(names.index(name)) for name in names if name != "a/bad.png"]
    # Rows in the order of the index's entries: the index is the output's rows and its failures, in order.
    entries = [entry.key for entry in read_index(Path(str(output) + MEMBERS_SUFFIX))]
    assert [key for key, _ in rows(output)] == [key for key in entries if key not in dict(errors(output))]


def test_keep_and_image_column_are_refused_where_the_images_cannot_have_them(job_images, tmp_path):
    with pytest.raises(ValueError, match="keep=txt keeps values .* is a folder"):
        job_child.config(job_images, tmp_path / "out.csv", "csv", keep=("txt",))
    tars = write_tars(job_images, tmp_path / "tars", 24)
    with pytest.raises(ValueError, match="image_column=jpg names a column of Parquet or TFRecord files"):
        job_child.config(str(tars[0]), tmp_path / "out.csv", "csv", image_column="jpg")
    with pytest.raises(ValueError, match="images= takes files of one kind; got Parquet files and tars"):
        parse_images((str(tars[0]), str(tmp_path / "x.parquet")))


def test_an_output_beside_the_files_a_glob_names_is_never_taken_for_one_of_them(job_images, tmp_path):
    write_files("img2dataset", job_images, tmp_path / "data", 8)
    pattern, output = str(tmp_path / "data" / "*.parquet"), tmp_path / "data" / "feats.parquet"
    first = jobs.run(job_child.config(pattern, output, "parquet"))
    assert (first.written, first.failed) == (23, 1)
    assert sorted(path.name for path in (tmp_path / "data").glob("*.parquet")) == [
        "000000.parquet", "000001.parquet", "000002.parquet", "feats.parquet", "feats.parquet.manifest.parquet",
        "feats.parquet.members.parquet"]
    again = jobs.run(job_child.config(pattern, output, "parquet"))  # the same 3 files: finished, nothing to do
    assert (again.written, again.already_done, again.failed) == (0, 23, 1)


@pytest.mark.parametrize("layout", ["img2dataset", "imagenet", "wds_tfrecord"])
def test_a_file_replaced_in_the_store_while_the_job_reads_it_leaves_no_row_of_either_version(layout, job_images,
                                                                                             s3_store, tmp_path,
                                                                                             monkeypatch):
    from parallel import engine
    from parallel.inputs import locations, remote
    (old,) = write_files(layout, job_images, tmp_path / "old", 24)
    (new,) = write_files(layout, job_images, tmp_path / "new", 24, pattern="a/*.png")  # 12 images and bad.png
    url = "s3://bucket/swapped-%s/%s" % (layout, old.name)
    store().pipe(url[len("s3://"):], old.read_bytes())
    output = tmp_path / "out.csv"
    monkeypatch.setattr(locations, "STREAM_BLOCK", 1024)  # several ranged GETs: the replacement lands in between
    real, swapped = remote.fetch, []

    def fetch(location, start=None, stop=None, version=None):
        data = real(location, start, stop, version)
        if not swapped and Path(str(output) + ".manifest.parquet").exists():  # the job froze it and reads it now
            store().pipe(url[len("s3://"):], new.read_bytes())
            swapped.append(location)
        return data
    monkeypatch.setattr(remote, "fetch", fetch)
    config = job_child.config(url, output, "csv")
    with pytest.raises(engine.RunError, match="changed since the job listed it .*rerun the same command"):
        jobs.run(config)
    assert not output.exists() and not list(tmp_path.glob("out.csv.attempts/*"))  # nothing of the attempt kept
    monkeypatch.setattr(remote, "fetch", real)
    rerun = jobs.run(config)  # the file as it is now: its new version recorded, then read
    assert swapped == [url] and (rerun.written, rerun.failed) == (12, 1)


def test_a_first_file_replaced_since_it_was_listed_is_left_to_the_read_of_its_shard(job_images, s3_store, tmp_path):
    from parallel.inputs.remote import ObjectChanged
    from parallel.inputs.sources import TFRECORD
    from parallel.inputs.streamed import check_first
    from parallel.inputs.tfrecord_stream import check_file
    (path,) = write_files("imagenet", job_images, tmp_path, 24)
    store().pipe("bucket/check/000000.tfrecord", path.read_bytes())
    url = "s3://bucket/check/000000.tfrecord"
    with pytest.raises(ObjectChanged):  # the file's check reads the version the job listed
        check_file(url, version="0123456789abcdef")
    check_first(TFRECORD, [url], ["0123456789abcdef"], [len(path.read_bytes())])  # not a mistake of the command


def test_tensorflow_s_imagenet_files_named_without_an_ending_are_read_as_tfrecords(job_images, folder_output, tmp_path):
    for number, path in enumerate(write_files("imagenet", job_images, tmp_path / "imagenet", 8)):
        path.rename(path.with_name("train-%05d-of-00003" % number))
    output = tmp_path / "out.csv"
    summary = jobs.run(job_child.config(str(tmp_path / "imagenet" / "train-*"), output, "csv"))
    assert (summary.written, summary.failed) == (23, 1)
    got = rows(output)
    assert [features for _, features in got] == [features for _, features in rows(folder_output)]
    assert got[0][0] == "tfrecord://a/00.png::%s" % (tmp_path / "imagenet" / "train-00000-of-00003")


def test_a_large_parquet_file_is_cut_in_pieces_of_row_groups_each_a_shard_of_its_own(job_images, tmp_path, s3_store,
                                                                                      monkeypatch):
    from parallel.inputs import parquet_stream
    from parallel.inputs.manifest import manifest_path, read_job
    from parallel.jobs.shards import ShardedJob
    (path,) = write_files("hf", job_images, tmp_path / "data", 24)
    pq.write_table(pq.read_table(path), path, row_group_size=5)  # row groups of 5, 5, 5, 5, 4 rows
    whole = tmp_path / "whole.parquet"
    jobs.run(job_child.config(str(path), whole, "parquet"))  # one shard, the file read through
    monkeypatch.setattr(parquet_stream, "PIECE_BYTES", 1)  # each row group is more than a piece holds
    single = tmp_path / "single.parquet"
    summary = jobs.run(job_child.config(str(path), single, "parquet"))
    assert (summary.written, summary.failed) == (23, 1)
    job = ShardedJob(single)
    assert job.load_manifest().paths == ["%s::rows=%d-%d" % (path, start, min(start + 5, 24)) for start in
                                         range(0, 24, 5)]
    output = tmp_path / "ranks.parquet"
    for rank in (2, 0, 1):  # a piece a shard: 5 shards over 3 ranks
        jobs.run(job_child.config(str(path), output, "parquet", static(rank, 3)))
    recorded = read_job(manifest_path(output))
    assert (recorded["images"], recorded["shard_size"]) == (5, 1)  # 5 pieces, a piece a shard
    mine, theirs, unpieced = job_files(output), job_files(single), job_files(whole)
    for suffix in ("", ".errors.csv", MEMBERS_SUFFIX):  # the same rows, keys and entries as the file read whole
        assert mine[suffix] == theirs[suffix] == unpieced[suffix], suffix
    again = jobs.run(job_child.config(str(path), output, "parquet"))  # bad.png retried, in its piece's place
    assert (again.written, again.already_done, again.failed) == (0, 23, 1)
    assert job_files(output)[""] == unpieced[""]
    (keyed,) = write_files("img2dataset", job_images, tmp_path / "keyed", 24)  # row groups of 3, and own keys
    assert parquet_stream.pieces(str(keyed)) == [str(keyed)]  # a key is unique in its file: read whole, in one shard
    url = "s3://bucket/pieces-%s/train.parquet" % tmp_path.name  # in a store: cut from its footer, at its version
    store().pipe(url[len("s3://"):], path.read_bytes())
    assert parse_images(url).scan().paths == ["%s::rows=%d-%d" % (url, start, min(start + 5, 24)) for start in
                                              range(0, 24, 5)]
