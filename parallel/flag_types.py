"""argparse types of the command lines (run_inference.py, search_features.py): the standard library only,
so that a mistyped flag is reported before TensorFlow is imported."""

import argparse


def at_least_one(text):
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError("must be a whole number of at least 1; got %r" % text)
    return value


def seconds(text):
    """argparse type: a number of seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError("must be a number of seconds, 0 or more; got %r" % text)
    return value


def names(text):
    """argparse type: comma-separated names ("caption,url") as a tuple, none of them empty."""
    values = tuple(value.strip() for value in text.split(","))
    if not all(values):
        raise argparse.ArgumentTypeError("must be names separated by commas, such as caption,url; got %r" % text)
    return values
