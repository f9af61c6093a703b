"""The argparse types the command lines share (parallel/flag_types.py)."""

import argparse

import pytest

from parallel.flag_types import at_least_one, names, seconds


def test_names_are_comma_separated_and_none_is_empty():
    assert names("caption") == ("caption",)
    assert names("caption, url,image/class/label") == ("caption", "url", "image/class/label")
    for text in ("", "caption,", ",url", "a,,b"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be names separated by commas.*got %r" % text):
            names(text)


def test_numbers_and_seconds_refuse_what_they_cannot_be():
    assert at_least_one("3") == 3 and seconds("0") == 0.0 and seconds("2.5") == 2.5
    for text in ("0", "-1", "x", "1.5"):
        with pytest.raises(argparse.ArgumentTypeError, match="at least 1; got %r" % text):
            at_least_one(text)
    for text in ("-1", "nan", "soon"):
        with pytest.raises(argparse.ArgumentTypeError, match="0 or more; got %r" % text):
            seconds(text)
