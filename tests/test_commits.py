"""The commit interface (parallel.jobs.commits), one contract for its two implementations: a local folder
(FolderCommits, rename is the atomic step) and an object store (ObjectCommits, on the loopback S3 server: a record
written last). Every test runs against both: what a job relies on must hold on either."""

import json

import pytest

from parallel.jobs.commits import FolderCommits, PartChanged
from parallel.jobs.shard_record import SHARD_RECORD
from parallel.output.durable import file_digest


@pytest.fixture(params=["folder", "store"])
def commits(request, tmp_path):
    if request.param == "folder":
        made = FolderCommits(tmp_path / "out" / "feats.parquet")
        made.output.parent.mkdir()
    else:
        from parallel.jobs.store_commits import ObjectCommits
        made = ObjectCommits(request.getfixturevalue("s3").url("runs/feats.parquet"))
    yield made
    made.close()


def group(commits, name, parts):
    """A folder holding `parts` ({file: bytes}) and their record, as an attempt gathers them to commit."""
    folder = commits.attempts / name
    folder.mkdir(parents=True)
    for part, data in parts.items():
        (folder / part).write_bytes(data)
    files = {part: dict(zip(("size", "sha256"), file_digest(folder / part))) for part in parts}
    (folder / SHARD_RECORD).write_text(json.dumps({"shard": 7, "files": files}), encoding="utf-8")
    return folder


def test_a_file_is_committed_whole_read_back_and_removed(commits):
    assert not commits.pull(".run.json") and commits.read(".run.json") is None and commits.sizes([".run.json"]) == {}
    commits.local(".run.json").write_bytes(b'{"state": "complete"}\n')
    commits.publish(".run.json")
    assert commits.read(".run.json") == b'{"state": "complete"}\n' and commits.sizes([".run.json", ""]) == {
        ".run.json": 22}
    if not isinstance(commits, FolderCommits):  # a store's local copy is this process's: pulled again
        commits.local(".run.json").unlink()
    assert commits.pull(".run.json") and commits.local(".run.json").read_bytes() == b'{"state": "complete"}\n'
    commits.unpublish([".run.json"])
    assert commits.read(".run.json") is None


def test_create_keeps_the_first_one_where_the_storage_can_tell(commits):
    commits.local(".manifest.parquet").write_bytes(b"first")
    assert commits.create(".manifest.parquet")
    if isinstance(commits, FolderCommits):
        return  # written in place, under the manifest's lock (`FrozenJob.freeze`): there is nothing to race
    commits.local(".manifest.parquet").write_bytes(b"second")
    assert not commits.create(".manifest.parquet")
    assert commits.read(".manifest.parquet") == b"first"


def test_a_group_is_listed_with_its_record_and_sizes_once_committed(commits):
    assert commits.groups(7) == [] and not commits.holds_shards()
    handle = commits.commit(7, group(commits, "a", {"features.parquet": b"rows", "_errors.csv": b"path\n"}))
    [(listed, record, sizes)] = commits.groups(7)
    assert listed == handle and record["shard"] == 7
    assert {name: sizes[name] for name in ("features.parquet", "_errors.csv")} == {"features.parquet": 4,
                                                                                   "_errors.csv": 5}
    folder = commits.fetch(7, handle, ("features.parquet", "_errors.csv"), verify=True)
    assert (folder / "features.parquet").read_bytes() == b"rows" and commits.holds_shards()


def test_a_second_group_of_a_shard_never_replaces_the_first(commits):
    first = commits.commit(7, group(commits, "a", {"features.parquet": b"rows"}))
    second = commits.commit(7, group(commits, "b", {"features.parquet": b"ROWS"}))
    # A folder refuses it (the rename fails); a store keeps both, and every reader chooses the first by name.
    assert [handle for handle, _, _ in commits.groups(7)][0] == first
    assert second is None if isinstance(commits, FolderCommits) else second > first


def test_a_part_changed_after_its_commit_is_caught_when_it_is_read_back(commits):
    handle = commits.commit(7, group(commits, "a", {"features.parquet": b"rows"}))
    if isinstance(commits, FolderCommits):
        (commits.shard_folder(7) / "features.parquet").write_bytes(b"ROWS")
    else:
        commits.store.write(commits._prefix(7) + handle + "/features.parquet", b"ROWS")
    with pytest.raises(PartChanged, match="features.parquet"):
        commits.fetch(7, handle, ("features.parquet",), verify=True)


def test_a_group_set_aside_is_never_chosen_again_and_a_dropped_one_is_gone(commits):
    handle = commits.commit(7, group(commits, "a", {"features.parquet": b"rows"}))
    moved = commits.reject(7, handle, "its rows are not the manifest's")
    assert commits.groups(7) == [] and str(commits.where(7, moved)).startswith(str(commits.location).rpartition("/")[0])
    again = commits.commit(7, group(commits, "b", {"features.parquet": b"rows"}))
    assert [handle for handle, _, _ in commits.groups(7)] == [again]
    commits.drop(7, again)
    assert commits.groups(7) == []
    commits.commit(8, group(commits, "c", {"features.parquet": b"rows"}))
    commits.remove_shards()
    assert commits.groups(8) == [] and not commits.holds_shards()


def test_only_a_folder_is_committed_as_it_is_written_and_has_a_lock(commits):
    assert commits.in_place is isinstance(commits, FolderCommits)
    with commits.lock():  # a flock on O.lock; a store has none (its writers write the same bytes)
        pass
