"""The output O of a job as committed: its ledger, the proof that it is finished, its record, its failures.

    job.ledger()            O.ledger.jsonl (parallel.jobs.ledger): what is in O, checksummed
    job.is_finished()       whether the ledger proves O finished, against O's committed files (parallel.jobs.proof)
    job.pull_output()       O as committed made this process's, to be written again (a store's downloaded)
    job.publish_output()    O written here committed, its record last (a store's uploaded; a local one is
                            committed as it is written: nothing to do)
    job.reopen()            O marked as being written again (a shard of it is replaced by a retry)

Every read and write goes through the job's Commits (parallel.jobs.commits), so that this is the same
for an output in a folder and one in a store. ShardedJob (parallel.jobs.shards) is this with its shards.
"""

import json

from parallel.inputs.tars import MEMBERS_SUFFIX, is_member
from parallel.jobs import proof
from parallel.jobs.attempts import Attempts
from parallel.jobs.commits import ATTEMPTS_SUFFIX, SHARDS_SUFFIX
from parallel.jobs.frozen import FrozenJob
from parallel.jobs.ledger import LEDGER_SUFFIX, Ledger, ledger_path
from parallel.jobs.proof import OUTPUT_FILES
from parallel.jobs.shard_record import SHARD_FEATURES
from parallel.messages import one_cause
from parallel.output import ErrorLog, OutputError, read_record
from parallel.output.record import ERRORS_SUFFIX, PATHS_SUFFIX, SIDECAR_SUFFIX, save_record
from parallel.output.text_rows import NEXT_SUFFIX, TEXT_SUFFIX

# What a job writes beside its output O (files, and folders: its shards, attempts, and the writer's parts).
JOB_FILES = ("", SIDECAR_SUFFIX, ERRORS_SUFFIX, PATHS_SUFFIX, ".manifest.parquet", MEMBERS_SUFFIX, TEXT_SUFFIX,
             TEXT_SUFFIX + NEXT_SUFFIX, LEDGER_SUFFIX)
JOB_FOLDERS = (SHARDS_SUFFIX, ATTEMPTS_SUFFIX, ".parts")


class CommittedOutput(FrozenJob):
    """A frozen job's output as committed (see the module docstring)."""

    def __init__(self, output):
        super().__init__(output)
        self._ledger = None  # the ledger as this process, holding the output's lock, writes it (`ledger`)
        self._stale = (None, None)  # (what `stale_shards` was found for, what it found)

    @property
    def members(self):
        """The local path of O.members.parquet (a tar job's index of members, written with O)."""
        return self.commits.local(MEMBERS_SUFFIX)

    @property
    def text(self):
        """The local path of O.text.parquet (what a text tower gave each row, written with O)."""
        return self.commits.local(TEXT_SUFFIX)

    def _released(self):
        self._ledger = None  # another process may append to it now

    def members_index(self):
        """O.members.parquet as a local file, or None: a tar job's index once O is written."""
        return self.members if self.members.exists() or self.commits.pull(MEMBERS_SUFFIX) else None

    def ledger(self):
        """The job's Ledger (`parallel.jobs.ledger`): read once by the process that holds the output's lock, which
        alone appends to it; read anew each time by any other."""
        if self._lock_depth and self._ledger is not None:
            return self._ledger
        self.commits.pull(LEDGER_SUFFIX)
        ledger = Ledger(ledger_path(self.output))
        if self._lock_depth:
            self._ledger = ledger
        return ledger

    def is_finished(self):
        """Whether the output was written from every shard (the shards may be gone since), as its ledger records
        and its files prove (`proof.is_proven_finished`)."""
        if self.identity is None and not self.manifest.exists():
            return False  # no job to prove it of
        self._known()
        record = self.commits.read(SIDECAR_SUFFIX)
        return record is not None and self.finished_in(self.ledger(), record)

    def finished_in(self, ledger, record=None):
        """Whether `ledger` proves the output finished, against its commit record (bytes; None: read now)."""
        record = self.commits.read(SIDECAR_SUFFIX) if record is None else record
        return proof.is_proven_finished(self, ledger, record)

    def committed_digest(self, suffix):
        """(size, SHA-256) of the committed O<suffix>, or None (`Commits.digest`: read once while it is unchanged)."""
        return self.commits.digest(suffix)

    def stale_shards(self, ledger):
        """`proof.stale_shards` of `ledger`, found once for each manifest and ledger (it reads the manifest whole)."""
        key = (self.manifest_checksum, tuple((entry["shard"], entry.get("images")) for entry in ledger.claims()))
        if self._stale[0] != key:
            self._stale = (key, proof.stale_shards(self, ledger))
        return self._stale[1]

    def members_proven(self, ledger):
        """Whether O.members.parquet is the index the ledger closed O with (`proof.members_proven`)."""
        return proof.members_proven(self, ledger)

    def text_proven(self, ledger):
        """Whether O.text.parquet is the one the ledger closed O with, or a retry recorded since
        (`proof.text_proven`)."""
        return proof.text_proven(self, ledger)

    def retries_in_output(self):
        """Whether the failed images of the finished output are retried into it (`retry.retry_in_output`), so that
        its shards go once it is written: every job's but a tar job's of which a tar could not be read at all (its
        members unknown: read again whole, in its shard, which stays with the others to write O afresh)."""
        return not self.streamed or all(is_member(path) for path, _, _ in self.ledger().failures())

    def pull_output(self):
        """The committed output's files made this process's (a store's downloaded), to be written again."""
        for suffix in OUTPUT_FILES + (SIDECAR_SUFFIX,):
            self.commits.pull(suffix)

    def publish_output(self):
        """The output written here committed (a store's uploaded), its commit record last."""
        for suffix in OUTPUT_FILES + (LEDGER_SUFFIX,):
            if (suffix != MEMBERS_SUFFIX or self.streamed) and (suffix != TEXT_SUFFIX or self.has_text):
                self.commits.publish(suffix)
        self.commits.publish(SIDECAR_SUFFIX)

    def reopen(self):
        """Marks a finished output as being written again (a shard of it is replaced by a retry): until it
        is written afresh from its shards, no process takes it as finished, even if this one is killed."""
        self.commits.pull(SIDECAR_SUFFIX)
        record = read_record(self.output)
        if record is not None and record["state"] == "complete":
            save_record(self.output, dict(record, state="writing", reopened=True))
            self.commits.publish(SIDECAR_SUFFIX)

    def is_reopened(self):
        """Whether the output was reopened (`reopen`) and must be written afresh from its shards."""
        return bool(self._record().get("reopened"))

    def _record(self):
        """The output's committed record, as it is ({} when there is none, or it does not read)."""
        try:
            record = json.loads(self.commits.read(SIDECAR_SUFFIX) or b"{}")
        except ValueError:
            return {}
        return record if isinstance(record, dict) else {}

    def output_settings(self):
        """The settings the output's committed record holds, or None (no record, or one that does not read)."""
        settings = self._record().get("settings")
        return settings if isinstance(settings, dict) else None

    def output_rows(self):
        """How many rows the output holds (finished or not), as its record says, or its ledger where the record is
        lost or damaged: 0 for a new one."""
        rows = self._record().get("rows")
        if isinstance(rows, int):
            return rows
        return max((entry.get("output_rows", 0) for entry in self.ledger().claims()), default=0)

    def failures_cause(self, count):
        """What the failed images of the output all say (`one_cause`), when its ledger records `count` of them (a
        process's summary that counts them all): the summary line gives it. None else, or when they say several."""
        failures = self.ledger().failures() if count else []
        return one_cause(failures) if len(failures) == count else None

    def assembled_failures(self):
        """The images that failed of the shards in the output, as its ledger records: set of paths."""
        return frozenset(path for path, _, _ in self.ledger().failures())

    def output_errors(self):
        """Path of the output's errors file, as committed (absent when no image failed)."""
        self.commits.pull(ERRORS_SUFFIX)
        return ErrorLog.path_for(self.output)

    def retried_in_output(self):
        """Whether this run retries the failed images in the finished output itself: its shards are gone."""
        return self.retries_in_output() and self.is_finished() and not self.commits.holds_shards()

    def holds_rows(self):
        """Whether a row of the job is committed anywhere: in the output, a committed shard or an attempt."""
        if self.output_rows():
            return True
        try:
            self._known()
        except ValueError:
            return True  # a job whose manifest does not read may have rows: never thrown away unseen
        for index in range(self.shard_count):
            for _, record, _ in self.commits.groups(index):
                if not isinstance(record, dict) or record.get("rows") != 0:
                    return True  # a shard that does not read may hold rows: never thrown away unseen
        for folder in sorted(self.attempts.glob("shard-*")) if self.attempts.is_dir() else ():
            try:
                recorded = read_record(folder / SHARD_FEATURES)
            except OutputError:
                return True
            if recorded is not None and recorded["rows"]:
                return True
        return False

    def remove_everything(self):
        """Removes the output and every file and folder of its job (--overwrite, or a job of one process with no
        row committed, which starts afresh): regular files and real folders only, the record last; the lock
        stays."""
        self._ledger = None
        self.commits.unpublish([suffix for suffix in JOB_FILES + JOB_FOLDERS
                                if suffix not in (SIDECAR_SUFFIX, ATTEMPTS_SUFFIX)])
        self.commits.unpublish([SIDECAR_SUFFIX])
        Attempts(self.attempts).remove_all()
