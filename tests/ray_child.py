"""A Ray driver for tests/test_ray_job.py: a 2-node local cluster, jobs through the real engine, results as JSON.

    unshare -n sh -c 'ip link set lo up && python tests/ray_child.py IMAGES FOLDER FORMAT:GPUS[:FAULT] ...'

Runs only inside a network namespace that has nothing but loopback (Ray binds the machine's
own address even when told 127.0.0.1). The cluster has 2 nodes of 1 CPU and 2 logical GPUs each
(`ray start --num-gpus` on machines without a GPU: a worker given them is refused), started without
TF_CPP_MIN_LOG_LEVEL (as a real cluster's nodes are); each job's driver joins it. A CPU worker takes a
node's CPU: at most 2 workers, one on each node, the fewest that are still two nodes and two workers, since
each worker is a process that imports TensorFlow (what the jobs here cost): a job of one shard starts one.
Each job writes FOLDER/FAULT.FORMAT ("none" without a FAULT) with GPUS GPUs per worker (0 here: CPU
workers) and job_child's colour model, and FAULT:
    kill          one shard of all 24 images (one worker): that worker is SIGKILLed mid-shard, once its
                  attempt has committed a batch (the actor given the shard next resumes the attempt after
                  it); then a rerun, which retries the failed image in the output
    interrupt     the output in an S3 store (moto, started by this driver on 127.0.0.1 before the
                  cluster, so that every node's workers reach it, each committing through the store's
                  protocol): s3://bucket/ray/interrupt.FORMAT, in shards of 2 (more than the 2 workers
                  take at once); SIGINT to the driver once the first shard is committed there, then a
                  rerun; the store's objects then copied into FOLDER/store-copy/ for the test to read
    badweights    the weights load in the driver but not in the workers (one shard: one worker)
    cli           the command line (run_inference.py, tests/cli_child.py) in a process of its own, over
                  the images as 3 tars of 8 WebDataset samples, each image with its caption but the first
                  (FOLDER/tars/*.tar, `captioned_tars`), a tar a shard, computed by a family of models/
                  read from its checkpoint's config: a small SigLIP 2 (--model siglip, its seeded random
                  weights and tokenizer written by the driver in FOLDER/siglip2, `siglip_weights`), the
                  captions embedded by its text tower (--text-column txt); first with GPUS + 1 GPUs per
                  worker (logical ones: refused), then with GPUS

Before it imports Ray, it prints "IMPORTS_RAY true|false": whether importing the package, the engine and
parallel.jobs.distributed imported Ray (they must not: Ray is the ray extra's).

Prints, per job, a line "RESULT {json}": the job as given, its output, the exit status, the
summary's counts, the workers the driver logged (and the interrupted run's status, counts and
workers), [pid, graphs built] of each process that built a graph, the pid killed and the rows its
attempt had committed ("kept"); for cli, the stderr and status of both runs and the files left by
the first.
"""

import argparse
import collections
import dataclasses
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import job_child
from hangs import HANG_SECONDS

CLUSTER = {"num_cpus": 1, "num_gpus": 2}
CLI_CHILD = str(Path(__file__).resolve().parent / "cli_child.py")
COUNTS = ("discovered", "written", "failed", "already_done", "skipped", "interrupted", "pending_shards")


class Workers(logging.Handler):
    """Collects the `ray_worker` record of each "worker N on ..." line the driver logs."""

    def __init__(self):
        super().__init__()
        self.infos = []

    def emit(self, record):
        if hasattr(record, "ray_worker"):
            self.infos.append(record.ray_worker)


def counting_builds(model, builds):
    """`model` whose fn appends "build <pid>" to the file `builds` each time a replica is built."""
    build = model.fn

    def fn(images):
        with open(builds, "a") as handle:
            handle.write("build %d\n" % os.getpid())
        return build(images)

    return dataclasses.replace(model, fn=fn)


NO_WEIGHTS = ("cannot download the ImageNet weights from https://example.invalid/vgg16_weights.h5 (<urlopen error "
              "[Errno -3] Temporary failure in name resolution>): offline? pass --weights PATH to a vgg16.npy or "
              "vgg16_weights_tf_dim_ordering_tf_kernels.h5")


def weights_in(pid):
    """load_weights of a model whose weights are in process `pid` only (the driver), as on a node offline."""
    def load_weights():
        if os.getpid() != pid:
            raise ValueError(NO_WEIGHTS + "\nand a second line")
        return job_child.WEIGHTS
    return load_weights


def cli_flags(images, output, weights):
    """The cli job's command line but its distribution: the SigLIP at `weights` over the tars `images` (a
    pattern), captions and all, into `output`, a tar a shard."""
    return ["--images", str(images), "--output", str(output), "--shard-size", "1", "--devices", "cpu:0",
            "--batch-size", "2", "--workers", "1", "--model", "siglip", "--weights", str(weights),
            "--text-column", "txt"]


def run_cli(images, output, address, gpus_per_worker, weights):
    """(exit status, stderr) of the command line in a process of its own, a driver of the cluster at `address`:
    `cli_flags`."""
    command = [sys.executable, CLI_CHILD, *cli_flags(images, output, weights), "--distributed", "ray",
               "--ray-address", address, "--gpus-per-worker", str(gpus_per_worker)]
    # Run in tests/: Ray puts its driver's current folder on its workers' sys.path, where cli_child's and
    # job_child's modules are. (A hang guard only: tests/hangs.py.)
    child = subprocess.run(command, capture_output=True, text=True, timeout=HANG_SECONDS, cwd=Path(CLI_CHILD).parent)
    return child.returncode, child.stderr


def cli_job(images, folder, job, address):
    """The result of a cli job (see the module docstring)."""
    output_format, gpus_per_worker, fault = job.split(":")
    output = folder / ("%s.%s" % (fault, output_format))
    result = {"job": job, "output": str(output), "builds": [], "killed": []}
    captioned_tars(images, folder / "tars", 8)
    tars, weights = folder / "tars" / "*.tar", siglip_weights(folder)
    result["first_status"], result["first_log"] = run_cli(tars, output, address, int(gpus_per_worker) + 1, weights)
    result["left"] = sorted(path.name for path in folder.iterdir() if path.name.startswith(output.name))
    result["status"], result["cli_log"] = run_cli(tars, output, address, int(gpus_per_worker), weights)
    return result


def when(condition, action, poll_seconds=0.02):
    """Calls `action()` once `condition()` holds (polling), unless HANG_SECONDS pass first (a hang guard only:
    the test then fails on what the action did not do)."""
    deadline = time.monotonic() + HANG_SECONDS
    while time.monotonic() < deadline:
        if condition():
            return action()
        time.sleep(poll_seconds)


def first_step(steps):
    """The pid of the first process that wrote "step <pid>" to `steps`, or None."""
    words = steps.read_text().split() if steps.exists() else []
    return int(words[1]) if words else None


def attempt_rows(output, pid):
    """Rows that process `pid` has committed so far in its attempts at the job writing `output` (their records)."""
    from parallel.output import read_record
    records = [read_record(folder / "features.parquet")
               for folder in Path(str(output) + ".attempts").glob("shard-*.%d" % pid)]
    return sum(record["rows"] for record in records if record is not None)


def is_dead(pid):
    """Whether process `pid` has ended (gone, or a zombie its parent has not reaped yet)."""
    try:
        return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def kill_first_stepper(steps, output, result):
    """SIGKILLs the first process to write a step to `steps` once its attempt has committed rows (not all of its
    shard's: it is committed whole at the end); result["killed"]: its pid, result["kept"]: those rows, once dead."""
    pid = first_step(steps)
    os.kill(pid, signal.SIGKILL)
    result["killed"].append(pid)
    when(lambda: is_dead(pid), lambda: result.update(kept=attempt_rows(output, pid)))


def siglip_weights(folder):
    """`folder`/siglip2: a small SigLIP 2 checkpoint (tests/siglip_files.py: config.json, seeded random weights,
    a Gemma tokenizer trained here), written once."""
    from siglip_files import write_small
    weights = Path(folder) / "siglip2"
    if not weights.exists():
        write_small(weights)
    return weights


def captioned_tars(images, folder, per_tar):
    """The images under `images` (sorted keys) as tars of `per_tar` WebDataset samples in `folder`: an image, then
    its caption NAME.txt (dataset_files.caption's), but the first image's (a missing caption: its row is kept)."""
    from dataset_files import caption
    from stores import image_paths, tar_bytes
    names = image_paths(images)
    folder.mkdir(parents=True, exist_ok=True)
    for number, start in enumerate(range(0, len(names), per_tar)):
        members = []
        for name in names[start:start + per_tar]:
            members.append((name, (Path(images) / name).read_bytes()))
            if name != names[0]:
                members.append((name.rsplit(".", 1)[0] + ".txt", caption(name).encode()))
        (folder / ("%06d.tar" % number)).write_bytes(tar_bytes(members))


def run(config):
    """(exit status, counts) of jobs.run(config)."""
    from parallel import engine, jobs
    try:
        summary = jobs.run(config)
    except ValueError as error:
        return 2, {"error": str(error)}
    except engine.RunError as error:
        return 1, {"error": str(error)}
    return summary.exit_status, {name: getattr(summary, name) for name in COUNTS}


def run_job(images, folder, job, address):
    """The result of one job (see the module docstring), FORMAT:GPUS[:FAULT], on the cluster at `address`."""
    from parallel import jobs
    output_format, gpus_per_worker, fault = (job.split(":") + ["none"])[:3]
    if fault == "cli":
        return cli_job(images, folder, job, address)
    gpus_per_worker = int(gpus_per_worker)
    output, builds, steps = folder / ("%s.%s" % (fault, output_format)), folder / (fault + ".builds"), None
    if fault in ("kill", "interrupt"):  # slow steps: the fault lands mid-job
        steps = folder / (fault + ".steps")
    if fault == "interrupt":
        output = "s3://%s/ray/interrupt.%s" % (BUCKET, output_format)
    # Interrupt: shards of 2, more than the 2 workers take at once, so that Ctrl-C after the first leaves some;
    # the others: one shard of every image, one worker (each is a process that imports TensorFlow).
    distribution = jobs.Distribution(kind="ray", gpus_per_worker=gpus_per_worker, wait_seconds=30, ray_address=address,
                                       shard_size={"interrupt": 2}.get(fault, 24))
    config = job_child.config(images, output, output_format, distribution, step_seconds=0.3 if steps else 0.0,
                              marker=steps)
    model = counting_builds(config.model, builds)
    if fault == "badweights":
        model = dataclasses.replace(model, load_weights=weights_in(os.getpid()))
    config = dataclasses.replace(config, model=model)
    workers, result = Workers(), {"job": job, "output": str(output), "killed": []}
    logging.getLogger("parallel").addHandler(workers)
    if fault == "kill":
        threading.Thread(target=when, args=(lambda: first_step(steps) and attempt_rows(output, first_step(steps)),
                                            lambda: kill_first_stepper(steps, output, result)), daemon=True).start()
    if fault == "interrupt":  # a shard's marker in the store: it is committed (parallel/jobs/commits.py)
        markers = "%s/ray/interrupt.%s.shards/shard-*/*/_shard.json" % (BUCKET, output_format)
        threading.Thread(target=when, args=(lambda: store().glob(markers), lambda: os.kill(os.getpid(), signal.SIGINT),
                                            0.2), daemon=True).start()
        result["first_status"], result["first_summary"] = run(config)
        result["first_workers"], workers.infos = workers.infos, []
    try:
        result["status"], result["summary"] = run(config)
        if fault == "kill":  # finished, an image failed, the shards gone: a rerun retries it into the output
            result["shards_after"] = sorted(path.name for path in Path(str(output) + ".shards").glob("*"))
            before = len(workers.infos)
            result["rerun_status"], result["rerun_summary"] = run(config)
            result["rerun_workers"] = len(workers.infos) - before
    finally:
        logging.getLogger("parallel").removeHandler(workers)
    if fault == "interrupt":  # what the store holds, for the test (its server ends with this process)
        copy = folder / "store-copy"
        copy.mkdir()
        for name in store().ls("%s/ray" % BUCKET):
            if store().isfile(name):
                (copy / Path(name).name).write_bytes(store().cat_file(name))
    built = collections.Counter(builds.read_text().split()[1::2]) if builds.exists() else {}
    return dict(result, workers=workers.infos, builds=[[int(pid), count] for pid, count in built.items()])


BUCKET = "bucket"


def start_store():
    """A moto S3 server on 127.0.0.1 (this namespace's loopback) with BUCKET; the AWS variables point at it."""
    from moto.server import ThreadedMotoServer
    from stores import free_port
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL_S3="http://127.0.0.1:%d" % port)
    ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False).start()  # a daemon thread: ends with us
    store().mkdir(BUCKET)


_STORE = []


def store():
    """The driver's filesystem of the store, made once (each one made costs 0.3 s of CPU: polled every 0.2 s for
    the interrupt, they took the cores the workers were starting on), its cached listings dropped: a call sees
    the store as it is now."""
    import s3fs
    if not _STORE:
        _STORE.append(s3fs.S3FileSystem(endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"], skip_instance_cache=True))
    _STORE[0].invalidate_cache()
    return _STORE[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("images", type=Path)
    parser.add_argument("folder", type=Path)
    parser.add_argument("jobs", nargs="+", metavar="FORMAT:GPUS[:FAULT]")
    args = parser.parse_args()
    # The interrupt fault sends SIGINT: as from a terminal, even when the suite was started with it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=logging.INFO)
    for module in ("parallel", "parallel.engine", "parallel.jobs.distributed"):  # before anything imports Ray
        importlib.import_module(module)
    print("IMPORTS_RAY " + json.dumps("ray" in sys.modules), flush=True)
    import ray.cluster_utils
    if any(job.endswith(":interrupt") for job in args.jobs):  # before the cluster: its workers inherit the variables
        start_store()
    os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)  # set by job_child: the nodes' workers would inherit it
    cluster = ray.cluster_utils.Cluster(initialize_head=True, head_node_args=CLUSTER)
    cluster.add_node(**CLUSTER)
    try:
        for job in args.jobs:
            result = run_job(args.images, args.folder, job, cluster.address)
            print("RESULT " + json.dumps(result), flush=True)
    finally:
        cluster.shutdown()
    return 0


if __name__ == "__main__":
    status = main()
    # Out without the interpreter's teardown: gRPC's threads of Ray's driver, torn down there after the cluster
    # is gone, sometimes abort (SIGABRT, "ASSERTION FAILED: grpc_cq_begin_op") once every result is printed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
