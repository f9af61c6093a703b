"""--distributed ray: a 2-node local cluster of CPU workers gives the single-host output, whatever a kill does.

The driver's loop (free workers pull shards, a dead one is replaced, Ctrl-C) is also tested
against a fake Ray in this process. Every real Ray cluster here runs in a child process inside a
network namespace of its own that has only loopback (`unshare -n`; `unshare -r -n` when not root):
Ray binds the machine's own address even when told 127.0.0.1, and a test must talk to nothing.
Without such a namespace (unshare missing, not permitted) or without Ray, these tests are skipped
with the reason; they never fall back to the host's network.
"""

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest

import job_child
import ray_child
from parallel.jobs import ray_job
from parallel.jobs import Distribution
from parallel.loop import Summary
from hangs import HANG_SECONDS
from outputs import job_outputs as outputs

CHILD = str(Path(__file__).resolve().parent / "ray_child.py")
REPOSITORY = str(Path(__file__).resolve().parent.parent)
LOOPBACK_UP = "ip link set lo up"  # the namespace's only interface


def isolated_network():
    """The command prefix of a child in a network namespace with loopback only, or the reason there is none."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None, "unshare or ip is not installed: no network namespace for Ray"
    # Not root: a user namespace gives the child the right to set up its own network namespace.
    prefix = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-r", "-n"]
    probe = subprocess.run(prefix + ["sh", "-c", LOOPBACK_UP], capture_output=True, text=True)
    if probe.returncode:
        return None, "cannot create a network namespace (%s): %s" % (" ".join(prefix), probe.stderr.strip())
    return prefix, None


# FORMAT:GPUS per worker:FAULT. The cluster's GPUs are logical ones (no machine here has a GPU): workers compute
# on the CPU, and the cli job's first run, with a GPU per worker, is refused. Each worker is a process that
# imports TensorFlow: the jobs are few, and each is checked for several properties.
JOBS = ("csv:0:kill", "npy:0:interrupt", "csv:0:badweights", "csv:0:cli")
# Lines that are not the driver's own: Ray's and TensorFlow's logs (dated, or absl's "I0000 00:00"), an
# actor's output forwarded by Ray ("(ShardActor pid=...)", "(raylet)"), Python warnings ("file.py:12:").
NOISE = re.compile(r"^\[?\d{4}-\d\d-\d\d|^[IWEF]\d{4} \d\d:|\((?:\w+ )?pid=\d+|\((?:raylet|autoscaler|gcs_server)"
                   r"|tensorflow|oneDNN|absl|\.py:\d+|\.cc:\d+")


@pytest.fixture(scope="module")
def ray_runs(job_images, tmp_path_factory):
    """{fault: result of tests/ray_child.py}, the JOBS run one after the other on one 2-node cluster (one child
    process for all: the cluster starts once)."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install -e '.[ray]')")
    prefix, reason = isolated_network()
    if prefix is None:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("ray")
    # Ray's sockets and logs: a short path of their own (a socket path has at most 107 bytes), removed after.
    ray_files = tempfile.mkdtemp(prefix="ray-test-")
    command = "%s && exec %s" % (LOOPBACK_UP, shlex.join([sys.executable, CHILD, str(job_images), str(folder), *JOBS]))
    try:
        # A guard against a hang only (tests/hangs.py), for all the jobs of the one child.
        # Ray starts its workers at nice 15 (its worker_niceness): beside other processes at nice 0 (a busy
        # machine, the suite's other test processes) they got almost no CPU, and the jobs outlasted the hang guard
        # (1200 s, where they take 5 min beside two busy loops at nice 0, as the driver and its nodes are).
        child = subprocess.run(prefix + ["sh", "-c", command], capture_output=True, text=True, timeout=2 * HANG_SECONDS,
                               cwd=REPOSITORY, env=dict(os.environ, RAY_TMPDIR=ray_files, TF_CPP_MIN_LOG_LEVEL="3",
                                                        RAY_worker_niceness="0"))
    finally:
        shutil.rmtree(ray_files, ignore_errors=True)
    results = {result["job"].split(":")[2]: result for result in
               (json.loads(line[len("RESULT "):]) for line in child.stdout.splitlines() if line.startswith("RESULT "))}
    assert child.returncode == 0 and len(results) == len(JOBS), child.stderr[-5000:]
    for result in results.values():
        result["builds"] = dict(result["builds"])  # pid: graphs built
        result["log"], result["log_folder"] = child.stderr, str(folder)
    results["imports"] = [line for line in child.stdout.splitlines() if line.startswith("IMPORTS_RAY ")]
    return results


def done(result):
    return {key: result["summary"][key] for key in ("discovered", "written", "failed", "already_done", "skipped")}


def test_a_worker_killed_mid_shard_is_replaced_and_the_output_is_the_single_host_one(ray_runs, single_outputs):
    result = ray_runs["kill"]
    [killed], kept = result["killed"], result["kept"]
    assert killed in result["builds"]  # the job's worker, killed mid-shard
    assert 0 < kept < 23  # the rows its attempt had committed: some of its shard's 23 images that can be read
    assert "a Ray worker died computing shard" in result["log"] and "a new one takes its place" in result["log"]
    # The actor given the shard next resumed the dead one's attempt: it computed only the rows not committed.
    assert result["status"] == 3 and done(result) == {"discovered": 24, "written": 23 - kept, "failed": 1,
                                                      "already_done": kept, "skipped": 0}  # the bad image
    assert outputs(result["output"]) == single_outputs["csv"]
    assert not Path(result["output"] + ".attempts").exists()
    # The shards go once the output is written, an image failed or not: a rerun retries it in the output, by an actor.
    assert result["shards_after"] == [] and not Path(result["output"] + ".shards").exists()
    rerun = result["rerun_summary"]
    assert result["rerun_status"] == 3 and (rerun["written"], rerun["already_done"], rerun["failed"]) == (0, 23, 1)
    assert result["rerun_workers"] == 1  # one actor, which tried bad.png again: it still fails


def test_ctrl_c_on_the_driver_stops_handing_out_shards_and_a_rerun_finishes_exactly(ray_runs, single_outputs):
    result = ray_runs["interrupt"]
    first = result["first_summary"]
    assert result["first_status"] == 130 and first["interrupted"] and first["skipped"] > 0, first
    assert first["written"] + first["failed"] + first["skipped"] == 24
    assert result["status"] == 3 and done(result)["already_done"] == first["written"]
    assert outputs(Path(result["log_folder"]) / "store-copy" / "interrupt.npy") == single_outputs["npy"]


def test_a_worker_that_cannot_load_the_weights_fails_the_run_as_one_process_would(ray_runs):
    result = ray_runs["badweights"]  # the driver has the weights, the nodes do not
    assert result["status"] == 2 and result["summary"]["error"].splitlines()[0] == ray_child.NO_WEIGHTS


def test_a_ray_usage_error_leaves_nothing_and_the_corrected_run_is_quiet_and_exact(ray_runs, one_process_tars):
    result = ray_runs["cli"]
    assert result["first_status"] == 2 and result["left"] == [], result
    # A GPU per worker on logical GPUs, refused by the driver before anything is written (Ray chose GPU 0 or 1).
    assert result["first_log"] in {"run_inference: error: %s\n" % NO_GPU % (1, socket.gethostname(), [gpu])
                                   for gpu in (0, 1)}, result["first_log"]
    assert result["status"] == 3 and outputs(result["output"]) == outputs(one_process_tars), result["cli_log"]
    lines = result["cli_log"].splitlines()
    assert [line for line in lines if NOISE.search(line)] == [], result["cli_log"]
    assert any(line.startswith("Ray: cluster ready in") and "s graph and weights" in line for line in lines), lines


def test_an_output_in_an_object_store_is_the_single_host_one(ray_runs, single_outputs):
    """The interrupt job's output is in the store: workers on two nodes commit through the store's protocol, no
    shared folder, and the rerun resumes from the shards committed there."""
    result = ray_runs["interrupt"]
    assert result["output"].startswith("s3://") and result["status"] == 3, result["summary"]
    counts = done(result)
    assert (counts["discovered"], counts["failed"], counts["skipped"]) == (24, 1, 0), counts
    assert counts["written"] + counts["already_done"] == 23 and counts["already_done"] > 0, counts
    copy = Path(result["log_folder"]) / "store-copy"
    assert outputs(copy / "interrupt.npy") == single_outputs["npy"]
    assert sorted(path.name for path in copy.iterdir()) == ["interrupt.npy" + suffix for suffix in
                                                            ("", ".errors.csv", ".ledger.jsonl", ".manifest.parquet",
                                                             ".paths.csv", ".run.json")]  # the shards gone


@pytest.fixture(scope="module")
def one_process_tars(ray_runs, tmp_path_factory):
    """What one process writes for the cli job (its tars): its output (CSV), by the same command line and the
    same SigLIP, without Ray."""
    import run_inference
    folder = Path(ray_runs["cli"]["log_folder"])
    single = tmp_path_factory.mktemp("one_process_tars") / "single.csv"
    assert run_inference.main(ray_child.cli_flags(folder / "tars" / "*.tar", single, folder / "siglip2")
                              + ["--quiet"]) == 3
    return single


def test_tars_are_shards_of_a_ray_job_as_of_one_process(ray_runs, one_process_tars):
    result = ray_runs["cli"]  # read from its tars, a tar a shard
    assert result["status"] == 3 and re.search(r"^24 images: 23 written, 1 failed, 0 already done, 0 skipped in ",
                                               result["cli_log"], re.M), result["cli_log"]
    members = [Path(str(output) + ".members.parquet").read_bytes() for output in (result["output"], one_process_tars)]
    assert members[0] == members[1]


def test_a_family_of_the_registry_with_its_text_tower_on_the_cluster_gives_one_process_s_bytes(ray_runs,
                                                                                                one_process_tars):
    """SigLIP (--model siglip: its size from the checkpoint's config, its spec pickled to the actors, its weights
    and tokenizer read there), its captions embedded and scored by the workers: one process's bytes, text too."""
    import pandas
    from parallel.output.text_rows import TEXT_SUFFIX
    result = ray_runs["cli"]
    assert outputs(result["output"]) == outputs(one_process_tars)
    assert Path(result["output"]).read_text().split("\n")[0].endswith(",embedding_31")
    texts = [Path(str(output) + TEXT_SUFFIX) for output in (result["output"], one_process_tars)]
    assert texts[0].read_bytes() == texts[1].read_bytes()
    text = pandas.read_parquet(texts[0])
    # A row for each sample; the first image's caption missing, the damaged image's caption without an image to
    # score against: 22 probabilities, each SigLIP's sigmoid, and not one value repeated for every row.
    assert len(text) == 24 and text["caption_error"].tolist().count("missing") == 1, text
    scores = text["caption_probability"].dropna()
    assert len(scores) == 22 and scores.between(0, 1).all() and scores.nunique() == 22, text


def test_each_worker_builds_its_graph_once_on_a_cpu_device_of_its_own(ray_runs):
    for fault in ("kill", "interrupt", "badweights"):
        result = ray_runs[fault]
        builds = result["builds"]
        assert builds and set(builds.values()) == {1}, builds  # one replica, never a second graph
        ready = {worker["pid"] for worker in result["workers"] + result.get("first_workers", [])}
        assert ready <= set(builds) and (ready or fault == "badweights"), (ready, builds)
    killed, interrupted = ray_runs["kill"], ray_runs["interrupt"]
    # The workers of one run of the driver, less the one killed: a CPU each, none of the node's (logical) GPUs.
    checked = []
    for workers in (killed["workers"], interrupted["first_workers"], interrupted["workers"]):
        alive = [worker for worker in workers if worker["pid"] not in killed["killed"]]
        assert alive and all(worker["devices"] == "CPU:0" and worker["gpu_ids"] == [] for worker in alive), alive
        checked += alive
    # Workers of both nodes among them. (Not of both in each run: a worker still starting when the last shard is
    # done is stopped unannounced, as the kill's replacement may be.)
    assert len({worker["node"] for worker in checked}) == 2, checked


def test_an_actor_s_devices_are_its_ray_gpus_as_tensorflow_numbers_them():
    devices = ray_job.actor_devices(1, [3], visible_gpus=1)  # CUDA_VISIBLE_DEVICES=3: TensorFlow's GPU 0
    assert (devices.names, devices.physical_gpus) == (("/device:GPU:0",), (0,))
    devices = ray_job.actor_devices(2, [5, 6], visible_gpus=8)  # Ray left CUDA_VISIBLE_DEVICES alone
    assert (devices.names, devices.physical_gpus) == (("/device:GPU:0", "/device:GPU:1"), (5, 6))
    devices = ray_job.actor_devices(0, [], visible_gpus=2)  # a CPU worker leaves the node's GPUs alone
    assert (devices.names, devices.physical_gpus) == (("/device:CPU:0",), ())


NO_GPU = ("Ray gives each worker GPUs (gpus_per_worker=%d), but TensorFlow on %s sees none (Ray's GPU ids there: %s; "
          "logical GPUs of ray start --num-gpus, or a TensorFlow without CUDA): pass --gpus-per-worker 0 for CPU "
          "workers, or pip install -e '.[gpu]' on the nodes")


@pytest.mark.parametrize("gpus, gpu_ids", [(1, [0]), (2, [2, 3])])
def test_gpus_tensorflow_cannot_see_are_refused_as_gpus_refuses_them_never_the_cpu_instead(gpus, gpu_ids):
    """Logical Ray GPUs (ray start --num-gpus on a machine without any) are not a fall-back to CPU devices."""
    with pytest.raises(ValueError) as raised:
        ray_job.actor_devices(gpus, gpu_ids, visible_gpus=0, host="node-2")
    assert str(raised.value) == NO_GPU % (gpus, "node-2", gpu_ids)


def test_the_workers_are_as_many_as_the_alive_nodes_hold():
    nodes = [{"Alive": True, "Resources": {"CPU": 8.0, "GPU": 4.0}}, {"Alive": True, "Resources": {"CPU": 2.0}},
             {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 8.0}}, {"Alive": True, "Resources": {"GPU": 3.0}}]
    assert [ray_job.worker_count(nodes, gpus) for gpus in (0, 1, 2, 4, 5)] == [10, 7, 3, 1, 0]


class FakeRay:
    """Just enough of Ray for a ShardPool, in this process: an actor's call runs when its result is asked for.

    Args:
      gpus: GPUs of the one node (gpus_per_worker is 1: as many workers).
      deaths: {shard: how many times computing it kills the worker (-1: every time), or the exception it raises}.
      visible: GPUs TensorFlow sees on the node (None: as many as Ray has; 0: Ray's GPUs are logical ones).
    """

    class exceptions:
        class RayActorError(Exception):
            actor_init_failed = False

        class RayTaskError(Exception):
            def __init__(self, cause):
                super().__init__("ray::ShardActor.process() (pid=1)\n%s" % cause)
                self.cause = cause

    def __init__(self, gpus, deaths=None, visible=None):
        self.gpus, self.deaths, self.started, self.killed = gpus, dict(deaths or {}), 0, 0
        self.visible = gpus if visible is None else visible
        self.probes = []  # the GPUs each check_gpus task asked for

    def nodes(self):
        return [{"Alive": True, "Resources": {"CPU": 1.0, "GPU": float(self.gpus)}}]

    def remote(self, **options):
        def decorate(target):
            if target is ray_job.node_gpus:  # a task on a node: what TensorFlow sees there
                assert set(options) == {"num_gpus", "num_cpus", "max_retries"} and options["num_cpus"] == 0
                self.probes.append(options["num_gpus"])
                gpu_ids = list(range(options["num_gpus"]))
                return types.SimpleNamespace(remote=lambda: lambda: ("fake-node", gpu_ids, self.visible))
            gpus = options.get("num_gpus")  # a GPU worker reserves no CPU; a CPU worker one CPU
            assert target is ray_job.ShardActor and options == {"num_gpus": gpus, "num_cpus": 0 if gpus else 1,
                                                                 "max_restarts": 0}
            return types.SimpleNamespace(remote=self._actor)
        return decorate

    def _actor(self, config, job):
        self.started += 1
        return FakeActor({"host": "fake", "pid": self.started, "node": "n", "gpu_ids": [self.started],
                          "devices": "GPU:0", "build_seconds": 1.0}, self._process)

    def _process(self, index):
        if isinstance(self.deaths.get(index), Exception):  # raised in the actor: Ray gives it as a cause
            raise self.exceptions.RayTaskError(self.deaths[index])
        if self.deaths.get(index):
            self.deaths[index] -= 1
            raise self.exceptions.RayActorError("The actor died unexpectedly.\nWorker exit detail: SIGKILL")
        return Summary(discovered=5, written=4, failed=1, device_seconds=2.0, seconds=3.0)

    def wait(self, refs, num_returns, timeout):
        return refs[:num_returns], refs[num_returns:]

    def get(self, ref):
        return ref()

    def kill(self, actor):
        self.killed += 1


class FakeActor:
    """An actor handle: `actor.method.remote(...)` returns a reference, here the call to make."""

    def __init__(self, info, process):
        self.ready = types.SimpleNamespace(remote=lambda: lambda: info)
        self.process = types.SimpleNamespace(remote=lambda index: lambda: process(index))


def pool_run(ray, todo, stop_after=None):
    """ShardPool(ray).run(todo); Ctrl-C comes after `stop_after` shards. Returns (Summary, shards reported)."""
    config = types.SimpleNamespace(distribution=Distribution(kind="ray", gpus_per_worker=1))
    stop, reported = types.SimpleNamespace(signal_name=None), []

    def update(images, failed):
        reported.append(images)
        if len(reported) == stop_after:
            stop.signal_name = "SIGINT"

    progress = types.SimpleNamespace(update=update)
    return ray_job.ShardPool(ray, config).run(None, todo, Summary(), stop, progress), reported


def test_free_workers_pull_shards_until_none_is_left(caplog):
    ray = FakeRay(gpus=2)
    with caplog.at_level("INFO", logger="parallel"):
        summary, reported = pool_run(ray, [0, 1, 2, 3, 4])
    assert (summary.written, summary.failed, summary.interrupted, reported) == (20, 5, False, [5] * 5)
    assert summary.device_seconds == 5.0  # 5 shards of 2 s on 2 workers: a mean worker's 5 s
    assert (ray.started, ray.killed) == (2, 2)  # every actor is killed once the queue is empty
    # Where the workers' time went, beyond the stage clock of their shards: 5 shards of 3 s on 2 workers.
    assert re.search(r"^Ray: cluster ready in 0\.0 s; 2 workers, each on average: \d+\.\d s starting \(a process, its "
                     r"imports, then 1\.0 s graph and weights\), 7\.5 s on shards, \d+\.\d s waiting",
                     "\n".join(caplog.messages), re.M), caplog.text


@pytest.mark.parametrize("cause", [ValueError("no weights here: pass --weights PATH\nsecond line"),
                                   ray_job.RunError("disk full; rows committed so far are kept")])
def test_a_worker_s_value_error_or_run_error_reaches_the_caller_as_one_process_raises_it(cause):
    with pytest.raises(type(cause)) as raised:
        pool_run(FakeRay(gpus=2, deaths={1: cause}), [0, 1, 2])
    assert raised.value is cause


def test_another_exception_in_a_worker_is_a_run_error_naming_it():
    with pytest.raises(ray_job.RunError, match=r"^a Ray worker could not compute shard 1: KeyError: 'x'$"):
        pool_run(FakeRay(gpus=2, deaths={1: KeyError("x")}), [0, 1, 2])


def test_an_actor_that_cannot_start_raises_the_reason_when_asked_if_ready(job_images, tmp_path, monkeypatch):
    """Not from __init__: Ray would give the driver a dead actor and its traceback as text, not the exception."""
    fake_ray = types.SimpleNamespace(get_gpu_ids=lambda: [], get_runtime_context=lambda: None)
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    config = job_child.config(job_images, tmp_path / "out.csv", "csv", Distribution(kind="ray", gpus_per_worker=0))
    error = ValueError("cannot read the weights\nsecond line")
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, load_weights=lambda: _raise(error)))
    level = logging.getLogger("parallel").level
    try:
        actor = ray_job.ShardActor(config, job=None)  # quiets the log of its process: this one's, here
    finally:
        logging.getLogger("parallel").setLevel(level)
    with pytest.raises(ValueError) as raised:
        actor.ready()
    assert raised.value is error


def _raise(error):
    raise error


@pytest.mark.parametrize("problem", ["no room", "bad weights"])
def test_a_ray_usage_error_writes_nothing(job_images, tmp_path, monkeypatch, problem):
    """The driver checks the cluster and the weights before the manifest: the folder stays as it was."""
    monkeypatch.setattr(ray_job, "_connected", lambda address, verbose: contextlib.nullcontext(FakeRay(gpus=1)))
    gpus = 2 if problem == "no room" else 1
    config = job_child.config(job_images, tmp_path / "out" / "features.csv", "csv",
                              Distribution(kind="ray", gpus_per_worker=gpus))
    if problem == "bad weights":
        model = dataclasses.replace(config.model, load_weights=lambda: _raise(ValueError("bad weights")))
        config = dataclasses.replace(config, model=model)
    with pytest.raises(ValueError, match="no node of the Ray cluster has 2 GPUs" if gpus == 2 else "^bad weights$"):
        ray_job.run(config)
    assert list(tmp_path.iterdir()) == []


def test_gpus_per_worker_on_a_cluster_of_logical_gpus_is_one_line_before_anything_is_written(job_images, tmp_path,
                                                                                             monkeypatch, caplog):
    """`ray start --num-gpus 4` on CPU-only nodes: refused as --gpus refuses, before the manifest (and before
    the shard size is weighed against a GPU step the workers would not compute)."""
    ray = FakeRay(gpus=4, visible=0)
    monkeypatch.setattr(ray_job, "_connected", lambda address, verbose: contextlib.nullcontext(ray))
    config = job_child.config(job_images, tmp_path / "out" / "features.csv", "csv",
                              Distribution(kind="ray", gpus_per_worker=1, shard_size=5), per_device_batch=None)
    with caplog.at_level("INFO", logger="parallel"), pytest.raises(ValueError) as raised:
        ray_job.run(config)
    assert str(raised.value) == NO_GPU % (1, "fake-node", [0]) and ray.probes == [1] and ray.started == 0
    assert list(tmp_path.iterdir()) == [] and caplog.messages == []


@pytest.mark.parametrize("gpus, step", [(0, 12), (2, 128)])
def test_shards_are_weighed_against_the_step_of_a_worker_not_of_the_driver(job_images, tmp_path, caplog, gpus, step):
    """A worker computes 12 images a step on its CPU, or 64 on each of its GPUs: the driver's 3 devices do not count."""
    from parallel.jobs.identity import freeze_sharded
    config = job_child.config(job_images, tmp_path / "out.csv", "csv", Distribution(
        kind="ray", gpus_per_worker=gpus, shard_size=5), devices="cpu:0,cpu:1,cpu:2", per_device_batch=None)
    with caplog.at_level("WARNING", logger="parallel"):
        freeze_sharded(config, check_folder=False)
    assert ("shards of 5 images are not a multiple of the %d images of a step" % step) in caplog.text, caplog.text


def test_a_pool_of_cpu_workers_asks_nothing_of_the_gpus():
    ray = FakeRay(gpus=0, visible=0)
    config = types.SimpleNamespace(distribution=Distribution(kind="ray", gpus_per_worker=0))
    ray_job.ShardPool(ray, config).check_gpus()
    assert ray.probes == []


def test_a_dead_worker_is_replaced_and_its_shard_redone():
    ray = FakeRay(gpus=2, deaths={3: 2})
    summary, reported = pool_run(ray, [0, 1, 2, 3, 4])
    assert (summary.written, reported) == (20, [5] * 5)
    assert ray.started == 4  # two replacements


def test_a_shard_that_kills_every_worker_stops_the_job():
    with pytest.raises(ray_job.RunError, match="shard 1 took down 3 Ray workers \\(last: Worker exit detail"):
        pool_run(FakeRay(gpus=2, deaths={1: -1}), [0, 1, 2])


def test_ctrl_c_hands_out_no_more_shards():
    summary, reported = pool_run(FakeRay(gpus=1), [0, 1, 2, 3], stop_after=1)
    assert (summary.written, summary.interrupted, reported) == (4, True, [5])


def test_ctrl_c_after_the_last_shard_is_handed_out_still_stops_the_job_before_its_output_is_written():
    summary, reported = pool_run(FakeRay(gpus=1), [0, 1], stop_after=2)
    assert (summary.written, summary.interrupted, reported) == (8, True, [5, 5])


def test_a_cluster_without_room_for_one_worker_is_refused_before_any_actor():
    config = job_child.config("images", "out.csv", "csv", Distribution(kind="ray", gpus_per_worker=2))
    with pytest.raises(ValueError, match=r"no node of the Ray cluster has 2 GPUs for one worker \(gpus_per_worker=2\)"):
        ray_job.ShardPool(FakeRay(gpus=1), config)


def test_importing_the_package_and_the_engine_does_not_import_ray(ray_runs):
    """Asked of the cluster's driver, a fresh process, before it imports Ray (each process that imports the engine
    imports TensorFlow: seconds)."""
    assert ray_runs["imports"] == ["IMPORTS_RAY false"]



@pytest.mark.parametrize("verbose", [False, True])
def test_a_cluster_started_or_joined_here_forwards_the_actors_output_only_with_verbose(monkeypatch, verbose):
    calls = []
    fake_ray = types.SimpleNamespace(is_initialized=lambda: False, init=lambda **options: calls.append(options),
                                     shutdown=lambda: calls.append("shutdown"))
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    with ray_job._connected("auto", verbose) as ray:
        assert ray is fake_ray
    assert calls == [{"address": "auto", "log_to_driver": verbose,
                      "logging_level": logging.INFO if verbose else logging.ERROR}, "shutdown"]
