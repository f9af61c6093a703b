"""Weight files: both layouts read and checked, hostile and damaged files refused, the `random` command."""

import filecmp
import pickle
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from arrays import assert_same_array
from hangs import HANG_SECONDS
from models import weight_files
from models.vgg16_layers import LAYERS

REPOSITORY = Path(__file__).resolve().parents[1]


def test_npy_and_h5_files_give_the_same_weights(seeded_weights, seeded_files):
    from_npy, from_h5 = weight_files.load_weights(seeded_files["npy"]), weight_files.load_weights(seeded_files["h5"])
    assert list(from_npy) == list(from_h5) == [layer.name for layer in LAYERS]
    for name in from_npy:
        for ours, theirs, original in zip(from_npy[name], from_h5[name], seeded_weights[name]):
            assert_same_array(ours, theirs, name)
            assert_same_array(ours, original, name)


def test_a_python2_tensorflow_vgg_pickle_loads(tmp_path):
    """vgg16.npy was written by Python 2: protocol 2, array data as latin-1 str."""
    small = {"conv1_1": [np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(3, np.float32)]}
    array = np.empty((), dtype=object)
    array[()] = small
    path = tmp_path / "py2.npy"
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "|O", "fortran_order": False, "shape": ()})
        pickle.dump(array, handle, protocol=2)
    loaded = weight_files._read_npy(path)
    np.testing.assert_array_equal(loaded["conv1_1"][0], small["conv1_1"][0])


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, ("touch %s" % self.marker,))


def _npy_with_pickle(path, content):
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "|O", "fortran_order": False, "shape": ()})
        pickle.dump(content, handle, protocol=3)


@pytest.mark.parametrize("content", ["code", "set"])
def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path, content):
    marker = tmp_path / "code-ran"
    payload = {"conv1_1": [_RunsCode(marker)]} if content == "code" else {"conv1_1": {1, 2}}
    _npy_with_pickle(tmp_path / "evil.npy", payload)
    with pytest.raises(weight_files.WeightsError, match="refused: it refers to (posix|os|builtins)"):
        weight_files.load_weights(tmp_path / "evil.npy")
    assert not marker.exists()
    # The unprotected way would have run it: proves the fixture is really hostile.
    if content == "code":
        np.load(tmp_path / "evil.npy", allow_pickle=True)
        assert marker.exists()


def _h5_with(tmp_path, layers):
    path = tmp_path / "partial.h5"
    weight_files.save_h5(layers, path)
    return path


@pytest.mark.parametrize("make, message", [
    (lambda tmp: _h5_with(tmp, {"conv1_1": (np.zeros((3, 3, 3, 32), np.float32), np.zeros(32, np.float32))}),
     r"layer conv1_1 \(Keras: block1_conv1\) weights have shape \(3, 3, 3, 32\); VGG16 needs \(3, 3, 3, 64\)"),
    (lambda tmp: _h5_with(tmp, {"conv1_1": (np.zeros((3, 3, 3, 64), np.float32), np.zeros(64, np.float32))}),
     r"has no layer conv1_2 \(Keras: block1_conv2\)"),
    (lambda tmp: (tmp / "a.npy", np.save(tmp / "a.npy", np.zeros(3)))[0], "plain float64 array"),
    (lambda tmp: (tmp / "a.txt", (tmp / "a.txt").write_text("hello"))[0], "neither a tensorflow-vgg"),
    (lambda tmp: tmp / "missing.h5", "No such file"),
    (lambda tmp: (tmp / "e.h5", h5py.File(tmp / "e.h5", "w").close())[0], "without Keras's 'layer_names'"),
    (lambda tmp: (tmp / "l.npy", _npy_with_pickle(tmp / "l.npy", [1, 2]))[0], "holds a list"),
])
def test_bad_weight_files_are_one_clear_error(tmp_path, make, message):
    with pytest.raises(weight_files.WeightsError, match=message):
        weight_files.load_weights(make(tmp_path))


@pytest.mark.parametrize("kind", ["npy", "h5"])
def test_truncated_weight_files_are_refused(seeded_files, tmp_path, kind):
    truncated = tmp_path / ("truncated." + kind)
    with open(seeded_files[kind], "rb") as source:
        truncated.write_bytes(source.read(30_000_000))
    with pytest.raises(weight_files.WeightsError, match="truncated or damaged"):
        weight_files.load_weights(truncated)


# ----------------------------------------------------------------------------- the `random` command

def run_command(*arguments, **popen_options):
    return subprocess.run([sys.executable, "-m", "models.weight_files", *map(str, arguments)], cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=HANG_SECONDS, **popen_options)


def test_the_random_command_writes_a_real_layout_and_says_the_features_are_meaningless(seeded_files, tmp_path,
                                                                                        capsys):
    """In this process (`python -m` runs the same main: its exit status and one-line failure are tested below).
    What it writes is, byte for byte, the session's seeded .h5 (tests/weights.py), which loads as the seeded
    weights (test_npy_and_h5_files_give_the_same_weights): a real layout, of these weights."""
    output = tmp_path / "smoke.h5"
    assert weight_files.main(["random", str(output), "--seed", "0"]) == 0
    error = capsys.readouterr().err
    assert "RANDOM vgg16 weights (seed 0) in Keras's layout" in error and "MEANINGLESS" in error
    assert list(tmp_path.iterdir()) == [output]
    assert filecmp.cmp(output, seeded_files["h5"], shallow=False)


def test_the_random_command_leaves_nothing_when_the_write_fails(tmp_path):
    def limit_file_size():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    done = run_command("random", tmp_path / "smoke.npy", preexec_fn=limit_file_size)
    assert done.returncode == 1
    assert done.stderr.startswith("python -m models.weight_files: failed: cannot write %s: File too large\n"
                                  % (tmp_path / "smoke.npy"))
    assert done.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name, message", [
    ("smoke.txt", r"smoke.txt: the name must end in .npy \(tensorflow-vgg's layout\) or .h5 \(Keras's layout\) "
                  r"for vgg16"),
    ("existing.npy", "existing.npy exists; it is not replaced"),
    ("missing/smoke.npy", "smoke.npy: the folder .*missing does not exist"),
])
def test_the_random_command_refuses_before_writing_anything(tmp_path, capsys, name, message):
    (tmp_path / "existing.npy").write_bytes(b"precious")
    assert weight_files.main(["random", str(tmp_path / name)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("python -m models.weight_files: error: ") and error.count("\n") == 1, error
    assert re.search(message, error), error
    assert sorted(path.name for path in tmp_path.iterdir()) == ["existing.npy"]
    assert (tmp_path / "existing.npy").read_bytes() == b"precious"


def test_the_random_command_refuses_a_flag_given_twice_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:  # argparse's own: it kept the last --model without a word
        weight_files.main(["random", str(tmp_path / "w.h5"), "--model", "resnet50", "--model", "efficientnet_b0"])
    error = capsys.readouterr().err
    assert stopped.value.code == 2 and list(tmp_path.iterdir()) == []
    assert error.splitlines()[-1] == ("python -m models.weight_files random: error: argument --model: given twice "
                                      "('resnet50', then 'efficientnet_b0'): give it once"), error


def test_reading_and_writing_weight_files_imports_no_tensorflow():
    code = ("import sys, models.weight_files, models.imagenet_download; "
            "print(sorted({'tensorflow', 'h5py', 'keras'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True,
                          timeout=HANG_SECONDS)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr
