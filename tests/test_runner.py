"""A job on one process: resumed, a full disk, a stop: each rerun finishes with the uninterrupted bytes; its shard
size and kept shards, as a spread job's."""


import dataclasses
import shutil
from pathlib import Path

import pytest
import tensorflow as tf
from PIL import Image

from colour_jobs import SIZE, WEIGHTS, StopAfter, config_for, make_images
from parallel import engine, jobs
from parallel.jobs import distributed

tf1 = tf.compat.v1


def test_a_rerun_resumes_and_computes_nothing_twice(tmp_path):
    images = tmp_path / "images"
    make_images(images, 5)
    first = jobs.run(config_for(tmp_path, images))
    before = (tmp_path / "out" / "features.csv").read_bytes()
    second = jobs.run(config_for(tmp_path, images))
    assert (first.written, second.written, second.already_done) == (5, 0, 5)
    assert (tmp_path / "out" / "features.csv").read_bytes() == before


# --- the final merge: a full disk, a signal ------------------------------------------------------------


def wide_model(images):
    """uint8 [N, 16, 16, 3] -> float32 [N, 19200]: big rows that do not compress, so that a few fill a small disk."""
    scale = tf1.get_variable("colour/scale", [3], initializer=tf1.zeros_initializer())
    pixels = tf.cast(images, tf.float32) * scale
    return tf.tile(tf.reshape(pixels, [-1, 768]), [1, 25]) * tf.linspace(1.0, 2.0, 19200)


WIDE = engine.ModelSpec(name="wide", fn=wide_model, image_size=SIZE, load_weights=lambda: WEIGHTS,
                        output_name="wide", settings={"model": "wide"})


@pytest.mark.parametrize("output_format", ["parquet", "npy"])
def test_a_full_disk_during_the_final_merge_is_a_run_error_and_a_rerun_finishes(tmp_path, small_disk, output_format):
    if output_format == "parquet" and not small_disk.real:
        pytest.skip("needs a real small file system (root): pyarrow does not write through os.write")
    images = tmp_path / "images"
    make_images(images, 6)
    reference = tmp_path / ("reference." + output_format)
    jobs.run(config_for(tmp_path, images, model=WIDE, output=reference, output_format=output_format))
    output = small_disk.folder / ("out." + output_format)
    small_disk.leave_free(700 * 1024)  # the parts (6 x 77 KB) fit; the merged copy beside them does not
    with pytest.raises(engine.RunError, match="disk full while writing .*rows committed, rerun to resume"):
        jobs.run(config_for(tmp_path, images, model=WIDE, output=output, output_format=output_format))
    small_disk.free_space()
    summary = jobs.run(config_for(tmp_path, images, model=WIDE, output=output, output_format=output_format))
    assert (summary.written, summary.already_done) == (0, 6)
    assert output.read_bytes() == reference.read_bytes()


# --- exit statuses: a full disk is never a usage error (2 means nothing was written) -------------------


@pytest.mark.parametrize("free", [0, 4096])  # the sidecar cannot be written; the data file's header cannot
def test_a_full_disk_at_the_first_write_is_a_run_error(tmp_path, small_disk, free):
    images = tmp_path / "images"
    make_images(images, 4)
    small_disk.leave_free(free)
    with pytest.raises(engine.RunError, match="^(disk full while writing |cannot write the manifest |.*No space left "
                                              "on device: ).*out.csv.*rerun"):
        jobs.run(config_for(tmp_path, images, output=small_disk.folder / "out.csv"))
    small_disk.free_space()
    assert jobs.run(config_for(tmp_path, images, output=small_disk.folder / "out.csv")).written == 4


def test_a_rerun_with_nothing_to_compute_says_so(tmp_path):
    images = tmp_path / "images"
    make_images(images, 4)
    output = jobs.run(config_for(tmp_path, images)).output
    assert jobs.run(config_for(tmp_path, images)).line() == "4 images: all already done -> %s" % output
    distribution = jobs.Distribution(kind="static", rank=0, world_size=1, shard_size=2, wait_seconds=5)
    sharded = tmp_path / "sharded.csv"
    jobs.run(config_for(tmp_path, images, output=sharded, distribution=distribution))
    again = jobs.run(config_for(tmp_path, images, output=sharded, distribution=distribution))
    assert again.line() == "4 images: all already done -> %s" % sharded


@pytest.mark.parametrize("output_format", ["csv", "parquet", "npy"])
def test_a_stopped_run_resumed_gives_the_bytes_of_an_uninterrupted_one(job_images, tmp_path, monkeypatch,
                                                                       output_format):
    """Steps start at fixed positions of the job's images: an image that failed before the stop and is retried
    by the rerun does not shift which images share a step, so a model whose rows depend on that (as oneDNN's
    may, in the last bits) gives the same rows."""
    import job_child
    from outputs import job_outputs

    def run(output):
        return jobs.run(job_child.config(job_images, output, output_format, per_device_batch=2,
                                           batch_dependent=True))
    run(tmp_path / ("single." + output_format))
    resumed = tmp_path / ("resumed." + output_format)
    monkeypatch.setattr(distributed, "StopRequest", lambda: StopAfter(8))  # a/bad.png (the 13th image) is behind
    stopped = run(resumed)
    assert stopped.interrupted and stopped.failed == 1 and stopped.written == 15
    monkeypatch.undo()
    summary = run(resumed)
    assert (summary.written, summary.failed, summary.already_done) == (8, 1, 15)
    assert job_outputs(resumed) == job_outputs(tmp_path / ("single." + output_format))


# --- a shard size and kept shards on one process: the sharded job without a Distribution ------------------------


def test_one_process_cuts_its_job_into_the_shards_given_and_writes_the_same_bytes(job_images, single_outputs,
                                                                                  tmp_path):
    import job_child
    from outputs import job_outputs
    from parallel.inputs.manifest import manifest_path, read_job
    output = tmp_path / "out.csv"

    def run(shard_size):
        return jobs.run(dataclasses.replace(job_child.config(job_images, output, "csv"), shard_size=shard_size))
    summary = run(4)
    assert (summary.written, summary.failed) == (23, 1)
    assert read_job(manifest_path(output))["shard_size"] == 4  # 24 images: 6 shards
    assert job_outputs(output) == single_outputs["csv"]
    assert not Path(str(output) + ".shards").exists()  # each went once its rows were in the output
    with pytest.raises(ValueError, match="cut into shards of 4 images, not 5: leave --shard-size out"):
        run(5)
    again = run(None)  # the job's own size: resumed, its failed image tried again
    assert (again.written, again.failed, again.already_done) == (0, 1, 23)
    assert job_outputs(output) == single_outputs["csv"] and read_job(manifest_path(output))["shard_size"] == 4


def test_kept_shards_on_one_process_are_a_parquet_dataset_of_every_row_and_a_rerun_retries_in_them(
        job_images, single_outputs, tmp_path):
    import job_child
    import pandas as pd
    from outputs import job_outputs
    root = tmp_path / "images"
    shutil.copytree(job_images, root)
    output = tmp_path / "out.parquet"

    def run():
        return jobs.run(dataclasses.replace(job_child.config(root, output, "parquet"), shard_size=5,
                                            keep_shards=True))
    summary = run()
    assert (summary.written, summary.failed) == (23, 1)
    assert job_outputs(output) == single_outputs["parquet"]
    shards = Path(str(output) + ".shards")  # never removed one by one: every shard, nothing of the assembly's
    assert sorted(path.name for path in shards.iterdir()) == ["shard-%06d" % index for index in range(5)]
    frame = pd.read_parquet(shards)
    assert len(frame) == 23 and sorted(frame["path"]) == sorted(pd.read_parquet(output)["path"])
    Image.new("RGB", (12, 10), (1, 2, 3)).save(root / "a" / "bad.png")  # repaired
    again = run()
    assert (again.written, again.failed, again.already_done) == (1, 0, 23)
    assert len(pd.read_parquet(shards)) == 24 and len(pd.read_parquet(output)) == 24


def test_the_shard_size_and_kept_shards_are_one_setting_of_the_config_and_its_distribution(tmp_path):
    images = tmp_path / "images"
    alone = config_for(tmp_path, images, shard_size=4, keep_shards=True)
    assert (alone.shard_size, alone.keep_shards, alone.distribution) == (4, True, None)
    spread = config_for(tmp_path, images, shard_size=4, keep_shards=True, distribution=jobs.Distribution("static"))
    assert (spread.distribution.shard_size, spread.distribution.keep_shards) == (4, True)
    given_there = config_for(tmp_path, images, distribution=jobs.Distribution("static", shard_size=6,
                                                                              keep_shards=True))
    assert (given_there.shard_size, given_there.keep_shards) == (6, True)
    assert dataclasses.replace(given_there, workers=1).distribution == given_there.distribution
    with pytest.raises(ValueError, match="shard_size=4 and the distribution's shard_size=6 disagree"):
        config_for(tmp_path, images, shard_size=4, distribution=jobs.Distribution("static", shard_size=6))
    for wrong in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="shard_size must be at least 1; got %r" % (wrong,)):
            config_for(tmp_path, images, shard_size=wrong)
