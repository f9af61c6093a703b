"""An output's rows, read in batches: paths and float32 [B, D], whatever its format.

    source = read_output("results/features.parquet")     # or .csv, .npy, or a kept <output>.shards/
    source.count, source.feature_size, source.settings    # rows, D, the settings in <output>.run.json
    for paths, vectors in source.batches(4096):           # list of str, float32 [B, D]
        ...

Layouts (docs/outputs.md; parallel/output/ writes them): a CSV `path,<layer>_0,...` read up to its
committed length; Parquet with `path_bytes` and one fixed-size-list column; npy `[N, D]` with the
paths in `<output>.paths.csv`; a shards folder `<output>.shards/shard-NNNNNN/features.parquet`
(folders and files starting with "_" skipped). Paths come back exactly as the writer was given
them (bytes that are not UTF-8 as lone surrogates, as os.fsdecode gives).

Memory: one batch at a time, plus the N paths and, for a CSV, the N line offsets.
"""

import mmap
from pathlib import Path

import numpy as np

from parallel.output.csv_rows import decode_name, read_csv_paths, read_paths_csv
from parallel.output.record import PATHS_SUFFIX, SIDECAR_SUFFIX, read_record

SHARDS_SUFFIX = ".shards"
SHARD_FEATURES = "features.parquet"  # parallel/jobs/shard_record.py: a committed shard's rows
_NAME_COLUMNS = ("path", "path_bytes")


class OutputVectors:
    """The rows of one output. Built by `read_output`.

    Attributes:
      output: the Path read.
      format: "csv", "parquet", "npy" or "shards".
      count: N, the rows.
      feature_size: D.
      settings: {str: str} from the output's record (layer, weights, precision, ...); {} when it has none.
      complete: False when the record says the output is still being written (the rows committed
        so far are read; `Index.add` takes the rest later).
    """

    def __init__(self, output, output_format, count, feature_size, settings, complete, batches):
        self.output, self.format, self.count, self.feature_size = output, output_format, count, feature_size
        self.settings, self.complete = settings, complete
        self._batches = batches

    def batches(self, batch_rows=4096, skip=None):
        """Yields (paths, vectors) in the output's row order.

        Args:
          batch_rows: at most this many rows a batch.
          skip: a set of paths left out (the rows an index already holds), or None.

        Yields:
          (list of str, float32 [B, D]), B >= 1.
        """
        for paths, vectors in self._batches(batch_rows):
            if skip:
                keep = [index for index, path in enumerate(paths) if path not in skip]
                if not keep:
                    continue
                if len(keep) < len(paths):
                    paths, vectors = [paths[index] for index in keep], vectors[keep]
            yield paths, np.ascontiguousarray(vectors, dtype=np.float32)

    def paths(self):
        """Every row's path, in order."""
        return [path for paths, _ in self.batches() for path in paths]


def read_output(output):
    """The rows of `output`: a CSV, Parquet or npy output, or a kept `<output>.shards/` folder.

    Raises:
      ValueError: `output` is none of these, or is damaged; the message names it.
    """
    path = Path(output)
    if path.is_dir():
        return _shards(path)
    if not path.is_file():
        raise ValueError("output=%s is not a file or a shards folder (pass a .csv, .parquet or .npy output, "
                         "or a kept <output>.shards/ folder)" % output)
    record = read_record(path)
    settings = dict(record["settings"]) if record else {}
    complete = record is None or record.get("state") == "complete"
    suffix = path.suffix.lower()
    kind = settings.get("format") or {".csv": "csv", ".parquet": "parquet", ".npy": "npy"}.get(suffix)
    if kind == "csv":
        source = _csv(path, settings, complete, record)
    elif kind == "parquet":
        source = _parquet([path], path, "parquet", settings, complete)
    elif kind == "npy":
        source = _npy(path, settings, complete)
    else:
        raise ValueError("output=%s: not a .csv, .parquet or .npy output" % output)
    # The rows the record says are committed must all be there (a CSV cut at a line boundary reads
    # as whole rows); an npy or Parquet output being written is merged only at its end.
    committed = record.get("rows") if record and (complete or kind == "csv") else None
    if isinstance(committed, int) and source.count < committed:
        raise _damaged(path, "%d rows, but its record %s says %d are committed: write it again"
                       % (source.count, path.name + SIDECAR_SUFFIX, committed))
    return source


def _damaged(path, why):
    return ValueError("%s cannot be read as an output (%s)" % (path, why))


def _csv(path, settings, complete, record):
    with open(path, "rb") as file:
        header = file.readline()
        if not header.startswith(b"path,"):
            raise _damaged(path, "its header does not start with 'path,'")
        feature_size = header.count(b",")
        size = path.stat().st_size
        # A CSV being written: only its committed bytes are rows (a killed writer may leave a partial line).
        end = record["bytes"] if record and not complete and record.get("bytes") else size
        line_starts = []
        if end > len(header):
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
                try:
                    read_csv_paths(data[:end] if end < size else data, len(header), line_starts)
                except ValueError as error:
                    raise _damaged(path, error) from None
    count = max(0, len(line_starts) - 1)

    def batches(batch_rows):
        if not count:
            return
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            for start in range(0, count, batch_rows):
                stop = min(count, start + batch_rows)
                lines = [bytes(data[line_starts[row]:line_starts[row + 1]]) for row in range(start, stop)]
                paths = read_csv_paths(b"".join(lines))
                # The path field may be quoted and hold commas: the floats are the last D fields.
                fields = []
                for line in lines:
                    fields += line.rstrip(b"\n").rsplit(b",", feature_size)[1:]
                vectors = _parse_floats(fields, path).reshape(stop - start, feature_size)
                yield paths, vectors

    return OutputVectors(path, "csv", count, feature_size, settings, complete, batches)


def _parse_floats(fields, path):
    try:
        return np.array(fields, dtype=np.float32)
    except ValueError as error:
        raise _damaged(path, error) from None


def _feature_column(schema, path):
    import pyarrow as pa
    columns = [field for field in schema if field.name not in _NAME_COLUMNS]
    if len(columns) != 1 or not pa.types.is_fixed_size_list(columns[0].type) or "path_bytes" not in schema.names:
        raise _damaged(path, "expected columns path, path_bytes and one fixed-size list of float32")
    return columns[0].name, columns[0].type.list_size


def _parquet(files, output, output_format, settings, complete):
    import pyarrow.parquet as pq
    count, column, feature_size = 0, None, None
    for file in files:
        try:
            metadata = pq.read_metadata(file)
            name, size = _feature_column(metadata.schema.to_arrow_schema(), file)
        except (OSError, ValueError) as error:
            raise _damaged(file, error) from None
        if column is not None and (name, size) != (column, feature_size):
            raise _damaged(file, "its column %s[%d] differs from %s[%d] of the other shards"
                           % (name, size, column, feature_size))
        column, feature_size = name, size
        count += metadata.num_rows
    settings = dict(settings)
    settings.setdefault("column_prefix", column)

    def batches(batch_rows):
        for file in files:
            with pq.ParquetFile(file) as parquet:
                for batch in parquet.iter_batches(batch_size=batch_rows, columns=["path_bytes", column]):
                    paths = [decode_name(raw) for raw in batch.column(0).to_pylist()]
                    values = batch.column(1).flatten().to_numpy(zero_copy_only=False)
                    yield paths, values.reshape(-1, feature_size)

    return OutputVectors(output, output_format, count, feature_size or 0, settings, complete, batches)


def _npy(path, settings, complete):
    try:
        matrix = np.load(path, mmap_mode="r")
    except ValueError as error:
        raise _damaged(path, error) from None
    if matrix.ndim != 2 or matrix.dtype != np.float32:
        raise _damaged(path, "expected float32 [N, D], found %s %s" % (matrix.dtype, matrix.shape))
    paths_file = path.with_name(path.name + PATHS_SUFFIX)
    try:
        names = read_paths_csv(paths_file)
    except (OSError, ValueError) as error:
        raise _damaged(path, "its paths file %s: %s" % (paths_file, getattr(error, "strerror", None) or error)) \
            from None
    if len(names) != len(matrix):
        raise _damaged(path, "%d rows but %d paths in %s" % (len(matrix), len(names), paths_file))

    # Read, not mapped: a mapped file's pages stay in the process's resident memory once touched (20 GB for 10M
    # rows of 512 floats, each pass); read a batch at a time, only that batch is.
    offset, feature_size = matrix.offset, matrix.shape[1]
    row_bytes = feature_size * matrix.itemsize

    def batches(batch_rows):
        with open(path, "rb") as file:
            for start in range(0, len(names), batch_rows):
                block = np.empty((min(batch_rows, len(names) - start), feature_size), np.float32)
                file.seek(offset + start * row_bytes)
                if file.readinto(memoryview(block).cast("B")) != block.nbytes:
                    raise _damaged(path, "it ends before its %d rows do" % len(names))
                yield names[start:start + batch_rows], block

    del matrix  # its map: never read through
    return OutputVectors(path, "npy", len(names), feature_size, settings, complete, batches)


def _shards(folder):
    files = sorted(child / SHARD_FEATURES for child in folder.iterdir()
                   if child.is_dir() and not child.name.startswith("_") and (child / SHARD_FEATURES).is_file())
    if not files:
        raise ValueError("output=%s is a folder without committed shards (<folder>/shard-NNNNNN/%s)"
                         % (folder, SHARD_FEATURES))
    settings, complete = {}, False
    if folder.name.endswith(SHARDS_SUFFIX):
        record = read_record(folder.with_name(folder.name[:-len(SHARDS_SUFFIX)]))
        if record:
            settings = dict(record["settings"])
    return _parquet(files, folder, "shards", settings, complete)
