"""A job on one process: resumed, a full disk, a stop: each rerun finishes with the uninterrupted bytes."""


import pytest
import tensorflow as tf

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
