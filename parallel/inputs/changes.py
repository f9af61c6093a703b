"""What changed in a job's folder since its manifest was frozen, and the refusal of a rerun it makes stale.

The rules (see parallel.inputs.manifest): an image added is refused (its row would land out of sorted
order); an image removed or changed after its row was committed is refused (the row would be
stale); one without a row is simply processed as it is now.
"""

import dataclasses

_NAMES_SHOWN = 3  # names quoted per kind of change in an error


@dataclasses.dataclass(frozen=True)
class Changes:
    """How a folder differs from a job's frozen manifest (each a sorted list of paths)."""

    added: list
    removed: list
    changed: list

    def __bool__(self):
        return bool(self.added or self.removed or self.changed)


def describe_changes(changes, images, output, committed=None,
                     way_out="pass --overwrite to start afresh, or choose another --output"):
    """The one-line refusal of a rerun whose folder changed, or None when it may go on.

    Args:
      changes: Changes of the folder against the job's manifest.
      images: the images folder, for the message.
      output: the output, for the message.
      committed: the paths with a committed row (a set, or a dict keyed by them); None: not
        known yet (only added images are judged then).
      way_out: what the user can do, for the message (a job over several processes has
        other ways out than one process's --overwrite).

    Returns:
      str or None.
    """
    problems = []
    if changes.added:
        problems.append(_count_and_names(changes.added, "added"))
    if committed is not None:
        stale = [path for path in changes.removed if path in committed]
        if stale:
            problems.append(_count_and_names(stale, "removed after its row was written"))
        stale = [path for path in changes.changed if path in committed]
        if stale:
            problems.append(_count_and_names(stale, "changed after its row was written"))
    if not problems:
        return None
    return "%s changed since the job writing %s started: %s. %s" % (images, output, "; ".join(problems),
                                                                   way_out[:1].upper() + way_out[1:])


def _count_and_names(paths, what):
    shown = ", ".join(paths[:_NAMES_SHOWN]) + (", ..." if len(paths) > _NAMES_SHOWN else "")
    return "%d image%s %s (%s)" % (len(paths), "" if len(paths) == 1 else "s", what, shown)


def other_source_message(output, recorded, given):
    """The one-line refusal of an output that belongs to the images of another folder."""
    return ("%s holds the features of the images in %s, not %s: pass --overwrite to replace it, or choose "
            "another --output" % (output, recorded, given))
