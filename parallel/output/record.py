"""The commit record: `<output>.run.json`, the settings of an output and how much of it is committed.

    {"version": 1, "settings": {...}, "state": "writing" | "complete",
     "rows": committed rows, "bytes": committed CSV length, "parts": committed parts}

It is replaced atomically after the data it describes is durable, so on open it is the truth:
data beyond it was never committed. It is kept after close(), so that a rerun can tell a
finished output of the same settings (nothing to do) from a different job (refused).
"""

import json
from pathlib import Path

from parallel.output.durable import DamagedOutput, OtherSettings, OutputError, beside, replace_atomically

SIDECAR_SUFFIX = ".run.json"
PARTS_SUFFIX = ".parts"
PATHS_SUFFIX = ".paths.csv"
ERRORS_SUFFIX = ".errors.csv"
_SIDECAR_VERSION = 1


def sidecar_path(output):
    """`<output>.run.json`: settings and commit record of `output` (str or Path)."""
    return beside(Path(output), SIDECAR_SUFFIX)


def new_record(settings):
    """The record of an output with nothing committed yet, written with `settings` ({str: str})."""
    return {"version": _SIDECAR_VERSION, "settings": settings, "state": "writing", "rows": 0, "bytes": 0, "parts": 0}


def closed_record(settings, rows, csv_bytes=0):
    """The record a writer leaves on the output it closed with `rows` rows (a CSV's: `csv_bytes` long), its
    `settings` as it records them (`parallel.output.writer.recorded_settings`): what a job writes again when
    the record is lost, once its bytes (`record_bytes`) are those its ledger recorded."""
    return dict(new_record(settings), state="complete", rows=rows, bytes=csv_bytes, parts=0)


def record_bytes(record):
    """The bytes of the sidecar that holds `record`."""
    return (json.dumps(record, indent=1, ensure_ascii=True) + "\n").encode("ascii")


def save_record(output, record):
    """Replaces the sidecar of `output` (a Path) by `record`, atomically and durably."""
    replace_atomically(sidecar_path(output), record_bytes(record))


def read_record(output):
    """The commit record of `output` (its settings, "state", "rows"), or None for a new output.

    Read-only: a caller can refuse a job before anything is written.

    Raises:
      OutputError: the sidecar is damaged or from another version.
    """
    path = sidecar_path(output)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None  # a folder that cannot be created is reported when it is created
    except OSError as error:
        raise OutputError("cannot read %s: %s" % (path, error.strerror)) from error
    try:
        record = json.loads(data.decode("utf-8"))  # UnicodeDecodeError: a ValueError
        if record.get("version") != _SIDECAR_VERSION or not isinstance(record.get("settings"), dict):
            raise ValueError(record.get("version"))
        for key in ("state", "rows", "bytes", "parts"):
            record[key]  # noqa: B018 -- a missing key is a damaged sidecar
    except (ValueError, KeyError, AttributeError, TypeError):
        raise DamagedOutput("%s is damaged or from another version: pass --overwrite to start afresh or choose "
                            "another --output" % path) from None
    return record


def check_settings(output, recorded, expected, ignore=()):
    """Refuses an output recorded with other settings than `expected`.

    Args:
      output: the output, for the message.
      recorded: settings from `read_record(output)["settings"]`.
      expected: the settings of the new run.
      ignore: keys not known yet (e.g. "feature_size" before the graph is built).

    Raises:
      OutputError: a setting differs; the message names each difference, or only the models when they
        differ (then every other setting may too: the layer, the preprocessing, the weights).
    """
    old = {key: value for key, value in recorded.items() if key not in ignore}
    new = {key: value for key, value in expected.items() if key not in ignore}
    if None not in (old.get("model"), new.get("model")) and old["model"] != new["model"]:
        raise OtherSettings("%s was written by another model (%s, not %s): pass --overwrite to replace it or "
                            "choose another --output" % (output, old["model"], new["model"]))
    differences = ["%s=%r, not %r" % (key, old.get(key), new.get(key))
                   for key in sorted(set(old) | set(new)) if old.get(key) != new.get(key)]
    if differences:
        raise OtherSettings("%s was written with other settings (%s): pass --overwrite to replace it or choose "
                          "another --output" % (output, "; ".join(differences)))
