"""parallel.output.stores: one interface over a local folder and an S3-compatible store (moto on 127.0.0.1,
s3fs talking real HTTP to it), and the one-line errors of a store that cannot be written."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hangs import HANG_SECONDS
import s3_server
from parallel.output import OutputError
from parallel.output.durable import new_file_mode
from parallel.output.stores import LocalStore, ObjectStore, StoreError, is_url, open_store

REPOSITORY = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """A store of each kind, empty."""
    if request.param == "local":
        return open_store(tmp_path / "runs" / "feats.parquet")[0]
    s3 = request.getfixturevalue("s3")
    return open_store(s3.url("runs/feats.parquet"))[0]


@pytest.mark.parametrize("location, url", [
    ("s3://bucket/feats.parquet", True), ("gs://bucket/a/b.csv", True), ("S3://bucket/x", True),
    ("file:///tmp/x.csv", False), ("/tmp/s3://x", False), ("results/features.csv", False), ("x.csv", False)])
def test_is_url(location, url):
    assert is_url(location) is url


def test_open_store_splits_the_output_into_its_folder_and_name(s3, tmp_path):
    store, name = open_store(s3.url("runs/feats.parquet"))
    assert isinstance(store, ObjectStore) and name == "feats.parquet"
    assert store.url(name) == s3.url("runs/feats.parquet")
    local, name = open_store(tmp_path / "feats.csv")
    assert isinstance(local, LocalStore) and local.url(name) == str(tmp_path / "feats.csv")
    with pytest.raises(OutputError, match="^--output s3://bucket names no object"):
        open_store("s3://bucket")


def test_write_read_list_and_remove(store, tmp_path):
    assert store.read("feats.parquet") is None and store.list("feats.parquet.shards/") == {}
    store.write("feats.parquet.run.json", b"{}\n")
    local = tmp_path / "part"
    local.write_bytes(b"x" * 1000)
    store.upload("feats.parquet.shards/shard-000000/a/features.parquet", local)
    store.upload("feats.parquet.shards/shard-000001/b/_errors.csv", local)
    store.upload("feats.parquet.shardsx", local)  # beside the folder, not in it
    assert store.read("feats.parquet.run.json") == b"{}\n"
    assert store.exists("feats.parquet.run.json") and not store.exists("feats.parquet")
    assert store.list("feats.parquet.shards/") == {"feats.parquet.shards/shard-000000/a/features.parquet": 1000,
                                                   "feats.parquet.shards/shard-000001/b/_errors.csv": 1000}
    assert store.list("feats.parquet.shards/shard-000001/") == {"feats.parquet.shards/shard-000001/b/_errors.csv": 1000}
    with pytest.raises(ValueError, match="a store lists folders"):
        store.list("feats.parquet")
    assert store.download("feats.parquet.run.json", tmp_path / "copy") and (tmp_path / "copy").read_bytes() == b"{}\n"
    assert not store.download("missing", tmp_path / "none") and not (tmp_path / "none").exists()
    store.write("feats.parquet.run.json", b"new")  # replaced whole
    assert store.read("feats.parquet.run.json") == b"new"
    store.remove(list(store.list("feats.parquet.shards/")) + ["feats.parquet.run.json", "never-there"])
    assert store.list("feats.parquet.shards/") == {} and store.exists("feats.parquet.shardsx")


def test_a_read_a_size_a_check_or_a_listing_is_one_request_there_or_not(s3, monkeypatch):
    """What a job asks a store most, each one request: s3fs's cat_file asks for the size before its GET, its info
    lists the prefix after a HEAD that found nothing (to call it a folder), its find asks twice more of a folder
    it found empty."""
    import werkzeug.serving
    asked = []
    real = werkzeug.serving.WSGIRequestHandler.run_wsgi

    def logged(handler):
        if handler.path.startswith("/" + s3.bucket):  # its objects, and listings of it
            asked.append(handler.command)
        return real(handler)

    monkeypatch.setattr(werkzeug.serving.WSGIRequestHandler, "run_wsgi", logged)
    store, _ = open_store(s3.url("runs/feats.parquet"))
    s3.filesystem.pipe_file("%s/runs/feats.parquet.run.json" % s3.bucket, b"{}\n")
    asked.clear()
    assert store.read("feats.parquet.run.json") == b"{}\n" and store.read("feats.parquet") is None
    assert store.sizes(["feats.parquet.run.json", "feats.parquet"]) == {"feats.parquet.run.json": 3}
    assert store.exists("feats.parquet.run.json") and not store.exists("feats.parquet")
    assert store.list("feats.parquet.shards/") == {}
    assert asked == ["GET", "GET", "HEAD", "HEAD", "HEAD", "HEAD", "GET"]


def test_create_is_done_once_the_second_creator_is_told(store, tmp_path):
    """What replaces the manifest's lock in a store: a conditional PUT (If-None-Match: *)."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_bytes(b"first")
    second.write_bytes(b"second")
    assert store.create("feats.parquet.manifest.parquet", first) is True
    assert store.create("feats.parquet.manifest.parquet", second) is False
    assert store.read("feats.parquet.manifest.parquet") == b"first"
    if isinstance(store, LocalStore):  # no temporary file left, and the mode of a new file, not mkstemp's 0o600
        assert sorted(path.name for path in store.folder.iterdir()) == ["feats.parquet.manifest.parquet"]
        mode = (store.folder / "feats.parquet.manifest.parquet").stat().st_mode & 0o777
        assert mode == new_file_mode()


def test_a_missing_bucket_is_one_line(s3):
    store, name = open_store("s3://%s-missing/feats.csv" % s3.bucket)
    with pytest.raises(OutputError, match=r"^--output s3://\S+-missing/feats.csv: the bucket \S+-missing does not "
                                          r"exist \(or this account may not see it\): create it, or choose another"):
        store.check(name)


def _check_in_child(url, env):
    """store.check(...) in a fresh process (s3fs keeps credentials per process): (exit status, stderr)."""
    code = ("import sys; from parallel.output.stores import open_store\n"
            "store, name = open_store(sys.argv[1])\n"
            "try:\n    store.check(name)\n"
            "except ValueError as error:\n    print(error, file=sys.stderr); sys.exit(2)\n")
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, timeout=HANG_SECONDS,
                          env=dict(env, PYTHONPATH=str(REPOSITORY)))
    return done.returncode, done.stderr


def test_no_credentials_is_one_line_naming_the_conventions(s3):
    status, error = _check_in_child(s3.url("feats.csv"), s3_server.environment(s3.endpoint, credentials=False))
    assert status == 2 and error.count("\n") == 1, error
    assert error.startswith("--output %s: no credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                            "or AWS_PROFILE" % s3.url("feats.csv")), error


def test_a_store_not_reachable_is_one_line_naming_the_endpoint(s3):
    import socket
    with socket.socket() as closed:  # a loopback port nothing listens on
        closed.bind(("127.0.0.1", 0))
        endpoint = "http://127.0.0.1:%d" % closed.getsockname()[1]
    status, error = _check_in_child(s3.url("feats.csv"), dict(s3_server.environment(endpoint), AWS_MAX_ATTEMPTS="1"))
    assert status == 2 and error.count("\n") == 1, error
    assert "the store is not reachable" in error and "AWS_ENDPOINT_URL_S3=%s" % endpoint in error, error


def test_a_plain_install_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fsspec", None)  # as if fsspec were not installed
    with pytest.raises(OutputError, match=r"^--output s3://bucket/x.csv needs s3fs, which is not installed: "
                                          r"pip install -e '.\[cloud\]'"):
        open_store("s3://bucket/x.csv")


def test_a_failing_store_operation_is_a_store_error_naming_the_object(s3):
    store, _ = open_store(s3.url("feats.csv"))
    s3.filesystem.rm(s3.bucket, recursive=True)  # the bucket is gone while the job runs
    with pytest.raises(StoreError, match=r"^cannot write %s: The specified bucket does not exist$"
                                         % re.escape(s3.url("feats.csv.run.json"))):
        store.write("feats.csv.run.json", b"{}")
