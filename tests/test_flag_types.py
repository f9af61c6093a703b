"""The argparse types the command lines share (parallel/flag_types.py)."""

import argparse

import pytest

from parallel.flag_types import FlagParser, at_least_one, names, seconds


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



def test_a_flag_of_one_value_given_twice_is_refused_naming_it_and_repeating_flags_take_every_value(capsys):
    """argparse's "store" kept the last value of a flag given twice and dropped the first without a word."""
    parser = FlagParser(prog="p")
    parser.add_argument("--output")
    parser.add_argument("--count", type=at_least_one, default=2)
    parser.add_argument("--text", action="append", default=[])
    parser.add_argument("--images", nargs="+", action="extend")
    parser.add_mutually_exclusive_group().add_argument("--gpus")
    serve = parser.add_subparsers(dest="command").add_parser("serve")
    serve.add_argument("folder")
    serve.add_argument("--port", type=int)
    args = parser.parse_args(["--text", "a", "--text", "b", "--images", "x", "y", "--images", "z", "--count", "2",
                              "--output", "o", "serve", "f", "--port", "1"])
    assert (args.text, args.images, args.count, args.output, args.folder, args.port) == (
        ["a", "b"], ["x", "y", "z"], 2, "o", "f", 1)
    for argv, said in ((["--output", "a", "--output", "b"], "--output: given twice ('a', then 'b')"),
                       (["--count", "2", "--count", "2"], "--count: given twice (2, then 2)"),  # the default, twice
                       (["--gpus", "0", "--gpus", "1"], "--gpus: given twice ('0', then '1')"),
                       (["serve", "f", "--port", "1", "--port", "2"], "--port: given twice (1, then 2)")):
        with pytest.raises(SystemExit) as stopped:
            parser.parse_args(argv)
        error = capsys.readouterr().err
        assert stopped.value.code == 2 and error.endswith("error: argument %s: give it once\n" % said), error
    assert parser.parse_args(["--output", "a"]).output == "a"  # a parse of its own: given once
