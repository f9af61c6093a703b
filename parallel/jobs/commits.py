"""Where a job's committed state lives: the one place where a local folder and an object store differ.

A job (parallel.jobs.shards) reads and writes its files in a local folder, and commits them through
one narrow interface, as Delta Lake's `LogStore` is the one place where S3, HDFS and local
semantics differ:

    commits.output               the local path where this process reads and writes the output O (and
                                 beside it O.manifest.parquet, O.ledger.jsonl, O.shards/, ...)
    commits.pull(suffix)         the committed O<suffix> made the local one: bool, whether there is one
    commits.read(suffix)         the bytes of the committed O<suffix> (small files: a record), or None
    commits.publish(suffix)      the local O<suffix> committed whole, replacing the committed one
    commits.create(suffix)       the local O<suffix> committed unless one is: bool (the first creator wins)
    commits.sizes(suffixes)      {suffix: size} of the committed files that exist
    commits.digest(suffix)       (size, SHA-256) of the committed O<suffix>, or None: read once while unchanged
    commits.unpublish(suffixes)  the committed files removed
    commits.lock()               the output's lock: one process writes O at a time

and a shard's files, committed as one group (its parts and its record, `_shard.json`, which lists
the size and SHA-256 of each part):

    commits.groups(i)            the committed groups of shard i, in the order readers choose among
                                 them: [(handle, record or None, {file: size})]
    commits.commit(i, folder)    the local `folder` (its parts and record) committed: its handle, or
                                 None when a group of the shard is committed and this one cannot be
    commits.fetch(i, h, parts)   the group's `parts` in a local folder, read back verified against the
                                 SHA-256 its record lists (a store's always, a folder's with `verify`)
    commits.reject(i, h, why)    a group set aside, never chosen again: its handle now (`where`: for messages)
    commits.drop(i, h)           a group removed; commits.remove_shards(): all of them

The job above (parallel.jobs.shards) decides what is committed, when, and whether it checks out;
these two decide only how it is stored:

    FolderCommits    O's own folder: every file is written in place, durably (`publish` has nothing
                     to do); a group is committed by renaming its folder O.shards/shard-000007, which
                     fails when one is there (`commit` returns None); set aside by another rename;
                     the lock is a flock on O.lock
    ObjectCommits    an object store (s3://..., parallel.jobs.store_commits): this process works in a
                     staging folder of its own; a file is committed by one PUT, created by a conditional
                     PUT (If-None-Match: *); a group is committed under a unique name, its parts first
                     and its record last, so a group without a record is never read, and readers choose
                     the first group whose record checks out, in name order; set aside by a `_rejected`
                     object. No lock: two processes writing O write the same bytes, each object whole

Attempts (the shards being computed) are local on either: O.attempts beside a local output, and
TMPDIR/parallel-store-attempts/<digest of the URL> for an output in a store (`store_commits.attempts_folder`).
"""

import contextlib
import json
import os
import shutil
from pathlib import Path

from parallel.jobs import locks
from parallel.jobs.shard_record import REJECTED_PREFIX, SHARD_RECORD, SUPERSEDED_PREFIX, files_problem, set_aside
from parallel.output import OutputError
from parallel.output.durable import beside, file_digest, fsync

SHARDS_SUFFIX = ".shards"
ATTEMPTS_SUFFIX = ".attempts"
LOCK_SUFFIX = ".lock"


class PartChanged(OutputError):
    """A committed group's part is not what its record lists (changed or removed)."""


def shard_name(index):
    """The name of shard `index`'s group: shard-000007."""
    return "shard-%06d" % index


class Commits:
    """The committed state of one job (see the module docstring).

    Attributes:
      output: Path where this process reads and writes the output O.
      location: the output as messages name it (its path, or its URL).
      attempts: Path of the folder where this host's processes compute shards.
      in_place: whether a file written at `output` is committed as it is written (a local folder), or
        only once published (a store: O is written whole, then uploaded).
    """

    in_place = True

    def local(self, suffix):
        """The local file O<suffix>: Path."""
        return beside(self.output, suffix)

    @property
    def shards(self):
        """The local folder of the shards' groups (O.shards)."""
        return self.local(SHARDS_SUFFIX)

    def shard_folder(self, index):
        """The local folder of shard `index`'s group (O.shards/shard-000007)."""
        return self.shards / shard_name(index)

    def pull(self, suffix):
        raise NotImplementedError

    def read(self, suffix):
        """The bytes of the committed O<suffix>, or None when there is none."""
        raise NotImplementedError

    def publish(self, suffix):
        raise NotImplementedError

    def create(self, suffix):
        raise NotImplementedError

    def sizes(self, suffixes):
        raise NotImplementedError

    def unpublish(self, suffixes):
        raise NotImplementedError

    def digest(self, suffix):
        """(size, SHA-256 hex) of the committed O<suffix>, or None when there is none or it cannot be read."""
        raise NotImplementedError

    def lock(self):
        raise NotImplementedError

    def groups(self, index):
        raise NotImplementedError

    def commit(self, index, folder):
        raise NotImplementedError

    def fetch(self, index, handle, parts, verify=False):
        raise NotImplementedError

    def reject(self, index, handle, why, superseded=False):
        raise NotImplementedError

    def where(self, index, handle):
        """Where a group is, for messages: a path, or a URL."""
        raise NotImplementedError

    def drop(self, index, handle):
        raise NotImplementedError

    def remove_shards(self):
        raise NotImplementedError

    def holds_shards(self):
        raise NotImplementedError

    def rewrite_record(self, index, handle, record):
        """Replaces a committed group's record (its parts unchanged) where the storage can: bool."""
        return False

    def named(self):
        """`with commits.named():` errors name the job's files as users see them (a store's by their URLs)."""
        return contextlib.nullcontext()

    def close(self):
        """Releases what this process holds for the job (a store's staging folder)."""


class FolderCommits(Commits):
    """The job's files beside a local output, committed as they are written (see the module docstring)."""

    def __init__(self, output):
        self.output = Path(output)
        self.location = self.output
        self.attempts = beside(self.output, ATTEMPTS_SUFFIX)
        self._digests = {}  # suffix -> (the file's status when it was read, its digest)

    def pull(self, suffix):
        return self.local(suffix).exists()

    def digest(self, suffix):
        """Read again only once the file changed: its size, times or inode (a rename over it)."""
        path = self.local(suffix)
        try:
            status = os.stat(path)
            key = (status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino)
            if self._digests.get(suffix, (None,))[0] != key:
                self._digests[suffix] = (key, file_digest(path))
        except OSError:
            return None
        return self._digests[suffix][1]

    def read(self, suffix):
        try:
            return self.local(suffix).read_bytes()
        except OSError:
            return None

    def publish(self, suffix):
        """Nothing to do: the writers make their files durable where they are."""

    def create(self, suffix):
        """The file was written where it is committed, under its lock (`ShardedJob.freeze`): True."""
        return True

    def sizes(self, suffixes):
        found = {}
        for suffix in suffixes:
            with contextlib.suppress(OSError):
                found[suffix] = os.path.getsize(self.local(suffix))
        return found

    def unpublish(self, suffixes):
        for suffix in suffixes:
            path = self.local(suffix)
            if path.is_file() and not path.is_symlink():
                path.unlink()
            elif path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)

    def lock(self):
        return locks.exclusive(self.local(LOCK_SUFFIX))

    def groups(self, index):
        folder = self.shard_folder(index)
        if not os.path.lexists(folder):
            return []
        try:
            record = json.loads((folder / SHARD_RECORD).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = None
        sizes = {}
        with contextlib.suppress(OSError):
            for part in folder.iterdir():
                with contextlib.suppress(OSError):
                    sizes[part.name] = part.stat().st_size
        return [(folder.name, record if isinstance(record, dict) else None, sizes)]

    def commit(self, index, folder):
        """Renames `folder` the shard's (synced first): its handle, or None when the shard has one already."""
        for part in folder.iterdir():
            fsync(part)
        fsync(folder)
        self.shards.mkdir(exist_ok=True)
        try:
            os.rename(folder, self.shard_folder(index))
        except OSError:  # ENOTEMPTY/EEXIST: a group of the shard is committed
            return None
        fsync(self.shards)
        return shard_name(index)

    def fetch(self, index, handle, parts, verify=False):
        folder = self.shards / handle
        if verify:
            problem = files_problem(folder, verify=True)
            if problem:
                raise PartChanged(problem)
        return folder

    def reject(self, index, handle, why, superseded=False):
        """Renames the group out of the way (`shard_record.set_aside`): its new handle, or None if it was gone."""
        moved = set_aside(self.shards / handle, prefix=SUPERSEDED_PREFIX if superseded else REJECTED_PREFIX)
        return None if moved is None else moved.name

    def where(self, index, handle):
        return self.shards / handle

    def drop(self, index, handle):
        shutil.rmtree(self.shards / handle, ignore_errors=True)

    def remove_shards(self):
        if self.shards.exists():
            shutil.rmtree(self.shards)

    def holds_shards(self):
        return self.shards.exists()

    def rewrite_record(self, index, handle, record):
        """Replaces the group's record in one rename."""
        folder = self.shards / handle
        renewed = folder / (SHARD_RECORD + ".tmp")  # "_": never read as a part of the shards' dataset
        renewed.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
        fsync(renewed)
        os.replace(renewed, folder / SHARD_RECORD)
        fsync(folder)
        return True
