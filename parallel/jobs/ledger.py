"""The job's ledger: `O.ledger.jsonl`, what has been committed into the output O, append-only and checksummed.

A job's rows end in O; the shards they were computed in go once they are in it, so O and this
ledger are then the only record of what is done. Each line is one entry, as Delta Lake's
`_delta_log` keeps one commit a file:

    <SHA-256 hex> <JSON>\\n     the SHA-256 of the line before's digest (64 zeros for the first) and the JSON

so a line changed, cut or removed fails its check (a removed one makes the next fail too). Entries:

    {"seq": n, "shard": k, "failed": [[path, kind, message], ...], "output_rows": R, "images": digest}
        shard k's rows are appended to O (which commits R rows after it); these of its images failed;
        the rows were computed from the images of this digest (the manifest's, of those with a row)
    {"seq": n, "retried": [path, ...], "failed": [[path, kind, message], ...]}
        failed images computed again into O: those of `retried` have a row now; those of `failed`
        still fail, with this message
    {"seq": n, "text": [size, SHA-256]}
        a retry's O.text.parquet, its rows that read now scored, is written (O.text.parquet.next) before their
        rows are: the file O.text.parquet may be until O is closed again (parallel.jobs.retry)
    {"seq": n, "complete": {"rows": R, "files": {suffix: [size, SHA-256 or null]}, "record": SHA-256,
                            "manifest": checksum}}
        O was closed (merged) with R rows; its files of these sizes, and the side files a rerun
        trusts (its errors file, a tar job's index of members, its text file) of these SHA-256; its commit
        record (O.run.json) of these bytes; the manifest's images as its checksum says

Nothing in it is trusted because it says so: a rerun checks O against it before acting on it
(`parallel.jobs.assembly.Assembly.prove`, `parallel.jobs.proof`): a shard whose rows are not all in O
is forgotten (its entry dropped, the ledger rewritten) and computed again; a line that fails its
check is dropped the same way, with a warning. An entry is appended (and synced) only after what
it records is durable, so a line cut by a kill records nothing that happened. Entries of an
earlier version (a shard's without "images", a closing entry with sizes only) are read as they
are: what they do not record is proven anew or rebuilt (`parallel.jobs.proof`).
"""

import hashlib
import json
import logging
import os

from parallel.output.durable import beside, fsync, replace_atomically

log = logging.getLogger("parallel")

LEDGER_SUFFIX = ".ledger.jsonl"
_ORIGIN = "0" * 64


def ledger_path(output):
    """`O.ledger.jsonl` of the output `output` (a Path)."""
    return beside(output, LEDGER_SUFFIX)


def _line(previous, entry):
    """(the line of `entry` after a line of digest `previous`, its digest)."""
    text = json.dumps(entry, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    digest = hashlib.sha256((previous + text).encode("ascii")).hexdigest()
    return "%s %s\n" % (digest, text), digest


class Ledger:
    """The ledger of an output (see the module docstring), read once and appended to by its one writer.

    The caller holds the output's lock to append or rewrite; reading needs none (a reader sees whole
    lines: a torn last line fails its check and counts as never written).

    Attributes:
      path: Path of the ledger file.
      entries: the entries that checked out, in order (a list of dicts).
      damaged: how many lines failed their check when it was read.
      rewrites: how many times this process rewrote it (`rewrite`): a store's is then committed again.
    """

    def __init__(self, path):
        self.path = path
        self.rewrites = 0
        self.entries, self.damaged, last = self._read()
        self._digest = None if self.damaged else last  # the last line's, where the file holds exactly `entries`
        self._shards = None  # (how many entries it was folded from, `shards()`)

    def _read(self):
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [], 0, _ORIGIN
        entries, damaged, previous = [], 0, _ORIGIN
        lines = data.split(b"\n")
        if lines[-1]:  # a line without its end was cut by a kill as it was written: it records nothing
            damaged += 1
        for raw in lines[:-1]:
            if not raw:
                continue
            digest, _, text = raw.partition(b" ")
            try:
                digest, text = digest.decode("ascii"), text.decode("ascii")
                if hashlib.sha256((previous + text).encode("ascii")).hexdigest() != digest:
                    raise ValueError(digest)
                entry = json.loads(text)
                if not isinstance(entry, dict):
                    raise ValueError(text)
            except (UnicodeDecodeError, ValueError):
                damaged += 1
                previous = digest if isinstance(digest, str) else _ORIGIN
                continue
            entries.append(entry)
            previous = digest
        return entries, damaged, previous

    # -- what it records ------------------------------------------------------------------------

    def shards(self):
        """The shards in O, as recorded: {shard index: its failed images [(path, kind, message)], now} (folded
        once, again after an entry is added: a job asks once per shard)."""
        if self._shards is None or self._shards[0] != len(self.entries):
            self._shards = (len(self.entries), self._fold())
        return self._shards[1]

    def _fold(self):
        shards, where = {}, {}
        for entry in self.entries:
            if "shard" in entry:
                index = int(entry["shard"])
                shards[index] = [tuple(row) for row in entry["failed"]]
                where.update((row[0], index) for row in entry["failed"])
            elif "retried" in entry:
                done = set(entry["retried"])
                again = {row[0]: tuple(row) for row in entry["failed"]}
                for index in {where[path] for path in done | set(again) if path in where}:
                    shards[index] = [again.get(row[0], row) for row in shards[index] if row[0] not in done]
        return shards

    def failures(self):
        """The failed images of the shards in O, in shard order: [(path, kind, message)]."""
        shards = self.shards()
        return [row for index in sorted(shards) for row in shards[index]]

    def complete(self):
        """What the last entry records of O closed ({"rows", "files", ...}), or None when O was not closed since."""
        if self.entries and "complete" in self.entries[-1]:
            return self.entries[-1]["complete"]
        return None

    def closed(self):
        """What the last closing entry records of O, or None: the files a retry since (its entries after it) left
        as they were (a tar job's index of members) are proven by it."""
        for entry in reversed(self.entries):
            if "complete" in entry:
                return entry["complete"]
        return None

    def texts_since_closed(self):
        """The [size, SHA-256] of each O.text.parquet a retry recorded since O was last closed (`add_text`)."""
        found = []
        for entry in reversed(self.entries):
            if "complete" in entry:
                break
            if "text" in entry:
                found.append(entry["text"])
        return found

    def claims(self):
        """The shard entries, in order: [{"shard", "failed", "output_rows", and "images" where recorded}]."""
        return [entry for entry in self.entries if "shard" in entry]

    # -- appending and rewriting (under the output's lock) -------------------------------------

    def add_shard(self, index, failed, output_rows, images=None):
        """Records shard `index`'s rows as appended to O (committing `output_rows` rows), `failed` its failures,
        `images` the digest of the images its rows were computed from (`parallel.jobs.proof.rows_digest`)."""
        entry = {"shard": int(index), "failed": [list(row) for row in failed], "output_rows": int(output_rows)}
        self._append(entry if images is None else dict(entry, images=images))

    def add_retry(self, retried, failed):
        """Records failed images computed again into O: `retried` have a row now, `failed` still fail."""
        self._append({"retried": list(retried), "failed": [list(row) for row in failed]})

    def add_text(self, size, digest):
        """Records O.text.parquet of `size` bytes and SHA-256 `digest` (a retry's, durable) as one O may have."""
        self._append({"text": [int(size), digest]})

    def add_complete(self, rows, state):
        """Records O closed with `rows` rows, and `state` (`parallel.jobs.proof.closed_state`: {"files", "record",
        "manifest"})."""
        self._append({"complete": dict(state, rows=int(rows))})

    def forget(self, shards=(), everything=False):
        """Rewrites the ledger without the entries of `shards` (or without any), and without its closing entry
        (nor a retry's text file): what they recorded cannot be proven, and is computed again."""
        shards = set(shards)
        kept = [] if everything else [entry for entry in self.entries if "complete" not in entry
                                      and "text" not in entry and entry.get("shard") not in shards]
        self.rewrite(kept)

    def rewrite(self, entries):
        """Replaces the ledger by `entries` (renumbered, checksummed anew), in one atomic step."""
        lines, previous = [], _ORIGIN
        for seq, entry in enumerate(entries):
            line, previous = _line(previous, dict(entry, seq=seq))
            lines.append(line)
        if lines or self.path.exists():
            replace_atomically(self.path, "".join(lines).encode("ascii"))
        self.entries, self.damaged, self._digest = [dict(entry, seq=seq) for seq, entry in enumerate(entries)], 0, \
            previous
        self._shards = None
        self.rewrites += 1

    def repaired(self):
        """The ledger as read, with the lines that failed their check dropped (rewritten if there were any): self."""
        if self.damaged:
            log.warning("%s: %d line(s) failed their check and are dropped: what they recorded is computed again",
                        self.path, self.damaged)
            self.rewrite(self.entries)
        return self

    def _append(self, entry):
        if self._digest is None:  # lines that failed their check go first
            self.rewrite(self.entries)
        entry = dict(entry, seq=len(self.entries))
        line, digest = _line(self._digest, entry)
        created = not self.path.exists()
        with open(self.path, "ab") as file:
            file.write(line.encode("ascii"))
            file.flush()
            os.fsync(file.fileno())
        if created:
            fsync(self.path.parent)
        self.entries.append(entry)
        self._digest = digest
