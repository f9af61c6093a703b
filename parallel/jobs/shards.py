"""One job over many processes: a frozen manifest, cut into fixed shards, each committed as one group of files.

Files, for an output O (local, or in a store: the same names, as objects; parallel.jobs.commits):

    O.manifest.parquet        the job: its images (a row group per shard) and, in its metadata, its
                              settings and shard size; frozen by the first process (parallel.jobs.frozen)
    O.attempts/shard-000007.<host>.<pid>/
                              a shard being computed on this host (parallel.jobs.attempts): a single-host
                              job (reader -> devices -> writer, committed batch by batch) into features.parquet
    O.shards/shard-000007/    a committed shard: features.parquet (path, path_bytes, <layer>, rows in
                              path order), _errors.csv (its images that could not be read), _shard.json
                              (its job, its images' digest, its counts, the size and SHA-256 of each file:
                              shard_record) and, a tar's (parallel.inputs.tars), _members.parquet: its images;
                              a text job's _text.parquet (parallel.output.text_rows)
                              (in a store: O.shards/shard-000007/<attempt>/..., its record written last)
    O.members.parquet         a tar job's members, written with O (parallel.inputs.tars.read_member)
    O.text.parquet            a text job's captions and labels, merged from the shards' with O
    O                         written from the shards, in order (parallel.jobs.assembly)
    O.ledger.jsonl            what is in O: each shard appended, its failed images, O closed (ledger)

Commit protocol: a shard's attempt is finished in its own folder, its files gathered with their
record, and committed as one group (`Commits.commit`: renamed into O.shards in one step, or uploaded
with its record last). A committed shard is computed again only for its failed images (a retry,
committed anew in its place: ShardWorker.retry) or when it no longer checks out. A process killed
during an attempt leaves its attempt, resumed by the next process on its host given the shard. Two
processes given the same shard both compute it; one group is chosen, the same by every reader: one
correct part, never two. Shard i holds images i * shard_size .. (i + 1) * shard_size - 1 of the
manifest, whatever the number of processes, so a job can resume on another number of hosts.

Nothing is trusted that storage or a user may have changed: the manifest carries checksums
(parallel.inputs.manifest), a shard is counted as committed only if its record is of this job and shard
and lists its files' sizes (else it is set aside and computed again), and before a byte of O is
written from a shard its every byte is checked against its record, and its rows and errors to be
exactly the manifest's images of that shard. O.shards is a Parquet dataset as it is (readers skip
"_" files: docs/many-hosts.md), removed once O is written.
"""

import contextlib
import json
import logging
import shutil

from parallel.inputs.tars import MEMBERS_FILE, merge_indexes
from parallel.output.text_rows import TEXT_FILE, merge_files
from parallel.jobs import locks
from parallel.jobs.assembly import Assembly
from parallel.jobs.attempts import COMMITTING, Attempts
from parallel.jobs.commits import ATTEMPTS_SUFFIX, SHARDS_SUFFIX, PartChanged
from parallel.jobs.output_state import JOB_FILES, JOB_FOLDERS, CommittedOutput
from parallel.jobs.shard_record import (SHARD_ERRORS, SHARD_FEATURES, SHARD_RECORD, content_problem, error_paths,
                                        quick_problem, record_problem, rejection, shard_keys, write_record)
from parallel.output import OutputError, read_record

log = logging.getLogger("parallel")

__all__ = ["ShardedJob", "SHARD_FEATURES", "SHARDS_SUFFIX", "ATTEMPTS_SUFFIX", "JOB_FILES", "JOB_FOLDERS"]

_ERRORS_HEADER = "path,kind,message\n"


class ShardedJob(CommittedOutput):
    """The files of a sharded job writing `output`, a local path or a URL (see the module docstring).

    Attributes (beside FrozenJob's): shards, attempts: the local paths of O.shards and of this host's attempts.
    """

    @property
    def shards(self):
        return self.commits.shards

    @property
    def attempts(self):
        return self.commits.attempts

    # -- the committed shards ------------------------------------------------------------------

    def shard_folder(self, index):
        """The local folder of shard `index` (a store's: where its files are fetched)."""
        return self.commits.shard_folder(index)

    def _parts(self):
        """The files of a shard beside its record: a tar shard's also its index of members (its images), a text job's
        its text file."""
        return (SHARD_FEATURES, SHARD_ERRORS) + ((MEMBERS_FILE,) if self.streamed else ()) + (
            (TEXT_FILE,) if self.has_text else ())

    def _choose(self, index, images=None):
        """(the handle and record of shard `index`'s committed group that checks out, first in the readers' order,
        or (None, None); [(handle, problem)] of the groups before it that do not). `images`: the digest of the
        images it must be committed for (None: the manifest's now)."""
        self._known()
        images = self.shard_digest(index) if images is None else images
        wrong = []
        for handle, record, sizes in self.commits.groups(index):
            problem = record_problem(record, sizes, self.identity, index, images)
            if problem is None:
                return handle, record, wrong
            wrong.append((handle, problem))
        return None, None, wrong

    def chosen(self, index):
        """The handle of shard `index`'s committed group (`Commits.groups`), or None."""
        return self._choose(index)[0]

    def is_committed(self, index):
        """Whether shard `index` is committed, and its record and its files' sizes check out.

        A committed group that does not (of another job or manifest, a file emptied or replaced) is set
        aside with a warning, so that the shard is computed again, unless its rows are in the output.
        """
        handle, _, wrong = self._choose(index)
        if handle is None and (self.is_finished() or index in self.ledger().shards()):
            return True  # its rows are in the output, and it went (or goes) meanwhile
        for other, problem in wrong:
            self._set_aside(index, other, problem)
        return handle is not None

    def missing(self):
        """The shards not committed yet (or set aside now by `is_committed`), in order."""
        if self.is_finished():
            return []
        return [index for index in range(self.shard_count) if not self.is_committed(index)]

    def committed_folder(self, index, features=False):
        """The local folder of committed shard `index`'s files, read back verified where they are fetched (a
        store's; its features.parquet only when `features`)."""
        handle = self.chosen(index)
        if handle is None:
            return self.shard_folder(index)
        parts = self._parts() if features else tuple(part for part in self._parts() if part != SHARD_FEATURES)
        return self.commits.fetch(index, handle, parts)

    def set_aside(self, index, problem):
        """Sets the committed group of shard `index` aside (never chosen again), to be computed again: where it is
        now, or None when there was none."""
        handle = self.chosen(index)
        return None if handle is None else self._set_aside(index, handle, problem)

    def _set_aside(self, index, handle, problem):
        moved = self.commits.reject(index, handle, problem)
        if moved is None:
            return None
        where = self.commits.where(index, moved)
        log.warning("shard %d of %s is set aside as %s, to be computed again: %s", index, self.location, where,
                    problem)
        return where

    def failed_count(self, index):
        """How many images committed shard `index` failed, as its record says (0 once the shards are gone)."""
        record = self._choose(index)[1]
        try:
            return int(record["failed"]) if record else 0
        except (KeyError, TypeError, ValueError):
            return 0

    def retriable(self):
        """The committed shards with failed images, whose failures a rerun computes again: [index]."""
        self._known()
        return [index for index in range(self.shard_count) if self.failed_count(index) and self.is_committed(index)]

    def renew_record(self, index, previous):
        """Committed shard `index`, recorded for the images `previous` (a digest), is recorded for the manifest's
        images now: some of its failed images were repaired and taken anew (none of them has a row).

        Its rows stay valid, so the shard is kept, and a run retries its failed images (`ShardWorker.retry`)
        instead of computing it again whole. Where the storage cannot replace a record (a store's are written
        once), the shard is computed again whole.

        Returns:
          bool: whether the record was renewed (False: no such committed shard, or it does not check out).
        """
        handle, record, _ = self._choose(index, previous)
        return handle is not None and self.commits.rewrite_record(index, handle,
                                                                  dict(record, images=self.shard_digest(index)))

    def shard_problem(self, index):
        """What is wrong with committed shard `index` against the manifest now (None: it checks out).

        Its record (of this job, shard and images), every byte of its files (against the SHA-256
        its record lists), and its rows and errors: exactly its images.

        Raises:
          RunError: the manifest is damaged.
        """
        from parallel.engine import RunError  # imports TensorFlow: not when shards are only read
        from parallel.inputs.manifest import DamagedManifest
        handle = self.chosen(index)
        if handle is None:
            return "it is not committed"
        try:
            images = self.shard_images(index)
        except DamagedManifest as error:  # after this process wrote its shards: not a usage error
            raise RunError(str(error)) from None
        try:
            folder = self.commits.fetch(index, handle, self._parts(), verify=True)  # every byte, once, before use
        except PartChanged as error:
            return str(error)
        return (quick_problem(folder, self.identity, index, images.digest())  # the manifest as it is now
                or content_problem(folder / SHARD_FEATURES, folder / SHARD_ERRORS,
                                   shard_keys(self, index) if self.streamed else images.paths))

    # -- attempts and the commit ------------------------------------------------------------------

    def resumes_attempts(self):
        """Whether an attempt is resumed by the next run when its process dies (`attempt(resume=True)`): its writer
        commits batch by batch, so that a kill costs at most two batches, the one being committed and the one
        being computed (a tar's stream is read again, its members with a row skipped by their key:
        `engine.extract_stream`)."""
        return True

    def new_attempt(self, index):
        """A fresh folder of this process for computing shard `index`: Path."""
        return Attempts(self.attempts).new(index)

    def attempt(self, index, resume=False):
        """`with job.attempt(i) as folder:` a folder of this process for computing shard `index`, locked while
        the block runs; with `resume`, the attempt of a process that died at this shard's images as the
        manifest records them now is taken over, and kept when the block raises (`Attempts.open`)."""
        return Attempts(self.attempts).open(index, self._attempt_job(index) if resume else None)

    def _attempt_job(self, index):
        """What an attempt at shard `index` computes (a run resumes only an attempt of the same): str."""
        return json.dumps({"job": self.identity, "shard": index, "images": self.shard_digest(index)},
                          sort_keys=True) + "\n"

    def remove_dead_attempts(self):
        """Removes the attempts of processes that were killed (their folders' locks are free)."""
        Attempts(self.attempts).remove_dead()

    def commit(self, index, attempt, errors, replacing=False):
        """Makes the finished attempt shard `index`'s committed group, with its record.

        Args:
          index: the shard.
          attempt: the attempt folder, holding a closed SHARD_FEATURES output.
          errors: Path of the attempt's errors file (absent when no image failed).
          replacing: the attempt is a retry of the committed shard's failed images (its rows and
            more): it takes the committed one's place.

        Returns:
          bool: True if this attempt became the shard's group, False if another had already committed.

        Raises:
          OutputError: the attempt's rows and errors are not the shard's images (nothing committed).
        """
        if not replacing and self.is_committed(index):  # another attempt was committed first; it is as good
            shutil.rmtree(attempt, ignore_errors=True)
            return False
        keys = shard_keys(self, index, attempt)
        problem = content_problem(attempt / SHARD_FEATURES, errors, keys)
        if problem:
            raise OutputError("shard %d of %s was not committed: %s" % (index, self.location, problem))
        failed = len(error_paths(errors)) if errors.exists() else 0
        ready = attempt / COMMITTING
        ready.mkdir()
        (attempt / SHARD_FEATURES).rename(ready / SHARD_FEATURES)
        if errors.exists():
            errors.rename(ready / SHARD_ERRORS)
        else:
            (ready / SHARD_ERRORS).write_text(_ERRORS_HEADER, encoding="utf-8")
        for part in (MEMBERS_FILE,) * self.streamed + (TEXT_FILE,) * self.has_text:  # a tar's members, its text
            (attempt / part).rename(ready / part)
        write_record(ready, self.identity, index, self.shard_digest(index), len(keys) - failed, failed,
                     parts=self._parts())
        if _changed_since_completed(attempt / SHARD_FEATURES, ready):
            shutil.rmtree(attempt, ignore_errors=True)
            raise OutputError("shard %d of %s was not committed: its %s is not the file its writer completed; rerun "
                              "the same command to compute it again" % (index, self.location, SHARD_FEATURES))
        superseded = self.chosen(index) if replacing else None
        if superseded is not None:  # first: a kill before the commit leaves the shard to be computed again
            superseded = self.commits.reject(index, superseded, "superseded by a retry of its failed images",
                                             superseded=True)
        handle = self.commits.commit(index, ready)
        if handle is None and not self.is_committed(index):  # the group there did not check out, and is set aside
            handle = self.commits.commit(index, ready)
        shutil.rmtree(attempt, ignore_errors=True)
        if superseded is not None:
            self.commits.drop(index, superseded)
        return handle is not None and self.chosen(index) == handle

    # -- the output ------------------------------------------------------------------------------

    def assembles_as_it_goes(self, keep_shards=False):
        """Whether each shard goes once its rows are in the output (see `parallel.jobs.assembly`): where the
        output is committed as it is written (a local one), its failures are retried in it whatever they are
        (not a tar job's: a tar that cannot be read keeps every shard, `retries_in_output`), the shards are
        not kept, and no text file is merged from them at the end."""
        return self.commits.in_place and not self.streamed and not self.has_text and not keep_shards

    def assembly(self, output_format, column_prefix, settings, keep_shards=False, feature_size=None):
        """The output's Assembly from this job's shards (the caller holds the output's lock; `feature_size`: the
        model's, where this process knows it)."""
        return Assembly(self, output_format, column_prefix, settings, feature_size=feature_size,
                        remove_shards=self.assembles_as_it_goes(keep_shards), afresh=self.is_reopened())

    def assemble(self, output_format, column_prefix, settings, keep_shards=False, assembly=None, feature_size=None):
        """Writes the output from the committed shards, in order, unless another process is doing it.

        The rows go through the output's ordinary writer, so the output is the one a single-host
        run writes, and a kill during this step is resumed by the next process that comes here. An
        output in a store is written in this process's staging folder, then published, its record last.

        Args:
          output_format, column_prefix, settings: as for `open_writer`.
          keep_shards: leave O.shards in place (a Parquet dataset) after the output is written.
          assembly: the Assembly of this process's, which has written some shards already (None: one
            made here).
          feature_size: the model's, where this process knows it (None: read from a shard, or the output).

        Returns:
          bool: True if this process wrote (or found written) the output, False if another holds it.
        """
        try:
            with self.named(), self.output_lock():
                with contextlib.ExitStack() as stack:
                    checked_as_appended = assembly is not None  # its process proved the ledger when it began
                    if assembly is None:
                        assembly = stack.enter_context(self.assembly(output_format, column_prefix, settings,
                                                                     keep_shards, feature_size=feature_size))
                        assembly.prove()  # what the ledger claims of the output, before it is trusted
                    if self.is_finished():
                        self.remove_dead_attempts()
                        return True
                    if self.missing():
                        return False  # checked under the lock: a process that finished first did the rest
                    if not checked_as_appended:
                        self._check_shards()  # every shard not in the output, before a byte of it is written
                    assembly.catch_up()  # after the one in the background, if any (its error raised here)
                    # Before O: once O is complete, the shards (and their indexes) may go. An index the ledger
                    # proves (O closed with it, its shards gone since) is kept: `Assembly.prove`.
                    if self.streamed and not self.members_proven(self.ledger()):
                        merge_indexes([self.committed_folder(i) / MEMBERS_FILE for i in range(self.shard_count)],
                                      self.members)
                    if self.has_text and not self.text_proven(self.ledger()):
                        merge_files([self.committed_folder(i) / TEXT_FILE for i in range(self.shard_count)], self.text)
                    assembly.finish()
                    self.publish_output()
                if not keep_shards and self.commits.holds_shards() and (
                        self.retries_in_output() or not self.retriable()):
                    self.commits.remove_shards()  # shards with failed images stay where a rerun retries them there
                self.remove_dead_attempts()
        except locks.Busy:
            log.info("another process is writing %s from the shards", self.location)
            return False
        return True

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
        handle = self.chosen(index)
        return None if handle is None else self.commits.fetch(index, handle, (SHARD_ERRORS,)) / SHARD_ERRORS

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

    def remove_shard(self, index):
        """Removes shard `index`'s committed groups (its rows are in the output)."""
        for handle, _, _ in self.commits.groups(index):
            self.commits.drop(index, handle)


def _changed_since_completed(features, ready):
    """Whether the attempt's `features` file, gathered in `ready` with its shard record, differs from the file its
    writer completed (the size and SHA-256 its commit record holds: `open_writer(record_digests=True)`)."""
    completed = ((read_record(features) or {}).get("digests") or {}).get(features.name)
    listed = json.loads((ready / SHARD_RECORD).read_text(encoding="utf-8"))["files"][features.name]
    return completed is not None and list(completed) != [listed["size"], listed["sha256"]]
