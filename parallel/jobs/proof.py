"""What a rerun proves of a job's output O against its ledger before it trusts it, and what it rebuilds instead.

The ledger (parallel.jobs.ledger) records what is committed into O; the files beside O are what people
and disks change. Every file a rerun reads is proven against the ledger, or rebuilt from what is:

    O, O.paths.csv (npy)   the output's own data: the size the ledger recorded when O was closed; its
                           writer checks its own files when it opens them (a CSV's committed length and
                           header, each part against its SHA-256). A bit flipped inside a closed output
                           is the disk's to catch: reading every byte of it on every rerun costs more
    O.run.json             its commit record: its SHA-256. Lost or damaged, it is written again from the
                           ledger where the bytes rebuilt are those recorded (`rebuilt_record`); else O is
                           written afresh
    O.errors.csv           its SHA-256; otherwise written again from the ledger (`Assembly.finish`)
    O.members.parquet      a tar job's index of members: its SHA-256 (`members_proven`); otherwise merged
                           again from the shards' indexes, or, the shards gone, O written afresh (its rows
                           are in the members' order, and a retry reads each member back by it; an index
                           rebuilt alone would read every file of the job again all the same)
    O.text.parquet         what a text tower gave each row: its SHA-256, the closing entry's or a retry's since
                           (`text_proven`); otherwise merged again from the shards', or, the shards gone, O
                           written afresh (its captions' embeddings are computed with the shards)
    the manifest           each shard's rows were computed from the job and images of a digest
                           (`rows_digest`, of those with a row): a manifest made anew (a damaged one
                           removed) proves them, or O is written afresh (`stale_shards`)

An error met while proving (a file gone, a footer or JSON that does not read) means "not proven":
what is not proven is rebuilt or computed again, never a failed run.

    closed_state(job)                       what the ledger records when O is closed
    is_proven_finished(job, ledger, record) whether the ledger proves O finished, as it is committed
    stale_shards(job, ledger)               the shards in O whose images are not those of their rows
    members_proven(job, ledger)             whether O.members.parquet is the one the ledger closed O with
    text_proven(job, ledger)                whether O.text.parquet is the one it closed O with, or a retry's since
    rebuilt_record(job, ledger, ...)        O.run.json as O was closed with it, rebuilt from the ledger
    owns_output(job)                        whether the file at O is the job's (a rerun may prove, rebuild
                                            or replace it), though its record is lost or damaged
"""

import hashlib
import json
import os

from parallel.inputs.tars import MEMBERS_SUFFIX, index_keys
from parallel.output.durable import DamagedOutput, beside, file_digest
from parallel.output.record import (ERRORS_SUFFIX, PATHS_SUFFIX, closed_record, read_record, record_bytes,
                                    sidecar_path)
from parallel.output.text_rows import TEXT_SUFFIX

# The files written with O, whose sizes the ledger records when O is closed (those that exist).
OUTPUT_FILES = ("", PATHS_SUFFIX, ERRORS_SUFFIX, MEMBERS_SUFFIX, TEXT_SUFFIX)
# Those a rerun trusts beside the output's own data: smaller than it, proven by their SHA-256.
DIGESTED = (ERRORS_SUFFIX, MEMBERS_SUFFIX, TEXT_SUFFIX)
# What reading a file that a person or a disk changed may raise: each means "not proven".
UNPROVEN = (OSError, ValueError, KeyError, TypeError, AttributeError)


def closed_state(job):
    """What the ledger records of O (the local files of `job`, a frozen job) when it is closed, and a rerun proves
    before it takes O as finished.

    Returns:
      {"files": {suffix: [size, SHA-256 of a side file (DIGESTED), None for the output's own data]} of the
       OUTPUT_FILES that exist, "record": the SHA-256 of O.run.json's bytes, "manifest": the manifest's checksum}.
    """
    files = {}
    for suffix in OUTPUT_FILES:
        path = beside(job.output, suffix)
        try:
            files[suffix] = list(file_digest(path)) if suffix in DIGESTED else [os.path.getsize(path), None]
        except OSError:
            pass
    try:
        record = hashlib.sha256(sidecar_path(job.output).read_bytes()).hexdigest()
    except OSError:
        record = None
    return {"files": files, "record": record, "manifest": job.manifest_checksum}


def recorded_files(complete):
    """{suffix: (size, SHA-256 or None)} of a closing entry's files (one of an earlier version records sizes only).

    Raises:
      ValueError, TypeError: the entry does not read (a line that checked out, of another version).
    """
    files = {}
    for suffix, value in (complete.get("files") or {}).items():
        size, digest = (value, None) if isinstance(value, int) else value
        files[suffix] = (int(size), digest)
    return files


def is_proven_finished(job, ledger, record):
    """Whether an output is finished as its `ledger` records it: every one of the job's shards in it, closed with the
    rows, the commit record (its SHA-256), the files (their sizes; the side files' SHA-256) recorded when it was
    closed, its rows computed from the manifest's images (a file removed, cut, grown or changed since is not).

    Args:
      job: the frozen job (its committed files are read through its Commits).
      ledger: the output's Ledger.
      record: the bytes of its commit record (O.run.json) as committed, or None.
    """
    complete = ledger.complete()
    if complete is None or record is None or sorted(ledger.shards()) != list(range(job.shard_count)):
        return False
    try:
        parsed = json.loads(record)
        if not (isinstance(parsed, dict) and parsed.get("state") == "complete"
                and parsed.get("rows") == complete["rows"] and hashlib.sha256(record).hexdigest() == complete["record"]):
            return False
        files = recorded_files(complete)
        if {suffix: size for suffix, (size, _) in files.items()} != job.commits.sizes(OUTPUT_FILES):
            return False
        for suffix in DIGESTED:
            if suffix in files and (files[suffix][1] is None or job.committed_digest(suffix) != files[suffix]):
                return False  # one of an earlier version records no SHA-256: it is written, or proven, anew
    except UNPROVEN:
        return False
    return complete.get("manifest") in (None, job.manifest_checksum) or not job.stale_shards(ledger)


def rows_digest(job, images, failed):
    """What the rows of a shard were computed from: the job (its settings, step geometry and shard size: its
    identity) and the shard's images that have a row, its `images` (a Manifest) but the `failed` ones (a set of
    paths, whose state the manifest records anew when they are repaired): 32 hex digits."""
    content = "%s %s" % (job.identity, images.without(failed).digest())
    return hashlib.sha256(content.encode("ascii")).hexdigest()[:32]


def stale_shards(job, ledger):
    """The shards in O (as `ledger` records them) whose rows were computed from another job or other images than
    those of the manifest now, or whose images cannot be read from it (a manifest made anew from a folder that
    changed, or cut into other shards, or with other settings): [index]. An entry of an earlier version records no
    digest: its rows are the manifest's, as they always were."""
    stale = []
    for entry in ledger.claims():
        if "images" not in entry:
            continue
        try:
            digest = rows_digest(job, job.shard_images(entry["shard"]), {row[0] for row in entry["failed"]})
        except UNPROVEN:
            digest = None
        if digest != entry["images"]:
            stale.append(entry["shard"])
    return stale


def members_proven(job, ledger):
    """Whether O.members.parquet is the index the ledger last closed O with (a retry since leaves it as it was):
    its SHA-256; one closed by an earlier version (its size recorded only) is read whole instead."""
    closed = ledger.closed()
    try:
        size, digest = recorded_files(closed).get(MEMBERS_SUFFIX, (None, None)) if closed else (None, None)
        now = job.committed_digest(MEMBERS_SUFFIX)
        if size is None or now is None:
            return False
        if digest is not None:
            return now == (size, digest)
        index_keys(job.members_index())  # an earlier version's: every key reads
        return now[0] == size
    except UNPROVEN:
        return False


def text_proven(job, ledger):
    """Whether O.text.parquet is the one the ledger last closed O with, or one a retry recorded since (written
    before its rows were: while their rows are not in O, the file O was closed with holds too): its SHA-256."""
    try:
        now = job.committed_digest(TEXT_SUFFIX)
        closed = ledger.closed()
        known = [recorded_files(closed).get(TEXT_SUFFIX)] if closed else []
        known += [tuple(value) for value in ledger.texts_since_closed()]
        return now is not None and tuple(now) in {(int(size), digest) for size, digest in filter(None, known)}
    except UNPROVEN:
        return False


def rebuilt_record(job, ledger, settings, output_format):
    """The commit record O was closed with, rebuilt from the ledger where O.run.json is lost or damaged: the record
    a writer leaves (`closed_record`), whose bytes are those the ledger recorded (their SHA-256), of an output of
    the size recorded; None when it cannot be (O not closed, or not as recorded: O is written afresh).

    Args:
      job: the frozen job.
      ledger: its Ledger.
      settings: the settings the output's writer records (`parallel.output.recorded_settings`).
      output_format: the output's format.
    """
    complete = ledger.complete()
    try:
        size = job.commits.sizes([""]).get("")
        if complete is None or size is None or recorded_files(complete).get("", (None,))[0] != size:
            return None
        record = closed_record(settings, int(complete["rows"]), size if output_format == "csv" else 0)
        return record if hashlib.sha256(record_bytes(record)).hexdigest() == complete["record"] else None
    except UNPROVEN:
        return None


def changed_since_closed(job, record, complete):
    """What differs in the output's data files, whose commit `record` says it is closed, from the sizes its ledger
    recorded (`complete`, the ledger's closing entry) when it was closed; None if nothing does (the side files
    aside: each is proven or rebuilt on its own)."""
    if complete is None or record["state"] != "complete":
        return None
    try:
        then = recorded_files(complete)
    except UNPROVEN:
        return "its ledger's closing entry does not read"
    now = job.commits.sizes(OUTPUT_FILES)
    for suffix in OUTPUT_FILES:
        if suffix not in DIGESTED and now.get(suffix) != then.get(suffix, (None,))[0]:
            return "%s%s is %s, not %s" % (job.output.name, suffix, "%d bytes" % now[suffix] if suffix in now
                                           else "gone", "%d bytes" % then[suffix][0] if suffix in then else "absent")
    return None


def owns_output(job):
    """Whether the file at the output's name is this job's output: its commit record reads; or the record is
    damaged and the job's manifest or ledger is beside it; or the record is gone and the job's ledger records rows
    appended to it (closed at the size it has now, where the ledger records it closed). A rerun then proves O, or
    rebuilds it; a file this program did not write is never replaced without --overwrite."""
    try:
        if read_record(job.output) is not None:
            return True
        lost = True
    except DamagedOutput:
        lost = False
    ledger = job.ledger()
    if not lost:
        return bool(ledger.entries) or job.manifest.exists()
    complete = ledger.complete()
    if complete is None:
        return any(entry.get("output_rows") for entry in ledger.claims())
    try:
        return recorded_files(complete).get("", (None,))[0] == os.path.getsize(job.output)
    except UNPROVEN:
        return False
