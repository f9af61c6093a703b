"""Tests of parallel/output/record.py: the commit record, and outputs of other settings refused."""

import json

import pytest
from outputs import SETTINGS, files_under, make_batch, run_job

from parallel.output import OutputError, check_settings, open_writer, read_record, sidecar_path


def test_other_settings_are_refused_naming_the_setting(tmp_path):
    output = tmp_path / "out.csv"
    run_job(output, "csv", [make_batch(0)])
    before = files_under(tmp_path)
    with pytest.raises(OutputError) as raised:
        open_writer(output, feature_size=64, settings=dict(SETTINGS, weights="/weights/other.h5"))
    message = str(raised.value)
    assert "weights='imagenet', not '/weights/other.h5'" in message
    assert "--overwrite" in message and "--output" in message and "\n" not in message
    with pytest.raises(OutputError, match="feature_size='64', not '32'"):
        open_writer(output, feature_size=32, settings=SETTINGS)
    with pytest.raises(OutputError, match="format='csv', not 'npy'"):
        open_writer(output, format="npy", feature_size=64, settings=SETTINGS)
    assert files_under(tmp_path) == before


def test_read_record_is_none_for_a_new_output_and_the_record_once_opened(tmp_path):
    output = tmp_path / "out.csv"
    assert read_record(output) is None
    open_writer(output, feature_size=4, settings=SETTINGS).close()
    record = read_record(str(output))
    assert (record["state"], record["rows"], record["settings"]["model"]) == ("complete", 0, "vgg16")
    assert json.loads(sidecar_path(output).read_text()) == record


@pytest.mark.parametrize("text", ["{not json", '{"version": 2, "settings": {}}', '{"version": 1, "settings": {}}',
                                  "[1]"])
def test_a_damaged_or_foreign_record_is_one_line_naming_the_file(tmp_path, text):
    output = tmp_path / "out.csv"
    sidecar_path(output).write_text(text)
    with pytest.raises(OutputError) as raised:
        read_record(output)
    assert str(raised.value) == ("%s is damaged or from another version: pass --overwrite to start afresh or choose "
                                 "another --output" % sidecar_path(output))


def test_check_settings_names_each_difference_and_skips_the_ignored_keys(tmp_path):
    recorded = {"model": "vgg16", "layer": "fc7", "feature_size": "4096"}
    check_settings("out.csv", recorded, {"model": "vgg16", "layer": "fc7"}, ignore=("feature_size",))
    with pytest.raises(OutputError) as raised:
        check_settings("out.csv", recorded, {"model": "vgg16", "layer": "fc6", "resize": "crop"},
                       ignore=("feature_size",))
    assert str(raised.value) == ("out.csv was written with other settings (layer='fc7', not 'fc6'; resize=None, "
                                 "not 'crop'): pass --overwrite to replace it or choose another --output")


def test_an_output_of_another_model_is_refused_naming_the_two_models_only():
    """Another model differs in its layer, preprocessing and weights too: the models say it all, in a short line."""
    recorded = {"model": "vgg16", "layer": "fc7", "weights": "w.npy (553432024 bytes)", "preprocessing": "None"}
    with pytest.raises(OutputError) as raised:
        check_settings("out.csv", recorded, {"model": "efficientnet_b0", "layer": "avg_pool", "weights": "e.h5",
                                             "preprocessing": "Keras EfficientNet: x/255, Normalization, ..."})
    assert str(raised.value) == ("out.csv was written by another model (vgg16, not efficientnet_b0): pass "
                                 "--overwrite to replace it or choose another --output")
