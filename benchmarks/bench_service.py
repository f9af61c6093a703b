"""Benchmark of the search service (`search_features.py serve`): one query's time through HTTP on loopback.

    python benchmarks/bench_service.py --workdir /tmp/bench-service    # 1,000,000 rows: 3 minutes, the index built
    python benchmarks/bench_service.py --workdir /tmp/bench-service --rows 20000 --queries 20 --requests 5

Everything is measured against a real `search_features.py serve INDEX --weights FOLDER --port 0`, started as a
child process (its RSS is read from its /proc/PID/status), asked by this process over HTTP on 127.0.0.1
(`http.client`, one keep-alive connection a client, as a browser keeps one).

The index: ROWS synthetic rows of 512 floats in CLIP ViT-B/32's `embedding` space, clustered unit vectors
(`block` below: 4,096 random unit centres, a row is a centre plus N(0, 0.03^2 I) noise, normalised: cosine
about 0.83 to its centre and 0.68 to a row of its cluster, about 0 across clusters), generated a block at a
time and given to `Index.build(source=...)` as an output's rows with the record of an output of `clip_vit_b32`,
layer `embedding`, and the random weights' identity. So the index is uncentred (search/centre.py: a text
tower's space) and takes sentences; no output file is written (the build reads the generator). Kind hnsw,
built once in a fresh process (`--build-child`: its time and peak RSS, VmHWM), kept in WORKDIR and reused.

The model: CLIP ViT-B/32 with seeded RANDOM weights in its real layout (`python -m models.weight_files random
WORKDIR/clip-random --model clip_vit_b32`, 605 MB; speed does not depend on the values).

Parts, in this order, the service started once:
first       the first sentence (the text tower loaded) and the first image (the image tower loaded), each one
            request's time.
text        QUERIES sentences (all different), one at a time, k=10: the median and 90th percentile of each
            request's time (sent to answer read and parsed).
key         QUERIES indexed rows by key, one at a time, the same way.
image       a JPEG of 640x480 (smooth random, quality 90) uploaded QUERIES times, alternated with the image
            tower's own time for the same bytes in this process (`parallel.queries.ImageEmbedder.images([bytes])`,
            the runner the service uses, built once and warmed): the medians of both, and their difference.
concurrent  CLIENTS threads, each sending REQUESTS requests (sentences and keys alternated) on its own
            connection, ROUNDS times: errors (any answer but 200, or none), requests/s, and the server's VmRSS
            before the round, after it, and sampled every 0.2 s during it, and its VmHWM (the peak since start,
            which includes loading).
"""

import argparse
import http.client
import importlib.metadata
import io
import json
import os
import platform
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT)]

DIMS = 512
CENTRES = 4096
NOISE = 0.03
BLOCK = 10_000
K = 10
MODEL, LAYER = "clip_vit_b32", "embedding"
WORDS = (["dog", "cat", "boat", "house", "tree", "car", "child", "bird", "mountain", "bicycle", "street", "horse"],
         ["red", "small", "old", "wet", "sunny", "crowded", "quiet", "bright", "dark", "wooden", "snowy", "tall"],
         ["on a beach", "in a kitchen", "at night", "in the rain", "near a river", "on a hill", "in a city",
          "under a bridge", "in a field", "by the sea", "in a forest", "on a road"])


def say(*parts):
    print(*parts, file=sys.stderr, flush=True)


def machine():
    model, flags = "?", set()
    with open("/proc/cpuinfo") as file:
        for line in file:
            if line.startswith("model name") and model == "?":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags |= {flag for flag in line.split(":", 1)[1].split()
                          if flag in ("avx2", "fma") or flag.startswith("avx512")}
    versions = {}
    for name in ("tensorflow", "faiss-cpu", "numpy", "Pillow"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {"cpu": model, "cores": os.cpu_count(), "flags": " ".join(sorted(flags)),
            "python": platform.python_version(), "versions": versions,
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(default)")}


def sentences(count):
    """`count` different sentences ("a photo of a red dog on a beach", ...)."""
    nouns, adjectives, places = WORDS
    every = ["a photo of a %s %s %s" % (adjective, noun, place)
             for place in places for adjective in adjectives for noun in nouns]
    return [every[(number * 7919) % len(every)] + ("" if number < len(every) else " %d" % number)
            for number in range(count)]


def jpeg(size=(640, 480), seed=0):
    """The bytes of a smooth random JPEG (upsampled noise), quality 90."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    image = Image.fromarray(rng.integers(0, 255, (24, 32, 3), dtype=np.uint8)).resize(size, Image.BICUBIC)
    file = io.BytesIO()
    image.save(file, "JPEG", quality=90)
    return file.getvalue()


def key(row):
    return "synthetic/%07d.jpg" % row


def block(seed, number, centres, rows):
    """Rows number * BLOCK ... of the synthetic embedding: float32 [<= BLOCK, DIMS], unit length."""
    rng = np.random.default_rng([seed, number])
    count = min(BLOCK, rows - number * BLOCK)
    vectors = centres[rng.integers(0, CENTRES, count)] + NOISE * rng.standard_normal((count, DIMS), np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def source(rows, settings, seed=0):
    """The synthetic rows as an output's (`search.vectors.OutputVectors`), recorded as CLIP's embedding."""
    from search.vectors import OutputVectors
    rng = np.random.default_rng([seed, 512])
    centres = rng.standard_normal((CENTRES, DIMS)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)

    def batches(batch_rows):
        for number in range((rows + BLOCK - 1) // BLOCK):
            vectors = block(seed, number, centres, rows)
            start = number * BLOCK
            yield [key(row) for row in range(start, start + len(vectors))], vectors
    return OutputVectors("synthetic-clip-embedding", "synthetic", rows, DIMS,
                         dict(settings, synthetic="clustered unit vectors, seed %d" % seed), True, batches)


def status_kib(pid, field):
    with open("/proc/%d/status" % pid) as file:
        for line in file:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise ValueError("no %s in /proc/%d/status" % (field, pid))


def mib(kib):
    return round(kib / 1024, 1)


def build_child(folder, rows, weights):
    from models import registry
    from search.index import Index
    settings = registry.feature_model(MODEL, layer=LAYER, weights=str(weights)).settings
    started = time.perf_counter()
    index = Index.build(None, folder, kind="hnsw", source=source(rows, settings))
    print(json.dumps({"build_s": round(time.perf_counter() - started, 1), "peak_rss_mib": mib(status_kib(
        os.getpid(), "VmHWM")), "rows": len(index), "centred": index.meta["centre"]["centred"],
        "parameters": index.meta["parameters"], "recall_at_build": index.meta["recall_at_build"]}))


def prepare(workdir, rows):
    """(weights folder, index folder, the build's figures): each made once, kept in `workdir`."""
    weights = workdir / "clip-random"
    if not weights.exists():
        subprocess.run([sys.executable, "-m", "models.weight_files", "random", str(weights), "--model", MODEL],
                       check=True, cwd=ROOT)
    folder = workdir / ("clip-%d.index" % rows)
    built = workdir / ("clip-%d.build.json" % rows)
    if not (folder / "index.json").is_file() or not built.is_file():
        say("building the hnsw index of %d rows in %s ..." % (rows, folder))
        child = subprocess.run([sys.executable, __file__, "--workdir", str(workdir), "--build-child", str(folder),
                                str(rows), str(weights)], stdout=subprocess.PIPE, text=True, check=True)
        built.write_text(child.stdout.strip().splitlines()[-1] + "\n")
    return weights, folder, json.loads(built.read_text())


class Server:
    """`search_features.py serve INDEX --weights W --port 0` in a child process, while the context is open."""

    def __init__(self, index, weights):
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "search_features.py"), "serve", str(index), "--weights", str(weights),
             "--port", "0", "--quiet"], stderr=subprocess.PIPE, text=True, cwd=ROOT)
        started = time.perf_counter()
        for line in self.process.stderr:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            if found:
                self.port = int(found.group(1))
                break
        else:
            raise RuntimeError("the service ended before it said where it serves (status %s)" % self.process.wait())
        self.start_s = time.perf_counter() - started
        threading.Thread(target=self.process.stderr.read, daemon=True).start()  # drained, never blocks it

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=60)

    def memory(self):
        """{"rss_mib", "hwm_mib"} of the service's process now."""
        return {"rss_mib": mib(status_kib(self.process.pid, "VmRSS")),
                "hwm_mib": mib(status_kib(self.process.pid, "VmHWM"))}


class Client:
    """One keep-alive connection to the service; `ask` returns (seconds, status, answer)."""

    def __init__(self, port):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

    def ask(self, path, body=None):
        started = time.perf_counter()
        self.connection.request("POST" if body is not None else "GET", path, body=body)
        response = self.connection.getresponse()
        answer = json.loads(response.read())
        return time.perf_counter() - started, response.status, answer

    def text(self, sentence):
        return self.ask("/api/search?" + urllib.parse.urlencode({"text": sentence, "k": K}))

    def key(self, row):
        return self.ask("/api/search?" + urllib.parse.urlencode({"key": key(row), "k": K}))

    def image(self, data):
        return self.ask("/api/search/image?k=%d" % K, data)


def checked(result, what):
    seconds, status, answer = result
    if status != 200 or len(answer["neighbours"]) != K:
        raise RuntimeError("%s: status %d, %s" % (what, status, str(answer)[:300]))
    return seconds


def summary(seconds):
    milliseconds = 1000 * np.asarray(seconds)
    return {"median_ms": round(float(np.median(milliseconds)), 2),
            "p90_ms": round(float(np.percentile(milliseconds, 90)), 2),
            "min_ms": round(float(milliseconds.min()), 2), "count": len(milliseconds)}


def concurrent(server, rows, clients, requests, rounds):
    """CLIENTS threads x REQUESTS requests, ROUNDS times: errors, requests/s, the server's memory."""
    results = []
    for number in range(rounds):
        errors, lock, samples, done = [], threading.Lock(), [], threading.Event()
        texts = sentences(clients * requests + 1000 * (number + 1))[-clients * requests:]

        def client(index):
            connection = Client(server.port)
            for request in range(requests):
                try:
                    if request % 2 == 0:
                        result = connection.text(texts[index * requests + request])
                    else:
                        result = connection.key((index * 7919 + request * 104729 + number) % rows)
                    checked(result, "concurrent")
                except Exception as error:  # noqa: BLE001 -- counted, and the client goes on
                    with lock:
                        errors.append("%s: %s" % (type(error).__name__, str(error)[:200]))
                    connection = Client(server.port)

        def sample():
            while not done.wait(0.2):
                samples.append(status_kib(server.process.pid, "VmRSS"))
        before = server.memory()
        sampler = threading.Thread(target=sample)
        sampler.start()
        threads = [threading.Thread(target=client, args=(index,)) for index in range(clients)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
        after = server.memory()
        results.append({"round": number + 1, "clients": clients, "requests": clients * requests,
                        "errors": len(errors), "first_errors": errors[:3], "seconds": round(seconds, 2),
                        "requests_per_s": round(clients * requests / seconds, 1),
                        "rss_before_mib": before["rss_mib"], "rss_after_mib": after["rss_mib"],
                        "rss_peak_sampled_mib": mib(max(samples, default=0)),
                        "hwm_before_mib": before["hwm_mib"], "hwm_after_mib": after["hwm_mib"]})
        say(json.dumps(results[-1]))
    return results


def image_embedder(weights):
    """The image tower's runner as the service builds it (parallel.queries.ImageEmbedder), in this process."""
    from models import registry
    from parallel.queries import ImageEmbedder
    model = registry.feature_model(MODEL, layer=LAYER, weights=str(weights))
    return ImageEmbedder(model, devices="cpu:0", resize="crop")


def run(args):
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    results = {"machine": machine(), "rows": args.rows, "k": K, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                       time.gmtime())}
    weights, folder, results["build"] = prepare(workdir, args.rows)
    say("build:", json.dumps(results["build"]))
    picture = jpeg()
    results["image_bytes"] = len(picture)
    texts = sentences(args.queries + 1)
    with Server(folder, weights) as server:
        results["service_start_s"] = round(server.start_s, 2)
        results["memory_loaded_index"] = server.memory()
        client = Client(server.port)
        results["first_text_ms"] = round(1000 * checked(client.text(texts[-1]), "first sentence"), 1)
        results["first_image_ms"] = round(1000 * checked(client.image(picture), "first image"), 1)
        results["memory_models_loaded"] = server.memory()
        say("first:", results["first_text_ms"], results["first_image_ms"], json.dumps(server.memory()))
        results["text"] = summary([checked(client.text(sentence), "sentence") for sentence in texts[:-1]])
        say("text:", json.dumps(results["text"]))
        rng = np.random.default_rng(1)
        results["key"] = summary([checked(client.key(int(row)), "key") for row in rng.integers(0, args.rows,
                                                                                                args.queries)])
        say("key:", json.dumps(results["key"]))
        embedder = image_embedder(weights)
        embedder.images([picture])  # warm: the first run of a graph is slower
        service_times, own_times = [], []
        for _ in range(args.queries):  # alternated: drift of a shared machine falls on both
            started = time.perf_counter()
            features, failures = embedder.images([picture])
            own_times.append(time.perf_counter() - started)
            assert features.shape == (1, DIMS) and not failures
            service_times.append(checked(client.image(picture), "image"))
        embedder.close()
        results["image"] = summary(service_times)
        results["image_embedder"] = summary(own_times)
        results["image_overhead_ms"] = round(results["image"]["median_ms"] - results["image_embedder"]["median_ms"],
                                             2)
        say("image:", json.dumps(results["image"]), "own:", json.dumps(results["image_embedder"]))
        results["concurrent"] = concurrent(server, args.rows, args.clients, args.requests, args.rounds)
        results["memory_end"] = server.memory()
    results["requirements"] = {
        "text_median_at_most_50_ms": results["text"]["median_ms"] <= 50,
        "image_at_most_own_plus_20_ms": results["image_overhead_ms"] <= 20,
        "no_error_under_concurrency": all(entry["errors"] == 0 for entry in results["concurrent"])}
    text = json.dumps(results, indent=1)
    (workdir / ("service-%d.json" % args.rows)).write_text(text + "\n")
    print(text)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True,
                        help="the weights, the index (reused) and service-ROWS.json are kept here")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the index (default: %(default)s)")
    parser.add_argument("--queries", type=int, default=100, help="sentences, keys, images asked one at a time "
                                                                  "(default: %(default)s)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default: %(default)s)")
    parser.add_argument("--requests", type=int, default=50, help="requests a client, a round (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the concurrent part (default: %(default)s)")
    parser.add_argument("--build-child", nargs=3, metavar=("FOLDER", "ROWS", "WEIGHTS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.build_child:
        folder, rows, weights = args.build_child
        build_child(folder, int(rows), weights)
        return 0
    for name in ("rows", "queries", "clients", "requests", "rounds"):
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1; got %d" % (name, getattr(args, name)))
    if args.rows < K:
        parser.error("--rows must be at least %d; got %d" % (K, args.rows))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
