"""The model interface: light to import, and the only part of `parallel` that models depend on."""

import subprocess
import sys
from pathlib import Path

import pytest

import parallel

REPOSITORY = Path(__file__).resolve().parents[1]
HEAVY = ("tensorflow", "keras", "PIL", "polars", "pyarrow", "h5py")


@pytest.mark.parametrize("module", ["parallel", "parallel.model"])
def test_importing_the_package_or_the_model_interface_imports_nothing_heavy(module):
    code = "import sys, %s; print(sorted(set(%r) & set(sys.modules)))" % (module, HEAVY)
    done = subprocess.run([sys.executable, "-c", code], cwd=REPOSITORY, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


def test_every_exported_name_is_reachable_and_the_functions_keep_their_names():
    import parallel.engine  # noqa: F401 -- imports the submodules data_parallelism and shard_features
    from parallel import data_parallelism, shard_features

    for name in parallel.__all__:
        assert getattr(parallel, name).__name__ == name
    assert callable(data_parallelism) and callable(shard_features)  # the functions, not their modules
    assert parallel.ModelSpec is parallel.engine.ModelSpec
    assert set(parallel.__all__) <= set(dir(parallel))
