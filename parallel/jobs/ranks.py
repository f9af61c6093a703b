"""This process's rank in a job of several: from --rank/--world-size, or from the scheduler's environment.

    source                 rank                     world size
    --rank/--world-size    --rank                   --world-size          (both flags win over the environment)

Messages name the parameters (`rank=`, `world_size=`); the command line writes them as its flags.
    Slurm                  SLURM_PROCID             SLURM_NTASKS
    torchrun               RANK                     WORLD_SIZE
    Kubernetes Indexed Job JOB_COMPLETION_INDEX     --world-size (the Job's completions)
    TF_CONFIG              the task's place         every chief and worker task of "cluster"

Only `--distributed static` reads these: without it a variable left in the environment (a
TF_CONFIG of another job, say) changes nothing. Two sources that disagree are an error naming
both, never a guess; so is a --world-size alone that disagrees with the environment (--rank alone
wins over the environment's rank, which a launcher may number otherwise).
"""

import dataclasses
import json
import os

_TF_CONFIG_TYPES = ("chief", "master", "worker")  # the tasks that work; "ps" and "evaluator" do not


@dataclasses.dataclass(frozen=True)
class Rank:
    """Attributes: rank (0 <= rank < world_size), world_size, and source (where they came from)."""

    rank: int
    world_size: int
    source: str

    def shards(self, count):
        """The shards of a job of `count` shards this rank runs: i with i mod world_size == rank."""
        return range(self.rank, count, self.world_size)


def resolve_rank(rank=None, world_size=None, environ=None):
    """The rank of this process, from the flags or the environment (see the module docstring).

    Args:
      rank: --rank, or None.
      world_size: --world-size, or None.
      environ: the environment (default os.environ).

    Returns:
      Rank.

    Raises:
      ValueError: no source, sources that disagree, or a rank outside 0 .. world size - 1;
        the message names the variables and values.
    """
    environ = os.environ if environ is None else environ
    if rank is not None and world_size is not None:
        return _checked(rank, world_size, "rank and world size given")
    found = [source for source in _environment_sources(environ, world_size) if source is not None]
    if world_size is not None:  # --world-size without --rank: it must agree with the rank's source
        for source in found:
            if source.world_size != world_size:
                raise ValueError("world_size=%d but %s says %d ranks; pass the world size the scheduler "
                                 "started, or both rank= and world_size=" % (world_size, source.source,
                                                                            source.world_size))
    if rank is not None:  # --rank without --world-size: the world size from the environment
        found = [Rank(rank, source.world_size, "rank given, world size from " + source.source) for source in found[:1]]
    for first, second in zip(found, found[1:]):
        if (first.rank, first.world_size) != (second.rank, second.world_size):
            raise ValueError("the environment gives two different ranks: %s says rank %d of %d, %s says rank %d "
                             "of %d; pass rank= and world_size=" % (first.source, first.rank, first.world_size,
                                                                     second.source, second.rank, second.world_size))
    if not found:
        raise ValueError("distributed static needs rank= and world_size=, or the environment of a scheduler: "
                         "SLURM_PROCID/SLURM_NTASKS (Slurm), RANK/WORLD_SIZE (torchrun), JOB_COMPLETION_INDEX with "
                         "world_size= (Kubernetes), or TF_CONFIG")
    return _checked(found[0].rank, found[0].world_size, found[0].source)


def _environment_sources(environ, world_size):
    """A Rank (or None) for each scheduler whose variables are set."""
    yield _pair(environ, "SLURM_PROCID", "SLURM_NTASKS", "Slurm (SLURM_PROCID, SLURM_NTASKS)")
    yield _pair(environ, "RANK", "WORLD_SIZE", "torchrun (RANK, WORLD_SIZE)")
    if "JOB_COMPLETION_INDEX" in environ:
        if world_size is None:
            raise ValueError("JOB_COMPLETION_INDEX=%s (a Kubernetes Indexed Job) needs world_size=: the Job's "
                             "completions" % environ["JOB_COMPLETION_INDEX"])
        yield Rank(_integer(environ, "JOB_COMPLETION_INDEX"), world_size,
                   "Kubernetes (JOB_COMPLETION_INDEX, world size given)")
    if "TF_CONFIG" in environ:
        yield _from_tf_config(environ["TF_CONFIG"])


def _pair(environ, rank_name, size_name, source):
    if rank_name not in environ and size_name not in environ:
        return None
    if rank_name not in environ or size_name not in environ:
        raise ValueError("%s is set but %s is not" % ((size_name, rank_name) if rank_name not in environ
                                                      else (rank_name, size_name)))
    return Rank(_integer(environ, rank_name), _integer(environ, size_name), source)


def _integer(environ, name):
    try:
        return int(environ[name])
    except ValueError:
        raise ValueError("%s=%r is not a whole number" % (name, environ[name])) from None


def _from_tf_config(text):
    try:
        config = json.loads(text)
        task_type, task_index = config["task"]["type"], int(config["task"]["index"])
        cluster = config["cluster"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError("TF_CONFIG is not a TensorFlow cluster description (%s): %r" % (error, text[:200])) from None
    if task_type not in _TF_CONFIG_TYPES:
        raise ValueError("TF_CONFIG names task type %r; only %s tasks compute features"
                         % (task_type, "/".join(_TF_CONFIG_TYPES)))
    tasks = [(kind, index) for kind in _TF_CONFIG_TYPES for index in range(len(cluster.get(kind, ())))]
    if (task_type, task_index) not in tasks:
        raise ValueError("TF_CONFIG's task %s:%d is not in its cluster" % (task_type, task_index))
    return Rank(tasks.index((task_type, task_index)), len(tasks), "TF_CONFIG (task %s:%d)" % (task_type, task_index))


def _checked(rank, world_size, source):
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError("world size must be at least 1; got %r (from %s)" % (world_size, source))
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError("rank must be in 0 .. %d; got %r (from %s)" % (world_size - 1, rank, source))
    return Rank(rank, world_size, source)
