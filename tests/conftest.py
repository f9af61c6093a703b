"""Shared fixtures: a fresh graph, sessions with n logical CPU devices, seeded random VGG16 weights, image bombs;
from tests/faults.py, nodes that are not regular files and a disk that fills up; from tests/stores.py, an S3
server and an HTTP server on loopback; from tests/hub_server.py, a Hugging Face hub on loopback; the end of the
PyTorch references' child (tests/torch_references.py) with the session."""

import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# One OpenMP thread in each test process and its children, set before numpy and faiss load their libraries.
# Three test processes share the cores (setup.cfg): faiss's OpenMP threads, each spinning while it waits for
# the others to get a core, made tests/test_search_index.py cost 103 s of CPU beside two busy processes,
# 16 s with one thread (31 s with OMP_WAIT_POLICY=PASSIVE). The test processes are the parallelism.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# huggingface_hub's telemetry off, set before it is imported: building the headers of its first request, it
# fetches {HF_ENDPOINT as it was at its import}/api/agent-harnesses, once a day, into $HF_HOME: a test's request
# to the loopback hub (tests/hub_server.py) would send one to huggingface.co too.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _import_tensorflow_quietly():
    """TensorFlow, imported with descriptor 2 on /dev/null: the lines its libraries print while they load
    (before any setting is read) would otherwise come through each test worker around the suite's report."""
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return tensorflow


import numpy as np  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from faults import make_node, small_disk  # noqa: F401,E402 -- fixtures for every test file (fault injection)
from stores import http_server, s3_store  # noqa: F401 -- stores on loopback, one S3 server for the whole session
from hub_server import fake_hub  # noqa: F401,E402 -- a Hugging Face hub on loopback, huggingface_hub pointed at it

tf = tf1 = None  # TensorFlow and its compat.v1, imported by pytest_configure


@pytest.hookimpl(trylast=True)  # after pytest-xdist's, which registers its controller ("dsession")
def pytest_configure(config):
    """Imports TensorFlow quietly in each process that runs tests, before any test module does; not in
    pytest-xdist's controller, which runs none (3 s of CPU the suite spent there for nothing)."""
    global tf, tf1
    if not config.pluginmanager.has_plugin("dsession"):
        tf = _import_tensorflow_quietly()
        tf1 = tf.compat.v1


# The modules that take longest, longest first (wall seconds in their test process, whole suite on a quiet
# machine after the suite's speed work of 2026-11-28: Ray's 70, then 36 down to 11), run before the rest. A module
# goes to one test process whole (setup.cfg: loadscope, and --no-loadscope-reorder: without it, modules go out by
# their number of tests): a long module handed out last ends the run alone (Ray's once started 196 s in and ended
# it, 365 s later, while the two other processes had finished). Measured, not tested: update it as modules grow.
# The PyTorch-reference modules (TOGETHER) go out as one unit of 62 s, second.
LONGEST_FIRST = ("test_ray_job.py", "test_clip_config.py", "test_siglip.py", "test_dinov2_config.py",
                 "test_run_inference.py", "test_assembly.py", "test_convnext.py", "test_store_shards.py",
                 "test_store_inputs.py", "test_registry.py", "test_resnet.py", "test_efficientnet.py",
                 "test_vgg16.py", "test_inputs_streamed.py", "test_search_features.py", "test_output_writers.py",
                 "test_docs.py", "test_search_live_page.py", "test_search_service.py", "test_distributed.py",
                 "test_text_pass.py", "test_search_index.py", "test_signals.py", "test_engine.py", "test_protocol.py")


# Modules that go to one test process together, as one unit of loadscope's work: the parity tests against
# PyTorch, which start a PyTorch child in the first test process to need one (tests/torch_references.py:
# importing torch, transformers and open_clip is 4 to 5 s of CPU), so that one child serves them all (the
# three modules alone, on three test processes: 59 and 55 CPU-seconds with a child in each, 47 and 45 with one).
TOGETHER = {"test_clip_config.py": "torch references", "test_siglip.py": "torch references",
            "test_dinov2_config.py": "torch references"}


def pytest_xdist_make_scheduler(config, log):
    """loadscope's scheduling (setup.cfg), but TOGETHER's modules are one scope; another --dist is xdist's own."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TogetherScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            scope = super()._split_scope(nodeid)
            return TOGETHER.get(scope.split("::")[0].rpartition("/")[2], scope)

    return TogetherScheduling(config, log)


def pytest_collection_finish(session):
    """Moves what a test process holds once its tests are collected (TensorFlow, Keras, the test modules: about
    500,000 objects) out of the cyclic garbage collector's way, whose full collections walked them all each time
    (in a run of the suite, 2.8 to 3.6 CPU-seconds of full collections a test process; 1.9 to 2.5 with them frozen)."""
    gc.freeze()


def pytest_collection_modifyitems(items):
    """LONGEST_FIRST's modules first, in that order; the others after them, in their order."""
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: a module's tests keep theirs


def cpu_devices(count):
    """Graph names of `count` logical CPU devices."""
    return ["/device:CPU:%d" % index for index in range(count)]


def cpu_session(graph, count):
    """A Session on `graph` with `count` logical CPU devices and no soft placement."""
    config = tf1.ConfigProto(device_count={"CPU": count}, allow_soft_placement=False)
    return tf1.Session(graph=graph, config=config)


def dense_model(inputs):
    """A tiny model that creates its variables the way models must: get_variable.

    inputs: float32 [N, 4] -> float32 [N, 3].
    """
    weights = tf1.get_variable("dense/weights", [4, 3], initializer=tf1.zeros_initializer())
    biases = tf1.get_variable("dense/biases", [3], initializer=tf1.zeros_initializer())
    return tf.matmul(inputs, weights) + biases


DENSE_WEIGHTS = {
    "dense/weights": np.arange(12, dtype=np.float32).reshape(4, 3) / 10,
    "dense/biases": np.array([1, -2, 3], dtype=np.float32),
}


@pytest.fixture
def graph():
    """A fresh graph, made the default for the test."""
    fresh = tf.Graph()
    with fresh.as_default():
        yield fresh


PHOTOGRAPHS = Path(__file__).resolve().parent / "photographs"


@pytest.fixture(scope="session")
def photographs():
    """The five real photographs of tests/photographs/ as the engine reads them: uint8 [5, 224, 224, 3] RGB
    (the centre square, resized), in the order of their names."""
    from parallel.inputs.decode import load_image
    return np.stack([load_image(path) for path in sorted(PHOTOGRAPHS.glob("*.jpg"))])


@pytest.fixture(scope="session")
def seeded_weights():
    """Seeded random VGG16 weights (seed 0): {layer name: (float32 weights, float32 biases)}."""
    from models.weight_files import random_weights

    return random_weights(seed=0)


@pytest.fixture(scope="session")
def seeded_files(tmp_path_factory, request):
    """`seeded_weights` in both real on-disk layouts: {"npy": vgg16.npy, "h5": Keras's .h5 file}.

    Written once for the whole run, in a folder its test processes share (pytest-xdist gives each a
    basetemp of its own in the run's): 1.1 GB and 4 s of CPU, which each process needing them wrote
    again. The first to come writes them (from `seeded_weights`, which its tests may want too); the others wait on
    the lock, then read them."""
    import fcntl
    from weights import random_weight_files, weight_files_in

    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "seeded-vgg16"
    with open(str(folder) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        if not (folder / "written").exists():
            folder.mkdir(exist_ok=True)
            random_weight_files(folder, seed=0, weights=request.getfixturevalue("seeded_weights"))
            (folder / "written").touch()
    return weight_files_in(folder)


@pytest.fixture(scope="session")
def bombs(tmp_path_factory):
    """A folder of decompression bombs, written once: image_files.write_bombs."""
    from image_files import write_bombs

    return write_bombs(tmp_path_factory.mktemp("bombs"))


# --- a small job and what a single process writes for it (tests of jobs over several processes) ---------


@pytest.fixture(scope="session")
def job_images(tmp_path_factory):
    """23 small PNGs in two folders and one bad file: 24 images, 5 shards of 5."""
    from PIL import Image
    root = tmp_path_factory.mktemp("job") / "images"
    rng = np.random.default_rng(0)
    for index in range(23):
        path = root / "ab"[index % 2] / ("%02d.png" % index)
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (10, 12, 3), dtype=np.uint8)).save(path)
    (root / "a" / "bad.png").write_text("not an image")
    return root


@pytest.fixture(scope="session")
def single_outputs(job_images, tmp_path_factory):
    """{format: {file suffix: bytes}} of a single-host run, the reference every distributed run must equal."""
    import job_child
    from outputs import job_outputs
    from parallel import jobs
    folder = tmp_path_factory.mktemp("single")
    result = {}
    for output_format in ("csv", "parquet", "npy"):
        output = folder / ("out." + output_format)
        summary = jobs.run(job_child.config(job_images, output, output_format))
        assert (summary.written, summary.failed) == (23, 1)
        result[output_format] = job_outputs(output)
    return result


# --- an S3-compatible server on loopback (tests/s3_server.py) ------------------------------------------

@pytest.fixture(scope="session")
def s3_endpoint(s3_store):
    """The endpoint URL of the session's moto server on 127.0.0.1 (tests/stores.py)."""
    return s3_store


@pytest.fixture
def s3(s3_endpoint, monkeypatch):
    """A fresh bucket on the loopback server, this process's environment pointing s3fs at it.

    Attributes: bucket (its name), endpoint, filesystem (an s3fs filesystem), env (for child processes).
    """
    import fsspec
    import s3_server
    for key, value in s3_server.environment(s3_endpoint).items():
        monkeypatch.setenv(key, value)
    for key in s3_server.AWS_NAMES:
        if key not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_S3"):
            monkeypatch.delenv(key, raising=False)
    filesystem = fsspec.filesystem("s3")
    bucket = s3_server.new_bucket(filesystem)

    class S3:
        pass

    s3 = S3()
    s3.bucket, s3.endpoint, s3.filesystem = bucket, s3_endpoint, filesystem
    s3.env = s3_server.environment(s3_endpoint)
    s3.url = lambda name: "s3://%s/%s" % (bucket, name)
    s3.objects = lambda: sorted(path.split("/", 1)[1] for path in (filesystem.invalidate_cache()
                                                                   or filesystem.find(bucket)))
    return s3


# --- job children forked from one process (tests/forked_children.py) -----------------------------------

@pytest.fixture(scope="session")
def job_child_zygote():
    """A process that imported what tests/job_child.py and tests/cli_child.py run (TensorFlow: 3 s of CPU) once,
    for the session's tests: each spawn() forks a real child process of its own from it (forked_children.Zygote)."""
    from forked_children import JOB_CHILD_MODULES, Zygote
    zygote = Zygote(JOB_CHILD_MODULES)
    try:
        yield zygote
    finally:
        zygote.close()


# --- the PyTorch references' child (tests/torch_references.py) ------------------------------------------

@pytest.fixture(scope="session", autouse=True)
def torch_reference_child():
    """Ends, with the session, the one PyTorch child the parity tests of this test process shared (started by
    the first of them: torch_references.run_references); nothing when none ran."""
    import torch_references
    try:
        yield
    finally:
        torch_references.close_child()
