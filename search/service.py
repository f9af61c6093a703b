"""The search service: an index answered live over HTTP, as JSON, on 127.0.0.1 unless told otherwise.

    service = Service(Index.load("f.npy.index"), embedder)     # embedder: models/query_embedder.py, or None
    server = make_service(service, port=0)                     # not started (tests); serve_index runs it
    GET  /api/index                      the index's description
    GET  /api/search?text=a+dog&k=10     a sentence (an output of a model with a text tower)
    GET  /api/search?key=cats/01.jpg     an indexed row, by its key (its path in the output)
    GET  /api/neighbours?row=3&k=10      an indexed row, by its number
    POST /api/search/image?k=10          an image: the request's body is the file's bytes
    POST /api/search/vector?k=10         {"vector": [D floats]}: raw features, as the output holds them
    GET  /api/duplicates?threshold=0.9   the groups of near-duplicates at a cosine
    GET  /api/image?row=3                the indexed image of a row: its file's, tar member's or object's bytes

Every answer is JSON but an image's; an error is {"status": N, "error": "one line"}, never a traceback. The
answers are the command line's: the same query vectors (search/queries.py) and the same search. For an output
that kept values beside its rows (`run_inference.py --keep txt,json`), each row answered (a neighbour, and the
first `Limits.kept_per_group` rows of a duplicate group) holds them: "kept": {"txt": "...", "json": null}, read
from the output's members index for those rows only.

Safe by default: the Host check of search/server.py (DNS rebinding); a Content-Security-Policy; an image fetched
by row, never by a path the request names (a parameter that is not the endpoint's is refused); uploads bounded in
bytes (413, unread) and pixels (413, from the header, before decoding: decompression bombs); sentences bounded
in length; k bounded; at most `Limits.running` queries computed at once and `Limits.waiting` more waiting for
their turn, any more refused at once with 503, so memory stays bounded. search/api.py holds the HTTP side.
"""

import dataclasses
import io
import json
import math
import threading

import numpy as np
from PIL import Image

from parallel.messages import error_line
from search.queries import (Kept, check_text_queries, image_vectors, members_index, probabilities, ranked,
                            text_vectors)


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask, and how many are computed at once."""
    max_k: int = 1000                       # neighbours a query may ask for
    max_upload_bytes: int = 32 << 20        # an uploaded image or vector's body
    max_pixels: int = 50_000_000            # an uploaded image's width x height, read from its header
    max_sentence: int = 1000                # characters of a sentence
    max_image_bytes: int = 256 << 20        # an indexed image served by /api/image
    max_groups: int = 1000                  # duplicate groups returned (the count of all is given)
    kept_per_group: int = 60                # a duplicate group's first rows given their kept values (--keep)
    running: int = 2                        # queries computed at once (the machine's cores, not more)
    waiting: int = 32                       # queries waiting for their turn; more: 503
    connections: int = 64                   # connections open at once (a thread each); more: 503, closed


class ApiError(Exception):
    """A request refused: its HTTP status and one line."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class _Slots:
    """At most `running` holders at once and `waiting` more waiting; beyond, ApiError 503 at once."""

    def __init__(self, running, waiting):
        self._admitted = threading.BoundedSemaphore(running + waiting)
        self._running = threading.BoundedSemaphore(running)

    def __enter__(self):
        if not self._admitted.acquire(blocking=False):
            raise ApiError(503, "busy: too many queries at once; try again")
        self._running.acquire()

    def __exit__(self, *exc_info):
        self._running.release()
        self._admitted.release()


class Service:
    """The API's operations on one index; each returns what the answer's JSON holds, or raises ApiError.

    Args:
      index: a loaded `search.index.Index`.
      embedder: the queries' embedder (`images(list of bytes)`, `text(sentences)`: search/queries.py), or None:
        only rows and vectors are taken.
      limits: Limits.
    """

    def __init__(self, index, embedder=None, limits=Limits()):
        self.index, self.embedder, self.limits = index, embedder, limits
        self.slots = _Slots(limits.running, limits.waiting)
        self.members = members_index(index)
        self.kept = Kept(index)  # its names read once, on the first answer
        self._duplicates_lock = threading.Lock()

    def describe(self):
        """The index: its rows, kind, the output and model it holds, the names of the values kept beside its rows
        (`--keep`; [] when none), which queries it takes, the limits."""
        settings, centre = self.index.settings, self.index.meta["centre"]
        try:
            check_text_queries(self.index)
            takes_text = self.embedder is not None
        except ValueError:
            takes_text = False
        return {"rows": len(self.index), "kind": self.index.kind, "output": self.index.meta["source"]["output"],
                "model": settings.get("model"), "layer": settings.get("layer"), "kept": list(self.kept.names),
                "centred": centre["centred"],
                "dimensions": int(self.index.mean.shape[0]), "queries": {
                    "key": True, "row": True, "vector": True, "text": takes_text,
                    "image": self.embedder is not None and "model" in settings},
                "limits": dataclasses.asdict(self.limits)}

    def k(self, text):
        """The k asked for (default 10), checked against the limit."""
        try:
            k = int(text)
        except (TypeError, ValueError):
            k = 0
        if not 1 <= k <= self.limits.max_k:
            raise ApiError(400, "k must be a whole number from 1 to %d; got %r" % (self.limits.max_k, text))
        return k

    def _answer(self, query, unit_vector, k):
        found = ranked(self.index, unit_vector[None], k)[0]
        neighbours = [{"rank": rank, "row": row, "key": self.index.paths[row], "score": score}
                      for rank, (row, score) in enumerate(found, 1)]
        return {"query": query, "neighbours": self._with_kept(neighbours)}

    def _with_kept(self, rows):
        """`rows` (dicts with a "key"), each given "kept": {name: str or None} when the output kept values."""
        if self.kept.names:
            values = self.kept.of(row["key"] for row in rows)
            for row in rows:
                row["kept"] = values.get(row["key"], dict.fromkeys(self.kept.names))
        return rows

    def row(self, text):
        """The row numbered `text`, checked to be one of the index's (404 if not)."""
        try:
            row = int(text)
        except ValueError:
            row = -1
        if not 0 <= row < len(self.index):
            raise ApiError(404, "row must be a row of the index, 0 to %d; got %r" % (len(self.index) - 1, text))
        return row

    def by_row(self, text, k):
        """The neighbours of the indexed row numbered `text`."""
        row = self.row(text)
        with self.slots:
            return self._answer({"row": row, "key": self.index.paths[row]}, self.index.stored([row])[0], k)

    def by_key(self, key, k):
        """The neighbours of the indexed row whose key (its path in the output) is `key`."""
        try:
            row = self.index.row(key)
        except ValueError:
            raise ApiError(404, "key %r is not a row of the index" % key) from None
        return self.by_row(str(row), k)

    def by_text(self, sentence, k):
        """The neighbours of a sentence, embedded by the model's text tower."""
        if len(sentence) > self.limits.max_sentence:
            raise ApiError(400, "a sentence may have at most %d characters; got %d" % (self.limits.max_sentence,
                                                                                      len(sentence)))
        if not sentence.strip():
            raise ApiError(400, "text %r has no words: give a sentence" % sentence)
        with self.slots:
            self._needs_embedder("a sentence")
            answer = self._answer({"text": sentence}, text_vectors(self.index, [sentence], self.embedder)[0], k)
            chances = probabilities(self.embedder, [[(row["row"], row["score"]) for row in answer["neighbours"]]])[0]
            for row, chance in zip(answer["neighbours"], chances or ()):  # SigLIP's own score, beside the cosine
                row["probability"] = chance
            return answer

    def by_vector(self, body, k):
        """The neighbours of a vector given as JSON {"vector": [D numbers]} (raw features, as the output's)."""
        try:
            vector = np.asarray(json_body(body)["vector"], np.float64)
        except (ValueError, KeyError, TypeError):
            raise ApiError(400, 'the body must be JSON {"vector": [numbers]}') from None
        if vector.ndim != 1 or not np.isfinite(vector).all():
            raise ApiError(400, "vector must be one list of finite numbers; got shape %s" % (vector.shape,))
        with self.slots:
            return self._answer({"vector": len(vector)}, self.index.prepare(vector[None].astype(np.float32))[0], k)

    def by_image(self, data, k):
        """The neighbours of an uploaded image (its file's bytes), computed by the output's model."""
        check_pixels(data, self.limits.max_pixels)
        with self.slots:
            self._needs_embedder("an image")
            return self._answer({"image": len(data)}, image_vectors(self.index, [data], self.embedder,
                                                                    ["uploaded"])[0], k)

    def duplicates(self, text, neighbours=20):
        """The groups of rows with cosine >= threshold `text` (pairs joined, largest group first)."""
        from search.duplicates import find_pairs, group_pairs
        try:
            threshold = float(text)
        except (TypeError, ValueError):
            threshold = math.nan
        if not -1 <= threshold <= 1:
            raise ApiError(400, "threshold must be a cosine from -1 to 1; got %r" % (text,))
        with self.slots, self._duplicates_lock:  # one at a time: a pass over every row
            pairs, _ = find_pairs(self.index, threshold, neighbours=neighbours)
            groups = group_pairs(pairs, len(self.index))
        shown = [[{"row": int(row), "key": self.index.paths[row]} for row in group]
                 for group in groups[:self.limits.max_groups]]
        self._with_kept([member for group in shown for member in group[:self.limits.kept_per_group]])
        return {"threshold": threshold, "pairs": len(pairs), "groups": len(groups), "shown": shown}

    def image(self, text):
        """(bytes, content type) of the indexed image of row `text`: a file under the output's images folder, a tar
        member by its byte range (the output's members index), an object fetched by the service."""
        from search.page import image_source
        row = self.row(text)
        with self.slots:
            try:
                source = image_source(self.index.paths[row], self.index.settings.get("images"), self.members,
                                      self.index.settings.get("image_column"))
                if not isinstance(source, io.BytesIO):
                    if source.stat().st_size > self.limits.max_image_bytes:
                        raise ApiError(413, "the image of row %d is larger than %d bytes" % (
                            row, self.limits.max_image_bytes))
                    source = io.BytesIO(source.read_bytes())
            except (OSError, ValueError) as error:
                raise ApiError(404, "the image of row %d cannot be read (%s)" % (row, error_line(error))) from None
            data = source.getvalue()
        try:
            with Image.open(io.BytesIO(data)) as image:
                kind = Image.MIME.get(image.format, "application/octet-stream")
        except Exception:  # noqa: BLE001 -- not an image Pillow knows: sent as bytes, never sniffed (nosniff)
            kind = "application/octet-stream"
        return data, kind

    def _needs_embedder(self, what):
        if self.embedder is None:
            raise ApiError(400, "this service computes no new queries (no model given): %s cannot be searched" % what)


def check_pixels(data, max_pixels):
    """ApiError 413 for an image of more than `max_pixels` pixels (read from its header, nothing decoded: a
    decompression bomb is refused before it takes memory), 400 for bytes that are no image."""
    from parallel.inputs.decode import bomb_warnings_silenced  # Pillow and the standard library only
    try:
        with bomb_warnings_silenced(), Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:  # the warning, if made an error
        raise ApiError(413, "the image is too large: %s" % error_line(error)) from None
    except Exception:  # noqa: BLE001 -- whatever Pillow raises on bytes it cannot open
        raise ApiError(400, "the body is not an image (JPEG, PNG, GIF, BMP, TIFF, WebP or PNM)") from None
    if width * height > max_pixels:
        raise ApiError(413, "the image has %d x %d pixels, more than %d" % (width, height, max_pixels))


def json_body(body):
    """The JSON value of a request's body (bytes); ValueError when it is not UTF-8 JSON."""
    return json.loads(body.decode("utf-8"))
