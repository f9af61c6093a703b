"""What a user reads of an error, and how a long job shows its progress: one line, one bar.

Standard library only (tqdm on first use), so that the command line, the output layer and the
models can use them without importing the engine.
"""

import re


LINE_LIMIT = 500  # characters of a message line a user is shown; the rest is quoted data, not news


def first_line(error):
    """The first line of `error`'s message (an exception or a str), stripped; "" when it has none."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def error_line(error):
    """The first line of `error`'s message, or its type's name when it has none ("KeyError" for KeyError())."""
    return first_line(error) or type(error).__name__


def one_line(message, limit=LINE_LIMIT):
    """`message` as the one line a user reads: its first line, cut at `limit` characters (a message that
    quotes a row of 4,096 features, or a long list of names, says what matters first)."""
    line = first_line(message)
    if len(line) <= limit:
        return line
    return "%s ... (%d more characters)" % (line[:limit].rstrip(), len(line) - limit)


def counted(count, noun):
    """`count` and `noun`, plural unless count is 1: counted(1, "shard") -> "1 shard", counted(0, "image")
    -> "0 images". For nouns whose plural takes an s."""
    return "%d %s%s" % (count, noun, "" if count == 1 else "s")


def listed(indexes, shown=10):
    """"0, 4, 8", the first `shown` of `indexes` and ", ..." after them if there are more."""
    return ", ".join(str(index) for index in indexes[:shown]) + (", ..." if len(indexes) > shown else "")


def which_shards(indexes):
    """"no shard", "shard 3", "shards 0, 4, 8"."""
    if not indexes:
        return "no shard"
    return "shard%s %s" % ("" if len(indexes) == 1 else "s", listed(indexes))


CAUSE_LIMIT = 300  # characters of the cause a summary line gives its failures
_WORDS = re.compile(r"[^\s;,()]+|[\s;,()]")  # a message's words, and the spaces and punctuation between them


def one_cause(failures):
    """What every failure says, when it is one thing: the summary line gives it, not the errors file alone.

    Failures have one cause when they are of one kind and their messages are the same but for some words
    (a row's number, an image's path), which are written "..."; at most half of a message's words may differ.

        one_cause([(p, "missing", "row 0 has no image bytes (its path: a.jpg)"),
                   (p, "missing", "row 1 has no image bytes (its path: b.jpg)")])
        -> "all 2 'missing': row ... has no image bytes (its path: ...)"

    Args:
      failures: a list of (path, kind, message), as an errors file's rows.

    Returns:
      str (cut at CAUSE_LIMIT characters, as `one_line` cuts), or None: no failure, or several kinds or messages.
    """
    if not failures:
        return None
    _, kind, first = failures[0]
    form = _WORDS.findall(first)  # its words, and None for each that differs
    words = sum(1 for word in form if not word.isspace())
    pattern = re.compile(re.escape(first))
    for _, other_kind, message in failures[1:]:
        if other_kind != kind:
            return None
        if pattern.fullmatch(message):
            continue
        form = _merged(form, _WORDS.findall(message))
        if 2 * sum(1 for word in form if word is not None and not word.isspace()) < words:
            return None
        pattern = re.compile("".join(".+?" if word is None else re.escape(word) for word in form), re.S)
    text = "".join("..." if word is None else word for word in form)
    said = "%s'%s': %s" % ("" if len(failures) == 1 else "all %d " % len(failures), kind, text)
    return one_line(said, CAUSE_LIMIT)


def _merged(form, words):
    """`form` (words, None where they differ) with the words that `words` does not share turned into None."""
    import difflib
    merged = []
    for operation, start, stop, _, _ in difflib.SequenceMatcher(None, form, words, autojunk=False).get_opcodes():
        if operation == "equal":
            merged.extend(form[start:stop])
        elif not merged or merged[-1] is not None:
            merged.append(None)
    return merged


class Progress:
    """A tqdm bar on stderr, or nothing when `enabled` is false (a log file, --quiet).

        with Progress(stderr_is_terminal, total=len(images)) as bar:      # images done, images/s, time left
            bar.update(len(batch), failed=failures_so_far)
        with Progress(stderr_is_terminal, total=size, unit="B", unit_scale=True, desc="weights") as bar:
            bar.update(len(chunk))
    """

    def __init__(self, enabled, total, initial=0, unit="img", unit_scale=False, desc=None):
        self._bar = None
        if enabled:
            from tqdm import tqdm
            self._bar = tqdm(total=total, initial=initial, unit=unit, unit_scale=unit_scale, desc=desc,
                             dynamic_ncols=True, smoothing=0.1)

    def update(self, count, failed=0):
        """`count` more done; `failed`: how many failed so far (shown when not 0)."""
        if self._bar is not None:
            self._bar.update(count)
            if failed:
                self._bar.set_postfix(failed=failed, refresh=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        if self._bar is not None:
            self._bar.close()


class PhaseBars:
    """`progress(done, total[, what])` callbacks shown as a bar per phase (`what`: "rows", "pairs"): a new `what`
    closes the bar before it. Nothing is shown when `enabled` is false.

        bars = PhaseBars(stderr_is_terminal)
        index.add(output, progress=bars)      # bars(done, total) as rows are added
        bars.close()
    """

    def __init__(self, enabled):
        self.enabled, self.bar, self.what = enabled, None, None

    def __call__(self, done, total, what="rows"):
        if what != self.what:
            self.close()
            self.bar, self.what, self.done = Progress(self.enabled, total=total, unit="row", desc=what), what, 0
            self.bar.__enter__()
        self.bar.update(done - self.done)
        self.done = done

    def close(self):
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar, self.what = None, None
