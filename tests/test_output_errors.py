"""Tests of parallel/output/errors.py: the errors file of the last run."""

import csv
import os
import stat

import pandas as pd
import pytest
from outputs import UNDECODABLE

from parallel.output import ErrorLog, OutputError


def test_error_log_lists_the_failures_of_the_last_run(tmp_path):
    output = tmp_path / "out.csv"
    log = ErrorLog(output)
    assert log.path == tmp_path / "out.csv.errors.csv" == ErrorLog.path_for(str(output))
    assert not log.path.exists()  # no failure, no file
    log.add("a,b.jpg", "decode", 'cannot identify image "a,b.jpg"\nsecond line')
    log.add(UNDECODABLE, "missing", "No such file")
    assert log.path.read_text(encoding="utf-8", errors="surrogateescape").startswith("path,kind,message\n")
    with open(log.path, newline="", encoding="utf-8", errors="surrogateescape") as file:
        rows = list(csv.reader(file))  # flushed per row: readable before close
    assert rows == [["path", "kind", "message"], ["a,b.jpg", "decode", 'cannot identify image "a,b.jpg"\nsecond line'],
                    [UNDECODABLE, "missing", "No such file"]]
    log.close()
    assert log.count == 2
    with ErrorLog(output) as rerun:  # the images are retried; this run's failures replace the old list
        assert not rerun.path.exists()
        rerun.add("c.jpg", "decode", "broken")
    assert pd.read_csv(rerun.path)["path"].tolist() == ["c.jpg"]
    ErrorLog(output).close()
    assert not rerun.path.exists()


def test_error_log_does_not_remove_what_is_not_a_regular_file(tmp_path, make_node):
    make_node(ErrorLog.path_for(tmp_path / "out.csv"), "fifo", None)
    with pytest.raises(OutputError, match="out.csv.errors.csv is a FIFO; not replacing it"):
        ErrorLog(tmp_path / "out.csv")
    assert stat.S_ISFIFO(os.lstat(ErrorLog.path_for(tmp_path / "out.csv")).st_mode)
