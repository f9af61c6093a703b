"""search/service.py and its HTTP side search/api.py: the JSON API against `neighbours`, its refusals, its bounds."""

import csv
import http.client
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hangs import HANG_SECONDS
from parallel.inputs.manifest import Manifest, manifest_path
import search.api
from search.api import make_service, reachable_warning
from search.index import Index
from search.service import NO_EMBEDDER, Limits, Service
from search_data import clustered, write_npy
from serving import serving, stop
from services import (HTML_CAPTION, Running, clip_job, kept_job, png, run,  # noqa: F401 -- the jobs: fixtures
                      siglip_job)

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


# ----------------------------------------------------------------- the API answers as the command line does

def _cli_neighbours(capsys, *argv):
    capsys.readouterr()
    assert run("neighbours", *argv) == 0
    return [(row["path"], float(row["score"])) for row in csv.DictReader(io.StringIO(capsys.readouterr().out))]


def no_text_tower(model):
    """The line refusing a text query on an output of `model` (models.text_queries names the text towers)."""
    from models.text_queries import check_text_queries
    with pytest.raises(ValueError) as refused:
        check_text_queries({"model": model, "layer": "relu7"})
    return str(refused.value)


def no_captions(index):
    """The line refusing a caption query on `index`, an output of a job without --text-column (search.captions)."""
    from search.captions import check_caption_scores
    with pytest.raises(ValueError) as refused:
        check_caption_scores(index)
    return str(refused.value)


def _api_neighbours(answer):
    return [(found["key"], found["score"]) for found in answer["neighbours"]]


def _same(api, cli):
    assert [key for key, _ in api] == [key for key, _ in cli] and len(api) == 5
    np.testing.assert_allclose([score for _, score in api], [score for _, score in cli], atol=1e-6)


def test_the_api_answers_a_key_an_image_and_a_sentence_as_neighbours_does(clip_job, tmp_path, capsys):
    from models.query_embedder import QueryEmbedder
    from parallel.queries import ImageEmbedder
    folder, weights, index_folder, images = clip_job
    index = Index.load(index_folder)
    query = tmp_path / "new.png"
    query.write_bytes(png((120, 90), 99))  # not an indexed image: computed by the model
    embedder = QueryEmbedder(index.settings, index.meta["source"]["output"], weights=str(weights),
                             image_embedder=ImageEmbedder)
    with Running(Service(index, embedder)) as service:
        status, by_key, _ = service.request("/api/search?key=colour03.png&k=5")
        assert status == 200
        _same(_api_neighbours(by_key), _cli_neighbours(capsys, index_folder, "colour03.png", "-k", "5"))
        status, by_image, _ = service.request("/api/search/image?k=5", body=query.read_bytes())
        assert status == 200
        _same(_api_neighbours(by_image), _cli_neighbours(capsys, index_folder, query, "-k", "5", "--weights",
                                                         weights))
        sentence = "a red square on a beach"
        status, by_text, _ = service.request("/api/search?" + urllib.parse.urlencode({"text": sentence, "k": 5}))
        assert status == 200 and by_text["query"] == {"text": sentence}
        _same(_api_neighbours(by_text), _cli_neighbours(capsys, index_folder, "--text", sentence, "-k", "5",
                                                        "--weights", weights))
        assert by_text["neighbours"][0]["score"] - by_text["neighbours"][4]["score"] >= 1e-4  # the check can fail
        assert "probability" not in by_text["neighbours"][0]  # CLIP has no probability of its own
        status, by_row, _ = service.request("/api/neighbours?row=3&k=5")
        assert status == 200 and by_row["query"] == {"row": 3, "key": "colour03.png"}
        assert by_row["neighbours"] == by_key["neighbours"]
        status, image, headers = service.request("/api/image?row=3")
        assert status == 200 and image == (images / "colour03.png").read_bytes()
        assert headers["Content-Type"] == "image/png"
    embedder.close()


def test_a_siglip_sentence_s_neighbours_carry_siglip_s_probability_in_the_api_and_the_command_line(siglip_job,
                                                                                                     capsys):
    """SigLIP's own score beside the cosine, sigmoid(exp(logit_scale) * cosine + logit_bias): a field
    "probability" of each neighbour of a sentence in the service's JSON, a column "probability" in neighbours' CSV
    (after score); none for an image's neighbours."""
    from models.query_embedder import QueryEmbedder
    folder, weights, index_folder, images = siglip_job
    index = Index.load(index_folder)
    assert index.meta["centre"]["centred"] is False and "SigLIP's cosine" in index.meta["centre"]["reason"]
    embedder = QueryEmbedder(index.settings, index.meta["source"]["output"], weights=str(weights))
    sentence = "Ein Hund am Strand, 東京 2024"
    with Running(Service(index, embedder)) as service:
        status, by_text, _ = service.request("/api/search?" + urllib.parse.urlencode({"text": sentence, "k": 5}))
        status_key, by_key, _ = service.request("/api/search?key=colour03.png&k=5")
    embedder.close()
    assert status == status_key == 200 and "probability" not in by_key["neighbours"][0]
    capsys.readouterr()
    assert run("neighbours", index_folder, "--text", sentence, "-k", "5", "--weights", weights) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "query,rank,score,probability,path"
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    _same(_api_neighbours(by_text), [(row["path"], float(row["score"])) for row in rows])
    scores = np.array([found["score"] for found in by_text["neighbours"]])
    chances = np.array([found["probability"] for found in by_text["neighbours"]])
    # The small model's logit_scale ln(10) and logit_bias -10 (tests/siglip_files.py's random weights).
    np.testing.assert_allclose(chances, 1 / (1 + np.exp(-(10 * scores - 10))), rtol=1e-5)
    np.testing.assert_allclose([float(row["probability"]) for row in rows], chances, rtol=1e-5)
    assert np.all(np.diff(chances) <= 0) and chances[0] > chances[-1]  # ranked alike, and they differ
    capsys.readouterr()
    assert run("neighbours", index_folder, "colour03.png", "-k", "2") == 0
    assert capsys.readouterr().out.splitlines()[0] == "query,rank,score,path"  # an image's: no such column


@pytest.fixture(scope="module")
def siglip_captions_job(siglip_job, tmp_path_factory):
    """An output of the small SigLIP's embedding over an img2dataset Parquet file of six captioned images, run with
    --text-column caption, and its index: (weights, index folder, its text file's TextRows)."""
    import run_inference
    from dataset_files import write_files
    from parallel.output.text_rows import TEXT_SUFFIX, read_rows
    from text_jobs import write_images
    _, weights, _, _ = siglip_job
    folder = tmp_path_factory.mktemp("siglip-captions")
    write_files("img2dataset", write_images(folder / "images"), folder / "parquet", per_file=6)
    assert run_inference.main(["--images", str(folder / "parquet" / "*.parquet"), "--output", str(folder / "f.npy"),
                               "--model", "siglip", "--weights", str(weights), "--text-column", "caption",
                               "--devices", "cpu:0", "--quiet"]) == 0
    assert run("--quiet", "index", folder / "f.npy") == 0
    return weights, folder / "f.npy.index", read_rows(str(folder / "f.npy") + TEXT_SUFFIX)


def test_a_caption_query_and_the_caption_score_bound_are_answered_as_neighbours_does(siglip_captions_job,
                                                                                     siglip_job, capsys):
    from dataset_files import caption
    from models.query_embedder import QueryEmbedder
    weights, index_folder, rows = siglip_captions_job
    index = Index.load(index_folder)
    scores = dict(zip(rows.keys, rows.scores.tolist()))
    bound = float(np.sort(rows.scores)[2])  # the four highest pass
    sentence = caption("a/03.png")
    embedder = QueryEmbedder(index.settings, index.meta["source"]["output"], weights=str(weights))
    with Running(Service(index, embedder)) as service:
        description = service.request("/api/index")[1]
        by_caption = service.request("/api/search?" + urllib.parse.urlencode({"caption": sentence, "k": 4}))[1]
        by_text = service.request("/api/search?" + urllib.parse.urlencode({
            "text": sentence, "k": 6, "min_caption_score": repr(bound)}))[1]
        by_row = service.request("/api/neighbours?row=0&k=6&min_caption_score=%r" % bound)[1]
        _refused(service.request("/api/search?key=x&caption=a+dog"), 400, "give one of text")
        _refused(service.request("/api/neighbours?row=0&min_caption_score=2"), 400, "min_caption_score must be a "
                                                                                     "cosine from -1 to 1; got '2'")
    embedder.close()
    assert description["queries"]["caption"] is True and "caption" not in description["unavailable"]
    assert description["caption_scores"] is True
    for answer in (by_caption, by_text, by_row):  # each row answered carries its caption score, as the file has it
        assert all(found["caption_score"] == pytest.approx(scores[found["key"]], abs=1e-6)
                   for found in answer["neighbours"]), answer
    assert Service(index, embedder).answers() == ("answers: neighbours of a row or a key, a sentence, a sentence "
                                                  "against the captions, an image, a vector, duplicates")
    assert by_caption["query"] == {"caption": sentence} and "probability" not in by_caption["neighbours"][0]
    cli = _cli_neighbours(capsys, index_folder, "--caption", sentence, "-k", "4", "--weights", weights)
    assert [found["key"] for found in by_caption["neighbours"]] == [key for key, _ in cli] and len(cli) == 4
    first = by_caption["neighbours"][0]  # the row of that caption, by its own
    assert first["score"] == pytest.approx(1, abs=1e-5) and first["row"] == index.row(first["key"])
    np.testing.assert_allclose([found["score"] for found in by_caption["neighbours"]], [score for _, score in cli],
                               atol=1e-6)
    cli = _cli_neighbours(capsys, index_folder, "--text", sentence, "-k", "6", "--weights", weights,
                          "--min-caption-score", repr(bound))
    assert [found["key"] for found in by_text["neighbours"]] == [key for key, _ in cli]
    assert {key for key, _ in cli} == {key for key, score in scores.items() if score >= bound}
    assert all("probability" in found for found in by_text["neighbours"])  # a sentence against the images: SigLIP's
    assert {found["key"] for found in by_row["neighbours"]} == {key for key, score in scores.items() if score >= bound}
    _, _, plain, _ = siglip_job  # an output without captions: no caption query, no bound
    with Running(Service(Index.load(plain), embedder)) as service:
        description = service.request("/api/index")[1]
        _refused(service.request("/api/neighbours?row=0&min_caption_score=0.1"), 400, "has no caption scores")
        _refused(service.request("/api/search?caption=a+dog"), 400, "has no caption scores")
        by_plain_row = service.request("/api/neighbours?row=0&k=2")[1]
    assert description["queries"]["caption"] is False and "has no caption scores" in description["unavailable"][
        "caption"]
    assert description["caption_scores"] is False and "caption_score" not in by_plain_row["neighbours"][0]


# ----------------------------------------------------------------- refusals, each one status and one line

class FakeEmbedder:
    """Vectors of the index's width; when told to block, each call sets `entered` and waits for `release`."""

    def __init__(self, dims, block=False):
        self.dims, self.block = dims, block
        self.entered, self.release = threading.Event(), threading.Event()

    def _vectors(self, count):
        if self.block:
            self.entered.set()
            assert self.release.wait(HANG_SECONDS)
        return np.ones((count, self.dims), np.float32)

    def text(self, sentences):
        return self._vectors(len(sentences))

    def images(self, images):
        return self._vectors(len(images)), []


@pytest.fixture(scope="module")
def vgg_index(tmp_path_factory):
    """An index of 300 rows of an output of vgg16's relu7 (no text tower), its images folder holding row 0's file
    (the output's manifest records it, as a job's does)."""
    folder = tmp_path_factory.mktemp("vgg")
    images = folder / "images" / "img"
    images.mkdir(parents=True)
    (images / "00000.jpg").write_bytes(png((40, 30), 0))
    write_npy(folder / "f.npy", clustered(300), settings={"model": "vgg16", "layer": "relu7", "weights": "imagenet",
                                                          "precision": "fp32", "images": str(folder / "images")})
    Manifest.scan(folder / "images").save(manifest_path(folder / "f.npy"))
    return Index.build(folder / "f.npy", folder / "f.index")


def _refused(answer, status, *words):
    got, body, headers = answer
    assert got == status and body == {"status": status, "error": body["error"]}, body
    assert "\n" not in body["error"] and all(word in body["error"] for word in words), body["error"]
    assert headers["Content-Security-Policy"] == "default-src 'none'; frame-ancestors 'none'"


def test_refusals_are_one_status_and_one_line_of_json(vgg_index):
    limits = Limits(max_upload_bytes=50_000, max_pixels=1_000_000, max_k=100, max_sentence=50)
    with Running(Service(vgg_index, FakeEmbedder(64), limits)) as service:
        _refused(service.request("/api/image?path=/etc/passwd"), 400, "/api/image takes row; not 'path'")
        _refused(service.request("/api/image?row=0&file=../../etc/passwd"), 400, "not 'file'")
        _refused(service.request("/etc/passwd"), 404, "no such endpoint")
        _refused(service.request("/api/../../etc/passwd"), 404, "no such endpoint")
        _refused(service.request("/api/search/image", body=b"\0" * 50_001), 413, "more than 50000")
        bomb = io.BytesIO()
        Image.new("1", (2000, 2000)).save(bomb, "PNG")  # 4 MP in a few KB: refused from its header
        assert len(bomb.getvalue()) < 50_000
        _refused(service.request("/api/search/image", body=bomb.getvalue()), 413, "2000 x 2000 pixels")
        _refused(service.request("/api/search/image", body=b"<html>not an image</html>"), 400, "not an image")
        _refused(service.request("/api/index", host="evil.example:%d" % service.port), 421, "answers only to")
        _refused(service.request("/api/search?text=a+dog"), 400, "a text query needs an output of a model with a "
                                                                 "text tower", "'vgg16'")
        _refused(service.request("/api/search?key=img/00001.jpg&k=101"), 400, "k must be a whole number from 1 to "
                                                                               "100; got '101'")
        _refused(service.request("/api/search?key=img/00001.jpg&k=ten"), 400, "got 'ten'")
        _refused(service.request("/api/search?text=" + "a" * 51), 400, "at most 50 characters; got 51")
        _refused(service.request("/api/search?key=nope.jpg"), 404, "'nope.jpg' is not a row")
        _refused(service.request("/api/neighbours?row=300"), 404, "0 to 299; got '300'")
        _refused(service.request("/api/image?row=1"), 404, "the image of row 1 cannot be read")
        _refused(service.request("/api/search/vector", body=b'{"vector": [1, 2]}'), 400, "64")
        _refused(service.request("/api/search/vector", body=b"[1, 2"), 400, '{"vector": [numbers]}')
        _refused(service.request("/api/index", body=b"{}"), 405, "/api/index takes GET")
        _refused(service.request("/api/duplicates?threshold=2"), 400, "from -1 to 1; got '2'")


def test_decompression_bombs_are_refused_from_their_header_before_the_model_sees_them(vgg_index, bombs):
    embedder = FakeEmbedder(64, block=True)  # would wait for ever if a bomb reached it
    with Running(Service(vgg_index, embedder)) as service:
        for name, words in (("pillow_bomb.png", "too large"), ("our_bomb.png", "12000 x 9000 pixels")):
            _refused(service.request("/api/search/image", body=(bombs / name).read_bytes()), 413, words)
    assert not embedder.entered.is_set()


def test_a_service_without_an_embedder_takes_rows_and_vectors_only(vgg_index):
    with Running(Service(vgg_index)) as service:
        status, description, _ = service.request("/api/index")
        assert status == 200 and description["rows"] == 300 and description["queries"] == {
            "key": True, "row": True, "vector": True, "text": False, "image": False, "caption": False}
        no_tower = no_text_tower("vgg16")
        assert description["unavailable"] == {"text": no_tower, "image": NO_EMBEDDER,  # the first reason of each
                                              "caption": no_captions(vgg_index)}
        _refused(service.request("/api/search/image", body=png((40, 30), 0)), 400,
                 "an image cannot be searched: no model given to the service: search by a row, a key or a vector")
        _refused(service.request("/api/search?text=a+dog"), 400, "a sentence cannot be searched: " + no_tower)
        vector = json.dumps({"vector": clustered(300)[7].tolist()}).encode()
        status, answer, _ = service.request("/api/search/vector?k=2", body=vector)
        assert status == 200 and answer["neighbours"][0]["key"] == "img/00007.jpg"
        assert answer["neighbours"][0]["score"] == pytest.approx(1.0, abs=1e-5)
        status, image, headers = service.request("/api/image?row=0")
        assert status == 200 and image == png((40, 30), 0) and headers["X-Content-Type-Options"] == "nosniff"


def test_duplicate_groups_at_a_threshold(tmp_path):
    vectors = clustered(50)
    vectors[49] = vectors[3] * 1.001
    write_npy(tmp_path / "f.npy", vectors)
    with Running(Service(Index.build(tmp_path / "f.npy", tmp_path / "f.index"))) as service:
        status, answer, _ = service.request("/api/duplicates?threshold=0.99")
        assert status == 200 and answer["groups"] == 1 and answer["pairs"] == 1
        # The row the rule keeps first, the others marked as those that would go (search/removals.py).
        assert answer["keep_rule"] == "first-key" and answer["shown"] == [
            [{"row": 3, "key": "img/00003.jpg", "remove": False}, {"row": 49, "key": "img/00049.jpg", "remove": True}]]
        _refused(service.request("/api/duplicates?threshold=0.99&keep=highest-caption-score"), 400,
                 "has no caption scores")
        _refused(service.request("/api/duplicates?threshold=0.99&keep=newest"), 400, "keep must be one of")


def test_each_row_answered_holds_the_values_kept_beside_it(kept_job, vgg_index, capsys):
    folder, expected = kept_job
    index = Index.load(folder)
    query = sorted(expected)[3]
    vector = json.dumps({"vector": index.stored([index.row(query)])[0].tolist()}).encode()
    with Running(Service(index, limits=Limits(kept_per_group=3))) as service:
        answers = [service.request(path, body)[1] for path, body in (
            ("/api/search?" + urllib.parse.urlencode({"key": query, "k": 8}), None),
            ("/api/neighbours?row=%d&k=8" % index.row(query), None), ("/api/search/vector?k=8", vector))]
        for answer in answers:
            assert sorted(found["key"] for found in answer["neighbours"]) == sorted(expected)
            assert [found["kept"] for found in answer["neighbours"]] == [
                expected[found["key"]] for found in answer["neighbours"]]
        assert answers[0]["neighbours"][0]["kept"] == {"txt": HTML_CAPTION, "json": expected[query]["json"]}
        # As `neighbours` prints them, in the same order.
        cli = _cli_neighbours(capsys, folder, query, "-k", "8")
        assert [found["key"] for found in answers[0]["neighbours"]] == [key for key, _ in cli]
        status, answer, _ = service.request("/api/duplicates?threshold=-1")  # one group of every row
        [group] = answer["shown"]
        assert status == 200 and sorted(member["key"] for member in group) == sorted(expected)
        assert [member.get("kept") for member in group] == [expected[member["key"]] for member in group[:3]] + [
            None] * (len(group) - 3)  # a group's first rows only: a group may hold every row of the index
        assert service.request("/api/index")[1]["kept"] == ["txt", "json"]
    with Running(Service(vgg_index)) as service:  # an output of a folder keeps nothing: no "kept"
        assert "kept" not in service.request("/api/neighbours?row=1&k=1")[1]["neighbours"][0]
        assert service.request("/api/index")[1]["kept"] == []


def test_a_tar_member_is_served_by_its_row_through_the_members_index(tmp_path):
    from parallel.inputs.tars import MEMBERS_SUFFIX, Entry, member_key, write_index
    data = png((30, 20), 5)
    member = tmp_path / "a.png"
    member.write_bytes(data)
    with tarfile.open(tmp_path / "shard.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(member, arcname="a.png")
    with tarfile.open(tmp_path / "shard.tar") as tar:
        info = tar.getmember("a.png")
    key = member_key("a.png", str(tmp_path / "shard.tar"))
    write_index(str(tmp_path / "f.npy") + MEMBERS_SUFFIX, [Entry(key, info.offset_data, info.size)])
    shard = (tmp_path / "shard.tar").stat()  # the job's manifest records its tars
    Manifest([str(tmp_path / "shard.tar")], [shard.st_size], [shard.st_mtime_ns], [""]).save(
        manifest_path(tmp_path / "f.npy"))
    from search_data import SETTINGS
    from parallel.output import open_writer
    writer = open_writer(tmp_path / "f.npy", format="npy", feature_size=64, settings=SETTINGS)
    writer.write([key] + ["img/%d.jpg" % row for row in range(9)], clustered(10))
    writer.close()
    with Running(Service(Index.build(tmp_path / "f.npy", tmp_path / "f.index"))) as service:
        status, image, headers = service.request("/api/image?row=0")
    assert status == 200 and image == data and headers["Content-Type"] == "image/png"


def test_a_row_of_a_parquet_file_is_served_by_its_row_with_the_job_s_image_column_and_its_caption(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from colour_jobs import config_for
    from parallel import jobs
    images = [png((30 + row, 20), row) for row in range(6)]
    pq.write_table(pa.table({"picture": pa.array(images, pa.binary()), "caption": ["c%d" % row for row in range(6)]}),
                   tmp_path / "data.parquet", row_group_size=4)  # row 5: in the second row group
    jobs.run(config_for(tmp_path, str(tmp_path / "data.parquet"), output=tmp_path / "f.csv", image_column="picture",
                        keep=("caption",)))
    assert run("--quiet", "index", tmp_path / "f.csv") == 0
    index = Index.load(tmp_path / "f.csv.index")
    row = index.row("parquet://#5::%s" % (tmp_path / "data.parquet"))
    with Running(Service(index)) as service:
        status, image, headers = service.request("/api/image?row=%d" % row)
        answer = service.request("/api/neighbours?row=%d&k=1" % row)[1]
    assert status == 200 and image == images[5] and headers["Content-Type"] == "image/png"
    assert answer["neighbours"][0]["kept"] == {"caption": "c5"}


def test_an_object_of_a_store_is_fetched_by_the_service_by_its_row(tmp_path, s3):
    """The browser never gets the store's address or a credential: the service fetches the object a row names."""
    from search_data import SETTINGS
    from parallel.output import open_writer
    from parallel.inputs.remote import describe
    data = png((30, 20), 6)
    s3.filesystem.pipe_file("%s/photos/a.png" % s3.bucket, data)
    Manifest([s3.url("photos/a.png")], *([value] for value in describe(s3.url("photos/a.png")))).save(
        manifest_path(tmp_path / "f.npy"))  # an --images-from list's URL: the job records its version
    writer = open_writer(tmp_path / "f.npy", format="npy", feature_size=64, settings=SETTINGS)
    writer.write([s3.url("photos/a.png")] + ["img/%d.jpg" % row for row in range(9)], clustered(10))
    writer.close()
    with Running(Service(Index.build(tmp_path / "f.npy", tmp_path / "f.index"))) as service:
        status, image, headers = service.request("/api/image?row=0")
        refused = service.request("/api/image?url=%s" % urllib.parse.quote(s3.url("photos/a.png")))
    assert status == 200 and image == data and headers["Content-Type"] == "image/png"
    _refused(refused, 400, "/api/image takes row; not 'url'")


# ----------------------------------------------------------------- bounded: 503 beyond the queue, and load

def test_queries_beyond_those_running_and_waiting_are_refused_with_503(vgg_index):
    embedder = FakeEmbedder(64, block=True)
    with Running(Service(vgg_index, embedder, Limits(running=1, waiting=0))) as service:
        first = []
        thread = threading.Thread(target=lambda: first.append(service.request("/api/search/image?k=1", body=png(
            (40, 30), 1))))
        thread.start()
        assert embedder.entered.wait(HANG_SECONDS)  # the one slot is held
        _refused(service.request("/api/neighbours?row=1"), 503, "busy")
        _refused(service.request("/api/search?key=img/00001.jpg"), 503, "busy")
        assert service.request("/api/index")[0] == 200  # the description computes nothing: always answered
        embedder.release.set()
        thread.join(HANG_SECONDS)
        assert first[0][0] == 200 and len(first[0][1]["neighbours"]) == 1
        assert service.request("/api/neighbours?row=1")[0] == 200  # the slot is free again


def test_sixteen_clients_at_once_are_all_answered(vgg_index):
    answers, lock = [], threading.Lock()

    def client(number):
        for request in range(4):
            path = ("/api/neighbours?row=%d&k=10" % (number * 4 + request) if request % 2 else
                    "/api/search?key=img/%05d.jpg&k=5" % (number * 4 + request))
            status, answer, _ = service.request(path)
            with lock:
                answers.append((status, len(answer["neighbours"]) if status == 200 else answer))

    with Running(Service(vgg_index, FakeEmbedder(64))) as service:
        clients = [threading.Thread(target=client, args=(number,)) for number in range(16)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(HANG_SECONDS)
    assert sorted(answers) == [(200, 5)] * 32 + [(200, 10)] * 32


def test_an_answer_leaves_in_one_write_with_nagle_off(vgg_index, monkeypatch):
    """An answer's headers and body leave in one write, Nagle off. As two writes, the body waited for the client's
    delayed ACK of the headers: 40 ms on Linux's loopback, on each request of a kept connection but its first
    (44 ms a key query where the search took 1.6: benchmarks/bench_service.py). Counted on the server's side of
    the connection, not timed."""
    import socket
    writes = []  # (bytes, TCP_NODELAY) of each write of the server's sockets

    def counted(real):
        def write(self, data, *args):
            if self.getsockname()[1] == port:
                writes.append((len(data), self.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)))
            return real(self, data, *args)
        return write

    with Running(Service(vgg_index)) as service:
        port = service.port
        monkeypatch.setattr(socket.socket, "send", counted(socket.socket.send))
        monkeypatch.setattr(socket.socket, "sendall", counted(socket.socket.sendall))
        connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=HANG_SECONDS)
        for row in range(5):
            connection.request("GET", "/api/neighbours?row=%d&k=5" % row)
            response = connection.getresponse()
            assert response.status == 200 and len(json.loads(response.read())["neighbours"]) == 5
        connection.close()
    assert len(writes) == 5 and all(nodelay for _, nodelay in writes), writes


def test_connections_beyond_the_bound_are_answered_503_and_closed_when_each_is_answered(vgg_index):
    """A connection whose request is being answered is never closed to make room (tests/test_search_connections.py:
    one waiting for its client is)."""
    embedder = FakeEmbedder(64, block=True)
    with Running(Service(vgg_index, embedder, Limits(connections=1))) as service:
        first = []
        thread = threading.Thread(target=lambda: first.append(service.request("/api/search/image?k=1", body=png(
            (40, 30), 1))))
        thread.start()
        assert embedder.entered.wait(HANG_SECONDS)  # the one place: a query being computed
        refused_busy = service.request("/api/index")
        embedder.release.set()
        thread.join(HANG_SECONDS)
    _refused(refused_busy, 503, "busy: too many connections at once; try again")
    assert first[0][0] == 200


def test_a_stop_signal_while_a_connection_s_thread_starts_stops_the_server(vgg_index, monkeypatch):
    """SIGTERM's handler raises in the main thread wherever it is, even in Thread.start: the stop must reach
    serve_forever (an error of the connection bound's own would be caught there, and the server would serve on)."""
    import socket
    import socketserver
    started = socketserver.ThreadingMixIn.process_request
    ours, theirs = socket.socketpair()

    def interrupted(self, request, client_address):
        before = set(threading.enumerate())
        started(self, request, client_address)
        theirs.close()  # the connection ends, and its thread with it, freeing its place...
        for thread in set(threading.enumerate()) - before:
            thread.join(HANG_SECONDS)
        raise KeyboardInterrupt  # ...before the stop handler raises here, in the main thread

    monkeypatch.setattr(socketserver.ThreadingMixIn, "process_request", interrupted)
    server = make_service(Service(vgg_index, limits=Limits(connections=2)), port=0)
    with pytest.raises(KeyboardInterrupt):
        server.process_request(ours, ("127.0.0.1", 0))
    server.server_close()
    assert server._open.acquire(blocking=False) and server._open.acquire(blocking=False)  # both places free
    assert not server._open.acquire(blocking=False)


# ----------------------------------------------------------------- the command line and the docs

def test_the_service_example_of_docs_search_runs(tmp_path):
    page = (ROOT / "docs" / "search.md").read_text()
    code = page.split("## The service")[1].split("```python\n")[1].split("```")[0]
    (tmp_path / "results").mkdir()
    vectors = clustered(300)
    vectors[299] = vectors[3] * 1.001
    write_npy(tmp_path / "results" / "features.npy", vectors)
    Index.build(tmp_path / "results" / "features.npy", tmp_path / "results" / "features.npy.index")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=HANG_SECONDS, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "300" and lines[1].startswith("{'rank': 1, 'row': 3, 'key': 'img/00003.jpg', 'score': ")
    assert lines[2:] == ["img/00003.jpg", "5", "1"]


def test_a_line_a_request_escapes_what_could_move_a_terminal_s_cursor(vgg_index):
    lines = []
    with Running(Service(vgg_index), log=lines.append) as service:
        for request in (b"GET /api/neighbours?row=3&k=2 HTTP/1.1", b"GET /\x1b[2Jcleared HTTP/1.1",
                        b"GET /api/index?" + b"a" * 300 + b" HTTP/1.1", b"PUT /api/index HTTP/1.1", b"NONSENSE"):
            with socket.create_connection(("127.0.0.1", service.port), timeout=HANG_SECONDS) as connection:
                connection.sendall(request + b"\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % service.port)
                while connection.recv(65536):
                    pass
    assert [line.rsplit(" ", 4)[0] for line in lines] == [
        "127.0.0.1 GET /api/neighbours?row=3&k=2 200", "127.0.0.1 GET /\\x1b[2Jcleared 404",
        "127.0.0.1 GET " + ("/api/index?" + "a" * 300)[:200] + "... 400", "127.0.0.1 PUT /api/index 501",
        "127.0.0.1 NONSENSE 400"]
    assert int(lines[0].split()[4]) > 100 and all(line.endswith(" ms") for line in lines)


def test_serve_takes_quiet_after_the_command_too():
    from search_features import parse_args
    assert parse_args(["serve", "IDX"]).quiet is False
    assert parse_args(["serve", "IDX", "--quiet"]).quiet is True and parse_args(["--quiet", "serve", "IDX"]).quiet


def test_serve_without_the_weights_says_what_it_answers_offers_no_sentence_or_image_and_logs_until_sigterm(
        clip_job, tmp_path, capsys):
    """One `serve` child (each imports TensorFlow): its first lines, what it answers, its refusals, a line a
    request (a sentence as its length), then SIGTERM: status 0."""
    folder, weights, index_folder, images = clip_job
    found = folder / "clip" / "model.safetensors"  # beside the output: the refusal names it
    why = ("the output was computed with the weights file %s; its record names the file, not where it is: pass "
           "--weights %s (found there: that size and content)" % (Index.load(index_folder).settings["weights"], found))
    with serving(index_folder, program=TESTS / "search_child.py") as (child, url):
        assert url.endswith("/")  # its page; the API beside it
        sizes = []

        def ask(path, body=None):
            try:
                with urllib.request.urlopen(url.rstrip("/") + path, body, timeout=HANG_SECONDS) as response:
                    status, data = response.status, response.read()
            except urllib.error.HTTPError as error:
                status, data = error.code, error.read()
            sizes.append((status, len(data)))
            return status, (json.loads(data) if path.startswith("/api/") else data)

        status, description = ask("/api/index")  # only what works
        assert description["queries"] == {"key": True, "row": True, "vector": True, "text": False, "image": False,
                                          "caption": False}
        assert description["unavailable"] == {"text": why, "image": why, "caption": no_captions(Index.load(
            index_folder))}
        assert ask("/")[0] == 200
        assert ask("/api/search?text=my+own+words&k=2") == (400, {"status": 400, "error": "a sentence cannot be "
                                                                                          "searched: " + why})
        assert ask("/api/search/image", png((40, 30), 1)) == (400, {"status": 400, "error": "an image cannot be "
                                                                                           "searched: " + why})
        assert ask("/api/search?key=colour03.png&k=2")[0] == 200
        # Said as it starts, beside where it serves; then a line a request.
        status, lines = stop(child, signal.SIGTERM)
    assert status == 0 and lines[0] == ("answers: neighbours of a row or a key, a vector, duplicates; not sentences or "
                                        "images: %s" % why)
    lines = lines[1:]
    # Each request's line is written by its own thread once it is answered: their order is not the requests'.
    assert sorted(line.rsplit(" ", 2)[0] for line in lines) == sorted("127.0.0.1 %s %d %d bytes" % (request, *size)
                                                                      for request, size in zip(
        ["GET /api/index", "GET /", "GET /api/search?text=(12 characters)&k=2", "POST /api/search/image",
         "GET /api/search?key=colour03.png&k=2"], sizes))  # a sentence: its length
    assert all(float(line.split()[-2]) >= 0 and line.endswith(" ms") for line in lines), lines
    # Weights given that are not the output's: refused at start, one line, status 2 (no service that cannot answer).
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    capsys.readouterr()

    def served(*args, **kwargs):  # in this process a service would serve for ever: it fails the test instead
        raise AssertionError("serve started a service with weights that are not the output's")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search.api, "serve_index", served)
        assert run("serve", index_folder, "--port", "0", "--weights", tmp_path) == 2
    assert capsys.readouterr().err == (
        "search_features: error: --weights %s is not the weights the output was computed with (%s)\n"
        % (tmp_path, Index.load(index_folder).settings["weights"]))


def test_serve_with_the_output_s_weights_gives_its_service_the_model_and_with_quiet_no_log(clip_job, monkeypatch):
    """What `serve INDEX --weights W` hands the server (the browser tests of tests/test_search_live_page.py search
    a Service built so, in this process): the output's model for sentences and images; --quiet, no log."""
    folder, weights, index_folder, images = clip_job
    started = []

    def served(service, port, host, announce, log):  # search.api.serve_index, which would serve until stopped
        started.append((service, port, host, log))

    monkeypatch.setattr(search.api, "serve_index", served)
    for quiet in (["--quiet"], []):
        assert run("serve", index_folder, "--weights", weights, "--port", "0", *quiet) == 0
    [(service, port, host, log), (_, _, _, announced)] = started
    assert (port, host, log) == (0, "127.0.0.1", None) and announced is not None  # without --quiet: a line a request
    assert service.answers() == "answers: neighbours of a row or a key, a sentence, an image, a vector, duplicates"


def test_serve_says_what_a_service_of_an_output_without_a_text_tower_answers(vgg_index):
    """An index of vgg16 (no text tower) whose record names Keras's weights: sentences and images refused, each for
    its own reason, with what `serve` gives the Service (the lines of a `serve` child: the test above)."""
    from models.query_embedder import QueryEmbedder
    why = QueryEmbedder(vgg_index.settings, vgg_index.meta["source"]["output"]).unusable()  # as `serve` asks
    assert Service(vgg_index, None, no_embedder=why).answers() == (
        "answers: neighbours of a row or a key, a vector, duplicates; not sentences: %s; not images: the output was "
        "computed with weights 'imagenet': pass them with --weights" % no_text_tower("vgg16"))


def test_another_host_than_loopback_is_warned_of_and_a_page_is_served_on_loopback_only(tmp_path, capsys):
    assert reachable_warning("127.0.0.1") is None and reachable_warning("localhost") is None
    assert "reachable by anyone" in reachable_warning("0.0.0.0")
    (tmp_path / "page").mkdir()
    (tmp_path / "page" / "index.html").write_text("<p>page</p>")
    assert run("serve", tmp_path / "page", "--host", "0.0.0.0") == 2
    assert "a page's folder is served on 127.0.0.1 only" in capsys.readouterr().err


def test_a_client_that_went_away_is_not_printed_and_another_error_is(vgg_index, capsys):
    server = make_service(Service(vgg_index, None), port=0)
    try:
        for error in (ConnectionResetError(104, "Connection reset by peer"), BrokenPipeError(32, "Broken pipe"),
                      ValueError("a bug of ours")):
            try:
                raise error
            except Exception:  # noqa: BLE001 -- socketserver calls handle_error inside its except
                server.handle_error(None, ("127.0.0.1", 1))
    finally:
        server.server_close()
    printed = capsys.readouterr().err
    assert "ValueError: a bug of ours" in printed
    assert "ConnectionResetError" not in printed and "BrokenPipeError" not in printed
