"""The job's ledger: entries read back as written, and a line changed, cut or removed never believed."""

import pytest

from parallel.jobs.ledger import Ledger


@pytest.fixture
def ledger(tmp_path):
    return Ledger(tmp_path / "out.csv.ledger.jsonl")


def _written(ledger):
    ledger.add_shard(0, [], 4)
    ledger.add_shard(1, [("a/bad.png", "corrupt", "cannot identify"), ("b/\udcff.png", "missing", "gone")], 6)
    ledger.add_shard(2, [("c.png", "corrupt", "truncated")], 9)
    return Ledger(ledger.path)


def test_what_is_appended_is_read_back_in_order(ledger):
    read = _written(ledger)
    assert read.damaged == 0
    assert read.shards() == {0: [],
                             1: [("a/bad.png", "corrupt", "cannot identify"), ("b/\udcff.png", "missing", "gone")],
                             2: [("c.png", "corrupt", "truncated")]}
    assert [row[0] for row in read.failures()] == ["a/bad.png", "b/\udcff.png", "c.png"]
    assert read.complete() is None
    read.add_complete(9, {"files": {"": 120, ".errors.csv": 80}, "record": "ab" * 32})
    assert Ledger(ledger.path).complete() == {"rows": 9, "files": {"": 120, ".errors.csv": 80}, "record": "ab" * 32}


def test_a_retry_gives_rows_to_some_failures_and_new_messages_to_the_others(ledger):
    read = _written(ledger)
    read.add_complete(9, {"files": {"": 1}, "record": None})
    read.add_retry(["a/bad.png"], [("c.png", "corrupt", "still truncated")])
    again = Ledger(ledger.path)
    assert again.failures() == [("b/\udcff.png", "missing", "gone"), ("c.png", "corrupt", "still truncated")]
    assert again.complete() is None  # the output was opened again since it was closed


@pytest.mark.parametrize("line", [0, 1, 2])
def test_a_byte_changed_in_a_line_loses_that_line_and_no_other_silently(ledger, line):
    _written(ledger)
    lines = ledger.path.read_bytes().split(b"\n")
    data = bytearray(lines[line])
    data[70] ^= 0x01  # inside the JSON
    lines[line] = bytes(data)
    ledger.path.write_bytes(b"\n".join(lines))
    read = Ledger(ledger.path)
    assert read.damaged == 1
    assert sorted(read.shards()) == sorted({0, 1, 2} - {line})


def test_a_changed_digest_loses_its_line_and_the_next(ledger):
    _written(ledger)
    data = bytearray(ledger.path.read_bytes())
    data[0] = ord("0") if data[0] != ord("0") else ord("1")
    ledger.path.write_bytes(bytes(data))
    read = Ledger(ledger.path)
    assert read.damaged == 2 and sorted(read.shards()) == [2]


def test_a_removed_line_makes_the_next_fail(ledger):
    _written(ledger)
    lines = ledger.path.read_bytes().split(b"\n")
    ledger.path.write_bytes(b"\n".join(lines[:1] + lines[2:]))
    read = Ledger(ledger.path)
    assert read.damaged == 1 and sorted(read.shards()) == [0]


@pytest.mark.parametrize("cut", [1, 20, 200])
def test_a_cut_ledger_keeps_the_whole_lines_before_the_cut(ledger, cut):
    _written(ledger)
    data = ledger.path.read_bytes()
    ledger.path.write_bytes(data[:-cut])
    read = Ledger(ledger.path)
    assert read.damaged == 1 and sorted(read.shards()) == ([0, 1] if cut < 100 else [0])


def test_lines_that_failed_are_dropped_before_the_next_is_appended(ledger):
    _written(ledger)
    ledger.path.write_bytes(ledger.path.read_bytes()[:-5])  # shard 2's line cut, as by a kill
    read = Ledger(ledger.path)
    read.add_shard(2, [], 9)
    again = Ledger(ledger.path)
    assert again.damaged == 0 and sorted(again.shards()) == [0, 1, 2]


def test_forgetting_shards_rewrites_it_without_them_nor_its_closing_entry(ledger):
    read = _written(ledger)
    read.add_complete(9, {"files": {"": 1}, "record": None})
    read.forget([1])
    again = Ledger(ledger.path)
    assert again.damaged == 0 and sorted(again.shards()) == [0, 2] and again.complete() is None
    again.forget(everything=True)
    assert Ledger(ledger.path).entries == [] and ledger.path.read_bytes() == b""


def test_a_missing_ledger_records_nothing(ledger):
    assert (ledger.entries, ledger.damaged, ledger.shards(), ledger.complete()) == ([], 0, {}, None)
    ledger.forget(everything=True)
    assert not ledger.path.exists()


def test_a_retry_s_text_file_is_proven_until_the_output_is_closed_then_the_close_s_and_forgotten_with_it(ledger):
    from types import SimpleNamespace
    from parallel.jobs.proof import text_proven
    read = _written(ledger)
    read.add_complete(9, {"files": {".text.parquet": [100, "c" * 64]}, "record": None})
    read.add_text(100, "d" * 64)  # a retry's, written before its rows are
    again = Ledger(ledger.path)
    assert again.texts_since_closed() == [[100, "d" * 64]] and again.complete() is None
    proven = [text_proven(SimpleNamespace(committed_digest=lambda suffix: digest), again)
              for digest in ((100, "c" * 64), (100, "d" * 64), (100, "e" * 64), None)]
    assert proven == [True, True, False, False]  # the file it was closed with, or the retry's: no other
    again.add_complete(9, {"files": {".text.parquet": [100, "d" * 64]}, "record": None})
    assert again.texts_since_closed() == []
    again.add_text(100, "f" * 64)
    again.forget([1])
    assert Ledger(ledger.path).texts_since_closed() == [] and not [entry for entry in again.entries if "text" in entry]
