"""The job's committed state in an object store (s3://...): parallel.jobs.commits' interface without rename or lock.

Objects, for an output O = s3://bucket/runs/feats.parquet (all beside it, under its name):

    O.manifest.parquet                   created once with a conditional PUT (If-None-Match: *): the
                                         first process's wins, the others read it
    O.shards/shard-000007/<group>/features.parquet, _errors.csv (a tar's _members.parquet, a text job's _text.parquet)
                                         one committed group of shard 7 (an attempt's files): each one PUT
    O.shards/shard-000007/<group>/_shard.json
                                         its record, PUT LAST: the shard record (job, shard, digest of the
                                         images, rows, failed) and the size and SHA-256 of each part
    O.shards/shard-000007/<group>/_rejected
                                         written when a group did not check out (the store's "set aside":
                                         nothing is renamed)
    O, O.paths.csv (npy), O.errors.csv, O.members.parquet (tars), O.text.parquet (text), O.ledger.jsonl
                                         the output, each one PUT once it is written (`publish`)
    O.run.json                           the output's commit record, PUT LAST

A group is named `<time in ns, 16 hex digits>-<random>`, unique. Its parts are written first, its
record last, so a group without a record (a process killed while uploading) is never read. Readers
choose the first group whose record checks out, in name order, so every reader makes the same choice
from the same objects; the parts are verified against the record's SHA-256 as they are fetched. Two
groups of one shard (a retried task, two ranks with one number) both finish; one is chosen, the other
is ignored and removed with O.shards. No lock is needed: concurrent groups are harmless, and two
processes writing O at once write the same bytes, each object in one PUT (a reader never sees part of
an object).

This process works in a staging folder of its own (a temporary folder, removed when the job is
closed or by the next job on this host once its process is gone): the output is written there by the
ordinary writer (so it is byte for byte a local run's), then published; a kill during the upload
leaves O.run.json as it was and the next process publishes again.
"""

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import time
import weakref
from pathlib import Path

from parallel.jobs.commits import SHARDS_SUFFIX, Commits, PartChanged, shard_name
from parallel.jobs.shard_record import SHARD_RECORD
from parallel.output.durable import file_digest
from parallel.output.stores import open_store, read_json

REJECTED = "_rejected"  # an object beside a group's record: the group is set aside
STAGING_PREFIX = "parallel-store-"  # a process's staging folder: parallel-store-<pid>-<random>
ATTEMPTS_PREFIX = "parallel-store-attempts"  # the attempts of each output in a store, on this host


class ObjectCommits(Commits):
    """The job's files in an object store, staged in a folder of this process (see the module docstring)."""

    in_place = False

    def __init__(self, url):
        self.store, self.name = open_store(url)
        self.location = str(url)
        self.store.check(self.name)
        self._stage()

    def _stage(self):
        """A staging folder of this process (removed by `close`, or with the object)."""
        remove_dead_staging()
        staging = tempfile.mkdtemp(prefix="%s%d-" % (STAGING_PREFIX, os.getpid()))
        self._cleanup = weakref.finalize(self, shutil.rmtree, staging, True)
        self.output = Path(staging) / self.name
        # Attempts outlive their process, as O.attempts does beside a local output: the next process on this
        # host given the shard resumes one after its last committed batch.
        self.attempts = attempts_folder(self.store.url(self.name))
        self._fetched = {}  # shard -> (handle, the parts fetched) of its staging copy
        self._digests = {}  # suffix -> (its size in the store when it was read, its digest)
        self._listed = {}  # shard -> its groups (`groups`), once it has one

    def __getstate__(self):
        """What a Ray worker receives: the store, not this process's staging folder."""
        return {"store": self.store, "name": self.name, "location": self.location}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._stage()  # a folder of this process, on this host

    def close(self):
        """Removes this process's staging folder; one killed leaves it to the next job's `remove_dead_staging`."""
        self._cleanup()

    @contextlib.contextmanager
    def named(self):
        try:
            yield
        except Exception as error:
            if error.args and isinstance(error.args[0], str):
                staging = str(self.output.parent) + os.sep
                error.args = (error.args[0].replace(staging, self.store.url("")),) + error.args[1:]
            raise

    def pull(self, suffix):
        local = self.local(suffix)
        local.parent.mkdir(parents=True, exist_ok=True)
        if self.store.download(self.name + suffix, local):
            return True
        if local.exists():
            local.unlink()
        return False

    def read(self, suffix):
        return self.store.read(self.name + suffix)

    def digest(self, suffix):
        """Downloaded aside (the staging copy may be this process's newer one), and read again only once its size in
        the store changed or this process published it: an object is replaced whole."""
        size = self.sizes([suffix]).get(suffix)
        if size is None:
            return None
        if self._digests.get(suffix, (None,))[0] != size:
            aside = self.local(suffix + ".proof")
            try:
                aside.parent.mkdir(parents=True, exist_ok=True)
                if not self.store.download(self.name + suffix, aside):
                    return None
                self._digests[suffix] = (size, file_digest(aside))
            except OSError:
                return None
            finally:
                aside.unlink(missing_ok=True)
        return self._digests[suffix][1]

    def publish(self, suffix):
        self._digests.pop(suffix, None)
        local = self.local(suffix)
        if local.exists():
            self.store.upload(self.name + suffix, local)
        else:
            self.store.remove([self.name + suffix])  # of an earlier job: the output has none now

    def create(self, suffix):
        return self.store.create(self.name + suffix, self.local(suffix))

    def sizes(self, suffixes):
        listed = self.store.sizes([self.name + suffix for suffix in suffixes])
        return {suffix: listed[self.name + suffix] for suffix in suffixes if self.name + suffix in listed}

    def unpublish(self, suffixes):
        for suffix in suffixes:
            self._digests.pop(suffix, None)
        names = [self.name + suffix for suffix in suffixes]
        self.store.remove([name for name in names if not name.endswith(SHARDS_SUFFIX)])
        if self.name + SHARDS_SUFFIX in names:
            self.remove_shards()

    def lock(self):
        """No lock in a store: processes writing O at once write the same bytes, each object whole."""
        return contextlib.nullcontext()

    def _prefix(self, index):
        return "%s%s/%s/" % (self.name, SHARDS_SUFFIX, shard_name(index))

    def _forget(self, index):
        """What this process knew of shard `index`'s groups is read anew."""
        self._fetched.pop(index, None)
        self._listed.pop(index, None)

    def groups(self, index):
        """As Commits.groups; a listing that holds a group is kept (a group committed stays until this process
        sets it aside or removes it; another one's come later in name order)."""
        if index in self._listed:
            return self._listed[index]
        prefix = self._prefix(index)
        found = {}
        for name, size in self.store.list(prefix).items():
            handle, _, part = name[len(prefix):].partition("/")
            found.setdefault(handle, {})[part] = size
        listed = []
        for handle in sorted(found):
            sizes = found[handle]
            if SHARD_RECORD not in sizes or REJECTED in sizes:
                continue  # unfinished (its record comes last), or set aside
            listed.append((handle, read_json(self.store, prefix + handle + "/" + SHARD_RECORD), sizes))
        if listed:
            self._listed[index] = listed
        return listed

    def commit(self, index, folder):
        """Uploads the group's parts, then its record, under a unique name: the name."""
        handle = "%016x-%s" % (time.time_ns(), secrets.token_hex(8))
        prefix = self._prefix(index) + handle + "/"
        record = json.loads((folder / SHARD_RECORD).read_text(encoding="utf-8"))
        for part in sorted(record.get("files") or {}):
            self.store.upload(prefix + part, folder / part)
        self.store.upload(prefix + SHARD_RECORD, folder / SHARD_RECORD)
        shutil.rmtree(folder, ignore_errors=True)
        self._forget(index)
        return handle

    def fetch(self, index, handle, parts, verify=False):
        """The group's `parts` downloaded into the shard's staging folder, each verified against its record
        (a store's parts are always read back verified: they are downloaded anyway)."""
        folder = self.shard_folder(index)
        have_handle, have = self._fetched.get(index, (None, frozenset()))
        if have_handle == handle and have.issuperset(parts):
            return folder  # fetched and verified already: its record is not read again
        if have_handle != handle:
            if folder.exists():
                shutil.rmtree(folder)
            have = frozenset()
        folder.mkdir(parents=True, exist_ok=True)
        prefix = self._prefix(index) + handle + "/"
        record = read_json(self.store, prefix + SHARD_RECORD)
        if record is None:
            raise PartChanged("its %s was removed from the store" % SHARD_RECORD)
        (folder / SHARD_RECORD).write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
        listed = record.get("files") or {}
        for part in [part for part in parts if part not in have]:
            if part not in listed or not self.store.download(prefix + part, folder / part):
                raise PartChanged("its %s was removed from the store" % part)
            if list(file_digest(folder / part)) != [listed[part].get("size"), listed[part].get("sha256")]:
                raise PartChanged("its %s does not match its %s (size or SHA-256): it was changed in the store"
                                  % (part, SHARD_RECORD))
        self._fetched[index] = (handle, have | frozenset(parts))
        return folder

    def reject(self, index, handle, why, superseded=False):
        """Writes the group's `_rejected` object: its handle."""
        self._forget(index)
        self.store.write(self._prefix(index) + handle + "/" + REJECTED, (why + "\n").encode("utf-8"))
        return handle

    def where(self, index, handle):
        return self.store.url(self._prefix(index) + handle)

    def drop(self, index, handle):
        self._forget(index)
        prefix = self._prefix(index) + handle + "/"
        self.store.remove(list(self.store.list(prefix)))

    def remove_shards(self):
        self._fetched.clear()
        self._listed.clear()
        self.store.remove(list(self.store.list(self.name + SHARDS_SUFFIX + "/")))

    def holds_shards(self):
        return bool(self.store.list(self.name + SHARDS_SUFFIX + "/"))


def remove_dead_staging():
    """Removes the staging folders of processes that no longer run (their pid is in the name).

    A process removes its own when its job ends (`ObjectCommits.close`); one killed, or ended
    at once by a second signal, cannot: the next job on this host does.
    """
    pattern = re.compile(re.escape(STAGING_PREFIX) + r"(\d+)-")
    for folder in Path(tempfile.gettempdir()).glob(STAGING_PREFIX + "*"):
        match = pattern.match(folder.name)
        if match and folder.is_dir() and not folder.is_symlink() and not _alive(int(match.group(1))):
            shutil.rmtree(folder, ignore_errors=True)


def attempts_folder(url):
    """Where this host's processes compute the shards of the output `url` (TMPDIR/parallel-store-attempts/<its
    digest>): a folder of the job's, not of a process, so that an attempt a killed process left is resumed."""
    digest = hashlib.sha256(str(url).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / ATTEMPTS_PREFIX / digest


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True
