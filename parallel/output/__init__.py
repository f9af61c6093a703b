"""Writes (paths, features) batches to CSV, Parquet or npy: streaming, crash-safe, resumable.

    writer = open_writer("results/features.csv", feature_size=4096, settings={"model": "vgg16"})
    todo = [path for path in paths if path not in writer.completed]   # resume
    for batch_paths, batch_features in batches(todo):
        writer.write(batch_paths, batch_features)   # committed once it returns
    writer.close()

Every `write()` is a commit: once it returns, its rows survive a crash or a SIGKILL.
Re-opening the same output with the same settings resumes it: `completed` holds the paths
committed by earlier runs, and writing the rest produces what one uninterrupted run would
have (every row once, in the order written, no partial line; for CSV the same bytes).

Files, for an output `O` (all beside it; nothing in an image name can change where a
file is written):

    O                  the output. csv: grows as rows commit. parquet, npy: written by close().
    O.run.json         the sidecar: the settings the output was written with and the commit
                       record (state "writing" or "complete", rows, csv bytes, parts). It is
                       kept after close(), so that a rerun can tell a finished output of the same
                       settings (nothing to do) from a different job (refused).
    O.parts/           parquet, npy: one committed part per write(), until close() merges them:
                       part-000000.parquet, or part-000000.npy + part-000000.paths.csv.
    O.paths.csv        npy: the paths, one column `path`, in the rows' order.
    O.errors.csv       `ErrorLog`: the images that failed in the last run.
    *.tmp              transient: written, fsync'ed, then renamed over the real name.

Only regular files are ever replaced or removed (O.parts/ only when it is a real folder):
something else under one of these names (a device, a FIFO, a socket, a folder, a symbolic
link) is refused with an OutputError, and nothing is removed.

Commit protocol: data first (appended or written to a part, flushed, fsync'ed), then the
sidecar is atomically replaced (temp file, fsync, os.replace, fsync of the folder). On
open the sidecar is the truth: a CSV is truncated to its committed length (dropping a
partial line left by a kill), parts beyond the committed count are deleted.

The modules, one job each:

    durable.py         fsync, atomic replace, temp-then-rename, the regular-file refusal (stdlib only)
    stores.py          a local folder or an object store (fsspec) behind one interface: no rename needed
    csv_rows.py        CSV lines: names quoted and encoded, floats formatted on a thread pool, read back
    record.py          the commit record (the sidecar): read, checked against the settings, saved
    base.py            FeatureWriter: the lifecycle, with hooks each format overrides
    writer.py          open_writer: arguments, --overwrite, the class of the format
    csv_writer.py      CsvWriter: rows appended to the output
    parts_writer.py    PartsWriter: a part per write(), merged by close() (Parquet, npy)
    parquet_writer.py  ParquetWriter, and its Parquet files (layout in its docstring)
    npy_writer.py      NpyWriter, and its .npy files
    errors.py          ErrorLog

The names below are imported on first use (PEP 562): `import parallel.output.durable` loads
nothing but the standard library, and nothing here imports TensorFlow.
"""

from parallel.lazy import lazy_exports

# The submodule -> the names it exports.
_MODULES = {
    "writer": ("FORMATS", "open_writer", "recorded_settings", "remove_output"),
    "base": ("FeatureWriter",),
    "csv_writer": ("CsvWriter",), "parquet_writer": ("ParquetWriter",), "npy_writer": ("NpyWriter",),
    "durable": ("DamagedOutput", "OtherSettings", "OutputError"),
    "csv_rows": ("csv_header", "format_rows", "read_csv_paths"),
    "record": ("check_settings", "read_record", "sidecar_path", "ERRORS_SUFFIX", "PARTS_SUFFIX", "PATHS_SUFFIX",
               "SIDECAR_SUFFIX"),
    "errors": ("ErrorLog",),
}
_EXPORTS = {name: __name__ + "." + module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
