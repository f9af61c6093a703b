"""A job's text side (parallel/jobs/text_pass.py): each row's caption embedded by CLIP's text tower and scored against
its image, its labels ranked, on Parquet, TFRecord and tar inputs, on one process and three, killed and resumed.

Steps of one image (per_device_batch=1): a shard of two images embeds its captions in two chunks, committed one by
one, so that a kill between them shows what is resumed."""

import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import dataset_files
from models.clip import clip
from models.text_queries import text_embedding
from parallel import extract, jobs
from parallel.devices.text_runner import TextRunner
from parallel.inputs.tars import MEMBERS_SUFFIX, read_index
from parallel.jobs.ledger import Ledger, ledger_path
from parallel.output.text_rows import TEXT_SUFFIX, read_rows
from text_jobs import NAMES, clip_weights, config, write_datasets, write_images

LABELS = ("dog", "cat", "red sofa", "beach")


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """The small CLIP's folder (tests/text_jobs.py), with one block in each tower instead of two: every job here
    builds both towers (the text tower twice, for two lengths), which is most of what a job of six small images
    costs; what is tested is the job's text side, which does not depend on the depth."""
    import dataclasses
    import small_clip
    one_block = dataclasses.replace(small_clip.SMALL, vision=dataclasses.replace(small_clip.SMALL.vision, depth=1),
                                    text=dataclasses.replace(small_clip.SMALL.text, depth=1))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(small_clip, "SMALL", one_block)
        with clip_weights(tmp_path_factory.mktemp("clip") / "clip-random") as folder:
            yield folder


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return write_images(tmp_path_factory.mktemp("text") / "images")


@pytest.fixture(scope="module")
def alone(weights, images):
    """Each tower computed alone: (the images' embeddings from their files, in NAMES' order; their captions' and the
    labels' prompts' embeddings by the text tower on the host, as search computes a sentence)."""
    from models.text_queries import TextEmbedder
    paths, vectors = extract(clip.VIT_B32.feature_model("embedding", weights=weights), str(images))
    assert paths == NAMES
    with TextEmbedder("clip_vit_b32", weights=weights) as embedder:
        return vectors, embedder.text([dataset_files.caption(name) for name in NAMES]), embedder.text(
            ["a photo of a %s." % label for label in LABELS])


def files_of(output):
    """{suffix: bytes} of an output and what the job wrote beside it that a user reads."""
    return {suffix: Path(str(output) + suffix).read_bytes() for suffix in ("", MEMBERS_SUFFIX, TEXT_SUFFIX)
            if Path(str(output) + suffix).exists()}


@pytest.fixture(scope="module")
def one_process(weights, images, tmp_path_factory):
    """{layout: (files, column, output)} of a job over each layout on one process, with captions."""
    folder = tmp_path_factory.mktemp("runs")
    found = {}
    for layout, (files, column) in write_datasets(images, folder).items():
        output = folder / layout / "feats.parquet"
        summary = jobs.run(config(weights, files, output, text_column=column))
        assert (summary.written, summary.failed, summary.exit_status) == (6, 0, 0)
        found[layout] = (files, column, output)
    return found


@pytest.mark.parametrize("layout", ["parquet", "tfrecord", "tars"])
def test_a_caption_score_is_the_cosine_of_the_two_towers_computed_alone(one_process, alone, layout):
    files, column, output = one_process[layout]
    rows = read_rows(Path(str(output) + TEXT_SUFFIX))
    entries = read_index(Path(str(output) + MEMBERS_SUFFIX))
    assert rows.keys == [entry.key for entry in entries] and len(rows.keys) == 6  # the output's rows, in its order
    images, text, _ = alone
    expected = np.sum(images * text, axis=1) / np.linalg.norm(images, axis=1) / np.linalg.norm(text, axis=1)
    np.testing.assert_allclose(rows.embeddings, text, atol=1e-6)
    np.testing.assert_allclose(rows.scores, expected, atol=1e-6)
    assert rows.errors == [None] * 6 and rows.probabilities is None and rows.labels is None  # CLIP: no probability
    assert [entry.kept for entry in entries] == [(dataset_files.caption(name),) for name in NAMES]  # kept beside


def test_the_output_is_the_same_bytes_without_its_captions(one_process, weights, tmp_path):
    files, _, output = one_process["parquet"]
    plain = tmp_path / "plain.parquet"
    jobs.run(config(weights, files, plain))
    assert Path(str(plain)).read_bytes() == Path(str(output)).read_bytes()
    assert not Path(str(plain) + TEXT_SUFFIX).exists()


class Crash(Exception):
    """Stands for SIGKILL, in the middle of a shard's captions."""


def test_three_ranks_one_killed_one_signalled_in_their_captions_give_the_one_process_bytes(one_process, weights,
                                                                                         tmp_path, monkeypatch):
    files, column, output = one_process["tars"]
    ranks, real, calls, then = tmp_path / "ranks.parquet", TextRunner.embed, [], [None]

    def embed(runner, sentences):
        calls.append(list(sentences))
        if then[0] == "kill" and len(calls) == 2:
            raise Crash()  # shard 0's first chunk committed, its second not
        found = real(runner, sentences)
        if then[0] == "signal" and len(calls) == 1:  # shard 1's first chunk: committed, then the rank stops
            os.kill(os.getpid(), signal.SIGTERM)  # StopRequest's handler (the job's disposition) takes it
        return found
    monkeypatch.setattr(TextRunner, "embed", embed)

    def rank(number, how=None):
        then[0] = how
        calls.clear()
        spread = jobs.Distribution(kind="static", rank=number, world_size=3, wait_seconds=5)
        return jobs.run(config(weights, files, ranks, text_column=column, distribution=spread))
    with pytest.raises(Crash):
        rank(0, "kill")
    resumed = rank(0)
    assert calls == [[dataset_files.caption("a/01.png")]]  # only what the kill lost: a/00's was committed
    assert (resumed.written, resumed.already_done, resumed.pending_shards) == (0, 2, (1, 2))  # its images not again
    stopped = rank(1, "signal")
    assert stopped.interrupted and stopped.written == 2 and calls == [[dataset_files.caption("a/02.png")]]
    assert rank(1).pending_shards == (2,) and calls == [[dataset_files.caption("a/03.png")]]
    assert rank(2).pending_shards == ()
    assert files_of(ranks) == files_of(output) and set(files_of(ranks)) == {"", MEMBERS_SUFFIX, TEXT_SUFFIX}


def test_labels_are_the_zero_shot_ranking_by_hand_and_a_repaired_image_gets_its_own(weights, images, alone,
                                                                                      tmp_path):
    """A folder's images (labels need no caption); a bad image has none until it is repaired, then the rerun's
    retry gives it the labels, and the file the bytes, of a job that never saw it fail: retried into the output
    (its shards gone), or in its shard (kept), the output then written afresh."""
    folder = tmp_path / "images"
    shutil.copytree(images, folder)
    (folder / "a" / "bad.png").write_bytes(b"not an image")
    labels = tmp_path / "labels.txt"
    labels.write_text("template: a photo of a {}.\n\n" + "\n".join(LABELS) + "\n", encoding="utf-8")
    names, template = jobs.read_labels(labels)
    assert (names, template) == (LABELS, "a photo of a {}.")

    def run(output, keep_shards=False):
        return jobs.run(config(weights, folder, output, labels=names, label_template=template, labels_top=3,
                               shard_size=4, keep_shards=keep_shards))
    output, kept = tmp_path / "labels.parquet", tmp_path / "kept.parquet"
    assert run(output).failed == 1 and run(kept, keep_shards=True).failed == 1
    rows = read_rows(Path(str(output) + TEXT_SUFFIX))
    assert rows.keys == ["a/%02d.png" % number for number in range(6)] + ["a/bad.png"]
    vectors, _, prompts = alone
    cosines = vectors @ prompts.T / np.linalg.norm(vectors, axis=1)[:, None] / np.linalg.norm(prompts, axis=1)
    best = np.argsort(-cosines, axis=1)[:, :3]
    assert rows.labels[:6] == [tuple(LABELS[place] for place in order) for order in best] and rows.labels[6] is None
    np.testing.assert_allclose(rows.label_scores[:6], np.take_along_axis(cosines, best, axis=1), atol=1e-6)
    assert np.isnan(rows.label_scores[6]).all() and rows.embeddings is None  # no caption column

    Image.fromarray(np.full((20, 20, 3), 200, np.uint8)).save(folder / "a" / "bad.png", format="PNG")
    retried, in_shard = run(output), run(kept, keep_shards=True)
    assert (retried.written, retried.failed, in_shard.written, in_shard.failed) == (1, 0, 1, 0)
    assert [entry for entry in Ledger(ledger_path(output)).entries if "text" in entry]  # retried in the output
    assert not [entry for entry in Ledger(ledger_path(kept)).entries if "text" in entry]  # in its shard
    run(tmp_path / "fresh.parquet")
    assert files_of(output) == files_of(tmp_path / "fresh.parquet") == files_of(kept)
    assert read_rows(Path(str(output) + TEXT_SUFFIX)).labels[6] is not None


def test_a_missing_or_blank_caption_fails_alone_and_a_bad_image_keeps_its_caption(weights, images, tmp_path, caplog):
    import pyarrow as pa
    import pyarrow.parquet as pq
    captions = ["a dog", None, "   ", "two cats", "a red sofa", "a beach"]
    data = [(images / name).read_bytes() for name in NAMES]
    data[4] = b"not an image"
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"key": ["%03d" % number for number in range(6)], "jpg": pa.array(data, pa.binary()),
                             "caption": pa.array(captions, pa.string())}), path)
    output = tmp_path / "captions.parquet"
    caplog.set_level("INFO", logger="parallel")
    summary = jobs.run(config(weights, [path], output, text_column="caption"))
    assert (summary.written, summary.failed, summary.exit_status) == (5, 1, 3)  # the bad image; not the captions
    rows = read_rows(Path(str(output) + TEXT_SUFFIX))
    assert rows.errors == [None, "missing", "empty", None, None, None]
    assert [np.isnan(score) for score in rows.scores] == [False, True, True, False, True, False]
    assert np.isnan(rows.embeddings[1:3]).all() and not np.isnan(rows.embeddings[[0, 3, 4, 5]]).any()
    np.testing.assert_allclose(rows.embeddings[4], text_embedding("clip_vit_b32", "a red sofa", weights=weights)[0],
                               atol=1e-6)  # its image failed, its caption did not
    assert "2 of the shard's 6 captions are missing or blank" in caplog.text


def test_the_text_file_is_read_as_the_outputs_page_shows(one_process, weights, tmp_path, monkeypatch, capsys):
    """A job with captions and labels, read in pandas as docs/outputs.md shows."""
    files, column, _ = one_process["parquet"]
    monkeypatch.chdir(tmp_path)
    jobs.run(config(weights, files, "feats.parquet", text_column=column, labels=LABELS, shard_size=3))
    page = (Path(__file__).resolve().parent.parent / "docs" / "outputs.md").read_text()
    example = page.split("## What a text tower gave each row")[1].split("```python\n")[1].split("```")[0]
    namespace = {}
    exec(compile(example, "docs/outputs.md", "exec"), namespace)
    rows = read_rows("feats.parquet" + TEXT_SUFFIX)
    assert list(namespace["kept"]["path"]) == [key for key, score in zip(rows.keys, rows.scores) if score >= 0.28]
    assert list(namespace["table"]["label_1"]) == [labels[0] for labels in rows.labels]
    assert namespace["vectors"].dtype == np.float32 and np.array_equal(namespace["vectors"], rows.embeddings)
    assert "label_score_1" in capsys.readouterr().out  # what it prints: pandas' table


def test_a_text_file_that_is_not_the_one_closed_is_merged_again_or_the_output_written_afresh(one_process, weights,
                                                                                            tmp_path):
    files, column, output = one_process["tfrecord"]
    copy = tmp_path / "kept.parquet"
    jobs.run(config(weights, files, copy, text_column=column, keep_shards=True))
    text = Path(str(copy) + TEXT_SUFFIX)
    text.write_bytes(text.read_bytes()[:-9] + b"damaged\n\n")  # its footer's length and magic number
    again = jobs.run(config(weights, files, copy, text_column=column, keep_shards=True))
    assert (again.written, again.already_done) == (0, 6) and files_of(copy) == files_of(output)  # from its shards
    shutil.rmtree(str(copy) + ".shards")
    text.write_bytes(text.read_bytes().replace(b"caption", b"Caption", 1))  # the same size, another SHA-256
    afresh = jobs.run(config(weights, files, copy, text_column=column))
    assert afresh.written == 6 and files_of(copy) == files_of(output)  # its shards gone: every one computed again


def test_a_store_output_s_text_file_is_the_local_one(one_process, weights, s3):
    files, column, output = one_process["tars"]
    summary = jobs.run(config(weights, files, "s3://%s/runs/feats.parquet" % s3.bucket, text_column=column))
    assert (summary.written, summary.exit_status) == (6, 0)
    stored = {suffix: s3.filesystem.cat_file("%s/runs/feats.parquet%s" % (s3.bucket, suffix))
              for suffix in ("", MEMBERS_SUFFIX, TEXT_SUFFIX)}
    assert stored == files_of(output)


def test_an_attempt_killed_in_its_captions_whose_rows_were_damaged_is_computed_again(one_process, weights, tmp_path,
                                                                                      monkeypatch, caplog):
    files, column, output = one_process["parquet"]
    again = tmp_path / "again.parquet"
    monkeypatch.setattr(TextRunner, "embed", lambda runner, sentences: (_ for _ in ()).throw(Crash()))
    with pytest.raises(Crash):
        jobs.run(config(weights, files, again, text_column=column))
    attempt, = Path(str(again) + ".attempts").glob("shard-*")
    (attempt / "features.parquet").write_bytes(b"PAR1 cut")  # its rows: not what its index says
    monkeypatch.undo()
    summary = jobs.run(config(weights, files, again, text_column=column))
    assert (summary.written, summary.already_done) == (6, 0) and files_of(again) == files_of(output)
    assert "cannot be resumed after its images (it cannot be read" in caplog.text
