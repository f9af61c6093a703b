"""What a value of --images names when it is a pattern: brace expansion as bash's, then globs, local or in
a store.

    expand_braces("s/{000..002}.tar")  -> ["s/000.tar", "s/001.tar", "s/002.tar"]
    expand("data/*.parquet")           -> the matching files, absolute paths (or URLs in a store)
    names_files("imagenet/train-*")    -> whether a value of no known ending may name files
"""

import glob
import os
import re

from parallel.inputs import remote
from parallel.locations import is_url

_RANGE = re.compile(r"\{(-?\d+)\.\.(-?\d+)\}")
_GLOB = re.compile(r"[*?\[]")


def names_files(value):
    """Whether --images `value`, of no known ending, may name files: it is a local file, or a pattern
    (braces, a glob) of them."""
    if not is_url(value) and os.path.exists(value):  # a folder named "photos [2019]" is a folder
        return os.path.isfile(value)
    return "{" in value or bool(_GLOB.search(value.split("://", 1)[-1]))


def expand(value, noun="file"):
    """The files `value` names: itself, its brace expansion, or its glob's matches (absolute paths, or URLs).

    Raises:
      ValueError: a glob matches no file ("images=VALUE names no NOUN: the glob G matches none").
    """
    names = expand_braces(value)
    found = []
    for name in names:
        if _GLOB.search(name.split("://", 1)[-1]):
            matches = glob_files(name)
            if not matches:
                raise ValueError("images=%s names no %s: the glob %s matches none" % (value, noun, name))
            found.extend(matches)
        else:
            found.append(name if is_url(name) else os.path.abspath(name))
    return found


def glob_files(pattern):
    """The files a glob names (absolute paths), or the objects a store's glob names (URLs)."""
    if not is_url(pattern):
        return [os.path.abspath(path) for path in glob.glob(pattern, recursive=True) if os.path.isfile(path)]
    fs, path = remote.filesystem(pattern)
    fs.invalidate_cache()  # the store now, not an earlier listing of this process
    scheme = remote.scheme(pattern)
    return ["%s://%s" % (scheme, name) for name in fs.glob(path)]


def expand_braces(text):
    """Bash's brace expansion of `text`: {000..099} (zero-padded as written, either direction), {a,b,c}.

    Returns:
      list of str, in the order bash gives them.
    """
    start = text.find("{")
    while start != -1:
        stop = text.find("}", start)
        if stop == -1:
            break
        inner = text[start + 1:stop]
        head, tail = text[:start], text[stop + 1:]
        numbers = _RANGE.fullmatch(text[start:stop + 1])
        if numbers:
            first, last = numbers.group(1), numbers.group(2)
            width = max(len(first), len(last)) if first.lstrip("-").startswith("0") or \
                last.lstrip("-").startswith("0") else 0
            step = 1 if int(last) >= int(first) else -1
            choices = [str(number).zfill(width) for number in range(int(first), int(last) + step, step)]
        elif "," in inner:
            choices = inner.split(",")
        else:
            start = text.find("{", stop)
            continue
        return [expanded for choice in choices for expanded in expand_braces(head + choice + tail)]
    return [text]
