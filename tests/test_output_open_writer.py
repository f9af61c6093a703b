"""Tests of parallel/output/writer.py: open_writer's arguments, foreign files, --overwrite, folders."""

import errno
import json
import os
from pathlib import Path

import pytest
from faults import NODE_KINDS, in_place_of
from outputs import SETTINGS, assert_same_content, entries_under, make_batch, run_job

from parallel.output import ErrorLog, OutputError, open_writer, sidecar_path


@pytest.mark.parametrize("arguments, message", [
    ({"format": "xlsx"}, "format='xlsx'"),
    ({"feature_size": 0}, "got 0"),
    ({"feature_size": 4.0}, "got 4.0"),
    ({"column_prefix": "a,b"}, "got 'a,b'"),
    ({"settings": {"model": 16}}, "'model': 16"),
    ({"settings": {"format": "npy"}}, "settings\\['format'\\]='npy'"),
])
def test_bad_arguments_are_value_errors_naming_the_value(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        open_writer(tmp_path / "out.csv", **dict({"feature_size": 4, "settings": SETTINGS}, **arguments))
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_without_sidecar_is_refused_unless_overwrite(tmp_path):
    output = tmp_path / "mine.csv"
    output.write_text("precious,data\n")
    with pytest.raises(OutputError, match="not written by this program.*--overwrite"):
        open_writer(output, feature_size=64, settings=SETTINGS)
    assert output.read_text() == "precious,data\n"
    with open_writer(output, feature_size=64, settings=SETTINGS, overwrite=True) as writer:
        assert writer.completed == frozenset()
        writer.write(*make_batch(0))
    assert_same_content(output, "csv", [make_batch(0)])


@pytest.mark.parametrize("output_format", ["csv", "npy"])
def test_overwrite_removes_output_sidecar_parts_and_errors(tmp_path, output_format):
    output = tmp_path / ("out." + output_format)
    writer = open_writer(output, format=output_format, feature_size=64, settings=SETTINGS)
    writer.write(*make_batch(0))
    writer.abort()
    ErrorLog(output).add("bad.jpg", "decode", "truncated")
    with open_writer(output, format=output_format, feature_size=64, settings=dict(SETTINGS, layer="fc6"),
                     overwrite=True) as fresh:
        assert fresh.completed == frozenset()
        assert not ErrorLog.path_for(output).exists()
        fresh.write(*make_batch(1))
    assert_same_content(output, output_format, [make_batch(1)])
    assert json.loads(sidecar_path(output).read_text())["settings"]["layer"] == "fc6"
    assert not Path(str(output) + ".parts").exists()


@pytest.mark.parametrize("kind", NODE_KINDS)
@pytest.mark.parametrize("suffix", ["", ".paths.csv", ".errors.csv", ".run.json", ".tmp", ".run.json.tmp", ".parts"])
def test_overwrite_removes_nothing_when_a_name_is_not_a_regular_file(tmp_path, make_node, suffix, kind):
    output = tmp_path / "job" / "out.npy"
    writer = open_writer(output, format="npy", feature_size=64, settings=SETTINGS)
    writer.write(*make_batch(0))
    writer.abort()
    with ErrorLog(output) as log:
        log.add("bad.jpg", "decode", "truncated")
    node = Path(str(output) + suffix)  # a link points to an input image, or a folder of them
    in_place_of(node, kind, make_node, tmp_path / "elsewhere", link_to_folder=suffix == ".parts")
    before = entries_under(tmp_path)
    with pytest.raises(OutputError) as raised:
        open_writer(output, format="npy", feature_size=64, settings=SETTINGS, overwrite=True)
    message = str(raised.value)
    assert message.startswith("%s is %s; not replacing it: " % (node, NODE_KINDS[kind])), message
    assert message.endswith("choose another --output") and "\n" not in message
    assert entries_under(tmp_path) == before  # checked first: nothing removed, the node still there


@pytest.mark.parametrize("suffix, kind", [("", "fifo"), ("", "character device"), ("", "symbolic link"),
                                          (".run.json", "character device"), (".run.json", "symbolic link")])
def test_an_output_that_is_not_a_regular_file_is_refused_without_suggesting_overwrite(tmp_path, make_node,
                                                                                        suffix, kind):
    output = tmp_path / "out.csv"
    (tmp_path / "precious.jpg").write_bytes(b"\xff\xd8 a photo")
    make_node(Path(str(output) + suffix), kind, tmp_path / "precious.jpg")
    before = entries_under(tmp_path)
    with pytest.raises(OutputError) as raised:
        open_writer(output, feature_size=64, settings=SETTINGS)
    assert str(raised.value) == "%s%s is %s; not replacing it: choose another --output" % (output, suffix,
                                                                                            NODE_KINDS[kind])
    assert entries_under(tmp_path) == before


def test_missing_parent_folders_are_created(tmp_path):
    output = tmp_path / "a" / "b" / "out.csv"
    run_job(output, "csv", [make_batch(0)])
    assert_same_content(output, "csv", [make_batch(0)])


def test_unwritable_folder_is_a_one_line_output_error(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="cannot create folder"):
        open_writer(tmp_path / "file" / "out.csv", feature_size=4, settings=SETTINGS)
    with pytest.raises(OutputError, match="is a folder"):
        open_writer(tmp_path, feature_size=4, settings=SETTINGS)
    folder = tmp_path / "locked"
    folder.mkdir()
    real_open = os.open

    def denied(path, *args, **kwargs):  # root ignores chmod, so the denial is simulated
        if str(path).startswith(str(folder)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", denied)
    with pytest.raises(OutputError) as raised:
        open_writer(folder / "out.csv", feature_size=4, settings=SETTINGS)
    assert str(raised.value) == "cannot write in folder %s: Permission denied: choose another --output" % folder


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_permission_denied_folder(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir(mode=0o500)
    with pytest.raises(OutputError, match="Permission denied"):
        open_writer(folder / "out.csv", feature_size=4, settings=SETTINGS)
