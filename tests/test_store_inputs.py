"""Jobs over images in a store and in tars: the same rows as the same images in a folder, on one
process or many, through kills and resumes (real S3 and HTTP on loopback; the colour model)."""

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import job_child
from outputs import job_outputs
from parallel import jobs
from parallel.inputs.tars import read_index, read_member, split_key
from stores import http_server, s3, store, upload, write_tars  # noqa: F401 (fixtures)

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


def test_a_prefix_of_a_store_gives_the_folder_s_output_byte_for_byte(job_images, folder_output, s3, tmp_path):
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


def test_tars_in_a_store_and_tars_expanded_by_the_shell_are_the_same_job(job_images, folder_output, local_tars, s3,
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
