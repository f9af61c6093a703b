"""The CLI end to end with VGG16 (seeded random weights in tensorflow-vgg's npy layout); its plumbing (failures,
shards, signals and kills) with a colour model in VGG16's place (tests/cli_child.py, `colour`)."""

import argparse
import contextlib
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf
from PIL import Image

import colour_jobs
import run_inference
from parallel import engine, jobs
from parallel.devices import available_gpus
from hangs import HANG_SECONDS

REPOSITORY = Path(__file__).resolve().parent.parent
NAMES = ["a/one.jpg", "a/two, with comma.png", "b/日本.jpg", "b/c/=four.jpg", "five.JPG"]


@pytest.fixture(scope="module")
def weights_file(seeded_files):
    return seeded_files["npy"]


def make_images(folder, names=NAMES, size=(40, 30)):
    rng = np.random.default_rng(0)
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size[::-1] + (3,), dtype=np.uint8)).save(
            path, format="PNG" if name.endswith(".png") else "JPEG")
    return folder


def main(*argv):
    return run_inference.main([str(arg) for arg in argv])


def read(path):
    return pd.read_csv(path, index_col="path", keep_default_na=False, dtype={"path": object})


@contextlib.contextmanager
def colour_in_every_model_s_place():
    """job_child's colour model in every model's place, in this process (as tests/cli_child.py has it in a process of
    its own: a run here is the same job as its, and writes the same bytes), in a moment."""
    import job_child
    from models import registry
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(registry, "feature_model", lambda name, **flags: job_child.colour_model())
        yield


@pytest.fixture
def colour(monkeypatch, tmp_path):
    """The command line in this process with job_child's colour model in every model's place (as cli_child.py
    has it in a process of its own), from tmp_path: a job runs in a moment."""
    monkeypatch.chdir(tmp_path)
    with colour_in_every_model_s_place():
        yield


def shown_by_the_command_line(records):
    """The messages of `records` (caplog's) that the command line's log would show on stderr: the run's own at
    INFO, the libraries' warnings."""
    return [record.getMessage() for record in records if record.levelno >= logging.WARNING or (
        record.levelno >= logging.INFO and record.name.startswith("parallel"))]


@pytest.mark.parametrize("make, flags, message", [
    (lambda tmp: tmp / "nowhere", [], "--images .*nowhere is not a folder"),
    (lambda tmp: make_images(tmp) / "five.JPG", [], "--images .*five.JPG is a file, not a folder: to compute some "
     "images, list their paths in a text file, one a line, and give it as --images-from$"),
    (lambda tmp: (tmp / "empty").mkdir() or tmp / "empty", [], "contains no images"),
    (make_images, ["--gpus", "3"], "GPU 3 not found; this machine has CPU:0"),
    (make_images, ["--devices", "tpu:0"], "must name a CPU or GPU"),
    (make_images, ["--weights", "missing.npy"], "--weights missing.npy is not a file"),
    (make_images, ["--weights", "{notes}"], "is neither a tensorflow-vgg vgg16.npy nor a Keras .h5"),
    (make_images, ["--model", "clip_vit_b32", "--weights", "hf://openai/clip-vit-base-patch32@main"],
     "--weights hf://openai/clip-vit-base-patch32@main: 'main' is a branch or a tag, which moves"),
])
def test_usage_errors_are_one_line_exit_2_and_leave_no_output(tmp_path, capsys, weights_file, make, flags, message):
    (tmp_path / "notes.txt").write_text("not weights")
    images = make(tmp_path)
    flags = [flag.replace("{notes}", str(tmp_path / "notes.txt")) for flag in flags]
    if "--weights" not in flags:
        flags += ["--weights", weights_file]
    output = tmp_path / "out" / "features.csv"
    assert main("--images", images, "--output", output, "--quiet", *flags) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("run_inference: error: "), error
    assert re.search(message, error), error
    assert not output.parent.exists()


def test_gpus_and_devices_together_are_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        main("--images", ".", "--gpus", "0", "--devices", "cpu:0")
    error = capsys.readouterr().err
    assert stop.value.code == 2 and "not allowed with argument" in error and error.count("\n") == 1


def test_features_by_path_do_not_depend_on_devices_or_batch_size(tmp_path, capsys, weights_file):
    images = make_images(tmp_path / "images")
    frames = {}
    for devices, batch in (("cpu:0", 3), ("cpu:0,cpu:1", 1)):  # steps of 3 and 2, or of 2, 2 and 1 on two devices
        output = tmp_path / ("%d-%d.csv" % (devices.count(",") + 1, batch))
        assert main("--images", images, "--output", output, "--weights", weights_file,
                    "--devices", devices, "--batch-size", batch) == 0
        assert "5 images: 5 written, 0 failed" in capsys.readouterr().err
        frames[devices] = read(output)
    single, parallel = frames.values()
    assert list(single.index) == sorted(NAMES)  # keyed by relative path, in sorted order
    assert list(single.columns) == ["fc7_%d" % i for i in range(4096)]
    assert single.dtypes.unique().tolist() == [np.float64]
    np.testing.assert_allclose(parallel.to_numpy(), single.to_numpy(), rtol=1e-5,
                               atol=1e-5 * np.abs(single.to_numpy()).max())
    assert (single.to_numpy() < 0).any()  # fc7 is before the ReLU


def test_layer_relu7_and_parquet_into_a_new_folder(tmp_path, weights_file):
    images = make_images(tmp_path / "images", NAMES[:2])
    assert main("--images", images, "--output", str(tmp_path / "new") + os.sep, "--weights", weights_file,
                "--layer", "relu7", "--format", "parquet", "--quiet") == 0
    output = tmp_path / "new" / "features.parquet"
    frame = pd.read_parquet(output)
    features = np.stack(frame["relu7"])
    assert list(frame["path"]) == sorted(NAMES[:2]) and features.shape == (2, 4096)
    assert features.dtype == np.float32 and features.min() >= 0


def test_strict_stops_at_a_bad_image_with_one_line_and_exit_1(colour, tmp_path, capsys):
    images = make_images(tmp_path / "images", NAMES[:1])
    (images / "broken.jpg").write_bytes(b"<html>")
    assert main("--images", images, "--output", tmp_path / "features.csv", "--strict", "--quiet") == 1
    error = capsys.readouterr().err
    assert error.startswith("run_inference: failed: --strict: broken.jpg") and error.count("\n") == 1, error
    assert "Error" not in error and "--verbose" not in error, error  # an expected failure: no class, no traceback


def test_some_images_failed_is_exit_3_with_an_errors_file(colour, tmp_path, capsys):
    images = make_images(tmp_path / "images", NAMES[:2])
    (images / "broken.jpg").write_bytes(b"<html>")
    output = tmp_path / "features.csv"
    assert main("--images", images, "--output", output) == 3
    assert "3 images: 2 written, 1 failed" in capsys.readouterr().err
    errors = pd.read_csv(str(output) + ".errors.csv")
    assert list(errors["path"]) == ["broken.jpg"] and list(errors["kind"]) == ["not_an_image"]
    assert list(read(output).index) == sorted(NAMES[:2])


def test_another_job_s_rerun_is_refused_in_one_line_with_nothing_logged_before_it_until_overwrite(
        tmp_path, capfd, caplog, weights_file):
    """A rerun with other settings (a tf32 run does not resume an fp32 output), of another model or of other images:
    one line on stderr (descriptor 2 too), nothing logged before it (caplog: what the command line's log would
    show), the output untouched; --overwrite replaces it. (A refusal in a process of its own, its log on stderr,
    TensorFlow's too, as users run it:
    test_a_store_output_in_a_missing_bucket_is_one_line_exit_2_without_the_store_client_s_chatter.) The first run
    logs its batch size, and runs in fp32 with TensorFlow's TF32 turned off, whatever it was before."""
    first, second = make_images(tmp_path / "first", NAMES[:1]), make_images(tmp_path / "second", NAMES[:1])
    output = tmp_path / "features.csv"
    allowed = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(True)  # TensorFlow's default
    try:
        assert main("--images", first, "--output", output, "--weights", weights_file, "--devices", "cpu:0") == 0
        assert tf.config.experimental.tensor_float_32_execution_enabled() is False  # fp32 is IEEE float32
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(allowed)
    assert "1 image under %s; devices: CPU:0; 12 images per device per step" % first in caplog.messages
    before = output.read_bytes()
    capfd.readouterr()
    other_model = tmp_path / "efficientnet_b0.h5"
    other_model.write_bytes(b"never read: the output is checked first")
    for flags, message in ((["--images", first, "--layer", "relu7"],
                            "written with other settings (column_prefix='fc7', not 'relu7'; layer='fc7', not "
                            "'relu7')"),
                           (["--images", first, "--precision", "tf32"], "(precision='fp32', not 'tf32')"),
                           (["--images", first, "--model", "efficientnet_b0", "--weights", other_model,
                             "--batch-size", 5],  # no word of its step geometry: the job is not this one
                            "%s was written by another model (vgg16, not efficientnet_b0): pass --overwrite to "
                            "replace it or choose another --output\n" % output),
                           (["--images", second], "holds the features of the images in")):
        weights = [] if "--weights" in flags else ["--weights", weights_file]  # a flag is given once
        caplog.clear()
        assert main("--output", output, *weights, "--devices", "cpu:0", *flags) == 2
        error = capfd.readouterr().err
        assert shown_by_the_command_line(caplog.records) == []
        assert error.count("\n") == 1 and error.startswith("run_inference: error: "), error
        assert message in error and "--overwrite" in error, error
        assert output.read_bytes() == before
    assert main("--images", first, "--output", output, "--weights", weights_file, "--devices", "cpu:0", "--layer",
                "relu7", "--overwrite", "--quiet") == 0
    assert list(read(output).columns)[0] == "relu7_0"


def test_a_refusal_that_quotes_data_is_still_a_short_line(tmp_path, monkeypatch, capsys):
    """A message quoting a row of 4,096 features (or thousands of names) is cut: one readable line."""
    quoted = ",".join("%.6f" % value for value in np.linspace(-1, 1, 4096) for _ in range(5))
    monkeypatch.setattr(run_inference, "_run", lambda *args: (_ for _ in ()).throw(
        ValueError("features.csv holds another job's rows: %s\nand more" % quoted)))
    status = run_inference.main(["--images", str(tmp_path), "--output", str(tmp_path / "out.csv")])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1 and len(error) < 700, len(error)
    assert error.startswith("run_inference: error: features.csv holds another job's rows: -1.000000,")
    assert error.rstrip().endswith("more characters)")


@pytest.mark.parametrize("where, output, refusal", [
    ("proc", "/proc/features.csv", "/proc takes no new file (No such file or directory)"),
    ("file", "{tmp}/notes.txt/runs/features.parquet", "{tmp}/notes.txt is a file, not a folder"),
])
def test_an_output_that_cannot_be_written_is_one_line_exit_2_before_anything_is_loaded(tmp_path, capsys, where,
                                                                                       output, refusal):
    """Was exit 1, "failed: FileNotFoundError: ... features.csv.lock" once the images and weights were read."""
    if where == "proc" and not os.path.isdir("/proc/self"):
        pytest.skip("no /proc on this system")
    (tmp_path / "notes.txt").write_text("a file")
    weights = tmp_path / "vgg16.npy"
    weights.write_bytes(b"never read: the output is checked first")
    output, refusal = output.replace("{tmp}", str(tmp_path)), refusal.replace("{tmp}", str(tmp_path))
    assert main("--images", make_images(tmp_path / "images", NAMES[:1]), "--output", output, "--weights", weights,
                "--devices", "cpu:0") == engine.EXIT_USAGE
    assert capsys.readouterr().err == ("run_inference: error: --output %s cannot be written: %s; choose another "
                                       "output\n" % (output, refusal))


# ----------------------------------------------------------------------------- flags, --help and the output path

def help_text(monkeypatch, capsys, program="run_inference.py"):
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/" + program])
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal's width
    with pytest.raises(SystemExit) as stop:
        run_inference.parse_args(["--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("program", ["run-inference", "run_inference.py"])
def test_help_is_named_after_the_command_that_was_run(monkeypatch, capsys, program):
    text = help_text(monkeypatch, capsys, program)
    assert text.startswith("usage: %s [-h] [--images FOLDER] [--images-from FILE]" % program), text[:80]
    assert "\n  %s --images photos/ " % program in text  # the examples too


def test_help_run_as_a_script(tmp_path):
    done = subprocess.run([sys.executable, str(REPOSITORY / "run_inference.py"), "--help"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=HANG_SECONDS)
    assert done.returncode == 0 and done.stdout.startswith("usage: run_inference.py "), done


def test_help_gives_each_default_once_the_examples_and_every_exit_status(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys)
    options = text.split("\noptions:\n")[1].split("\n\n")[0]
    blocks = re.split(r"\n(?=  -)", options)
    assert len(blocks) == 24, blocks  # --help and the 23 flags of one process
    jobs = re.split(r"\n(?=  -)", text.split("\none job over many processes")[1].split("\n\n")[1])
    assert len(jobs) == 8, jobs  # --distributed and its 7 flags
    shard_size, = [block for block in jobs if block.lstrip().startswith("--shard-size")]
    assert "10000" not in shard_size.replace("up to 10000", "") and "9996 with 12" in shard_size  # what jobs record
    for block in blocks + jobs:
        assert block.count("default") <= 1, block
    images, = [block for block in blocks if block.lstrip().startswith("--images FOLDER")]
    assert "the current folder" in images and "(default: None)" not in text
    assert "Config" not in text and "engine" not in text  # written for someone who never read the code
    examples = text.split("\nexamples:\n")[1].split("\n\n")[0]
    assert examples.count("run_inference.py --images ") >= 4, examples
    statuses = text.split("\nexit status:\n")[1]
    listed = [int(number) for number in re.findall(r"^  (\d+) ", statuses, re.MULTILINE)]
    assert sorted(listed) == sorted([engine.EXIT_OK, engine.EXIT_FAILED, engine.EXIT_USAGE,
                                     engine.EXIT_SOME_FAILED, engine.EXIT_INTERRUPTED]), statuses


def test_help_readme_and_package_speak_of_every_model_in_the_registry_order(monkeypatch, capsys):
    """--help, setup.cfg and the README's title once said VGG16 alone, --weights left CLIP out, --resize described
    the square crop only, random weights went unmentioned, and the README listed the models in another order."""
    from models import registry
    text = help_text(monkeypatch, capsys)
    description = text.split("\n\n")[1]
    assert "VGG16" in description and "--model chooses another" in description, description
    assert "python -m models.weight_files random vgg16-random.npy" in " ".join(description.split())
    blocks = {block.split()[0]: " ".join(block.split()) for block in re.split(r"\n(?=  -)", text) if
              block.startswith("  --")}
    assert "for DINOv2 and CLIP the pinned Hugging Face checkpoint" in blocks["--weights"]
    assert "python -m models.weight_files random FILE --model NAME" in blocks["--weights"]
    assert "CLIP resizes the image to a short side of 224, DINOv2 to 256 (bicubic), then cuts its centre 224x224" \
        in blocks["--resize"]
    assert "--images FOLDER folder of images" in blocks["--images"]
    name = re.compile("|".join(sorted(registry.NAMES, key=len, reverse=True)))
    for page in (blocks["--model"], (REPOSITORY / "README.md").read_text(),
                 (REPOSITORY / "docs" / "command-line.md").read_text()):
        lists = [list(dict.fromkeys(name.findall(line))) for line in page.splitlines()]
        lists = [listed for listed in lists if sorted(listed) == sorted(registry.NAMES)]  # the lines naming all
        assert lists and all(listed == list(registry.NAMES) for listed in lists), lists
    setup = (REPOSITORY / "setup.cfg").read_text()
    title = (REPOSITORY / "README.md").read_text().splitlines()[0]
    families = ["VGG16", "ResNet50", "EfficientNetB0", "ConvNeXt", "DINOv2", "CLIP", "SigLIP"]
    for named in (re.search(r"^description = (.*)$", setup, re.MULTILINE).group(1), title):
        assert re.findall("|".join(families), named) == families, named


@pytest.mark.parametrize("flags, warned", [
    (["--output", "x.txt"], "--output x.txt"),
    (["--output", "feats"], "--output feats"),
    (["--output", "x.txt", "--format", "csv"], None),
    (["--output", "x.CSV"], None),
    ([], None),
])
def test_an_output_whose_extension_names_no_format_says_csv_is_written(fake_run, caplog, flags, warned):
    with caplog.at_level("WARNING"):
        assert main("--images", ".", "--devices", "cpu:0", "--quiet", *flags) == 0
    config, = fake_run.configs
    assert config.output_format == "csv"
    expected = [] if warned is None else ["%s names no format (.csv, .parquet or .npy): it is written as CSV; "
                                          "--format parquet or --format npy chooses another" % warned]
    assert [record.getMessage() for record in caplog.records if record.levelname == "WARNING"] == expected


@pytest.mark.parametrize("flag", ["--batch-size", "--workers", "--prefetch"])
@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_counts_below_one_are_one_line_naming_the_flag(capsys, flag, value):
    with pytest.raises(SystemExit) as stopped:
        run_inference.parse_args(["--images", "x", flag, value])
    assert stopped.value.code == engine.EXIT_USAGE
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and flag in error and repr(value) in error
    assert error.startswith("run_inference: error: argument %s" % flag)


@pytest.mark.parametrize("output, output_format, path, resolved_format", [
    (None, None, "results/features.csv", "csv"),              # the default follows the format
    (None, "parquet", "results/features.parquet", "parquet"),
    (None, "npy", "results/features.npy", "npy"),
    ("x.parquet", None, "x.parquet", "parquet"),              # no --format: the extension names it
    ("runs/x.NPY", None, "runs/x.NPY", "npy"),
    ("x.csv", "csv", "x.csv", "csv"),
    ("feats", None, "feats", "csv"),                          # no known extension: as typed
    ("feats", "npy", "feats", "npy"),
    ("x.txt", "parquet", "x.txt", "parquet"),
    ("new/", None, "new/features.csv", "csv"),                # a trailing separator: a folder
    ("new/", "npy", "new/features.npy", "npy"),
    ("x.csv/", "parquet", "x.csv/features.parquet", "parquet"),
    ("existing", None, "existing/features.csv", "csv"),       # an existing folder
    ("existing", "parquet", "existing/features.parquet", "parquet"),
    ("existing.npy", "csv", "existing.npy/features.csv", "csv"),
])
def test_resolve_output(tmp_path, monkeypatch, output, output_format, path, resolved_format):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing").mkdir()
    (tmp_path / "existing.npy").mkdir()
    if output is not None:
        output = output.replace("/", os.sep)
    assert run_inference.resolve_output(output, output_format) == (Path(path), resolved_format)
    assert sorted(os.listdir(tmp_path)) == ["existing", "existing.npy"]  # nothing created


@pytest.mark.parametrize("output, output_format, resolved, resolved_format", [
    ("s3://bucket/runs/feats.parquet", None, "s3://bucket/runs/feats.parquet", "parquet"),
    ("s3://bucket/feats.NPY", None, "s3://bucket/feats.NPY", "npy"),
    ("s3://bucket/feats", "parquet", "s3://bucket/feats", "parquet"),
    ("s3://bucket/runs/", "npy", "s3://bucket/runs/features.npy", "npy"),
    ("gs://bucket/x.txt", None, "gs://bucket/x.txt", "csv"),
])
def test_resolve_output_keeps_a_store_url_as_typed(tmp_path, monkeypatch, output, output_format, resolved,
                                                   resolved_format):
    monkeypatch.chdir(tmp_path)
    assert run_inference.resolve_output(output, output_format) == (resolved, resolved_format)
    with pytest.raises(ValueError, match=r"^--output s3://b/x.csv ends in .csv but --format is npy"):
        run_inference.resolve_output("s3://b/x.csv", "npy")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("output, output_format, message", [
    ("x.csv", "parquet",
     "--output x.csv ends in .csv but --format is parquet; use --output x.parquet, or --format csv"),
    ("x.npy", "csv", "--output x.npy ends in .npy but --format is csv; use --output x.csv, or --format npy"),
    ("a/x.PARQUET", "npy", "--output a/x.PARQUET ends in .PARQUET but --format is npy; use --output a/x.npy, "),
    ("", None, "--output is empty"),
])
def test_resolve_output_refuses(tmp_path, monkeypatch, output, output_format, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        run_inference.resolve_output(output, output_format)


@pytest.mark.parametrize("flags, message", [
    (["--format", "parquet", "--output", "x.csv"], "--output x.csv ends in .csv but --format is parquet"),
    (["--output", "x.npy", "--format", "csv"], "--output x.npy ends in .npy but --format is csv"),
])
def test_output_contradicting_format_is_refused_before_tensorflow_is_imported(tmp_path, flags, message):
    check = ("import sys, run_inference; status = run_inference.main(sys.argv[1:]); "
             "print('tensorflow' in sys.modules, 'parallel.engine' in sys.modules); sys.exit(status)")
    done = subprocess.run([sys.executable, "-c", check, "--images", str(tmp_path), *flags], capture_output=True,
                          text=True, cwd=tmp_path, timeout=HANG_SECONDS,
                          env=dict(os.environ, PYTHONPATH=str(REPOSITORY)))
    assert done.returncode == 2, done
    assert done.stderr.startswith("run_inference: error: " + message) and done.stderr.count("\n") == 1, done
    assert done.stdout == "False False\n"
    assert os.listdir(tmp_path) == []


@pytest.fixture
def fake_run(monkeypatch, tmp_path):
    """jobs.run replaced: records the Config main built, and returns or raises `fake_run.outcome`."""
    monkeypatch.chdir(tmp_path)

    def run(config):
        run.configs.append(config)
        if isinstance(run.outcome, BaseException):
            raise run.outcome
        return engine.Summary(output=config.output)

    run.configs, run.outcome = [], None
    monkeypatch.setattr(jobs, "run", run)
    return run


def test_captions_and_labels_reach_the_job_and_their_mistakes_are_one_line(fake_run, tmp_path, capsys):
    from models.clip import clip, clip_weights
    from small_clip import SMALL, write_small_clip
    labels = tmp_path / "labels.txt"
    labels.write_text("Template:  a photo of a {}.\ndog\n\n cat \n", encoding="utf-8")
    (tmp_path / "data.parquet").write_bytes(b"PAR1")  # a Parquet file, by its name: nothing reads it here
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clip.VIT_B32, "model", SMALL)
        patch.setattr(clip_weights.VIT_B32, "model", SMALL)
        weights = write_small_clip(tmp_path / "clip")
        assert main("--images", tmp_path / "data.parquet", "--model", "clip_vit_b32", "--weights", weights,
                    "--text-column", "caption", "--labels", labels, "--labels-top", "3", "--quiet") == 0
    config, = fake_run.configs
    assert (config.text_column, config.keep, config.labels, config.label_template, config.labels_top) == (
        "caption", ("caption",), ("dog", "cat"), "a photo of a {}.", 2)  # two labels: the top two
    assert config.settings["labels"].startswith("2, sha256 ") and config.settings["text_column"] == "caption"
    for flags, said in ((["--labels", tmp_path / "none.txt"], "--labels %s cannot be read: No such file or directory"
                         % (tmp_path / "none.txt")),
                        (["--text-column", "caption"], "--text-column caption needs a model with a text tower, its "
                         "layer in that tower's space (CLIP's or SigLIP's embedding); model vgg16's layer fc7 has "
                         "none")):
        assert main("--images", tmp_path / "data.parquet", "--quiet", *flags) == 2
        assert capsys.readouterr().err == "run_inference: error: %s\n" % said


@pytest.mark.parametrize("flags, output, output_format", [
    ([], "results/features.csv", "csv"),
    (["--format", "npy"], "results/features.npy", "npy"),
    (["--output", "x.parquet"], "x.parquet", "parquet"),
    (["--output", "new" + os.sep, "--format", "parquet"], "new/features.parquet", "parquet"),
    (["--output", "existing"], "existing/features.csv", "csv"),
])
def test_main_hands_the_resolved_output_to_the_engine(fake_run, tmp_path, flags, output, output_format):
    (tmp_path / "existing").mkdir()
    assert main("--images", tmp_path, "--devices", "cpu:0", "--quiet", *flags) == 0
    config, = fake_run.configs
    assert (config.output, config.output_format) == (Path(output), output_format)


@pytest.mark.parametrize("outcome, status, line", [
    (engine.RunError("No space left on device; rows committed so far are kept: rerun the same command to resume"),
     1, "failed: No space left on device; rows committed so far are kept: rerun the same command to resume"),
    (ValueError("--images x is not a folder"), 2, "error: --images x is not a folder"),
    (KeyError("fc9"), 1, "failed: KeyError: 'fc9' (--verbose shows the traceback)"),
    (AssertionError(), 1, "failed: AssertionError (--verbose shows the traceback)"),
    (KeyboardInterrupt(), 130, "interrupted; rerun the same command to resume"),
])
def test_errors_are_one_line_and_an_exit_status(fake_run, capsys, tmp_path, outcome, status, line):
    fake_run.outcome = outcome
    assert main("--images", tmp_path, "--devices", "cpu:0", "--quiet") == status
    assert capsys.readouterr().err == "run_inference: %s\n" % line


def test_verbose_shows_the_traceback(fake_run, tmp_path):
    fake_run.outcome = engine.RunError("disk full")
    with pytest.raises(engine.RunError, match="disk full"):
        main("--images", tmp_path, "--devices", "cpu:0", "--quiet", "--verbose")


# ----------------------------------------------------------------------------- GPU machines

@pytest.fixture
def nvidia_smi(tmp_path, monkeypatch):
    """A fake nvidia-smi first on PATH, listing two GPUs; `nvidia_smi.runs()` counts its runs."""
    folder, calls = tmp_path / "fake-bin", tmp_path / "nvidia-smi.calls"
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\necho run >> %s\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n"
                      "echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1)'\n" % calls)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvidia_smi.runs = lambda: len(calls.read_text().splitlines()) if calls.exists() else 0
    return nvidia_smi


tensorflow_sees_no_gpu = pytest.mark.skipif(available_gpus() > 0, reason="TensorFlow sees this machine's GPUs")


@tensorflow_sees_no_gpu
@pytest.mark.parametrize("flags, ending", [
    (["--gpus", "0,1"], "fix: pip install -e '.[gpu]'\n"),
    ([], "fix: pip install -e '.[gpu]', or run on the CPU on purpose with --devices cpu:0\n"),
])
def test_gpus_tensorflow_cannot_see_stop_the_run_with_one_line_naming_the_fix(fake_run, capsys, nvidia_smi, flags,
                                                                              ending):
    assert main("--images", ".", "--quiet", *flags) == engine.EXIT_USAGE
    error = capsys.readouterr().err
    assert error.startswith("run_inference: error: ") and error.count("\n") == 1, error
    assert "this machine has NVIDIA GPUs (" in error and "but TensorFlow sees none: it was installed without CUDA " \
        "support or cannot load CUDA; " in error and error.endswith(ending), error
    assert fake_run.configs == []  # the run did not start


@tensorflow_sees_no_gpu
@pytest.mark.parametrize("flags, per_device_batch", [([], 12), (["--batch-size", "5"], 5)])
def test_devices_cpu_runs_on_the_cpu_on_purpose_with_the_cpu_batch_unless_one_is_given(fake_run, nvidia_smi, flags,
                                                                                       per_device_batch):
    assert main("--images", ".", "--quiet", "--devices", "cpu:0", *flags) == 0
    config, = fake_run.configs
    assert config.devices.names == ("/device:CPU:0",) and config.per_device_batch == per_device_batch
    assert nvidia_smi.runs() == 0  # nothing was asked of the GPUs


# ----------------------------------------------------------------------------- signals, in real processes
# The command line as a program of its own, with a model that costs nothing to load or compute
# (tests/cli_child.py: job_child's colour model in VGG16's place, its steps slowed by a sleep inside
# Session.run): what these tests prove is the plumbing (the status, the messages, what a rerun resumes).
# The reruns that finish what a stopped process left, and the uninterrupted run they are compared with, run
# in this process (colour_run: the same job, the same bytes): what they check is the output, not a process.
# VGG16 itself runs end to end in the tests above. The processes signalled or killed in their run are forked from
# the session's zygote (tests/forked_children.py: TensorFlow imported once); the one signalled in its start-up is a
# fresh interpreter.

CLI_CHILD = REPOSITORY / "tests" / "cli_child.py"
STEP_SECONDS = 0.2  # about a step of VGG16 with one image on the CPU: a signal or a kill lands mid-run


def start(images, output, *flags, step_seconds=STEP_SECONDS, load_seconds=0, sigterm_at_run_end=False, zygote=None):
    """cli_child.py in a process of its own: forked from `zygote` (tests/forked_children.py: TensorFlow imported
    already, the signal handlers a fresh `python` has), or a fresh interpreter if None (its start-up is the point)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", CLI_CHILD_STEP_SECONDS=str(step_seconds),
               CLI_CHILD_LOAD_SECONDS=str(load_seconds), CLI_CHILD_SIGTERM_AT_RUN_END="1" if sigterm_at_run_end else "")
    if zygote is not None:  # SIGINT at its default, as from a terminal (as below)
        return zygote.spawn([CLI_CHILD, "--images", images, "--output", output, "--devices", "cpu:0",
                             "--batch-size", "1", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            cwd=REPOSITORY, sigint="default")
    # The child starts with SIGINT at its default, as from a terminal, even when the suite was started with it
    # ignored (a background job): handled here, it is reset to the default by exec; ignored, it would stay so.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            [sys.executable, str(CLI_CHILD), "--images", str(images), "--output", str(output), "--devices", "cpu:0",
             "--batch-size", "1", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPOSITORY)
    finally:
        signal.signal(signal.SIGINT, previous)


def colour_run(images, output, *flags):
    """start()'s run without a slowed step, in this process: its status (its summary line is on stderr)."""
    with colour_in_every_model_s_place():
        return main("--images", images, "--output", output, "--devices", "cpu:0", "--batch-size", "1", *flags)


def importing_tensorflow(child):
    """Whether process `child` has begun to import TensorFlow (its library is mapped), which the CLI does in
    the run, once its signal handling is in place."""
    return "libtensorflow_framework" in Path("/proc/%d/maps" % child.pid).read_text()


def rows_in(output):
    """Rows the job writing `output` has committed: in the output, its shards or its attempt (tests/outputs.py)."""
    from outputs import committed_rows
    return committed_rows(output)


def wait_for_rows(child, output, rows):
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while rows_in(output) < rows:
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "no rows after %d s" % HANG_SECONDS
        time.sleep(0.05)


@pytest.fixture(scope="module")
def many_images(tmp_path_factory):
    names = ["img_%03d.jpg" % index for index in range(24)]
    return make_images(tmp_path_factory.mktemp("many"), names, size=(32, 32)), names


@pytest.fixture(scope="module")
def uninterrupted(many_images, tmp_path_factory):
    images, _ = many_images
    output = tmp_path_factory.mktemp("reference") / "features.csv"
    assert colour_run(images, output, "--quiet") == 0
    return output.read_bytes()


def test_ctrl_c_stops_cleanly_and_a_rerun_resumes(tmp_path, capsys, many_images, uninterrupted, job_child_zygote):
    """Ctrl-C in the loop, end to end; SIGTERM takes the same way (one policy: tests/test_signals.py stops a
    run in the loop with it)."""
    images, names = many_images
    output = tmp_path / "features.csv"
    child = start(images, output, zygote=job_child_zygote)
    wait_for_rows(child, output, 2)
    child.send_signal(signal.SIGINT)
    _, error = child.communicate(timeout=HANG_SECONDS)
    assert child.returncode == 130, error
    assert "Rerun the same command to resume" in error and "Traceback" not in error
    done = rows_in(output)
    assert 2 <= done < len(names)
    assert colour_run(images, output) == 0
    error = capsys.readouterr().err
    assert "%d already done" % done in error, error
    assert output.read_bytes() == uninterrupted


def test_sigterm_during_start_up_is_status_130_with_one_line(tmp_path, many_images):
    """The weights take as long as the test needs (they never finish loading): the signal lands in the start-up
    whatever the machine's load."""
    images, _ = many_images
    child = start(images, tmp_path / "features.csv", load_seconds=HANG_SECONDS)
    deadline = time.monotonic() + HANG_SECONDS  # a guard against a hang only (tests/hangs.py)
    while not importing_tensorflow(child):  # the run's own signal handling is in place: it imports TensorFlow
        assert child.poll() is None and time.monotonic() < deadline, child.communicate()
        time.sleep(0.01)
    child.send_signal(signal.SIGTERM)
    _, error = child.communicate(timeout=HANG_SECONDS)
    assert child.returncode == 130, error  # not 143: killed by the signal, without a word
    assert error.strip().splitlines()[-1] == "run_inference: interrupted; rerun the same command to resume"
    assert "Traceback" not in error
    assert not (tmp_path / "features.csv").exists()  # nothing written: the run was still starting


def test_sigterm_as_the_run_ends_is_status_130_with_one_line_and_the_output_is_complete(tmp_path, many_images,
                                                                                       uninterrupted,
                                                                                       job_child_zygote):
    """A SIGTERM once the run's own signal handling has handed the handlers back, before the summary line (the
    child sends it to itself at that moment: cli_child.py; just after the summary line: tests/test_signals.py):
    status 130, and a line that says so; the output is the uninterrupted run's (a rerun finds it done)."""
    images, _ = many_images
    output = tmp_path / "features.csv"
    child = start(images, output, step_seconds=0, sigterm_at_run_end=True, zygote=job_child_zygote)
    _, error = child.communicate(timeout=HANG_SECONDS)
    assert child.returncode == 130, error
    assert error.strip().splitlines()[-1] == "run_inference: interrupted; rerun the same command to resume", error
    assert output.read_bytes() == uninterrupted


def test_an_import_a_signal_cut_short_is_an_interruption_not_a_failure(fake_run, capsys):
    """pybind11 turns the KeyboardInterrupt of a SIGTERM during `import tensorflow` into ImportError
    ("initialization failed") raised from it: the run was interrupted, status 130, not a failure."""
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as interrupt:
            raise ImportError("initialization failed") from interrupt
    except ImportError as error:
        fake_run.outcome = error
    assert main("--images", ".", "--devices", "cpu:0", "--quiet") == 130
    assert capsys.readouterr().err == "run_inference: interrupted; rerun the same command to resume\n"
    fake_run.outcome = ImportError("initialization failed")  # without a signal: a failure, as before
    assert main("--images", ".", "--devices", "cpu:0", "--quiet") == 1


def test_sigkill_at_random_moments_then_rerun_gives_the_uninterrupted_output(tmp_path, capsys, many_images,
                                                                            uninterrupted, job_child_zygote):
    images, names = many_images
    output = tmp_path / "features.csv"
    rng = random.Random(4)
    kills = 0
    while kills < 3:
        child = start(images, output, "--quiet", zygote=job_child_zygote)
        before = max(rows_in(output), 0)
        if before >= len(names) - 2:
            child.wait(timeout=HANG_SECONDS)
            break
        wait_for_rows(child, output, before + 1)
        time.sleep(rng.uniform(0, 2 * STEP_SECONDS))  # somewhere inside a later batch, a write or a commit
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=HANG_SECONDS)
        kills += 1
    committed = rows_in(output)
    assert colour_run(images, output) == 0
    error = capsys.readouterr().err
    assert kills >= 3
    # Only the images without a committed row were computed again.
    assert "%d written, 0 failed, %d already done" % (len(names) - committed, committed) in error, error
    assert output.read_bytes() == uninterrupted


@pytest.mark.parametrize("flags, message", [
    (["--images", "x", "--rank", "1"], "--rank only with --distributed"),
    (["--images", "x", "--world-size", "2", "--ray-address", "auto"], "--world-size, --ray-address only with "
                                                                         "--distributed"),
    (["--images", "x", "--distributed", "static", "--ray-address", "auto"],
     "--ray-address only with --distributed ray"),
    (["--images", "x", "--distributed", "ray", "--rank", "0"],
     "--rank and --world-size only with --distributed static"),
    (["--images", "x", "--manifest-wait", "30"], "--manifest-wait only with --distributed"),
    (["--images", "x", "--distributed", "static", "--manifest-wait", "-1"], "--manifest-wait: must be a number of "
                                                                             "seconds, 0 or more; got '-1'"),
    ([], "--images or --images-from is required"),
])
def test_job_flags_out_of_place_are_one_line(capsys, flags, message):
    with pytest.raises(SystemExit) as stopped:
        run_inference.parse_args(flags)
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and error.count("\n") == 1 and message in error, error


def test_distributed_flags_reach_the_config(fake_run):
    assert main("--images", ".", "--devices", "cpu:0", "--quiet", "--distributed", "static", "--rank", "1",
                "--world-size", "3", "--shard-size", "100", "--keep-shards", "--manifest-wait", "30") == 0
    distribution = fake_run.configs[-1].distribution
    assert (distribution.kind, distribution.rank, distribution.world_size, distribution.shard_size,
            distribution.keep_shards, distribution.wait_seconds) == ("static", 1, 3, 100, True, 30.0)
    assert main("--images", ".", "--devices", "cpu:0", "--quiet", "--distributed", "static") == 0
    assert fake_run.configs[-1].distribution.wait_seconds == jobs.Distribution("static").wait_seconds
    assert main("--images-from", "list.txt", "--devices", "cpu:0", "--quiet") == 0
    assert (str(fake_run.configs[-1].images_from), str(fake_run.configs[-1].images)) == ("list.txt", ".")
    assert main("--images", ".", "--devices", "cpu:0", "--quiet", "--shard-size", "7", "--keep-shards") == 0
    config = fake_run.configs[-1]  # one process: the job's shard size and kept shards, no distribution
    assert (config.distribution, config.shard_size, config.keep_shards) == (None, 7, True)


# --- --shard-size and --keep-shards on one process: a run without --distributed is a sharded job ------------
# With the colour model in VGG16's place: what these prove is how the job is cut, whatever the model computes.


@pytest.fixture(scope="module")
def one_process_default(tmp_path_factory):
    """The images (NAMES) and what the default run writes for them: (folder, bytes of features.csv)."""
    folder = tmp_path_factory.mktemp("one_process")
    images = make_images(folder / "images")
    with colour_in_every_model_s_place():
        assert main("--images", images, "--output", folder / "features.csv", "--devices", "cpu:0",
                    "--batch-size", 2, "--quiet") == 0
    return images, (folder / "features.csv").read_bytes()


def test_shard_size_without_distributed_cuts_the_job_and_a_rerun_with_another_is_one_line(
        colour, tmp_path, capsys, one_process_default):
    from parallel.inputs.manifest import manifest_path, read_job
    images, default = one_process_default
    output = tmp_path / "features.csv"
    flags = ["--images", images, "--output", output, "--devices", "cpu:0", "--batch-size", 2, "--quiet"]
    assert main(*flags, "--shard-size", 4) == 0, capsys.readouterr().err
    assert read_job(manifest_path(output))["shard_size"] == 4  # 5 images: shards of 4 and 1
    assert output.read_bytes() == default
    assert not Path(str(output) + ".shards").exists()  # without --keep-shards they go once their rows are in
    capsys.readouterr()
    assert main(*flags, "--shard-size", 3) == 2
    error = capsys.readouterr().err
    assert error.startswith("run_inference: error: ") and error.count("\n") == 1, error
    assert "cut into shards of 4 images, not 3" in error and "--overwrite" in error, error
    assert output.read_bytes() == default and read_job(manifest_path(output))["shard_size"] == 4


def test_keep_shards_without_distributed_leaves_a_parquet_dataset_of_every_row(colour, tmp_path, capsys,
                                                                              one_process_default):
    import pyarrow.dataset
    images, default = one_process_default
    output = tmp_path / "features.csv"
    assert main("--images", images, "--output", output, "--devices", "cpu:0", "--batch-size", 2, "--shard-size", 2,
                "--keep-shards", "--quiet") == 0, capsys.readouterr().err
    assert output.read_bytes() == default
    shards = Path(str(output) + ".shards")
    assert sorted(folder.name for folder in shards.iterdir()) == ["shard-000000", "shard-000001", "shard-000002"]
    frame = pd.read_parquet(shards)
    assert sorted(frame["path"]) == sorted(NAMES) and len(frame) == len(NAMES)
    table = pyarrow.dataset.dataset(shards, format="parquet").to_table()
    features = np.stack(table.column("colour").to_numpy(zero_copy_only=False))
    by_path = dict(zip(table.column("path").to_pylist(), features))
    written = read(output)
    np.testing.assert_array_equal(np.stack([by_path[path] for path in written.index]),
                                  written.to_numpy(np.float32))


def test_a_distributed_usage_error_writes_nothing_and_the_corrected_rerun_works(tmp_path, capsys, weights_file):
    images = make_images(tmp_path / "images", NAMES[:2])
    output = tmp_path / "out" / "features.csv"
    flags = ["--images", images, "--output", output, "--devices", "cpu:0", "--quiet", "--distributed", "static",
             "--rank", "0", "--world-size", "1"]
    assert main(*flags, "--weights", tmp_path / "missing.npy") == 2
    error = capsys.readouterr().err
    assert error.startswith("run_inference: error: --weights ") and error.count("\n") == 1, error
    assert not output.parent.exists()  # no manifest, no lock: the rerun below is not "another job"
    (tmp_path / "notes.npy").write_text("not weights")
    assert main(*flags, "--weights", tmp_path / "notes.npy") == 2  # a file that is not weights: the same
    assert "is neither a tensorflow-vgg vgg16.npy nor a Keras .h5" in capsys.readouterr().err
    assert not output.parent.exists()
    with colour_in_every_model_s_place():  # nothing left makes the rerun another job, even of another model
        assert main(*flags) == 0, capsys.readouterr().err
    assert len(read(output)) == 2


def test_library_messages_name_parameters_and_the_command_line_names_flags(tmp_path, capsys):
    with pytest.raises(ValueError, match="^images=.*nowhere is not a folder$"):
        jobs.run(jobs.Config(model=None, images=tmp_path / "nowhere", output=tmp_path / "o.csv",
                                 devices=__import__("parallel.devices").devices.resolve_devices(devices="cpu:0")))
    assert run_inference.as_flags("weights=a b.npy is not a file; pass weights=PATH (or images_from=x)") == (
        "--weights a b.npy is not a file; pass --weights PATH (or --images-from x)")
    assert run_inference.as_flags("photos/output=1.jpg: images=photos") == "photos/output=1.jpg: --images photos"
    assert run_inference.as_flags("pass overwrite=True to start afresh") == "pass --overwrite to start afresh"
    assert run_inference.as_flags("needs rank= and world_size=: the") == "needs --rank and --world-size: the"
    assert run_inference.as_flags("weights=/abs/w.npy: x") == "--weights /abs/w.npy: x"


def test_a_world_size_that_disagrees_with_slurm_is_one_line_naming_both_flags(tmp_path, capsys, monkeypatch,
                                                                              weights_file):
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    images = make_images(tmp_path / "images", NAMES[:1])
    output = tmp_path / "out" / "features.csv"
    assert main("--images", images, "--output", output, "--weights", weights_file, "--devices", "cpu:0",
                "--distributed", "static", "--world-size", "8") == 2
    assert capsys.readouterr().err == ("run_inference: error: --world-size 8 but Slurm (SLURM_PROCID, SLURM_NTASKS) "
                                       "says 4 ranks; pass the world size the scheduler started, or both --rank and "
                                       "--world-size\n")
    assert not output.parent.exists()


def test_several_images_values_are_the_tars_an_unquoted_pattern_expanded_to(fake_run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for number in range(3):
        (tmp_path / ("%02d.tar" % number)).write_bytes(b"")
    assert main("--images", "00.tar", "01.tar", "02.tar", "--devices", "cpu:0", "--quiet") == 0  # the shell's
    assert main("--images", "{00..02}.tar", "--devices", "cpu:0", "--quiet") == 0  # quoted: the same job
    expanded, quoted = fake_run.configs
    assert expanded.images == ("00.tar", "01.tar", "02.tar") and quoted.images == "{00..02}.tar"
    assert expanded.settings == quoted.settings and expanded.source.files == quoted.source.files
    assert main("--images", "s3://bucket/photos/", "--devices", "cpu:0", "--quiet") == 0
    assert fake_run.configs[-1].settings["images"] == "s3://bucket/photos/"


def test_several_images_values_that_are_not_all_tars_are_one_line_and_exit_2(tmp_path, capsys, weights_file):
    (tmp_path / "photos").mkdir()
    output = tmp_path / "out" / "features.csv"
    assert main("--images", tmp_path / "photos", tmp_path / "a.tar", "--output", output, "--weights", weights_file,
                "--quiet") == 2
    error = capsys.readouterr().err
    said = "got 2 values, of which %s is not a .tar, .parquet or .tfrecord" % (tmp_path / "photos")
    assert error.count("\n") == 1 and said in error
    assert not output.parent.exists()


def test_images_given_twice_is_every_value_given_as_one_list(fake_run, tmp_path):
    """`--images a/ --images b/` read b/ alone and exited 0: argparse kept the last value."""
    for number in range(3):
        (tmp_path / ("%02d.tar" % number)).write_bytes(b"")
    assert main("--images", "00.tar", "--images", "01.tar", "02.tar", "--devices", "cpu:0", "--quiet") == 0
    assert main("--images", "{00..02}.tar", "--devices", "cpu:0", "--quiet") == 0
    repeated, quoted = fake_run.configs
    assert repeated.images == ("00.tar", "01.tar", "02.tar") and repeated.settings == quoted.settings
    assert main("--images", "00.tar", "--keep", "txt", "--keep", "json,cls", "--devices", "cpu:0", "--quiet") == 0
    assert fake_run.configs[-1].keep == ("txt", "json", "cls")  # as --keep txt,json,cls


def test_images_given_twice_as_two_folders_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, weights_file):
    monkeypatch.chdir(tmp_path)
    make_images(tmp_path / "a", NAMES[:1]), make_images(tmp_path / "b", NAMES[1:2])
    assert main("--images", "a", "--images", "b", "--weights", weights_file, "--output", "out/features.csv") == 2
    assert capsys.readouterr().err == (
        "run_inference: error: --images takes one folder; got 2 folders: a, b (a row's key is its path in the "
        "folder): give the folder that holds them, or list their images' paths in a text file, one a line, and give "
        "it as --images-from\n")
    assert not (tmp_path / "out").exists()


def test_every_flag_of_one_value_given_twice_is_one_line_naming_it(capsys):
    """--output a --output b wrote b alone, --weights and --model given twice used the last: every flag that takes
    one value is refused when given twice; those given twice on purpose (--images, --keep) take every value."""
    skipped = (argparse._StoreTrueAction, argparse._HelpAction, argparse._AppendAction)  # no value, or repeated
    flags = [action for action in run_inference.make_parser()._actions if action.option_strings and action.nargs
             is None and not isinstance(action, skipped)]
    assert len(flags) == 24 and "--output" in sum((action.option_strings for action in flags), []), flags
    for action in flags:
        flag, value = action.option_strings[0], action.choices[0] if action.choices else "1"
        with pytest.raises(SystemExit) as stopped:
            run_inference.parse_args(["--images", "x", flag, value, flag, value])
        error = capsys.readouterr().err
        assert stopped.value.code == engine.EXIT_USAGE and error.count("\n") == 1, error
        assert error.startswith("run_inference: error: argument %s: given twice (" % flag), error
    assert {action.dest: type(action).__name__ for action in run_inference.make_parser()._actions
            if action.dest in ("images", "keep")} == {"images": "_ExtendAction", "keep": "_ExtendAction"}


def test_a_folder_img2dataset_wrote_is_its_parquet_files_and_keep_keeps_their_columns(colour, tmp_path, capsys):
    """Its folder (00000.parquet, 00000_stats.json, ...) was "no images", and with --keep the error blamed --keep."""
    from dataset_files import caption, write_files
    from parallel.inputs.tars import MEMBERS_SUFFIX, kept_names, read_index
    names = colour_jobs.make_images(tmp_path / "photos", 4)
    write_files("img2dataset", tmp_path / "photos", tmp_path / "laion", 3)
    (tmp_path / "laion" / "00000_stats.json").write_text("{}")
    assert main("--images", "laion/", "--keep", "caption", "--output", "out.csv", "--devices", "cpu:0") == 0
    assert "4 images: 4 written, 0 failed" in capsys.readouterr().err
    index = tmp_path / ("out.csv" + MEMBERS_SUFFIX)
    assert kept_names(index) == ("caption",) and sorted(entry.kept[0] for entry in read_index(index)) == sorted(
        caption(name) for name in names)
    assert main("--images", "laion/*.parquet", "--keep", "caption", "--output", "out.csv", "--quiet") == 0  # one job
    (tmp_path / "laion" / "000001.tar").write_bytes(b"")
    assert main("--images", "laion", "--output", "other.csv", "--quiet") == 2
    assert capsys.readouterr().err == (
        "run_inference: error: --images laion holds no image, and 2 Parquet files and 1 tar: a job reads files of one "
        "kind: pass --images 'laion/*.parquet' or --images 'laion/*.tar'\n")


def test_a_glob_over_a_parquet_file_and_a_tar_is_refused_in_one_line(colour, tmp_path, capsys):
    """'data/*' ran as a job of its first file's kind, and the other failed as a damaged one."""
    from dataset_files import write_files
    from stores import write_tars
    colour_jobs.make_images(tmp_path / "photos", 2)
    write_files("img2dataset", tmp_path / "photos", tmp_path / "data", 2)
    write_tars(tmp_path / "photos", tmp_path / "data", 2)
    assert main("--images", "data/*", "--output", "out.csv", "--quiet") == 2
    error = capsys.readouterr().err
    assert error == "run_inference: error: --images data/* takes files of one kind; got Parquet files and tars " \
                    "(%s, %s)\n" % (tmp_path / "data" / "000000.parquet", tmp_path / "data" / "000000.tar"), error
    assert not (tmp_path / "out.csv").exists()


def test_a_gzip_tfrecord_damaged_inside_its_data_is_as_many_images_as_records(colour, tmp_path, capsys):
    """12 records, one of them damaged: 13 images (12 records and the file's own failure, the same damage)."""
    from test_inputs_tfrecord_stream import damaged_gzip
    path, _ = damaged_gzip(tmp_path)
    assert main("--images", path, "--output", "out.csv", "--devices", "cpu:0") == 3
    assert "12 images: 11 written, 1 failed, 0 already done" in capsys.readouterr().err
    assert len(pd.read_csv("out.csv.errors.csv")) == 1


def test_failures_of_one_cause_are_said_in_the_summary_line(colour, tmp_path, capsys):
    """A datasets Parquet of paths (its to_parquet of local files): exit 3 and 4 failures, the reason only inside
    the errors file; a rerun (which retries them) says it too."""
    from test_inputs_parquet_stream import datasets_parquet
    names = colour_jobs.make_images(tmp_path / "photos", 4)
    datasets_parquet(tmp_path / "paths.parquet", [(str(tmp_path / "photos" / name), None) for name in names],
                     embed=False)
    for _ in range(2):
        assert main("--images", "paths.parquet", "--output", "out.csv", "--devices", "cpu:0") == 3
        line = capsys.readouterr().err.splitlines()[-1]
        assert line.startswith("4 images: 0 written, 4 failed") and line.endswith(
            "(failures: out.csv.errors.csv: all 4 'missing': row ... has no image bytes (its path: ...; datasets' "
            "to_parquet of local files keeps their paths only: embed the bytes, as push_to_hub does, or give the "
            "images' folder))"), line


def test_a_clip_folder_given_without_its_model_names_the_model(tmp_path, capsys, monkeypatch):
    """--weights CLIPFOLDER without --model (vgg16 by default) suggested VGG16's files."""
    from models.clip import clip_weights
    from small_clip import SMALL, write_small_clip
    monkeypatch.setattr(clip_weights.VIT_B32, "model", SMALL)  # ViT-B/32's tensors are SMALL's, as its checkpoint's
    folder = write_small_clip(tmp_path / "clip-random")
    images = make_images(tmp_path / "images", NAMES[:1])
    assert main("--images", images, "--weights", folder, "--output", tmp_path / "out" / "features.csv") == 2
    assert capsys.readouterr().err == ("run_inference: error: --weights %s is a folder: it holds CLIP ViT-B/32 weights "
                                       "(model.safetensors): pass --model clip_vit_b32\n" % folder)
    assert not (tmp_path / "out").exists()


def test_vgg16_s_npy_given_to_clip_says_what_the_file_is(tmp_path, capsys, weights_file):
    """It spoke of a safetensors header of 379,676,406,402,707 bytes: the .npy's magic number read as a length."""
    images = make_images(tmp_path / "images", NAMES[:1])
    assert main("--images", images, "--model", "clip_vit_b32", "--weights", weights_file, "--output",
                tmp_path / "features.csv") == 2
    assert capsys.readouterr().err == ("run_inference: error: --weights %s is not a safetensors file: it is a NumPy "
                                       ".npy file (--model vgg16 reads those)\n" % weights_file)


def test_a_store_output_reaches_the_job_as_typed(fake_run):
    assert main("--images", ".", "--output", "s3://bucket/runs/feats.parquet", "--devices", "cpu:0", "--quiet") == 0
    config, = fake_run.configs
    assert (config.output, config.output_format) == ("s3://bucket/runs/feats.parquet", "parquet")


def test_a_store_output_in_a_missing_bucket_is_one_line_exit_2_without_the_store_client_s_chatter(s3, tmp_path):
    """As users run it (a process of its own, its log on stderr, TensorFlow imported): the refusal is the one line;
    botocore logs "Found credentials in environment variables." at INFO, and the run's log is ours alone."""
    images = make_images(tmp_path / "images")
    weights = tmp_path / "vgg16.npy"
    weights.write_bytes(b"never read: the store is checked first")
    output = "s3://%s-none/feats.csv" % s3.bucket
    done = subprocess.run([sys.executable, str(REPOSITORY / "run_inference.py"), "--images", str(images), "--output",
                           output, "--weights", str(weights)], capture_output=True, text=True,
                          env=dict(os.environ, **s3.env), timeout=HANG_SECONDS)
    error = done.stderr
    assert done.returncode == 2 and error.count("\n") == 1, error
    assert error.startswith("run_inference: error: --output %s: the bucket " % output), error
    assert "does not exist" in error and "Found credentials" not in error, error
    assert sorted(path.name for path in tmp_path.iterdir()) == ["images", "vgg16.npy"] and s3.objects() == []


@pytest.mark.parametrize("flags, message", [
    (["--layer", "avg_pool"], "--layer avg_pool is not a layer of --model vgg16; its layers: pool5, fc6, relu6, fc7"),
    (["--model", "alexnet"], "argument --model: invalid choice: 'alexnet'"),
])
def test_a_model_or_layer_it_does_not_have_is_one_line(capsys, flags, message):
    with pytest.raises(SystemExit) as stopped:
        run_inference.parse_args(["--images", "x", *flags])
    error = capsys.readouterr().err
    assert stopped.value.code == engine.EXIT_USAGE and error.count("\n") == 1 and message in error, error


def test_the_layer_defaults_to_the_models():
    assert run_inference.parse_args(["--images", "x"]).layer == "fc7"
