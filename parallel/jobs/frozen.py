"""A job frozen in its manifest, and the output's lock: what every process of a job shares before a shard is computed.

    FrozenJob(output)            the job writing `output` (a local path, or a URL): its committed state
                                 behind one Commits (parallel.jobs.commits), its local files beside
                                 `job.output` (for a store, in a staging folder of this process)
    job.freeze(job, scan)        the job's manifest (O.manifest.parquet), written by the first process
                                 (under O.manifest.lock, then created in its store unless one is), read and
                                 checked by the others: its images, its shard size, its settings
    job.output_lock()            one process writes the output at a time (re-entrant in it)

ShardedJob (parallel.jobs.shards) is this with its shards.
"""

import contextlib
import logging
from pathlib import Path

from parallel.inputs.changes import other_source_message
from parallel.inputs.manifest import MANIFEST_SUFFIX, DamagedManifest, Manifest, manifest_path, read_job
from parallel.inputs.sources import STREAMED
from parallel.jobs import locks
from parallel.jobs.commits import LOCK_SUFFIX, FolderCommits
from parallel.jobs.shard_record import job_identity
from parallel.locations import is_url
from parallel.output import OutputError, check_settings

log = logging.getLogger("parallel")


class FrozenJob:
    """The files of a job writing `output`, and its manifest once frozen (see the module docstring).

    Attributes:
      commits: the Commits through which its state is committed (a local folder, or a store).
      output: Path where this process reads and writes the output; location: what messages name (a URL for
        a job in a store).
      manifest: Path of the job's manifest (local, or this process's copy of a store's).
      shard_size, shard_count, images: per shard, shards, of the job (once the manifest is frozen or read).
      identity, digests: the job's identity and its shards' digests; tars: whether its images are tars' members.
      has_text: whether a text tower gives each row its caption's embedding and score, or labels (O.text.parquet).
      manifest_checksum: the checksum of what the manifest records (None for one of an earlier version).
    """

    def __init__(self, output):
        self.commits = open_commits(output)
        self.output = self.commits.output
        self.location = self.commits.location
        self.manifest = Path(manifest_path(self.output))
        self.lock = self.commits.local(LOCK_SUFFIX)
        self.shard_size = self.shard_count = self.images = None
        self.identity = self.digests = None  # the job's identity and its shards' digests, once frozen
        self.manifest_checksum = None
        self.streamed = False  # shards of files read as streams (tars...), whose images are known once they are read
        self.has_text = False  # what a text tower gave each row beside it (captions, labels: O.text.parquet)
        self._lock_depth = 0  # how deep this process holds the output's lock (`output_lock`)
        self._held = None  # the lock held until `close` (`hold_lock`), or True: to be taken once the folder is made
        self.commits.pull(MANIFEST_SUFFIX)  # a store's: this process's copy

    def __getstate__(self):
        """What a Ray worker receives: the frozen job, not this process's lock."""
        return dict(self.__dict__, _held=None, _lock_depth=0)

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.output = self.commits.output  # a store's staging folder is the receiving process's
        self.manifest = Path(manifest_path(self.output))
        self.lock = self.commits.local(LOCK_SUFFIX)
        self.commits.pull(MANIFEST_SUFFIX)

    def close(self):
        """Releases what this process holds for the job: the output's lock (`hold_lock`), a store's staging folder."""
        held, self._held = self._held, None
        if held not in (None, True):
            held.close()
        self.commits.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

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

    @contextlib.contextmanager
    def output_lock(self):
        """`with job.output_lock():` this process is the only one writing the output (re-entrant in it; a store has
        no lock: processes writing its output at once write the same bytes).

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
        with self.commits.lock():
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
                self._released()

    def _released(self):
        """What this process knew only while it held the output's lock is read anew from now on."""

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
        with self.commits.named():
            fresh = not self.commits.pull(MANIFEST_SUFFIX)
            recorded = self._freeze_here(job, scan, shard_size, wait_seconds, default_shard_size)
            if fresh and not self.commits.create(MANIFEST_SUFFIX):  # another process froze the job first
                self.commits.pull(MANIFEST_SUFFIX)
                recorded = self._freeze_here(job, scan, shard_size, wait_seconds, default_shard_size)
        return recorded

    def _freeze_here(self, job, scan, shard_size, wait_seconds, default_shard_size):
        """`freeze` on this process's manifest file."""
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
            with self._manifest_errors(), locks.exclusive(self.commits.local(MANIFEST_SUFFIX + LOCK_SUFFIX),
                                                          wait_seconds):
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

    def recorded_job(self):
        """The "job" (its settings and source) the manifest records, checked; None when there is no manifest.

        Raises:
          ValueError: the manifest is damaged (named as users see it, with the way out).
        """
        with self._manifest_errors():
            recorded = read_job(self.manifest)
        return None if recorded is None else recorded["job"]

    def _take(self, recorded):
        """Knows the job recorded in its manifest (`read_job`); returns it."""
        self.shard_size, self.images = recorded["shard_size"], recorded["images"]
        self.shard_count = -(-self.images // self.shard_size)
        self.identity, self.digests = job_identity(recorded), recorded.get("shards")
        self.manifest_checksum = recorded.get("checksum")
        self.streamed = recorded["job"].get("input") in STREAMED
        self.has_text = "text_column" in recorded["job"] or "labels" in recorded["job"]
        return recorded

    def _known(self):
        """Knows the job as its manifest records it, if not frozen by this process (a tool, a test)."""
        if self.identity is None:
            with self._manifest_errors():
                recorded = read_job(self.manifest)
            if recorded is None:
                raise ValueError("%s has no manifest (%s): its shards cannot be checked" % (self.location,
                                                                                              self.manifest))
            self._take(recorded)

    def save_manifest(self, manifest):
        """Records `manifest` (the job's images, some taken anew) as the job's, with its shard size and job
        (a store's replaced whole: readers see one or the other)."""
        with locks.exclusive(self.commits.local(MANIFEST_SUFFIX + LOCK_SUFFIX)):
            recorded = read_job(self.manifest)
            manifest.save(self.manifest, recorded["shard_size"], job=recorded["job"])
            self.commits.publish(MANIFEST_SUFFIX)
            self._take(read_job(self.manifest))

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

    def named(self):
        """`with job.named():` errors name the job's files as users see them (a store's by their URLs)."""
        return self.commits.named()

    @contextlib.contextmanager
    def _manifest_errors(self):
        """A damaged manifest, with the way out of a job over several processes (no --overwrite there)."""
        with self.commits.named():
            try:
                yield
            except DamagedManifest as error:
                raise error.with_way_out("remove it and rerun: it is made anew from the images, and the rows of "
                                         "images that did not change are kept") from None


def open_commits(output):
    """The Commits of the output `output`: FolderCommits for a local path, ObjectCommits for a URL."""
    if is_url(output):
        from parallel.jobs.store_commits import ObjectCommits  # a store's modules only when a job needs them
        return ObjectCommits(output)
    return FolderCommits(output)
