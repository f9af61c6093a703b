"""CsvWriter: rows appended to the output itself; the commit record holds its length in bytes.

The lines are those of `parallel.output.csv_rows` (its docstring says how to read them back).
On open the file is truncated to its committed length, which drops a partial line left by a kill.
"""

import mmap
import os

from parallel.output.base import FeatureWriter, merged_order
from parallel.output.csv_rows import csv_header, format_rows, read_csv_paths
from parallel.output.durable import OutputError, fsync, temporary_then_rename, write_all


class CsvWriter(FeatureWriter):
    """CSV: `path,<prefix>_0,...,<prefix>_{D-1}`, one line a row, appended and synced per write()."""

    format = "csv"

    def _data_is_gone(self, record):
        return not self.output.exists()

    def _resume(self):
        record = self._record
        header = csv_header(self.column_prefix, self.feature_size)
        self._descriptor = os.open(self.output, os.O_RDWR | os.O_CREAT, 0o644)
        committed = record["bytes"]
        size = os.fstat(self._descriptor).st_size
        if size < committed:
            raise OutputError("%s is shorter (%d bytes) than its committed length (%d): it was changed by "
                              "something else; pass --overwrite to start afresh" % (self.output, size, committed))
        if size > committed:
            if record["state"] == "complete":
                raise OutputError("%s changed after it was completed (%d bytes, %d recorded): pass --overwrite "
                                  "to start afresh" % (self.output, size, committed))
            os.ftruncate(self._descriptor, committed)  # a partial line left by a kill
            os.fsync(self._descriptor)
        if committed == 0:  # killed before the header was committed
            write_all(self._descriptor, header)
            os.fsync(self._descriptor)
            fsync(self.output.parent)
            self._commit(bytes=len(header))
            return []
        os.lseek(self._descriptor, 0, os.SEEK_SET)
        if os.read(self._descriptor, len(header)) != header:
            raise OutputError("%s does not start with the expected header (path,%s_0,...,%s_%d): pass "
                              "--overwrite to start afresh" % (self.output, self.column_prefix,
                                                               self.column_prefix, self.feature_size - 1))
        os.lseek(self._descriptor, committed, os.SEEK_SET)
        if committed == len(header):
            return []
        with mmap.mmap(self._descriptor, committed, access=mmap.ACCESS_READ) as data:
            try:
                return read_csv_paths(data, len(header))
            except OutputError as error:
                raise OutputError("%s is damaged (%s): pass --overwrite to start afresh" % (self.output, error)
                                  ) from None

    def _reopen(self):
        self._commit(state="writing")

    def _finish(self, runs):
        if len(runs) == 1:
            return  # appended in order: the file is the output
        # Lines are copied in path order into a new file that replaces the old one: the same
        # bytes, rows and length, so the commit record holds for both, whenever a kill comes.
        committed = self._record["bytes"]
        header = len(csv_header(self.column_prefix, self.feature_size))
        with mmap.mmap(self._descriptor, committed, access=mmap.ACCESS_READ) as data:
            line_starts = []
            read_csv_paths(data, header, line_starts)
            with temporary_then_rename(self.output) as temporary, open(temporary, "wb") as file:
                file.write(data[:header])
                for row in merged_order(self._order, runs, self.order):
                    file.write(data[line_starts[row]:line_starts[row + 1]])
        fsync(self.output.parent)

    def _append(self, paths, features):
        block = format_rows(paths, features)
        # The file offset is the committed length: set on open, and after a failed write.
        write_all(self._descriptor, block)
        os.fsync(self._descriptor)
        self._commit(rows=self._record["rows"] + len(paths), bytes=self._record["bytes"] + len(block))

    def _undo_partial_write(self):
        try:
            os.ftruncate(self._descriptor, self._record["bytes"])
            os.lseek(self._descriptor, self._record["bytes"], os.SEEK_SET)
        except OSError:
            pass  # the next open truncates

    def _release(self):
        descriptor, self._descriptor = getattr(self, "_descriptor", None), None
        if descriptor is not None:
            os.close(descriptor)
