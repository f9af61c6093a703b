"""ParquetWriter, and the Parquet files it reads and writes.

Columns `path` (string: the name, with bytes that are not UTF-8 shown as backslash escapes
such as `\\xff`, because Arrow strings must be valid UTF-8), `path_bytes` (binary: the exact
bytes of the name, `os.fsencode(path)`), and the features as ONE column named `<prefix>` of
type fixed_size_list<float32>[D]: 4096 separate columns make Parquet slow to write and read,
while a list column is compact, polars reads it as an Array column (`.to_numpy()` gives
float32 [N, D]) and pandas as arrays (`np.stack(frame[prefix])`).

pyarrow is imported on first use: opening a CSV or npy output does not load it.
"""

import contextlib

from parallel.output.csv_rows import decode_name, encode_name
from parallel.output.durable import temporary_then_rename
from parallel.output.parts_writer import PartsWriter

# Unique names and float features gain nothing from dictionaries; statistics only for names.
_PARQUET_OPTIONS = {"use_dictionary": False, "write_statistics": ["path"], "compression": "snappy"}


class ParquetWriter(PartsWriter):
    """Parquet: a part `part-<index>.parquet` per write() (uncompressed), merged by close()
    into the output (snappy) in row groups of about _ROW_GROUP_BYTES of features."""

    format = "parquet"
    PART_EXTENSIONS = ("parquet",)

    def _write_part(self, index, paths, features):
        _write_parquet(self._part(index, "parquet"), paths, features, self.column_prefix, compression="none")

    def _read_part_paths(self, index):
        return _parquet_paths(self._part(index, "parquet"))

    def _read_output_paths(self):
        return _parquet_paths(self.output)

    def _part_features(self, index):
        import pyarrow.parquet as pq
        with pq.ParquetFile(self._part(index, "parquet")) as part:
            for batch in part.iter_batches(columns=[self.column_prefix]):
                values = batch.column(0).flatten().to_numpy(zero_copy_only=False)
                yield from values.reshape(-1, self.feature_size)

    def _merge_parts(self, part_count):
        import pyarrow as pa
        import pyarrow.parquet as pq
        schema = _parquet_schema(self.column_prefix, self.feature_size)
        rows_per_group = self._chunk_rows()
        with temporary_then_rename(self.output) as temporary:
            with _open_parquet(temporary, schema, _PARQUET_OPTIONS) as parquet:
                # Row groups of exactly rows_per_group rows (the last one fewer), whatever the parts'
                # sizes: the file is the same whether its rows came in batches of 12 or shards of
                # 10,000, in one run or after a kill. A big part is read a row group at a time.
                pending, pending_rows = [], 0
                for index in range(part_count):
                    # with: a failed write (disk full) closes the part now, not when its traceback goes.
                    with pq.ParquetFile(self._part(index, "parquet")) as part:
                        for batch in part.iter_batches(batch_size=rows_per_group):
                            pending.append(batch)
                            pending_rows += batch.num_rows
                            if pending_rows >= rows_per_group:
                                table = pa.Table.from_batches(pending, schema)
                                whole = pending_rows - pending_rows % rows_per_group
                                parquet.write_table(table.slice(0, whole), row_group_size=rows_per_group)
                                rest = table.slice(whole)
                                pending, pending_rows = rest.to_batches(), rest.num_rows
                if pending_rows:
                    parquet.write_table(pa.Table.from_batches(pending, schema))

    def _merge_sorted(self, runs, part_count):
        schema = _parquet_schema(self.column_prefix, self.feature_size)
        rows_per_group = self._chunk_rows()  # a chunk of the merge is a row group
        with self._merging_in_path_order(runs, part_count) as (temporary, chunks), \
                _open_parquet(temporary, schema, _PARQUET_OPTIONS) as parquet:
            for paths, features in chunks:
                parquet.write_table(_parquet_table(paths, features, self.column_prefix), row_group_size=rows_per_group)


def _parquet_schema(column_prefix, feature_size):
    import pyarrow as pa
    return pa.schema([("path", pa.string()), ("path_bytes", pa.binary()),
                      (column_prefix, pa.list_(pa.float32(), feature_size))])


@contextlib.contextmanager
def _open_parquet(path, schema, options):
    """A pq.ParquetWriter of `path` whose file is closed on every way out. Given a path,
    pyarrow leaves the file open after a failed write (disk full) until the traceback is
    gone, which keeps the space of the removed temporary file in use."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    with pa.OSFile(str(path), "wb") as sink, pq.ParquetWriter(sink, schema, **options) as parquet:
        yield parquet


def _parquet_table(paths, features, column_prefix):
    """The Parquet output's table of a batch: path, path_bytes, and features float32 [N, D] as one list column."""
    import pyarrow as pa
    raw = [encode_name(name) for name in paths]
    readable = [name.decode("utf-8", "backslashreplace") for name in raw]
    values = pa.FixedSizeListArray.from_arrays(pa.array(features.reshape(-1)), features.shape[1])
    return pa.Table.from_arrays([pa.array(readable, pa.string()), pa.array(raw, pa.binary()), values],
                                schema=_parquet_schema(column_prefix, features.shape[1]))


def _write_parquet(path, paths, features, column_prefix, compression):
    table = _parquet_table(paths, features, column_prefix)
    with temporary_then_rename(path) as temporary:
        with _open_parquet(temporary, table.schema, dict(_PARQUET_OPTIONS, compression=compression)) as parquet:
            parquet.write_table(table)


def _parquet_paths(path):
    import pyarrow.parquet as pq
    column = pq.read_table(path, columns=["path_bytes"]).column("path_bytes")
    return [decode_name(raw) for raw in column.to_pylist()]
