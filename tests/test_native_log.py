"""parallel/native_log.py: TensorFlow's start-up lines held to TF_CPP_MIN_LOG_LEVEL, every other line kept.

The first import of TensorFlow in a process, quiet or not, is tested in tests/test_engine.py
(test_extract_from_python_prints_no_tensorflow_log).
"""

import os

import pytest

from parallel import native_log

NOTICE = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
INFO = b"I0000 00:00:1795740601.211910    3903 port.cc:153] oneDNN custom operations are on.\n"
WARNING = b"W0000 00:00:1795740601.211911    3903 port.cc:90] a warning\n"
ERROR = b"E0000 00:00:1795740601.212218    3903 cuda_platform.cc:52] failed call to cuInit\n"
PYTHON = b"/x/tensorflow/__init__.py:3: UserWarning: not absl's\n"
TEXT = NOTICE + INFO + PYTHON + WARNING + ERROR


@pytest.mark.parametrize("level, kept", [(0, TEXT), (1, PYTHON + WARNING + ERROR), (2, PYTHON + ERROR), (3, PYTHON)])
def test_a_line_is_kept_as_the_level_says_and_every_line_not_tensorflows_is_kept(level, kept):
    assert native_log.kept_lines(TEXT, level) == kept


@pytest.mark.parametrize("value, level", [(None, 3), ("0", 0), ("2", 2), ("2 ", 2), ("loud", 0)])
def test_the_level_is_the_users_else_3(monkeypatch, capfd, value, level):
    if value is None:
        monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", value)
    with native_log.held_to_level():
        os.write(2, TEXT)
    assert capfd.readouterr().err.encode() == native_log.kept_lines(TEXT, level)
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == (value or "3")
