"""A job's attempts: the folders in which this host's processes compute shards, each locked while it is alive.

    O.attempts/shard-000007.<host>.<pid>/     an attempt at shard 7 (for an output in a store:
                                              TMPDIR/parallel-store-attempts/<digest>/, `commits.attempts_folder`)
        .lock                                 held while its process computes in it
        _attempt.json                         what it computes: the job, the shard, the digest of its images
        features.parquet, ...                 its rows, committed batch by batch by its writer
        commit/                               its files gathered to be committed as the shard's group

An attempt of a process that died (its lock is free) is resumed by the next process given its shard,
if it computes the same images (its `_attempt.json` is the one expected) and was not being committed:
its writer's committed rows are kept, so a kill costs at most two batches (the one being committed,
the one being computed: parallel.loop.WriterThread). Any other is removed.
"""

import contextlib
import logging
import os
import shutil
import socket

from parallel.jobs import locks

log = logging.getLogger("parallel")

ATTEMPT_LOCK = ".lock"
ATTEMPT_JOB = "_attempt.json"  # a resumable attempt's job, shard and images
COMMITTING = "commit"  # where an attempt's files are gathered, to be committed as the shard's group


class Attempts:
    """The attempts under one folder (see the module docstring).

    Attributes:
      folder: Path of the attempts' folder.
    """

    def __init__(self, folder):
        self.folder = folder

    def own(self, index):
        """The folder of this process's attempt at shard `index`: Path."""
        return self.folder / ("shard-%06d.%s.%d" % (index, socket.gethostname(), os.getpid()))

    def new(self, index):
        """A fresh folder of this process for computing shard `index`: Path."""
        folder = self.own(index)
        if folder.exists():
            shutil.rmtree(folder)  # this process's own earlier try
        folder.mkdir(parents=True)
        return folder

    @contextlib.contextmanager
    def open(self, index, expected=None):
        """`with attempts.open(i, expected) as folder:` a folder of this process for computing shard `index`,
        locked while the block runs, so that no other process removes or takes an attempt that is alive.

        Args:
          index: the shard.
          expected: what the attempt computes (str, written to its ATTEMPT_JOB): with it, the attempt at this
            shard of a process that died is taken over if it computes the same, so that the rows its writer
            committed are kept, and this one is kept too when the block raises (a signal, a full disk): the
            next run resumes it. None: a fresh folder, of which a block that raises leaves nothing.
        """
        resume = expected is not None
        with contextlib.ExitStack() as held:
            folder = self._resume(index, expected, held) if resume else None
            if folder is None:
                folder = self.new(index)
                held.enter_context(locks.exclusive(folder / ATTEMPT_LOCK))
                if resume:
                    try:
                        (folder / ATTEMPT_JOB).write_text(expected, encoding="utf-8")
                    except OSError as error:  # a full disk: named
                        shutil.rmtree(folder, ignore_errors=True)
                        raise OSError(error.errno, error.strerror, str(folder / ATTEMPT_JOB)) from None
            try:
                yield folder
            except BaseException:
                if not resume:
                    shutil.rmtree(folder, ignore_errors=True)
                raise

    def _resume(self, index, expected, held):
        """The attempt at shard `index` of a dead process, locked in `held` and renamed this process's; or None.

        Attempts of dead processes at this shard that do not compute `expected`, or that were being
        committed, are removed.
        """
        if not self.folder.is_dir():
            return None
        for candidate in sorted(self.folder.glob("shard-%06d.*" % index)):
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
                folder = self.own(index)
                if candidate != folder:
                    if folder.exists():
                        shutil.rmtree(folder)
                    os.rename(candidate, folder)  # the lock is on the file, which moves with its folder
                held.push(taken.pop_all())
                log.info("shard %d: resuming the attempt of a run that stopped (%s)", index, candidate.name)
                return folder
        return None

    def remove_dead(self):
        """Removes the attempts of processes that were killed (their folders' locks are free)."""
        locks.remove_unlocked(self.folder, ATTEMPT_LOCK)

    def remove_all(self):
        """Removes every attempt (--overwrite: the job starts afresh), a real folder only."""
        if self.folder.is_dir() and not self.folder.is_symlink():
            shutil.rmtree(self.folder)
