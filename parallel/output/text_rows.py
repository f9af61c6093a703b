"""What a model's text tower gave each row of a job (--text-column, --labels): a Parquet file beside the output.

    <output>.text.parquet     the job's, written with the output (TEXT_SUFFIX)
    <shard>/_text.parquet     a shard's, committed with its rows (TEXT_FILE)

One row per image of the job, in the output's order, a failed image's among them (as the members index has
them): the output's own bytes never depend on it. Its columns, those of what the job asked:

    key, key_bytes        the row's key as the output's `path` column holds it, and its exact bytes
    caption_embedding     --text-column: the caption by the text tower, float32 [D], unit length; null when the
                          caption failed
    caption_error         null, or why the caption has no embedding: "missing" (the row has no such value) or
                          "empty" (blank): a failure of the caption alone, the image's row kept
    caption_score         the cosine of the caption's and the image's embeddings (CLIP's: LAION kept 0.28 and
                          above); NaN where either is missing
    caption_probability   the model's own probability that they go together (SigLIP's), where it has one
    label_1 .. label_K    --labels: the K labels nearest the image (zero-shot, best first); null for a failed image
    label_score_1 .. K    their cosines with the image; NaN for a failed image

    write_rows(path, rows)              a TextRows, durably (temporary file, then renamed)
    read_rows(path, keys=None)          -> TextRows: a shard's whole, or an output's rows of `keys`
    merge_files(paths, target)          the shards' files one after the other, a row group at a time, durably
    replace_rows(path, target, rows)    the file with the rows of `rows`' keys replaced (a retry's), durably
    column_of(path, name)               -> (keys, values) of one column (search reads the scores)

Standard library, NumPy and pyarrow only (imported on use); nothing here imports TensorFlow.
"""

import dataclasses
import os
from typing import Optional

import numpy as np

TEXT_SUFFIX = ".text.parquet"
NEXT_SUFFIX = ".next"  # <output>.text.parquet.next: a retry's, durable before the ledger has it (parallel.jobs.retry)
TEXT_FILE = "_text.parquet"  # "_": readers of a Parquet folder (a kept shards folder) skip it
CAPTION_COLUMNS = ("caption_embedding", "caption_error", "caption_score")
MISSING, EMPTY = "missing", "empty"  # caption_error's kinds
_ROW_GROUP = 16384


@dataclasses.dataclass
class TextRows:
    """The rows of a text file in memory. None: a column the job does not have.

    Attributes:
      keys: list of N str.
      embeddings: float32 [N, D]: each caption's vector, NaN where it failed.
      errors: list of N (None, MISSING or EMPTY).
      scores, probabilities: float32 [N] (NaN where none).
      labels: list of N: a tuple of K str, or None (a failed image); label_scores: float32 [N, K].
    """

    keys: list
    embeddings: Optional[np.ndarray] = None
    errors: Optional[list] = None
    scores: Optional[np.ndarray] = None
    probabilities: Optional[np.ndarray] = None
    labels: Optional[list] = None
    label_scores: Optional[np.ndarray] = None

    def table(self):
        """The rows as a pyarrow Table of the columns in the module docstring."""
        import pyarrow as pa
        raw = [key.encode("utf-8", "surrogateescape") for key in self.keys]
        columns = {"key": pa.array([value.decode("utf-8", "backslashreplace") for value in raw], pa.string()),
                   "key_bytes": pa.array(raw, pa.binary())}
        if self.embeddings is not None:
            failed = np.isnan(self.embeddings).any(axis=1) if len(self.keys) else np.zeros(0, bool)
            values = pa.array(np.nan_to_num(self.embeddings).astype(np.float32).ravel(), pa.float32())
            columns["caption_embedding"] = pa.FixedSizeListArray.from_arrays(values, self.embeddings.shape[1],
                                                                             mask=pa.array(failed))
            columns["caption_error"] = pa.array(self.errors, pa.string())
            columns["caption_score"] = pa.array(self.scores, pa.float32())
            if self.probabilities is not None:
                columns["caption_probability"] = pa.array(self.probabilities, pa.float32())
        if self.labels is not None:
            for rank in range(self.label_scores.shape[1]):
                columns["label_%d" % (rank + 1)] = pa.array([None if names is None else names[rank]
                                                             for names in self.labels], pa.string())
            for rank in range(self.label_scores.shape[1]):
                columns["label_score_%d" % (rank + 1)] = pa.array(self.label_scores[:, rank], pa.float32())
        return pa.table(columns)


def rows_of(table):
    """The TextRows of a pyarrow Table of a text file's columns."""
    names = table.column_names
    keys = [raw.decode("utf-8", "surrogateescape") for raw in table.column("key_bytes").to_pylist()]
    rows = TextRows(keys)
    if "caption_embedding" in names:
        column = table.column("caption_embedding").combine_chunks()
        size = column.type.list_size
        embeddings = np.full((len(keys), size), np.nan, np.float32)
        valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), bool)
        # flatten() leaves the null rows out: the values of the others, in order
        embeddings[valid] = np.asarray(column.flatten().to_numpy(zero_copy_only=False), np.float32).reshape(-1, size)
        rows.embeddings, rows.errors = embeddings, table.column("caption_error").to_pylist()
        rows.scores = _floats(table, "caption_score")
        rows.probabilities = _floats(table, "caption_probability") if "caption_probability" in names else None
    top = sum(1 for name in names if name.startswith("label_score_"))
    if top:
        columns = [table.column("label_%d" % (rank + 1)).to_pylist() for rank in range(top)]
        rows.labels = [None if row[0] is None else tuple(row) for row in zip(*columns)]
        rows.label_scores = np.stack([_floats(table, "label_score_%d" % (rank + 1)) for rank in range(top)], axis=1)
    return rows


def _floats(table, name):
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), np.float32)


def read_rows(path, keys=None):
    """The TextRows of the file at `path`: whole (a shard's), or only the rows of `keys` (an iterable of str), a row
    group at a time (an output's: a retry's rows), in the file's order."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    if keys is None:
        return rows_of(pq.read_table(path))
    wanted = pa.array([key.encode("utf-8", "surrogateescape") for key in keys], pa.binary())
    tables = []
    with pq.ParquetFile(path) as file:
        for group in range(file.num_row_groups):
            found = pc.is_in(file.read_row_group(group, columns=["key_bytes"]).column(0), value_set=wanted)
            if pc.any(found).as_py():
                tables.append(file.read_row_group(group).filter(found))
        return rows_of(pa.concat_tables(tables) if tables else file.schema_arrow.empty_table())


def write_rows(path, rows):
    """Writes `rows` (TextRows) at `path` durably: a temporary file, synced, renamed over it, the folder synced."""
    _write_tables(path, [rows.table()])


def merge_files(paths, target):
    """Writes the text files at `paths`, one after the other, as one at `target` (a Path), a row group at a time
    (memory: one row group), durably."""
    import pyarrow.parquet as pq

    def tables():
        for path in paths:
            with pq.ParquetFile(path) as file:
                for group in range(file.num_row_groups):
                    yield file.read_row_group(group)
    _write_tables(target, tables(), schema=pq.read_schema(paths[0]) if paths else None)


def replace_rows(path, target, rows):
    """Writes the file at `path` to `target` with the rows of `rows`' keys (TextRows) replaced by them, durably;
    its other rows, and their order, as they were. `target` may be `path`."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    new = rows.table()
    places = {raw: place for place, raw in enumerate(new.column("key_bytes").to_pylist())}

    def tables():
        with pq.ParquetFile(path) as file:
            for group in range(file.num_row_groups):
                table = file.read_row_group(group)
                found = [places.get(raw) for raw in table.column("key_bytes").to_pylist()]
                if any(place is not None for place in found):  # its rows, or the new ones after them, by place
                    both = pa.concat_tables([table, new.select(table.column_names).cast(table.schema)])
                    table = both.take(pa.array([row if place is None else len(table) + place
                                                for row, place in enumerate(found)], pa.int64()))
                yield table
    _write_tables(target, tables(), schema=pq.read_schema(path))


def _write_tables(path, tables, schema=None):
    """The pyarrow Tables `tables`, one after the other, as the Parquet file `path` (a Path), durably."""
    import pyarrow.parquet as pq
    from parallel.output.durable import fsync, temporary_then_rename
    with temporary_then_rename(path) as temporary:
        writer = None
        try:
            for table in tables:
                if writer is None:
                    writer = pq.ParquetWriter(temporary, schema or table.schema)
                writer.write_table(table, row_group_size=_ROW_GROUP)
            if writer is None:
                writer = pq.ParquetWriter(temporary, schema)
        finally:
            if writer is not None:
                writer.close()
    fsync(path.parent)


def column_of(path, name):
    """(keys: list of str, values: NumPy array) of the column `name` of the text file at `path`.

    Raises:
      KeyError: the file has no such column.
    """
    import pyarrow.parquet as pq
    if name not in pq.read_schema(path).names:
        raise KeyError(name)
    table = pq.read_table(path, columns=["key_bytes", name])
    keys = [raw.decode("utf-8", "surrogateescape") for raw in table.column("key_bytes").to_pylist()]
    return keys, table.column(name).to_numpy(zero_copy_only=False)


def text_file(output):
    """The path of `<output>.text.parquet` beside the output `output` (a str or Path)."""
    return os.fspath(output) + TEXT_SUFFIX
