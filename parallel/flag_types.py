"""The parser and argparse types of the command lines (run_inference.py, search_features.py): the standard
library only, so that a mistyped flag is reported before TensorFlow is imported."""

import argparse
import re


class Once(argparse.Action):
    """argparse action of a flag that takes one value: given twice, it is refused in one line naming it.

    argparse's own ("store") keeps the last value and drops the first without a word: `--output a.csv
    --output b.csv` would write b.csv alone. `FlagParser` makes it every flag's default action.
    """

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self._parsing = None  # the namespace this flag was last given in: one per parse

    def __call__(self, parser, namespace, values, option_string=None):
        if self._parsing is namespace and self.option_strings:
            raise argparse.ArgumentError(self, "given twice (%r, then %r): give it once"
                                         % (getattr(namespace, self.dest), values))
        self._parsing = namespace
        setattr(namespace, self.dest, values)


class FlagParser(argparse.ArgumentParser):
    """argparse's parser, whose flags of one value (argparse's default action, "store") refuse to be given
    twice (`Once`), in its argument groups and its subcommands' parsers (of its class) too. A flag whose
    repetition means something says so: action="append" or "extend"."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("action", None, Once)
        self.register("action", "store", Once)


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


def parameters_as_flags(flags):
    """The function that writes a library's message in a command line's terms: each `parameter=value` of `flags`
    ({parameter: flag}) as the flag ("weights=a.npy" -> "--weights a.npy", "overwrite=True" -> "--overwrite",
    "needs world_size=" -> "needs --world-size"). The library's messages name its parameters, for whoever calls
    it from Python; on the command line the same line names the flag."""
    pattern = re.compile(r"(^|[\s(])(%s)=(True\b|(?=[\s,;:)]|$))?" % "|".join(flags))
    return lambda message: pattern.sub(lambda match: match.group(1) + flags[match.group(2)]
                                       + ("" if match.group(3) is not None else " "), message)


def names(text):
    """argparse type: comma-separated names ("caption,url") as a tuple, none of them empty."""
    values = tuple(value.strip() for value in text.split(","))
    if not all(values):
        raise argparse.ArgumentTypeError("must be names separated by commas, such as caption,url; got %r" % text)
    return values
