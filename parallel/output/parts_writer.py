"""PartsWriter: formats written whole at the end (Parquet, npy), from one committed part per write().

    O.parts/part-000000.<extension> ...   one part per write(), committed by the sidecar's count
    O (and the format's other files)      written by close() from the parts, then the parts go

A subclass names its files (`FINAL_SUFFIXES`, `PART_EXTENSIONS`) and overrides the hooks:
`_write_part` (write a part), `_read_part_paths` (a part's paths), `_part_features` (the rows
of a part), `_merge_parts` (the output from the parts in order), `_merge_sorted` (the output
from the parts in path order) and `_read_output_paths` (the paths of a finished output).
"""

import bisect
import contextlib
import heapq
import itertools
import os
import re
import shutil

import numpy as np

from parallel.output.base import FeatureWriter
from parallel.output.durable import (OutputError, TEMPORARY_SUFFIX, beside, file_digest, fsync, remove,
                                     temporary_then_rename)
from parallel.output.record import PARTS_SUFFIX

# Parquet row groups, and chunks of the merge in path order, of about this many bytes of features.
_ROW_GROUP_BYTES = 64 << 20
_PART_PATTERN = re.compile(r"part-(\d{6})\.(parquet|npy|paths\.csv|sha256)(\.tmp)?")
_DIGESTS = "sha256"  # part-000007.sha256: "<size> <SHA-256> <file>" of each file of part 7, written before its commit


class PartsWriter(FeatureWriter):
    """One part file (or set of files) per write(); close() merges them into the output.

    Class attributes a subclass sets:
      FINAL_SUFFIXES: the finished output's files, as suffixes of the output's name ("" is the
        output itself, and comes first).
      PART_EXTENSIONS: a part's files, `part-<index>.<extension>`, one to each final file.
    """

    FINAL_SUFFIXES = ("",)
    PART_EXTENSIONS = ()

    def __init__(self, output, *args):
        self._parts = beside(output, PARTS_SUFFIX)
        self._finals = [beside(output, suffix) for suffix in self.FINAL_SUFFIXES]
        super().__init__(output, *args)

    def _part(self, index, extension):
        return self._parts / ("part-%06d.%s" % (index, extension))

    def _part_files(self, index):
        return [self._part(index, extension) for extension in self.PART_EXTENSIONS]

    def _chunk_rows(self):
        """Rows of about _ROW_GROUP_BYTES of features: a Parquet row group, a chunk of a merge."""
        return max(1, _ROW_GROUP_BYTES // (4 * self.feature_size))

    def _data_is_gone(self, record):
        if record["state"] == "complete":
            return not all(path.exists() for path in self._finals)
        return record["parts"] > 0 and not self._parts.exists()

    def _resume(self):
        record = self._record
        for path in self._finals:
            remove(beside(path, TEMPORARY_SUFFIX))
        if record["state"] == "complete":
            self._remove_parts()  # killed after the merge was committed
            for name, (size, digest) in record.get("digests", {}).items():
                if file_digest(self.output.with_name(name)) != (size, digest):
                    raise OutputError("%s is not the file completed (its size or SHA-256 changed)"
                                      % self.output.with_name(name))
            return self._read_output_paths()
        for path in self._finals:  # a merge that was never committed
            remove(path)
        if not self._parts.exists():
            self._parts.mkdir()
            fsync(self.output.parent)
        for entry in os.listdir(self._parts):
            match = _PART_PATTERN.fullmatch(entry)
            if match is None:
                raise OutputError("%s holds %s, which this program did not write: move it away or pass "
                                  "--overwrite" % (self._parts, entry))
            if match.group(3) or int(match.group(1)) >= record["parts"]:
                remove(self._parts / entry)  # never committed
        paths = []
        for index in range(record["parts"]):
            for path in self._part_files(index):
                if not path.exists():
                    raise OutputError("%s is missing: pass --overwrite to start afresh" % path)
            problem = self._part_problem(index)
            if problem:  # this part and those after it are set aside: their rows are computed again
                self._drop_parts_from(index, len(paths), problem)
                break
            paths.extend(self._read_part_paths(index))
        return paths

    def _write_digests(self, index):
        """part-<index>.sha256: the size and SHA-256 of each file of the part, durably (before its commit)."""
        lines = ["%d %s %s\n" % (file_digest(path) + (path.name,)) for path in self._part_files(index)]
        with temporary_then_rename(self._part(index, _DIGESTS)) as temporary:  # synced, then renamed
            temporary.write_text("".join(lines), encoding="ascii")

    def _part_problem(self, index):
        """What differs between part `index`'s files and the digests written with it; None if nothing (a part
        of an earlier version has no digests: nothing to compare)."""
        digests = self._part(index, _DIGESTS)
        if not digests.exists():
            return None
        try:
            for line in digests.read_text(encoding="ascii").splitlines():
                size, digest, name = line.split(" ", 2)
                if file_digest(self._parts / name) != (int(size), digest):
                    return "%s is not the file committed (its size or SHA-256 changed)" % (self._parts / name)
        except (OSError, ValueError) as error:
            return "%s cannot be checked (%s)" % (digests, error)
        return None

    def _drop_parts_from(self, index, rows, problem):
        """Sets aside part `index` and every later one (`rows`: those of the parts before it), with a warning:
        the rows they held are computed again, and the output is exact."""
        import logging
        dropped = self._record["parts"] - index
        for later in range(index, self._record["parts"]):
            for path in self._part_files(later) + [self._part(later, _DIGESTS)]:
                remove(path)
        fsync(self._parts)
        self._commit(rows=rows, parts=index)
        logging.getLogger("parallel").warning("%s; it and the %d part(s) after it are set aside, their rows computed "
                                              "again", problem, dropped - 1)

    def _check_parts(self, part_count):
        """Before the merge: every part is the one committed (OutputError naming the first that is not; it and
        the later parts are set aside, so that a rerun computes their rows again)."""
        rows = 0
        for index in range(part_count):
            problem = self._part_problem(index)
            if problem:
                self._drop_parts_from(index, rows, problem)
                raise OutputError("%s: nothing was merged; rerun the same command to compute its rows again" % problem)
            rows += len(self._read_part_paths(index))

    def _reopen(self):
        """The finished output becomes part 0 (hard links, so a kill leaves it intact)."""
        self._remove_parts()
        self._parts.mkdir()
        for final, part in zip(self._finals, self._part_files(0)):
            try:
                os.link(final, part)
            except OSError:
                shutil.copyfile(final, part)
                fsync(part)
        self._write_digests(0)
        fsync(self._parts)
        self._commit(state="writing", parts=1)
        for final in self._finals:
            remove(final)

    def _append(self, paths, features):
        index = self._record["parts"]
        for part in self._part_files(index):
            remove(part)  # a leftover of a failed write
        self._write_part(index, paths, features)
        self._write_digests(index)
        fsync(self._parts)
        self._commit(rows=self._record["rows"] + len(paths), parts=index + 1)

    def _finish(self, runs):
        part_count = self._record["parts"]
        self._check_parts(part_count)  # a part changed on disk since its commit is never merged
        try:
            if len(runs) > 1:  # rows of a rerun sort before earlier ones: merged back into path order
                self._merge_sorted(runs, part_count)
            else:
                self._merge_parts(part_count)
            fsync(self.output.parent)
        except Exception:
            # The output may be in place already (npy: without its paths). Until the commit
            # nothing may look finished; the parts stay, and a rerun merges them again.
            for final in self._finals:
                try:
                    remove(final)
                except OSError:
                    pass  # the next open removes it; the error that brought us here matters more
            raise

    @contextlib.contextmanager
    def _merging_in_path_order(self, runs, part_count):
        """`with self._merging_in_path_order(runs, part_count) as (temporary, chunks):` write the
        rows of `chunks` to `temporary`, which then replaces the output (see temporary_then_rename).

        A streaming merge of the sorted runs, each read one part at a time (memory: a part per
        run, and a chunk of the output).

        Args:
          runs: (start, stop) row ranges, each in path order, covering the committed rows.
          part_count: the committed parts.

        Yields:
          (Path of the temporary file, iterator of (paths: tuple of str, features: float32
          [n, D]) chunks of _chunk_rows() rows at most, in path order).
        """
        starts = [0]
        for index in range(part_count):
            starts.append(starts[-1] + len(self._read_part_paths(index)))
        chunk_rows = self._chunk_rows()
        # ExitStack: on a failure (disk full) every part being read is closed now, not when the traceback goes.
        with contextlib.ExitStack() as streams, temporary_then_rename(self.output) as temporary:
            merged = heapq.merge(*(streams.enter_context(contextlib.closing(self._rows(start, stop, starts)))
                                   for start, stop in runs), key=lambda row: self.order(row[0]))
            chunks = ((paths, np.stack(features)) for paths, features in
                      (zip(*chunk) for chunk in iter(lambda: list(itertools.islice(merged, chunk_rows)), [])))
            yield temporary, chunks

    def _rows(self, start, stop, starts):
        """(path, features float32 [D]) of rows start .. stop - 1, read part by part; `starts`
        holds the first row of each part."""
        index = bisect.bisect_right(starts, start) - 1
        row = starts[index]
        while row < stop:
            for features in self._part_features(index):
                if row >= stop:
                    return
                if row >= start:
                    yield self._order[row], features
                row += 1
            index += 1

    def _completion(self):
        if not self.record_digests:
            return {}
        return {"digests": {final.name: list(file_digest(final)) for final in self._finals}}

    def _after_complete(self):
        self._remove_parts()

    def _remove_parts(self):
        if self._parts.exists():
            shutil.rmtree(self._parts)

    # -- the hooks each format overrides -----------------------------------------------

    def _write_part(self, index, paths, features):
        """Writes part `index` durably (its folder is synced after): paths, list of str;
        features, float32 [len(paths), D]."""
        raise NotImplementedError

    def _read_part_paths(self, index):
        """The paths of part `index`, list of str, in row order."""
        raise NotImplementedError

    def _part_features(self, index):
        """The feature rows of part `index`, float32 [D] each, in order, a block at a time."""
        raise NotImplementedError

    def _merge_parts(self, part_count):
        """Writes the output's files from parts 0 .. part_count - 1, rows in the order written."""
        raise NotImplementedError

    def _merge_sorted(self, runs, part_count):
        """Writes the output's files from the parts, rows in path order (`_merging_in_path_order`)."""
        raise NotImplementedError

    def _read_output_paths(self):
        """The paths of the finished output, list of str, in row order."""
        raise NotImplementedError
