"""What the tests of the search service and of its page share: a service in a thread, a small CLIP job (and
SigLIP's).

    with Running(Service(index)) as service:          # make_service on a free loopback port, in a thread
        status, answer, headers = service.request("/api/index")
    clip_job                                          # a module's fixture: a small CLIP's output of 12 PNGs, indexed
    siglip_job                                        # the same of a small SigLIP 2 (--model siglip)
    kept_job                                          # a module's fixture: an output of tars with --keep txt,json
    index, scores = captioned_copy(clip_job, folder)  # a job's output copied into folder, with caption scores
"""

import io
import json
import math
import tarfile
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hangs import HANG_SECONDS
import run_inference
import search_features
from search.api import make_service


def run(*argv):
    """search_features.main(argv) in this process: its exit status."""
    try:
        return search_features.main([str(arg) for arg in argv])
    except SystemExit as exit:
        return exit.code


class Running:
    """A service's server on a free loopback port, in a thread, while the context is open."""

    def __init__(self, service, log=None):
        self.server = make_service(service, port=0, log=log)
        self.port = self.server.server_address[1]

    def __enter__(self):
        # A stop waits for the poll under way: 0.05 s, not serve_forever's 0.5 s, at each server's end.
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc_info):
        self.server.shutdown()
        self.server.server_close()

    def request(self, path, body=None, host=None, headers=()):
        """(status, JSON answer or bytes, headers) of GET `path`, or POST `body` (bytes)."""
        request = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=body,
                                         headers=dict(headers))
        if host is not None:
            request.add_unredirected_header("Host", host)
        try:
            with urllib.request.urlopen(request, timeout=HANG_SECONDS) as response:
                status, data, answer_headers = response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            status, data, answer_headers = error.code, error.read(), error.headers
        if answer_headers["Content-Type"] == "application/json":
            data = json.loads(data)
        return status, data, answer_headers


def png(size, seed, mode="RGB"):
    """The bytes of a smooth PNG of `size` (upsampled seeded noise)."""
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 255, (4, 4, 3), dtype=np.uint8)).resize(size, Image.BICUBIC)
    file = io.BytesIO()
    image.convert(mode).save(file, "PNG")
    return file.getvalue()


@pytest.fixture(scope="module")
def clip_job(tmp_path_factory):
    """An output of CLIP's embedding computed by run_inference.py from 12 image files, by a small CLIP of the real
    layout (tests/small_clip.py), and its index. Yields (folder, weights, index folder, images folder)."""
    from models.clip import clip
    from small_clip import SMALL, small_clip
    folder = tmp_path_factory.mktemp("clip-job")
    images = folder / "images"
    images.mkdir()
    for number in range(12):
        (images / ("colour%02d.png" % number)).write_bytes(png((96, 80), number))
    with small_clip(folder / "clip") as weights, pytest.MonkeyPatch.context() as patch:
        patch.setattr(clip, "VIT_B32", clip.ImageModel(SMALL))  # the image tower the registry gives, small too
        assert run_inference.main(["--images", str(images), "--output", str(folder / "f.npy"), "--model",
                                   "clip_vit_b32", "--weights", str(weights), "--devices", "cpu:0", "--quiet"]) == 0
        assert run("--quiet", "index", folder / "f.npy") == 0
        yield folder, weights, folder / "f.npy.index", images


@pytest.fixture(scope="module")
def siglip_job(tmp_path_factory):
    """An output of SigLIP 2's embedding (`--model siglip`: the size from the folder's config.json) computed by
    run_inference.py from 12 image files, by a small SigLIP of the real layout (tests/siglip_files.py), and its
    index. Returns (folder, weights, index folder, images folder)."""
    from siglip_files import write_small
    folder = tmp_path_factory.mktemp("siglip-job")
    images = folder / "images"
    images.mkdir()
    for number in range(12):
        (images / ("colour%02d.png" % number)).write_bytes(png((96, 80), number))
    weights = write_small(folder / "siglip2", siglip2=True)
    assert run_inference.main(["--images", str(images), "--output", str(folder / "f.npy"), "--model", "siglip",
                               "--weights", str(weights), "--devices", "cpu:0", "--quiet"]) == 0
    assert run("--quiet", "index", folder / "f.npy") == 0
    return folder, weights, folder / "f.npy.index", images


def captioned_copy(job, folder):
    """The output of `job` (clip_job's or siglip_job's) copied into `folder`, with the text file a job run with
    --text-column writes beside it: each row's caption embedding (seeded unit vectors) and caption score (rows 3
    and 7: none), and its index. Returns (index, {key: caption score or None})."""
    import shutil
    from parallel.output.text_rows import TEXT_SUFFIX, TextRows, write_rows
    from search.index import Index
    output, index_folder = job[0] / "f.npy", job[2]
    for path in output.parent.glob("f.npy*"):
        if path.is_file():
            shutil.copyfile(path, folder / path.name)
    source = Index.load(index_folder)
    keys, size = list(source.paths), source.meta["feature_size"]
    random = np.random.default_rng(5)
    embeddings = random.standard_normal((len(keys), size)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    scores = random.uniform(0.1, 0.4, len(keys)).astype(np.float32)
    embeddings[[3, 7]], scores[[3, 7]] = np.nan, np.nan
    write_rows(Path(str(folder / "f.npy") + TEXT_SUFFIX), TextRows(keys, embeddings, [None] * len(keys), scores))
    index = Index.build(folder / "f.npy", folder / "f.index")
    return index, {key: None if math.isnan(score) else float(score) for key, score in zip(keys, scores)}


def probability_text(probability):
    """What both pages show of SigLIP's probability (search/live_page/scores.js's probabilityText)."""
    if probability == 0 or probability >= 0.001:
        return "p %.3f" % probability
    mantissa, exponent = ("%.1e" % probability).split("e")
    return "p %se%d" % (mantissa, int(exponent))


# A caption holding HTML, shown as text wherever the value is shown.
HTML_CAPTION = '<img src=x onerror="document.title=1"> <b>bold</b> & "quoted"'


def kept_values(sample):
    """{"txt": ..., "json": ...} kept beside sample `sample` of `kept_job`'s tars: sample 2 has no .json member,
    sample 5 neither, sample 3's caption holds HTML."""
    return {"txt": None if sample == 5 else HTML_CAPTION if sample == 3 else "caption of %d" % sample,
            "json": None if sample in (2, 5) else json.dumps({"sample": sample, "tags": ["a", "b"]})}


@pytest.fixture(scope="module")
def kept_job(tmp_path_factory):
    """A job over 2 tars of 4 JPEG samples each, with .txt and .json members beside the images (before the image in
    sample 6, after it elsewhere), run with keep=("txt", "json") (`--keep txt,json`) by tests/colour_jobs.py's cheap
    model, and its index. Yields (the index's folder, {key: kept_values(sample)} of every row)."""
    from parallel import jobs
    from parallel.inputs.tars import member_key
    from colour_jobs import config_for
    folder = tmp_path_factory.mktemp("kept-job")
    expected = {}
    for number in range(2):
        tar_path = folder / ("%06d.tar" % number)
        with tarfile.open(tar_path, "w", format=tarfile.GNU_FORMAT) as tar:
            for sample in range(4 * number, 4 * number + 4):
                image = io.BytesIO()
                Image.open(io.BytesIO(png((48, 32), sample))).save(image, "JPEG", quality=90)
                members = [("jpg", image.getvalue())] + [(name, value.encode("utf-8")) for name, value in
                                                        kept_values(sample).items() if value is not None]
                for extension, data in members[::-1] if sample == 6 else members:
                    info = tarfile.TarInfo("s/%04d.%s" % (sample, extension))
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                expected[member_key("s/%04d.jpg" % sample, str(tar_path))] = kept_values(sample)
    jobs.run(config_for(folder, str(folder / "*.tar"), output=folder / "f.csv", keep=("txt", "json")))
    assert run("--quiet", "index", folder / "f.csv") == 0
    yield folder / "f.csv.index", expected
