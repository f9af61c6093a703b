"""The rank of a process: from the flags, or from the environment of Slurm, torchrun, Kubernetes or TF_CONFIG."""

import json

import pytest

from parallel.jobs.ranks import Rank, resolve_rank


def tf_config(task_type, index, workers=3, chief=True):
    cluster = {"worker": ["w%d:2222" % i for i in range(workers)], "ps": ["ps0:2222"]}
    if chief:
        cluster["chief"] = ["c0:2222"]
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


@pytest.mark.parametrize("environ, world_size, expected", [
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "4"}, None, (2, 4, "Slurm")),
    ({"RANK": "1", "WORLD_SIZE": "3"}, None, (1, 3, "torchrun")),
    ({"JOB_COMPLETION_INDEX": "5"}, 8, (5, 8, "Kubernetes")),
    ({"TF_CONFIG": tf_config("worker", 1)}, None, (2, 4, "TF_CONFIG (task worker:1)")),  # chief is rank 0
    ({"TF_CONFIG": tf_config("chief", 0)}, None, (0, 4, "TF_CONFIG")),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "RANK": "1", "WORLD_SIZE": "2"}, None, (1, 2, "Slurm")),  # agree
])
def test_each_scheduler_environment_gives_the_rank_and_says_so(environ, world_size, expected):
    rank = resolve_rank(world_size=world_size, environ=environ)
    assert (rank.rank, rank.world_size) == expected[:2]
    assert expected[2] in rank.source


def test_flags_win_over_the_environment():
    environ = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "TF_CONFIG": "not even json"}
    assert resolve_rank(1, 2, environ) == Rank(1, 2, "rank and world size given")


def test_disagreeing_sources_are_an_error_naming_both():
    with pytest.raises(ValueError) as refused:
        resolve_rank(environ={"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "RANK": "1", "WORLD_SIZE": "2"})
    message = str(refused.value)
    assert "Slurm (SLURM_PROCID, SLURM_NTASKS) says rank 0 of 2" in message
    assert "torchrun (RANK, WORLD_SIZE) says rank 1 of 2" in message and "pass rank= and world_size=" in message


@pytest.mark.parametrize("rank, world_size, environ, message", [
    (None, None, {}, "needs rank= and world_size=, or the environment of a scheduler"),
    (None, None, {"SLURM_PROCID": "0"}, "SLURM_PROCID is set but SLURM_NTASKS is not"),
    (None, None, {"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not a whole number"),
    (None, None, {"JOB_COMPLETION_INDEX": "1"}, "JOB_COMPLETION_INDEX=1 .* needs world_size="),
    (None, None, {"TF_CONFIG": "{"}, "TF_CONFIG is not a TensorFlow cluster description"),
    (None, None, {"TF_CONFIG": tf_config("ps", 0)}, "TF_CONFIG names task type 'ps'"),
    (None, None, {"TF_CONFIG": tf_config("worker", 7)}, "task worker:7 is not in its cluster"),
    (3, 3, {}, "rank must be in 0 .. 2; got 3 \\(from rank and world size given\\)"),
    (0, 0, {}, "world size must be at least 1; got 0"),
    (None, None, {"SLURM_PROCID": "4", "SLURM_NTASKS": "4"}, "rank must be in 0 .. 3; got 4 \\(from Slurm"),
])
def test_bad_ranks_are_one_clear_error(rank, world_size, environ, message):
    with pytest.raises(ValueError, match=message):
        resolve_rank(rank, world_size, environ)


def test_shard_i_goes_to_rank_i_mod_w():
    assert list(Rank(1, 3, "x").shards(8)) == [1, 4, 7]
    assert sorted(i for r in range(3) for i in Rank(r, 3, "x").shards(8)) == list(range(8))


@pytest.mark.parametrize("environ, source, world_size", [
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "4"}, "Slurm (SLURM_PROCID, SLURM_NTASKS)", 4),
    ({"RANK": "1", "WORLD_SIZE": "2"}, "torchrun (RANK, WORLD_SIZE)", 2),
    ({"TF_CONFIG": tf_config("worker", 0)}, "TF_CONFIG (task worker:0)", 4),
])
def test_a_world_size_flag_that_disagrees_with_the_environment_is_an_error_naming_both(environ, source, world_size):
    with pytest.raises(ValueError) as refused:
        resolve_rank(world_size=8, environ=environ)
    assert str(refused.value).startswith("world_size=8 but %s says %d ranks" % (source, world_size))
    assert resolve_rank(world_size=world_size, environ=environ) == Rank(1, world_size, source)  # agreeing: no error
