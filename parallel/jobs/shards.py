"""One job over many processes: a frozen manifest, cut into fixed shards, each committed as one part.

Files, for an output O:

    O.manifest.parquet        the job: its images (a row group per shard) and, in its metadata, its
                              settings and shard size; frozen by the first process, under O.manifest.lock
    O.attempts/shard-000007.<host>.<pid>/
                              a shard being computed: a single-host job (reader -> devices -> writer,
                              committed batch by batch) into features.parquet
    O.shards/shard-000007/    a committed shard: features.parquet (path, path_bytes, <layer>, rows in
                              path order), _errors.csv (its images that could not be read) and
                              _shard.json (its job, its images' digest, its counts: shard_record)
                              and, a tar's (parallel.inputs.tars), _members.parquet: its images
    O.members.parquet         a tar job's members, written with O (parallel.inputs.tars.read_member)
    O.shards/_rejected-shard-000007.1/
                              a committed shard that did not check out, set aside to be computed again
    O                         written from the shards, in order, once all are committed (under O.lock)
    O.ledger.jsonl            what is in O: each shard appended, its failed images, O closed (ledger)

Commit protocol: a shard's attempt is finished in its own folder, then renamed to
O.shards/shard-NNNNNN in one step. A committed shard is computed again only for its failed images (a
retry, committed anew in its place: ShardWorker.retry) or when it no longer checks out. A process killed
during an attempt leaves only its attempt folder, which no one reads: the shard is redone. Two
processes given the same shard (a retried task, two ranks with the same number) both compute it;
the first rename wins and the other attempt is discarded: one correct part, never two. Shard i
holds images i * shard_size .. (i + 1) * shard_size - 1 of the manifest, whatever the number of
processes, so a job can resume on another number of hosts.

Nothing is trusted that storage or a user may have changed: the manifest carries checksums
(parallel.inputs.manifest), a shard is counted as committed only if its record is of this job and shard
and its counts are its files' (else it is set aside and computed again), and before a byte of O is
written every shard's rows and errors are checked to be exactly the manifest's images of that shard.
O.shards is a Parquet dataset as it is (readers skip "_" files: docs/many-hosts.md), removed once O is written.
"""

import contextlib
import json
import logging
import os
import shutil
import socket
from pathlib import Path

from parallel.inputs.manifest import DamagedManifest, Manifest, manifest_path, read_job
from parallel.inputs.tars import MEMBERS_FILE, MEMBERS_SUFFIX, merge_indexes
from parallel.jobs import locks
from parallel.jobs.assembly import Assembly, is_proven_finished, ledger_path
from parallel.jobs.ledger import LEDGER_SUFFIX, Ledger
from parallel.jobs.shard_record import (SHARD_ERRORS, SHARD_FEATURES, SHARD_RECORD, SUPERSEDED_PREFIX, content_problem,
                                        error_paths, files_problem, job_identity, quick_problem, rejection, set_aside,
                                        shard_keys, write_record)
from parallel.inputs.changes import other_source_message
from parallel.output import ErrorLog, OutputError, check_settings, read_record
from parallel.output.record import save_record
from parallel.output.durable import fsync

log = logging.getLogger("parallel")

SHARDS_SUFFIX = ".shards"
ATTEMPTS_SUFFIX = ".attempts"
LOCK_SUFFIX = ".lock"
ATTEMPT_LOCK = ".lock"
ATTEMPT_JOB = "_attempt.json"  # a resumable attempt's job, shard and images (ShardedJob.attempt)
COMMITTING = "commit"  # where an attempt's files are gathered, to be renamed the shard's folder
_ERRORS_HEADER = "path,kind,message\n"
# What a job writes beside its output O (files, and folders: its shards, attempts, and the writer's parts).
JOB_FILES = ("", ".run.json", ".errors.csv", ".paths.csv", ".manifest.parquet", MEMBERS_SUFFIX, LEDGER_SUFFIX)
JOB_FOLDERS = (SHARDS_SUFFIX, ATTEMPTS_SUFFIX, ".parts")


class ShardedJob:
    """The files of a sharded job writing `output` (see the module docstring).

    Attributes:
      output: Path of the final output; location: what messages name (a URL for a job in a store).
      shard_size, shard_count, images: per shard, shards, of the job (once the manifest is frozen or read).
    """

    def __init__(self, output):
        self.output = Path(output)
        self.location = self.output
        self.manifest = Path(manifest_path(self.output))
        self.shards = self.output.with_name(self.output.name + SHARDS_SUFFIX)
        self.attempts = self.output.with_name(self.output.name + ATTEMPTS_SUFFIX)
        self.lock = self.output.with_name(self.output.name + LOCK_SUFFIX)
        self.shard_size = self.shard_count = self.images = None
        self.identity = self.digests = None  # the job's identity and its shards' digests, once frozen
        self.tars = False  # shards of tars, whose images are their members (known once they are read)
        self.members = self.output.with_name(self.output.name + MEMBERS_SUFFIX)
        self._lock_depth = 0  # how deep this process holds the output's lock (`output_lock`)
        self._held = None  # the lock held until `close` (`hold_lock`), or True: to be taken once the folder is made
        self._ledger = None  # the ledger as this process, holding the output's lock, writes it (`ledger`)

    def close(self):
        """Releases what this process holds for the job: the output's lock (`hold_lock`); a store's job: its
        staging folder too."""
        held, self._held = self._held, None
        if held not in (None, True):
            held.close()

    def hold_lock(self):
        """Holds the output's lock until `close()`: this process is the job's only one (one run per output).

        An output whose folder does not exist yet has nothing to protect: the lock is taken by `freeze`
        once it has made the folder, before it writes anything there.

        Raises:
          OutputError: another run holds it.
        """
        if not self.output.parent.is_dir():
            self._held = True
            return
        held = contextlib.ExitStack()
        try:
            held.enter_context(self.output_lock())
        except locks.Busy:
            raise OutputError("another run is writing %s now (it holds %s): wait for it to end, or choose another "
                              "output" % (self.location, self.lock.name)) from None
        self._held = held

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # -- the manifest ------------------------------------------------------------------------

    def freeze(self, job, scan, shard_size=None, wait_seconds=600.0, default_shard_size=None):
        """The job's manifest: written by the first process, read (and checked) by the others.

        Args:
          job: {str: str}, what the job is (settings and source); a manifest recording another
            job is refused.
          scan: callable returning the Manifest of the images now (called by the process that
            writes the manifest).
          shard_size: images per shard; None: the recorded one, else `default_shard_size`.
          default_shard_size: the size of a new job's shards when `shard_size` is None: a number,
            or a callable of the scanned Manifest (tars grouped by their sizes); None: DEFAULT_SHARD_SIZE.
          wait_seconds: how long to wait for another process writing the manifest.

        Returns:
          the recorded {"shard_size", "images", "job"}.

        Raises:
          ValueError: the manifest records another job or shard size, or another process held
            its lock for `wait_seconds`.
        """
        from parallel.inputs.manifest import DEFAULT_SHARD_SIZE
        scanned = None
        if not self.output.parent.exists():  # a new folder: what is wrong with the images is said before it exists
            scanned = scan()
            if not len(scanned):
                raise ValueError("the job has no images")
        self.output.parent.mkdir(parents=True, exist_ok=True)
        if self._held is True:
            self.hold_lock()
        try:
            with self._manifest_errors(), \
                    locks.exclusive(self.manifest.with_name(self.manifest.name + LOCK_SUFFIX), wait_seconds):
                recorded = read_job(self.manifest)
                if recorded is None:
                    current = scanned if scanned is not None else scan()
                    if not len(current):
                        raise ValueError("the job has no images")
                    if callable(default_shard_size):
                        default_shard_size = default_shard_size(current)
                    current.save(self.manifest, shard_size or default_shard_size or DEFAULT_SHARD_SIZE, job=job)
                    recorded = read_job(self.manifest)
        except locks.Busy:
            raise ValueError("another process has been writing %s for %.0f s; if none is running, remove %s.lock"
                             % (self.manifest, wait_seconds, self.manifest)) from None
        if recorded["job"].get("images", job.get("images")) != job.get("images"):
            raise OutputError(other_source_message(self.location, recorded["job"]["images"], job.get("images")))
        check_settings(self.location, recorded["job"], job)
        if shard_size is not None and shard_size != recorded["shard_size"]:
            raise OutputError("%s was cut into shards of %d images, not %d: leave --shard-size out, or pass "
                              "--overwrite" % (self.output, recorded["shard_size"], shard_size))
        return self._take(recorded)

    # Before the output is written from them, the shards' files are checked against the SHA-256 their records
    # list (a store's job checks each part as it fetches it, against its marker).
    verify_files = True

    named = staticmethod(contextlib.nullcontext)  # `with job.named():` errors name the files as users see them

    def _take(self, recorded):
        """Knows the job recorded in its manifest (`read_job`); returns it."""
        self.shard_size, self.images = recorded["shard_size"], recorded["images"]
        self.shard_count = -(-self.images // self.shard_size)
        self.identity, self.digests = job_identity(recorded), recorded.get("shards")
        self.tars = recorded["job"].get("input") == "tars"
        return recorded

    def save_manifest(self, manifest):
        """Records `manifest` (the job's images, some taken anew) as the job's, with its shard size and job."""
        with locks.exclusive(self.manifest.with_name(self.manifest.name + LOCK_SUFFIX)):
            recorded = read_job(self.manifest)
            manifest.save(self.manifest, recorded["shard_size"], job=recorded["job"])
            self._take(read_job(self.manifest))

    def retries_in_output(self):
        """Whether the failed images of the finished output are retried into it (`retry.retry_in_output`),
        so that its shards go once it is written: a local output of listed images. A tar's failures may be a
        whole tar whose members are unknown, and an output in a store is not appended to: their shards with
        failed images stay, and are retried there."""
        return not self.tars

    def retried_in_output(self):
        """Whether this run retries the failed images in the finished output itself: its shards are gone."""
        return self.retries_in_output() and self.is_finished() and not self.shards.exists()

    def renew_record(self, index, previous):
        """Committed shard `index`, recorded for the images `previous` (a digest), is recorded for the manifest's
        images now: some of its failed images were repaired and taken anew (none of them has a row).

        Its rows stay valid, so the shard is kept, and a run retries its failed images (`ShardWorker.retry`)
        instead of computing it again whole. The record is replaced in one rename.

        Returns:
          bool: whether the record was renewed (False: no such committed shard, or it does not check out).
        """
        folder = self.shard_folder(index)
        if not folder.is_dir() or quick_problem(folder, self.identity, index, previous) is not None:
            return False
        path = folder / SHARD_RECORD
        record = dict(json.loads(path.read_text(encoding="utf-8")), images=self.shard_digest(index))
        renewed = folder / (SHARD_RECORD + ".tmp")  # "_": never read as a part of the shards' dataset
        renewed.write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")
        fsync(renewed)
        os.replace(renewed, path)
        fsync(folder)
        return True

    def shard_images(self, index):
        """Manifest of shard `index` alone (a worker never holds the job's whole list), checked."""
        with self._manifest_errors():
            return Manifest.load_shard(self.manifest, index)

    def load_manifest(self):
        """The job's whole Manifest, checked."""
        with self._manifest_errors():
            return Manifest.load(self.manifest)

    def shard_digest(self, index):
        """The manifest's digest of shard `index`'s images (`Manifest.digest`)."""
        return self.digests[index] if self.digests else self.shard_images(index).digest()

    @contextlib.contextmanager
    def _manifest_errors(self):
        """A damaged manifest, with the way out of a job over several processes (no --overwrite there)."""
        try:
            yield
        except DamagedManifest as error:
            raise error.with_way_out("remove it and rerun: it is made anew from the images, and the committed "
                                     "shards whose images did not change are kept") from None

    # -- shards --------------------------------------------------------------------------------

    def shard_folder(self, index):
        return self.shards / ("shard-%06d" % index)

    def committed_folder(self, index, features=False):
        """The local folder of committed shard `index`'s files (a store's job fetches them there; its
        features.parquet only when `features`)."""
        return self.shard_folder(index)

    def members_index(self):
        """O.members.parquet as a local file, or None: a tar job's index once O is written."""
        return self.members if self.members.exists() else None

    def is_finished(self):
        """Whether the output was written from every shard (the shards may be gone since), as its ledger records
        and its files prove (`assembly.is_proven_finished`)."""
        if self.identity is None and not self.manifest.exists():
            return False  # no job to prove it of
        self._known()
        return is_proven_finished(self.output, self.ledger(), self.shard_count)

    def ledger(self):
        """The job's Ledger (`parallel.jobs.ledger`): read once by the process that holds the output's lock, which
        alone appends to it; read anew each time by any other."""
        if not self._lock_depth:
            return Ledger(ledger_path(self.output))
        if self._ledger is None:
            self._ledger = Ledger(ledger_path(self.output))
        return self._ledger

    def _known(self):
        """Knows the job as its manifest records it, if not frozen by this process (a tool, a test)."""
        if self.identity is None:
            with self._manifest_errors():
                recorded = read_job(self.manifest)
            if recorded is None:
                raise ValueError("%s has no manifest (%s): its shards cannot be checked" % (self.location,
                                                                                              self.manifest))
            self._take(recorded)

    def is_committed(self, index):
        """Whether shard `index` is committed, and its record and counts check out.

        A committed shard that does not (of another job or manifest, a file emptied or replaced)
        is set aside with a warning, so that it is computed again: False.
        """
        self._known()
        folder = self.shard_folder(index)
        if not os.path.lexists(folder):
            return self.is_finished() or index in self.ledger().shards()
        problem = quick_problem(folder, self.identity, index, self.shard_digest(index))
        if problem is None:
            return True
        if self.is_finished() or index in self.ledger().shards():  # its rows are in the output, and it went meanwhile
            return True
        self.set_aside(index, problem)
        return False

    def missing(self):
        """The shards not committed yet (or set aside now by `is_committed`), in order."""
        if self.is_finished():
            return []
        return [index for index in range(self.shard_count) if not self.is_committed(index)]

    def set_aside(self, index, problem):
        """Renames committed shard `index` out of the way (see `shard_record.set_aside`): Path or None."""
        target = set_aside(self.shard_folder(index))
        if target is not None:
            log.warning("shard %d of %s is set aside as %s, to be computed again: %s", index, self.output, target,
                        problem)
        return target

    def resumes_attempts(self):
        """Whether an attempt is resumed by the next run when its process dies (`attempt(resume=True)`): a local
        attempt, whose writer commits batch by batch, so that a kill costs at most a batch (a tar's stream is
        read again, its members with a row skipped by their key: `engine.extract_stream`)."""
        return True

    def _attempt_folder(self, index):
        return self.attempts / ("shard-%06d.%s.%d" % (index, socket.gethostname(), os.getpid()))

    def new_attempt(self, index):
        """A fresh folder of this process for computing shard `index`: Path."""
        folder = self._attempt_folder(index)
        if folder.exists():
            shutil.rmtree(folder)  # this process's own earlier try
        folder.mkdir(parents=True)
        return folder

    @contextlib.contextmanager
    def attempt(self, index, resume=False):
        """`with job.attempt(i) as folder:` a folder of this process for computing shard `index`.

        The folder is locked while the block runs, so that no other process removes or takes an
        attempt that is alive (another process given the same shard, say).

        Args:
          index: the shard.
          resume: take over the attempt at this shard of a process that died (its lock is free)
            if it computed this job's images of the shard as the manifest records them now, so
            that the rows its writer committed are kept. Such an attempt is kept too when the
            block raises (a signal, a full disk): the next run resumes it. Without `resume`, a
            fresh folder, of which a block that raises leaves nothing.
        """
        with contextlib.ExitStack() as held:
            folder = self._resume_attempt(index, held) if resume else None
            if folder is None:
                folder = self.new_attempt(index)
                held.enter_context(locks.exclusive(folder / ATTEMPT_LOCK))
                if resume:
                    try:
                        (folder / ATTEMPT_JOB).write_text(self._attempt_job(index), encoding="utf-8")
                    except OSError as error:  # a full disk: named
                        shutil.rmtree(folder, ignore_errors=True)
                        raise OSError(error.errno, error.strerror, str(folder / ATTEMPT_JOB)) from None
            try:
                yield folder
            except BaseException:
                if not resume:
                    shutil.rmtree(folder, ignore_errors=True)
                raise

    def _attempt_job(self, index):
        """What an attempt at shard `index` computes (a run resumes only an attempt of the same): str."""
        return json.dumps({"job": self.identity, "shard": index, "images": self.shard_digest(index)},
                          sort_keys=True) + "\n"

    def _resume_attempt(self, index, held):
        """The attempt at shard `index` of a dead process, locked in `held` and renamed this process's; or None.

        Attempts of dead processes at this shard that are not of the job's images as the manifest
        records them now, or that were being committed, are removed.
        """
        if not self.attempts.is_dir():
            return None
        expected = self._attempt_job(index)
        for candidate in sorted(self.attempts.glob("shard-%06d.*" % index)):
            taken = contextlib.ExitStack()
            try:
                taken.enter_context(locks.exclusive(candidate / ATTEMPT_LOCK))
            except (locks.Busy, OSError):
                continue  # alive, or gone meanwhile
            with taken:
                try:
                    same = (candidate / ATTEMPT_JOB).read_text(encoding="utf-8") == expected
                except (OSError, UnicodeDecodeError):
                    same = False
                if not same or (candidate / COMMITTING).exists():
                    shutil.rmtree(candidate, ignore_errors=True)
                    continue
                folder = self._attempt_folder(index)
                if candidate != folder:
                    if folder.exists():
                        shutil.rmtree(folder)
                    os.rename(candidate, folder)  # the lock is on the file, which moves with its folder
                held.push(taken.pop_all())
                log.info("shard %d: resuming the attempt of a run that stopped (%s)", index, candidate.name)
                return folder
        return None

    def remove_dead_attempts(self):
        """Removes the attempts of processes that were killed (their folders' locks are free)."""
        locks.remove_unlocked(self.attempts, ATTEMPT_LOCK)

    def commit(self, index, attempt, errors, replacing=False):
        """Makes the finished attempt shard `index`'s part, in one rename, with its record.

        Args:
          index: the shard.
          attempt: the attempt folder, holding a closed SHARD_FEATURES output.
          errors: Path of the attempt's errors file (absent when no image failed).
          replacing: the attempt is a retry of the committed shard's failed images (its rows and
            more): it takes the committed one's place.

        Returns:
          bool: True if this attempt became the part, False if another had already committed.

        Raises:
          OutputError: the attempt's rows and errors are not the shard's images (nothing committed).
        """
        superseded = None
        if replacing:
            superseded = set_aside(self.shard_folder(index), prefix=SUPERSEDED_PREFIX)
        elif self.is_committed(index):  # another attempt was committed first; it is as good
            shutil.rmtree(attempt, ignore_errors=True)
            return False
        keys = shard_keys(self, index, attempt)
        problem = content_problem(attempt / SHARD_FEATURES, errors, keys)
        if problem:
            raise OutputError("shard %d of %s was not committed: %s" % (index, self.output, problem))
        failed = len(error_paths(errors)) if errors.exists() else 0
        ready = attempt / COMMITTING
        ready.mkdir()
        os.rename(attempt / SHARD_FEATURES, ready / SHARD_FEATURES)
        if errors.exists():
            os.rename(errors, ready / SHARD_ERRORS)
        else:
            (ready / SHARD_ERRORS).write_text(_ERRORS_HEADER, encoding="utf-8")
        if self.tars:  # its images: the members of its tar
            os.rename(attempt / MEMBERS_FILE, ready / MEMBERS_FILE)
        write_record(ready, self.identity, index, self.shard_digest(index), len(keys) - failed, failed,
                     parts=(SHARD_FEATURES, SHARD_ERRORS) + ((MEMBERS_FILE,) if self.tars else ()))
        if _changed_since_completed(attempt / SHARD_FEATURES, ready):
            shutil.rmtree(attempt, ignore_errors=True)
            raise OutputError("shard %d of %s was not committed: its %s is not the file its writer completed; rerun "
                              "the same command to compute it again" % (index, self.output, SHARD_FEATURES))
        for name in (SHARD_ERRORS, SHARD_RECORD) + ((MEMBERS_FILE,) if self.tars else ()):
            fsync(ready / name)
        fsync(ready)
        self.shards.mkdir(exist_ok=True)
        try:
            os.rename(ready, self.shard_folder(index))
        except OSError:  # ENOTEMPTY/EEXIST: another attempt was committed first; it is as good
            if not self.is_committed(index):  # it was not, and is set aside now: this one takes its place
                os.rename(ready, self.shard_folder(index))
            else:
                shutil.rmtree(attempt, ignore_errors=True)
                return False
        fsync(self.shards)
        shutil.rmtree(attempt, ignore_errors=True)
        if superseded is not None:
            shutil.rmtree(superseded, ignore_errors=True)
        return True

    def failed_count(self, index):
        """How many images committed shard `index` failed, as its record says (0 once the shards are gone)."""
        try:
            return int(json.loads((self.shard_folder(index) / SHARD_RECORD).read_text(encoding="utf-8"))["failed"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def retriable(self):
        """The committed shards with failed images, whose failures a rerun computes again: [index]."""
        self._known()
        return [index for index in range(self.shard_count) if self.failed_count(index) and self.is_committed(index)]

    def reopen(self):
        """Marks a finished output as being written again (a shard of it is replaced by a retry): until it
        is written afresh from its shards, no process takes it as finished, even if this one is killed."""
        record = read_record(self.output)
        if record is not None and record["state"] == "complete":
            save_record(self.output, dict(record, state="writing", reopened=True))

    def is_reopened(self):
        """Whether the output was reopened (`reopen`) and must be written afresh from its shards."""
        record = read_record(self.output)
        return bool(record and record.get("reopened"))

    def remove_everything(self):
        """Removes the output and every file and folder of its job (--overwrite, or a job of one process with no
        row committed, which starts afresh): regular files and real folders only; the lock stays."""
        self._ledger = None
        for suffix in JOB_FILES:
            path = Path(str(self.output) + suffix)
            if path.is_file() and not path.is_symlink():
                path.unlink()
        for suffix in JOB_FOLDERS:
            path = Path(str(self.output) + suffix)
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)

    def output_rows(self):
        """How many rows the output holds (finished or not): 0 for a new one."""
        record = read_record(self.output)
        return record["rows"] if record is not None else 0

    def holds_rows(self):
        """Whether a row of the job is committed anywhere: in the output, a committed shard or an attempt."""
        if self.output_rows():
            return True
        for folder in sorted(self.shards.glob("shard-*")) if self.shards.is_dir() else ():
            try:
                if int(json.loads((folder / SHARD_RECORD).read_text(encoding="utf-8"))["rows"]):
                    return True
            except (OSError, ValueError, KeyError, TypeError):
                return True  # a shard that does not read may hold rows: never thrown away unseen
        for folder in sorted(self.attempts.glob("shard-*")) if self.attempts.is_dir() else ():
            try:
                recorded = read_record(folder / SHARD_FEATURES)
            except OutputError:
                return True
            if recorded is not None and recorded["rows"]:
                return True
        return False

    @contextlib.contextmanager
    def output_lock(self):
        """`with job.output_lock():` this process is the only one writing the output (re-entrant in it).

        Raises:
          locks.Busy: another process holds it.
        """
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        with locks.exclusive(self.lock):
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
                self._ledger = None  # another process may append to it now

    # -- the final output ----------------------------------------------------------------------

    def assembles_as_it_goes(self, keep_shards=False, keep_failed=False):
        """Whether each shard goes once its rows are in the output (see `parallel.jobs.assembly`): where the
        failures are retried in the output (`retries_in_output`), unless the shards are kept or a Ray job's
        actors retry in them (`keep_failed`)."""
        return self.retries_in_output() and not keep_shards and not keep_failed

    def assembly(self, output_format, column_prefix, settings, keep_shards=False, keep_failed=False,
                 feature_size=None):
        """The output's Assembly from this job's shards (the caller holds the output's lock; `feature_size`: the
        model's, where this process knows it)."""
        return Assembly(self, output_format, column_prefix, settings, feature_size=feature_size,
                        remove_shards=self.assembles_as_it_goes(keep_shards, keep_failed), afresh=self.is_reopened())

    def assemble(self, output_format, column_prefix, settings, keep_shards=False, keep_failed=False, assembly=None):
        """Writes the output from the committed shards, in order, unless another process is doing it.

        The rows go through the output's ordinary writer, so the output is the one a single-host
        run writes, and a kill during this step is resumed by the next process that comes here.

        Args:
          output_format, column_prefix, settings: as for `open_writer`.
          keep_shards: leave O.shards in place (a Parquet dataset) after the output is written.
          keep_failed: leave it in place if an image failed, so that the failures are retried in the
            shards (a Ray job's actors do), not in the output (`retries_in_output`).
          assembly: the Assembly of this process's, which has written some shards already (None: one
            made here).

        Returns:
          bool: True if this process wrote (or found written) the output, False if another holds it.
        """
        try:
            with self.output_lock():
                with contextlib.ExitStack() as stack:
                    checked_as_appended = assembly is not None  # its process proved the ledger when it began
                    if assembly is None:
                        assembly = stack.enter_context(self.assembly(output_format, column_prefix, settings,
                                                                     keep_shards, keep_failed))
                        assembly.prove()  # what the ledger claims of the output, before it is trusted
                    if self.is_finished():
                        self.remove_dead_attempts()
                        return True
                    if self.missing():
                        return False  # checked under the lock: a process that finished first did the rest
                    if not checked_as_appended:
                        self._check_shards()  # every shard not in the output, before a byte of it is written
                    assembly.catch_up()  # after the one in the background, if any (its error raised here)
                    if self.tars:  # before O: once O is complete, the shards (and their indexes) may go
                        merge_indexes([self.shard_folder(i) / MEMBERS_FILE for i in range(self.shard_count)],
                                      self.members)
                    assembly.finish()
                if not keep_shards and self.shards.exists() and (
                        (self.retries_in_output() and not keep_failed) or not self.retriable()):
                    shutil.rmtree(self.shards)  # shards with failed images stay where a rerun retries them there
                self.remove_dead_attempts()
        except locks.Busy:
            log.info("another process is writing %s from the shards", self.output)
            return False
        return True

    def shard_problem(self, index):
        """What is wrong with committed shard `index` against the manifest now (None: it checks out).

        Its record (of this job, shard and images), every byte of its files (against the SHA-256
        its record lists, where `verify_files`), and its rows and errors: exactly its images.

        Raises:
          RunError: the manifest is damaged.
        """
        from parallel.engine import RunError  # imports TensorFlow: not when shards are only read
        folder = self.shard_folder(index)
        try:
            images = self.shard_images(index)
        except DamagedManifest as error:  # after this process wrote its shards: not a usage error
            raise RunError(str(error)) from None
        return (quick_problem(folder, self.identity, index, images.digest())  # the manifest as it is now
                or files_problem(folder, verify=self.verify_files)  # every byte, once, before it is used
                or content_problem(folder / SHARD_FEATURES, folder / SHARD_ERRORS,
                                   shard_keys(self, index) if self.tars else images.paths))

    def _check_shards(self):
        """Sets aside every shard left whose rows and errors are not exactly its images in the manifest.

        Raises:
          RunError: a shard was set aside (named, with what was wrong), or the manifest is
            damaged; nothing more is written.
        """
        rejected = []
        done = self.ledger().shards()
        for index in (index for index in range(self.shard_count) if index not in done):
            problem = self.shard_problem(index)
            if problem:
                target = self.set_aside(index, problem)
                rejected.append("shard %d (%s)%s" % (index, problem, ", now %s" % target if target else ""))
        if rejected:
            raise rejection(self.location, rejected, written=bool(done))

    def shard_errors(self, index):
        """Path of committed shard `index`'s errors file (None once the shards are gone)."""
        errors = self.shard_folder(index) / SHARD_ERRORS
        return errors if errors.exists() else None

    def assembled_failures(self):
        """The images that failed of the shards in the output, as its ledger records: set of paths."""
        return frozenset(path for path, _, _ in self.ledger().failures())

    def output_errors(self):
        """Path of the output's errors file (absent when no image failed)."""
        return ErrorLog.path_for(self.output)

    def failed_in(self, index, paths):
        """How many of committed shard `index`'s images (`paths`) failed: from its errors file, or the output's."""
        errors = self.shard_errors(index)
        in_output = self.ledger().shards()
        if errors is None and index in in_output:
            return len({path for path, _, _ in in_output[index]}.intersection(paths))
        if errors is None:
            errors, paths = self.output_errors(), set(paths)
            if not errors.exists():
                return 0
        return sum(1 for path in error_paths(errors) if path in paths)


def _changed_since_completed(features, ready):
    """Whether the attempt's `features` file, gathered in `ready` with its shard record, differs from the file its
    writer completed (the size and SHA-256 its commit record holds: `open_writer(record_digests=True)`)."""
    completed = ((read_record(features) or {}).get("digests") or {}).get(features.name)
    listed = json.loads((ready / SHARD_RECORD).read_text(encoding="utf-8"))["files"][features.name]
    return completed is not None and list(completed) != [listed["size"], listed["sha256"]]

