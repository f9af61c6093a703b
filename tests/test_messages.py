"""What a user reads of an error (parallel/messages.py): one line, and the one cause of many failures."""

from parallel.messages import CAUSE_LIMIT, one_cause, one_line


def test_a_long_message_is_its_first_line_cut_saying_how_much_more():
    assert one_line("short\nsecond") == "short"
    assert one_line("x" * 20, limit=10) == "x" * 10 + " ... (10 more characters)"


def test_failures_of_one_kind_and_message_but_for_their_paths_and_numbers_are_one_cause():
    """A datasets Parquet file of paths: 49 failures, the reason only inside the errors file."""
    advice = "datasets' to_parquet of local files keeps their paths only: embed the bytes"
    rows = [("parquet://#%d::/d/p.parquet" % row, "missing", "row %d has no image bytes (its path: %s; %s)"
             % (row, name, advice)) for row, name in enumerate(["a/1.jpg", "b/two words.png", "c.jpg"])]
    assert one_cause(rows) == "all 3 'missing': row ... has no image bytes (its path: ...; %s)" % advice
    assert one_cause(rows[:1]) == "'missing': %s" % rows[0][2]  # one failure: its message
    assert one_cause([("a", "not_an_image", "cannot identify image file")] * 2) == \
        "all 2 'not_an_image': cannot identify image file"


def test_failures_of_several_kinds_or_causes_are_none():
    assert one_cause([]) is None
    assert one_cause([("a", "missing", "no such file"), ("b", "unreadable", "no such file")]) is None
    assert one_cause([("a", "corrupt", "record 5 at byte 9910 is not a tf.train.Example"),
                      ("b", "corrupt", "damaged TFRecord: the data of the record at byte 12 has a wrong CRC")]) is None
    long = [("a", "corrupt", "x " * 400 + "a"), ("b", "corrupt", "x " * 400 + "b")]
    assert one_cause(long).startswith("all 2 'corrupt': x x") and len(one_cause(long).split(" ... (")[0]) <= CAUSE_LIMIT
