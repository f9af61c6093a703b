"""open_writer: checks the arguments, honours --overwrite, and opens the format's FeatureWriter."""

import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from parallel.output.base import path_order
from parallel.output.csv_rows import NEEDS_QUOTES
from parallel.output.csv_writer import CsvWriter
from parallel.output.durable import (FOLDER, REGULAR_FILE, TEMPORARY_SUFFIX, OutputError, beside, refuse_unless,
                                     remove)
from parallel.output.npy_writer import NpyWriter
from parallel.output.parquet_writer import ParquetWriter
from parallel.output.record import (ERRORS_SUFFIX, PARTS_SUFFIX, PATHS_SUFFIX, check_settings, read_record,
                                    sidecar_path)

# Output format -> the writer class of that format; the order is that of the choices shown.
WRITERS = {writer.format: writer for writer in (CsvWriter, ParquetWriter, NpyWriter)}
FORMATS = tuple(WRITERS)


def open_writer(output, *, format="csv", column_prefix="fc7", feature_size, settings, overwrite=False,
                sort_paths=False, record_digests=False):
    """Opens `output` for writing: a new output, or the resumption of an earlier one.

    Args:
      output: str or Path of the output file; missing parent folders are created.
      format: one of FORMATS.
      column_prefix: feature column names are `<prefix>_<i>` (csv) or the list column `<prefix>`.
      feature_size: D, floats per row.
      settings: flat dict of str -> str recorded in `<output>.run.json`: what determines the
        features (model, layer, weights identity, resize, ...). An existing output recorded
        with other settings is never appended to.
      overwrite: remove the output, its sidecar, parts and errors file first and start afresh.
      sort_paths: the finished output's rows are in path order, whatever order they were
        written in (the engine's outputs): rows of a rerun that sort before committed ones (an
        image repaired after it failed) are merged into place by close(). A callable: in the
        order of its key of each path (a tar job's: the place of each member in its tars).
        False: rows stay in the order written.
      record_digests: the record of the finished output holds the size and SHA-256 of its files
        (Parquet, npy), and a resume of it checks them (a shard's attempt, whose files are
        committed later: never the job's output, whose files may be large).

    Returns:
      FeatureWriter; its `completed` holds the paths committed by earlier runs.

    Raises:
      ValueError: a bad argument (the value is in the message).
      OutputError: the output exists with other settings, exists but was not written by this
        module, is damaged, or its folder cannot be written; or the output, or a file beside
        it that would be replaced, is not a regular file (a device, a FIFO, a link, ...).
    """
    output, recorded = _validate(output, format, column_prefix, feature_size, settings)
    for path in (output, sidecar_path(output)):
        # With or without --overwrite: it would not replace them either, so the way out is another output.
        refuse_unless(path, REGULAR_FILE, "choose another --output")
    if overwrite:
        remove_output(output)
    record = read_record(output)
    if record is not None:
        check_settings(output, record["settings"], recorded)
    elif output.exists():
        raise OutputError("%s exists and was not written by this program (no %s): pass --overwrite to replace "
                          "it or choose another --output" % (output, sidecar_path(output).name))
    writer = WRITERS[format](output, column_prefix, int(feature_size), recorded, record)
    writer.order = sort_paths if callable(sort_paths) else path_order if sort_paths else None
    writer.record_digests = bool(record_digests)
    return writer


def _validate(output, output_format, column_prefix, feature_size, settings):
    if output_format not in FORMATS:
        raise ValueError("format=%r; expected one of %s" % (output_format, ", ".join(FORMATS)))
    if isinstance(feature_size, bool) or not isinstance(feature_size, (int, np.integer)) or feature_size < 1:
        raise ValueError("feature_size must be a positive integer; got %r" % (feature_size,))
    if not isinstance(column_prefix, str) or not column_prefix or NEEDS_QUOTES.search(column_prefix):
        raise ValueError("column_prefix must be a non-empty name without comma, quote or newline; got %r"
                         % (column_prefix,))
    if not isinstance(settings, Mapping):
        raise ValueError("settings must be a dict of strings; got %r" % (settings,))
    for key, value in settings.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError("settings must map strings to strings; got %r: %r" % (key, value))
    own = recorded_settings({}, output_format, column_prefix, feature_size)
    for key, value in own.items():
        if key in settings and settings[key] != value:
            raise ValueError("settings[%r]=%r contradicts %s=%r" % (key, settings[key], key, value))
    try:
        output = Path(output)
    except TypeError:
        raise ValueError("output must be a file path; got %r" % (output,)) from None
    if output.is_dir():
        raise OutputError("--output %s is a folder; give a file name" % output)
    return output, dict(settings, **own)


def recorded_settings(settings, output_format, column_prefix, feature_size):
    """The settings an output's record holds: `settings` and the writer's own entries (another format, column
    prefix or feature size is another output)."""
    return dict(settings, format=output_format, column_prefix=column_prefix, feature_size=str(int(feature_size)))


def remove_output(output):
    """Removes the output (a Path) and its files (--overwrite, or an output its job starts afresh): the data before
    the sidecar, so that a kill part-way leaves no foreign-looking file.

    Everything is checked before anything is removed: a name held by something other than a
    regular file (the parts: a real folder) stops --overwrite with nothing removed.
    """
    data = (output, beside(output, PATHS_SUFFIX), beside(output, ERRORS_SUFFIX),
            beside(output, TEMPORARY_SUFFIX), beside(output, PATHS_SUFFIX + TEMPORARY_SUFFIX))
    records = (sidecar_path(output), beside(sidecar_path(output), TEMPORARY_SUFFIX))
    parts = beside(output, PARTS_SUFFIX)
    advice = "move it away or choose another --output"
    for path in data + records:
        refuse_unless(path, REGULAR_FILE, advice)
    parts_exist = refuse_unless(parts, FOLDER, advice)
    try:
        for path in data:
            remove(path)
        if parts_exist:
            shutil.rmtree(parts)
        for path in records:
            remove(path)
    except OSError as error:
        raise OutputError("--overwrite: cannot remove the old %s: %s" % (output, error.strerror)) from error
