"""A sharded job whose output is in an object store (s3://...): the commit protocol without rename.

Objects, for an output O = s3://bucket/runs/feats.parquet (all beside it, under its name):

    O.manifest.parquet                   the job, created once with a conditional PUT (If-None-Match:
                                         *): the first process's wins, the others read it
    O.shards/shard-000007/<attempt>/features.parquet, _errors.csv (and a tar's _members.parquet)
                                         one attempt at shard 7: its parts, each one PUT
    O.shards/shard-000007/<attempt>/_shard.json
                                         its marker, PUT LAST: the shard record (job, shard, digest of
                                         the images, rows, failed) and the size and SHA-256 of each part
    O.shards/shard-000007/<attempt>/_rejected
                                         written when a finished attempt did not check out (the
                                         store's "set aside": nothing is renamed)
    O.members.parquet                    a tar job's members (parallel.inputs.tars.read_member), merged
                                         from the shards' and PUT before O
    O, O.paths.csv (npy), O.errors.csv   the output, each one PUT, once every shard is committed
    O.run.json                           the output's commit record, PUT LAST: its presence (state
                                         "complete") is what makes the job finished

Commit protocol. An attempt is named `<time in ns, 16 hex digits>-<random>`, unique. Its parts are
written first, its marker last, so an attempt without a marker (a process killed while uploading)
is never read. Shard i is committed once an attempt of it has a marker that verifies (of this job,
this shard, the manifest's images, and listing exactly the sizes of its parts); readers choose the
first such attempt in name order, so every reader makes the same choice from the same objects, and
the parts' SHA-256 is verified when they are read. Two attempts at one shard (a retried task, two
ranks with one number) both finish; one is chosen, the other is ignored and removed with O.shards.
No lock is needed: concurrent attempts are harmless, and two processes writing O at once write the
same bytes, each object in one PUT (a reader never sees part of an object).

The final output is assembled in a local staging folder by the ordinary writer (so it is byte for
byte a local run's) and uploaded; a kill during the upload leaves O.run.json absent and the next
process uploads again. The process's staging folder (a temporary folder) holds the manifest, the
shards it reads and the attempt it computes; it is removed when the job object goes.

A job on one host to a store is this protocol with one process (rank 0 of 1): it resumes at the
first shard not committed. A shard is computed in an attempt folder outside the staging folder
(`attempts_folder`, the output's on this host), resumed after its last committed batch by the next
process on this host given the shard, as a local output's O.attempts is.
"""

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
import weakref
from pathlib import Path

from parallel.jobs.shard_record import (SHARD_ERRORS, SHARD_FEATURES, SHARD_RECORD, content_problem, error_paths,
                                        file_digest, rejection, shard_keys)
from parallel.jobs.assembly import Assembly
from parallel.jobs.shards import SHARDS_SUFFIX, ShardedJob, _ERRORS_HEADER
from parallel.inputs.manifest import MANIFEST_SUFFIX, read_job
from parallel.inputs.tars import MEMBERS_FILE, MEMBERS_SUFFIX, merge_indexes
from parallel.output import ErrorLog, OutputError
from parallel.output.record import ERRORS_SUFFIX, PATHS_SUFFIX, SIDECAR_SUFFIX
from parallel.output.stores import is_url, open_store, read_json

log = logging.getLogger("parallel")

REJECTED = "_rejected"
STAGING_PREFIX = "parallel-store-"  # a process's staging folder: parallel-store-<pid>-<random>
ATTEMPTS_PREFIX = "parallel-store-attempts"  # the attempts of each output in a store, on this host
_PARTS = (SHARD_FEATURES, SHARD_ERRORS)


class PartChanged(OutputError):
    """A committed attempt's part is not what its marker lists (changed or removed in the store)."""


def open_job(output):
    """The ShardedJob writing `output`: in a local folder (commit by rename), or in a store (this module)."""
    return StoreShardedJob(output) if is_url(output) else ShardedJob(output)


def remove_dead_staging():
    """Removes the staging folders of processes that no longer run (their pid is in the name).

    A process removes its own when its job ends (`StoreShardedJob.close`); one killed, or ended
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


class StoreShardedJob(ShardedJob):
    """The files of a sharded job whose output is the store object `url` (see the module docstring).

    The local paths of ShardedJob (`output`, `manifest`, `shards`) are in a staging folder of this
    process, its `attempts` in the output's folder of attempts on this host (`attempts_folder`);
    `location` is the output's URL, the store holds what is committed.
    """

    verify_files = False  # each part is verified against its marker as it is fetched (`_fetch`)

    def __init__(self, url):
        self.store, self.name = open_store(url)
        self._stage()
        self.location = str(url)
        self.store.check(self.name)
        if self._pull(self.name + MANIFEST_SUFFIX, self.manifest):
            with self._manifest_errors():  # a damaged one is named here, by its URL
                read_job(self.manifest)

    def _stage(self):
        """A staging folder of this process (removed by `close`, or with the object), and the local paths in it."""
        remove_dead_staging()
        staging = tempfile.mkdtemp(prefix="%s%d-" % (STAGING_PREFIX, os.getpid()))
        self._cleanup = weakref.finalize(self, shutil.rmtree, staging, True)
        super().__init__(Path(staging) / self.name)
        # Attempts outlive their process, as O.attempts does beside a local output: the next process on this
        # host given the shard resumes one after its last committed batch (a kill costs at most a batch).
        self.attempts = attempts_folder(self.store.url(self.name))
        self._chosen = {}  # shard -> the attempt chosen (a committed attempt stays committed)
        self._fetched = {}  # shard -> (attempt, with its features) of the staging copy

    def __getstate__(self):
        """What a Ray worker receives: the store and the frozen job, not this process's staging folder."""
        state = dict(self.__dict__)
        for name in ("_cleanup", "_chosen", "_fetched"):
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        frozen = {name: state[name] for name in ("location", "shard_size", "shard_count", "images", "identity",
                                                 "digests", "tars")}
        self.__dict__.update(state)
        self._stage()  # a folder of this process, on this host
        self.__dict__.update(frozen)
        self._pull(self.name + MANIFEST_SUFFIX, self.manifest)

    def close(self):
        """Removes this process's staging folder (a copy of what it computed and read): the job is done
        with here. A process that could not (killed, or stopped at once by a second signal) leaves it to
        the next job's `remove_dead_staging`."""
        super().close()
        self._cleanup()

    @contextlib.contextmanager
    def named(self):
        """Errors of the shared code name the staging copies: they name the store's objects instead."""
        try:
            yield
        except Exception as error:
            if error.args and isinstance(error.args[0], str):
                staging = str(self.output.parent) + os.sep
                error.args = (error.args[0].replace(staging, self.store.url("")),) + error.args[1:]
            raise

    @contextlib.contextmanager
    def _manifest_errors(self):
        with self.named(), super()._manifest_errors():
            yield

    def _pull(self, name, local):
        """The store's `name` into the staging file `local` (removed when the store has none): bool."""
        local.parent.mkdir(parents=True, exist_ok=True)
        if self.store.download(name, local):
            return True
        if local.exists():
            local.unlink()
        return False

    def output_exists(self):
        """Whether the output object exists (with or without its record)."""
        return self.store.exists(self.name)

    def remove_everything(self):
        """The output and every object of its job (--overwrite on one host): the data before the record."""
        names = [self.name + suffix for suffix in ("", PATHS_SUFFIX, ERRORS_SUFFIX, MEMBERS_SUFFIX, MANIFEST_SUFFIX)]
        self.store.remove(names + list(self.store.list(self.name + SHARDS_SUFFIX + "/")))
        self.store.remove([self.name + SIDECAR_SUFFIX])

    def output_rows(self):
        """Its record is read when the output is written (a store's job is checked by `_check_output`): 0."""
        return 0

    def holds_rows(self):
        """Whether the output or a shard of it is in the store (its rows are never thrown away unseen)."""
        return self.output_exists() or bool(self.store.list(self.name + SHARDS_SUFFIX + "/"))

    # -- the manifest: created once, with a conditional PUT instead of a lock ---------------------

    def freeze(self, job, scan, shard_size=None, wait_seconds=600.0, default_shard_size=None):
        name = self.name + MANIFEST_SUFFIX
        with self.named():
            self._pull(name, self.manifest)
            fresh = not self.manifest.exists()
            recorded = super().freeze(job, scan, shard_size, wait_seconds, default_shard_size)
            if fresh and not self.store.create(name, self.manifest):  # another process froze the job first
                self._pull(name, self.manifest)
                recorded = super().freeze(job, scan, shard_size, wait_seconds, default_shard_size)
        return recorded

    def save_manifest(self, manifest):
        recorded = read_job(self.manifest)
        manifest.save(self.manifest, recorded["shard_size"], job=recorded["job"])
        self.store.upload(self.name + MANIFEST_SUFFIX, self.manifest)  # replaced whole: readers see one or the other
        self._take(read_job(self.manifest))
        self._chosen.clear()  # chosen anew against the manifest's digests now
        self._fetched.clear()

    def retries_in_output(self):
        """An object in a store is written whole: its shards with failed images stay, and are retried there."""
        return False

    def renew_record(self, index, previous):
        """A marker is written once (a store has no rename): the shard is computed again whole instead."""
        return False

    # -- shards -----------------------------------------------------------------------------------

    def _prefix(self, index):
        return "%s%s/shard-%06d/" % (self.name, SHARDS_SUFFIX, index)

    def _parts(self):
        """The parts of an attempt: a tar shard's also its index of members (its images)."""
        return _PARTS + ((MEMBERS_FILE,) if self.tars else ())

    def committed_folder(self, index, features=False):
        return self._fetch(index, features=features) or self.shard_folder(index)

    def members_index(self):
        if not self.members.exists():
            self._pull(self.name + MEMBERS_SUFFIX, self.members)
        return super().members_index()

    def is_finished(self):
        record = read_json(self.store, self.name + SIDECAR_SUFFIX)
        return record is not None and record.get("state") == "complete"

    def failed_count(self, index):
        attempt = self.chosen_attempt(index)
        marker = attempt and read_json(self.store, self._prefix(index) + attempt + "/" + SHARD_RECORD)
        return int(marker.get("failed") or 0) if marker else 0

    def reopen(self):
        record = read_json(self.store, self.name + SIDECAR_SUFFIX)
        if record is not None and record.get("state") == "complete":
            data = json.dumps(dict(record, state="writing", reopened=True), indent=1, ensure_ascii=True) + "\n"
            self.store.write(self.name + SIDECAR_SUFFIX, data.encode("ascii"))

    def is_reopened(self):
        record = read_json(self.store, self.name + SIDECAR_SUFFIX)
        return bool(record and record.get("reopened"))

    def is_committed(self, index):
        self._known()
        if self.chosen_attempt(index) is not None:
            return True
        return self.is_finished()

    def chosen_attempt(self, index):
        """The committed attempt of shard `index` (the first in name order whose marker verifies), or None."""
        if index in self._chosen:
            return self._chosen[index]
        prefix = self._prefix(index)
        attempts = {}
        for name, size in self.store.list(prefix).items():
            attempt, _, file = name[len(prefix):].partition("/")
            attempts.setdefault(attempt, {})[file] = size
        for attempt in sorted(attempts):
            files = attempts[attempt]
            if SHARD_RECORD not in files or REJECTED in files:
                continue  # unfinished (its marker comes last), or set aside
            marker = read_json(self.store, prefix + attempt + "/" + SHARD_RECORD)
            problem = self._marker_problem(marker, index, files)
            if problem is None:
                self._chosen[index] = attempt
                return attempt
            log.warning("attempt %s of shard %d of %s is ignored: %s", attempt, index, self.location, problem)
        return None

    def _marker_problem(self, marker, index, sizes):
        """What is wrong with an attempt's marker, given the sizes of its objects; None if nothing."""
        if marker is None:
            return "its %s cannot be read" % SHARD_RECORD
        if marker.get("job") != self.identity:
            return "it was computed for another job (another setting or shard size)"
        if marker.get("shard") != index:
            return "its %s says shard %r" % (SHARD_RECORD, marker.get("shard"))
        if marker.get("images") != self.shard_digest(index):
            return "its images are not the manifest's (the manifest was made anew since)"
        listed = marker.get("files") or {}
        for part in self._parts():
            if part not in listed or sizes.get(part) != listed[part].get("size"):
                return "its %s is not the %s its marker lists" % (part, "size" if part in listed else "part")
        return None

    def _fetch(self, index, features=False):
        """The chosen attempt of committed shard `index` into its staging folder, each part checked
        against the marker's SHA-256: the folder (Path), or None when the shard is not committed."""
        attempt = self.chosen_attempt(index)
        if attempt is None:
            return None
        folder = self.shard_folder(index)
        have = self._fetched.get(index)
        if have is not None and have[0] == attempt and (have[1] or not features):
            return folder
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        prefix = self._prefix(index) + attempt + "/"
        marker = read_json(self.store, prefix + SHARD_RECORD)
        (folder / SHARD_RECORD).write_text(json.dumps(marker, sort_keys=True) + "\n", encoding="utf-8")
        for part in self._parts() if features else [part for part in self._parts() if part != SHARD_FEATURES]:
            if not self.store.download(prefix + part, folder / part):
                raise PartChanged("its %s was removed from the store" % part)
            size, digest = file_digest(folder / part)
            if (size, digest) != (marker["files"][part]["size"], marker["files"][part]["sha256"]):
                raise PartChanged("its %s does not match its marker (size or SHA-256): it was changed in the store"
                                  % part)
        self._fetched[index] = (attempt, features)
        return folder

    def shard_errors(self, index):
        folder = self._fetch(index)
        return folder / SHARD_ERRORS if folder is not None else None

    def assembled_failures(self):
        """The failed images of the finished output, as its errors file lists them (a store's output is written
        whole, from its shards, which stay while an image of them fails): set of paths."""
        if not self.is_finished():
            return frozenset()
        errors = self.output_errors()
        return frozenset(error_paths(errors)) if errors.exists() else frozenset()

    def output_errors(self):
        local = ErrorLog.path_for(self.output)
        self._pull(self.name + ERRORS_SUFFIX, local)
        return local

    def set_aside(self, index, problem):
        """Marks the chosen attempt of shard `index` rejected (a `_rejected` object): it is computed again."""
        attempt = self.chosen_attempt(index)
        self._chosen.pop(index, None)
        self._fetched.pop(index, None)
        if attempt is None:
            return None
        name = self._prefix(index) + attempt
        self.store.write(name + "/" + REJECTED, (problem + "\n").encode("utf-8"))
        log.warning("shard %d of %s is set aside (%s), to be computed again: %s", index, self.location,
                    self.store.url(name), problem)
        return self.store.url(name)

    def commit(self, index, attempt, errors, replacing=False):
        """Uploads the finished attempt's parts, then its marker: see the module docstring.

        With `replacing` (a retry of the committed shard's failed images), the attempts chosen
        before it are then marked superseded (a `_rejected` object), so that readers choose it.

        Returns:
          bool: True if this attempt is the shard's chosen one, False if another is.
        """
        if not replacing and self.is_committed(index):
            shutil.rmtree(attempt, ignore_errors=True)
            return False
        keys = shard_keys(self, index, attempt)
        problem = content_problem(attempt / SHARD_FEATURES, errors, keys)
        if problem:
            raise OutputError("shard %d of %s was not committed: %s" % (index, self.location, problem))
        if not errors.exists():
            errors.write_text(_ERRORS_HEADER, encoding="utf-8")
        failed = len(error_paths(errors))
        name = "%016x-%s" % (time.time_ns(), secrets.token_hex(8))
        prefix = self._prefix(index) + name + "/"
        files = {}
        for part in self._parts():
            local = errors if part == SHARD_ERRORS else attempt / part
            size, digest = file_digest(local)
            files[part] = {"size": size, "sha256": digest}
            self.store.upload(prefix + part, local)
        marker = {"job": self.identity, "shard": index, "images": self.shard_digest(index),
                  "rows": len(keys) - failed, "failed": failed, "files": files}
        self.store.write(prefix + SHARD_RECORD, (json.dumps(marker, sort_keys=True) + "\n").encode("utf-8"))
        shutil.rmtree(attempt, ignore_errors=True)
        self._chosen.pop(index, None)  # chosen anew, among the finished attempts now
        while replacing and self.chosen_attempt(index) not in (name, None):  # older ones sort first
            self._supersede(index)
        return self.chosen_attempt(index) == name

    def _supersede(self, index):
        """Marks the chosen attempt of shard `index` superseded by a retry (no warning: nothing is wrong with it)."""
        attempt = self._chosen.pop(index)
        self._fetched.pop(index, None)
        self.store.write(self._prefix(index) + attempt + "/" + REJECTED,
                         b"superseded by a retry of its failed images\n")

    def remove_parts(self):
        self.store.remove(self.store.list(self.name + SHARDS_SUFFIX + "/"))

    # -- the final output ---------------------------------------------------------------------------

    def assemble(self, output_format, column_prefix, settings, keep_shards=False, keep_failed=True, assembly=None):
        """Writes the output from the committed shards (see `ShardedJob.assemble`), without a lock.

        Two processes doing it at once write the same bytes; the record goes last.
        """
        with self.named():
            return self._assemble_in_store(output_format, column_prefix, settings, keep_shards)

    def _assemble_in_store(self, output_format, column_prefix, settings, keep_shards):
        if self.is_finished():
            return True
        afresh = self.is_reopened()
        if self.missing():
            return False
        rejected = []
        for index in range(self.shard_count):
            try:
                self._fetch(index, features=True)
            except PartChanged as error:
                target = self.set_aside(index, str(error))
                rejected.append("shard %d (%s), now %s" % (index, error, target))
        if rejected:
            raise rejection(self.location, rejected)
        self._check_shards()
        if self.tars:  # before O, as on a file system
            merge_indexes([self.shard_folder(index) / MEMBERS_FILE for index in range(self.shard_count)], self.members)
            self.store.upload(self.name + MEMBERS_SUFFIX, self.members)
        with Assembly(self, output_format, column_prefix, settings, afresh=afresh) as assembly:  # the shards stay
            assembly.catch_up()
            assembly.finish()
        self.remove_dead_attempts()  # of processes killed on this host (every shard is committed), then the folder
        for suffix in ("", PATHS_SUFFIX, ERRORS_SUFFIX):
            local = Path(str(self.output) + suffix)
            if local.exists():
                self.store.upload(self.name + suffix, local)
            else:
                self.store.remove([self.name + suffix])  # of an earlier job: the output has none
        self.store.upload(self.name + SIDECAR_SUFFIX, Path(str(self.output) + SIDECAR_SUFFIX))
        if not keep_shards and not self.retriable():  # shards with failed images stay: a rerun retries them
            self.remove_parts()
        return True
