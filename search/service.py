"""The search service: an index answered live over HTTP, as JSON, on 127.0.0.1 unless told otherwise.

    service = Service(Index.load("f.npy.index"), embedder)     # embedder: models/query_embedder.py, or None
    server = make_service(service, port=0)                     # not started (tests); serve_index runs it
    GET  /api/index                      the index's description: the queries it answers, why not the others
    GET  /api/search?text=a+dog&k=10     a sentence (an output of a model with a text tower)
    GET  /api/search?key=cats/01.jpg     an indexed row, by its key (its path in the output)
    GET  /api/search?caption=a+dog       a sentence against the rows' captions (text to text; an output of a job
                                         with --text-column)
    &min_caption_score=0.28              on any search: only rows whose caption score is at least this (each
                                         neighbour of an output with caption scores carries its "caption_score")
    GET  /api/neighbours?row=3&k=10      an indexed row, by its number
    POST /api/search/image?k=10          an image: the request's body is the file's bytes
    POST /api/search/vector?k=10         {"vector": [D floats]}: raw features, as the output holds them
    GET  /api/duplicates?threshold=0.9   the groups of near-duplicates at a cosine, each row kept (&keep=RULE)
                                         first, the others marked "remove"
    GET  /api/image?row=3                the indexed image of a row: its file's, tar member's or object's bytes

A service given no embedder (the command line's, when the output's model cannot be had: no --weights for an
output computed with a weights file) answers rows, keys, vectors and duplicates; /api/index says it takes no
sentence or image, and why ("unavailable"), and `answers()` says it in the line `serve` prints as it starts.

Every answer is JSON but an image's; an error is {"status": N, "error": "one line"}, never a traceback. The
answers are the command line's: the same query vectors (search/queries.py) and the same search. For an output
that kept values beside its rows (`run_inference.py --keep txt,json`), each row answered (a neighbour, and the
first `Limits.kept_per_group` rows of a duplicate group) holds them: "kept": {"txt": "...", "json": null}, read
from the output's members index for those rows only.

Safe by default: the Host check of search/server.py (DNS rebinding); a Content-Security-Policy; an image fetched
by row, never by a path the request names (a parameter that is not the endpoint's is refused), and served only
when it is the image indexed (search/indexed_images.py: inside the images folder, unchanged, an image); each
request read within a deadline (search/connections.py); uploads bounded in
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
from search.indexed_images import Changed, IndexedImages, TooLarge
from search.captions import (Captions, caption_filter, caption_scores, check_caption_scores,
                             has_caption_scores)
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
    request_seconds: float = 10.0           # a request's line, headers and body, from its first byte to its last


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


NO_EMBEDDER = "no model given to the service: search by a row, a key or a vector"


class Service:
    """The API's operations on one index; each returns what the answer's JSON holds, or raises ApiError.

    Args:
      index: a loaded `search.index.Index`.
      embedder: the queries' embedder (`images(list of bytes)`, `text(sentences)`: search/queries.py), or None:
        only rows and vectors are taken.
      limits: Limits.
      no_embedder: why `embedder` is None, one line: what /api/index, the page and `answers` say of the
        sentences and images refused (the command line's: the weights the output needs); None: NO_EMBEDDER.
    """

    def __init__(self, index, embedder=None, limits=Limits(), no_embedder=None):
        self.index, self.embedder, self.limits, self.no_embedder = index, embedder, limits, no_embedder or NO_EMBEDDER
        self.slots = _Slots(limits.running, limits.waiting)
        self.members = members_index(index)
        self.images = IndexedImages(index, self.members)  # its manifest read once, on the first image asked
        self.kept = Kept(index)  # its names read once, on the first answer
        self._duplicates_lock, self._captions_lock, self._caption_scores = threading.Lock(), threading.Lock(), None
        self._has_caption_scores = None  # whether the output has them: its text file's schema read once

    def has_caption_scores(self):
        """Whether the indexed output has caption scores (its job ran with --text-column): its text file's schema,
        read once."""
        with self._captions_lock:
            if self._has_caption_scores is None:
                self._has_caption_scores = has_caption_scores(self.index)
            return self._has_caption_scores

    def _scores_of_captions(self):
        """float32 [N]: each row's caption score (NaN: none), read once (None: the output has none)."""
        if not self.has_caption_scores():
            return None
        with self._captions_lock:
            if self._caption_scores is None:
                self._caption_scores = caption_scores(self.index)
            return self._caption_scores

    def unavailable(self):
        """{"text": why, "image": why, "caption": why}, one line each, for the kinds of query this service cannot
        answer ({}: it answers sentences, images and captions)."""
        why = {}
        try:
            check_text_queries(self.index)
        except ValueError as error:
            why["text"] = error_line(error)
        if "model" not in self.index.settings:
            why["image"] = "the indexed output records no model: search by a row, a key or a vector"
        if self.embedder is None:
            why = dict({"text": self.no_embedder, "image": self.no_embedder}, **why)
        try:
            check_caption_scores(self.index)
            if "text" in why:
                why["caption"] = why["text"]
        except ValueError as error:
            why["caption"] = error_line(error)
        return why

    def answers(self):
        """One line: the queries this service answers, and why not the others (said as it starts)."""
        why = self.unavailable()
        line = "answers: %s" % ", ".join(["neighbours of a row or a key"] + [name for kind, name in (
            ("text", "a sentence"), ("caption", "a sentence against the captions"), ("image", "an image"))
            if kind not in why] +
            ["a vector", "duplicates"])
        if "text" in why and why["text"] == why.get("image"):  # (the captions are said only where there are some)
            return "%s; not sentences or images: %s" % (line, why["text"])
        return line + "".join("; not %s: %s" % (name, why[kind]) for kind, name in (("text", "sentences"),
                                                                                    ("image", "images")) if kind in why)

    def describe(self):
        """The index: its rows, kind, the output and model it holds, the names of the values kept beside its rows
        (`--keep`; [] when none), which queries it takes and why not the others ("unavailable"), the limits."""
        settings, centre, why = self.index.settings, self.index.meta["centre"], self.unavailable()
        return {"rows": len(self.index), "kind": self.index.kind, "output": self.index.meta["source"]["output"],
                "model": settings.get("model"), "layer": settings.get("layer"), "kept": list(self.kept.names),
                "centred": centre["centred"],
                "dimensions": int(self.index.mean.shape[0]), "queries": {
                    "key": True, "row": True, "vector": True, "text": "text" not in why, "image": "image" not in why,
                    "caption": "caption" not in why},
                "caption_scores": self.has_caption_scores(),
                "unavailable": why, "limits": dataclasses.asdict(self.limits)}

    def k(self, text):
        """The k asked for (default 10), checked against the limit."""
        try:
            k = int(text)
        except (TypeError, ValueError):
            k = 0
        if not 1 <= k <= self.limits.max_k:
            raise ApiError(400, "k must be a whole number from 1 to %d; got %r" % (self.limits.max_k, text))
        return k

    def min_caption_score(self, text):
        """The caption score bound asked (`text`; None: none), checked: a cosine, on an output with caption scores."""
        if text is None:
            return None
        bound = cosine("min_caption_score", text)
        if self._scores_of_captions() is None:  # an output without caption scores: its one line
            try:
                check_caption_scores(self.index)
            except ValueError as error:
                raise ApiError(400, error_line(error)) from None
        return bound

    def _answer(self, query, unit_vector, k, to_captions=False, min_caption_score=None):
        """The k neighbours of `unit_vector`: the index's rows, or the rows whose caption is nearest (`to_captions`:
        search.captions, as the command line's --caption; a caption whose image failed has no row: "row" null);
        only rows of a caption score of at least `min_caption_score` (checked by `min_caption_score`), unless None."""
        if to_captions:
            found = [(self._row_of(key), key, score) for key, score in Captions(self.index).ranked(
                unit_vector[None], k, min_caption_score)[0]]
        else:
            allowed = None if min_caption_score is None else caption_filter(self.index, min_caption_score,
                                                                            self._scores_of_captions())
            found = [(row, self.index.paths[row], score)
                     for row, score in ranked(self.index, unit_vector[None], k, allowed)[0]]
        neighbours = [{"rank": rank, "row": row, "key": key, "score": score}
                      for rank, (row, key, score) in enumerate(found, 1)]
        return {"query": query, "neighbours": self._with_kept(self._with_caption_scores(neighbours))}

    def _with_caption_scores(self, rows):
        """`rows` (dicts with a "row"), each given its "caption_score" when the output has caption scores (null: no
        caption, one that failed, or a caption without an image row)."""
        scores = self._scores_of_captions()
        if scores is not None:
            for item in rows:
                value = None if item["row"] is None else float(scores[item["row"]])
                item["caption_score"] = None if value is None or math.isnan(value) else value
        return rows

    def _row_of(self, key):
        try:
            return self.index.row(key)
        except ValueError:
            return None

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

    def by_row(self, text, k, min_caption_score=None):
        """The neighbours of the indexed row numbered `text` (only rows of a caption score of at least
        `min_caption_score`, a checked bound, unless None; as every query's)."""
        row = self.row(text)
        with self.slots:
            return self._answer({"row": row, "key": self.index.paths[row]}, self.index.stored([row])[0], k,
                                min_caption_score=min_caption_score)

    def by_key(self, key, k, min_caption_score=None):
        """The neighbours of the indexed row whose key (its path in the output) is `key`."""
        try:
            row = self.index.row(key)
        except ValueError:
            raise ApiError(404, "key %r is not a row of the index" % key) from None
        return self.by_row(str(row), k, min_caption_score)

    def by_text(self, sentence, k, to_captions=False, min_caption_score=None):
        """The neighbours of a sentence, embedded by the model's text tower: the images nearest it, or the rows whose
        caption is nearest (`to_captions`: text to text)."""
        name = "caption" if to_captions else "text"
        if len(sentence) > self.limits.max_sentence:
            raise ApiError(400, "a sentence may have at most %d characters; got %d" % (self.limits.max_sentence,
                                                                                      len(sentence)))
        if not sentence.strip():
            raise ApiError(400, "%s %r has no words: give a sentence" % (name, sentence))
        self._answerable(name, "a sentence against the captions" if to_captions else "a sentence")
        with self.slots:
            answer = self._answer({name: sentence}, text_vectors(self.index, [sentence], self.embedder)[0], k,
                                  to_captions, min_caption_score)
            if to_captions:  # SigLIP's probability is of an image and a sentence, not of two sentences
                return answer
            chances = probabilities(self.embedder, [[(row["row"], row["score"]) for row in answer["neighbours"]]])[0]
            for row, chance in zip(answer["neighbours"], chances or ()):  # SigLIP's own score, beside the cosine
                row["probability"] = chance
            return answer

    def by_vector(self, body, k, min_caption_score=None):
        """The neighbours of a vector given as JSON {"vector": [D numbers]} (raw features, as the output's)."""
        try:
            vector = np.asarray(json_body(body)["vector"], np.float64)
        except (ValueError, KeyError, TypeError, OverflowError):  # OverflowError: an integer past a float's range
            raise ApiError(400, 'the body must be JSON {"vector": [numbers]}') from None
        if vector.ndim != 1 or not np.isfinite(vector).all():
            raise ApiError(400, "vector must be one list of finite numbers; got shape %s" % (vector.shape,))
        with self.slots:
            return self._answer({"vector": len(vector)}, self.index.prepare(vector[None].astype(np.float32))[0], k,
                                min_caption_score=min_caption_score)

    def by_image(self, data, k, min_caption_score=None):
        """The neighbours of an uploaded image (its file's bytes), computed by the output's model."""
        self._answerable("image", "an image")
        check_pixels(data, self.limits.max_pixels)
        with self.slots:
            return self._answer({"image": len(data)}, image_vectors(self.index, [data], self.embedder,
                                                                    ["uploaded"])[0], k,
                                min_caption_score=min_caption_score)

    def duplicates(self, text, neighbours=20, keep_rule="first-key"):
        """The groups of rows with cosine >= threshold `text` (pairs joined, largest group first); in each, the row
        `keep_rule` keeps first ("remove": false) and the others, which would go ("remove": true;
        search/removals.py); each member with its caption score where the output has them, as a search's."""
        from search.duplicates import find_pairs, group_pairs
        from search.removals import KEEP_RULES, check_rule_usable, kept_rows
        threshold = cosine("threshold", text)
        if keep_rule not in KEEP_RULES:
            raise ApiError(400, "keep must be one of %s; got %r" % (", ".join(KEEP_RULES), keep_rule))
        try:
            check_rule_usable(self.index, keep_rule)  # an output without caption scores: before the pass
        except ValueError as error:
            raise ApiError(400, error_line(error)) from None
        with self.slots, self._duplicates_lock:  # one at a time: a pass over every row
            pairs, _ = find_pairs(self.index, threshold, neighbours=neighbours)
            groups = group_pairs(pairs, len(self.index))
            kept = kept_rows(self.index, groups[:self.limits.max_groups], keep_rule)
        shown = [[{"row": int(row), "key": self.index.paths[row], "remove": row != keep}
                  for row in [keep] + [row for row in group if row != keep]]
                 for group, keep in zip(groups, kept.tolist())]
        self._with_kept([member for group in shown for member in group[:self.limits.kept_per_group]])
        self._with_caption_scores([member for group in shown for member in group])
        return {"threshold": threshold, "keep_rule": keep_rule, "pairs": len(pairs), "groups": len(groups),
                "shown": shown}

    def image(self, text):
        """(bytes, content type) of the indexed image of row `text`: a file under the output's images folder, a tar
        member by its byte range (the output's members index), an object fetched by the service; only when it is
        the image indexed (search/indexed_images.py): 404 when it cannot be read or proven so, 409 when it
        changed since it was indexed, 413 when it is too large."""
        row = self.row(text)
        with self.slots:
            try:
                return self.images.read(self.index.paths[row], self.limits.max_image_bytes)
            except TooLarge:
                raise ApiError(413, "the image of row %d is larger than %d bytes" % (
                    row, self.limits.max_image_bytes)) from None
            except Changed as error:
                raise ApiError(409, "the image of row %d changed since it was indexed (%s)" % (
                    row, error_line(error))) from None
            except (OSError, ValueError) as error:
                raise ApiError(404, "the image of row %d cannot be read (%s)" % (row, error_line(error))) from None

    def _answerable(self, kind, what):
        why = self.unavailable().get(kind)
        if why is not None:
            raise ApiError(400, "%s cannot be searched: %s" % (what, why))


def cosine(name, text):
    """The cosine a parameter `name` gives as `text`; ApiError 400 naming it unless a number from -1 to 1."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not -1 <= value <= 1:
        raise ApiError(400, "%s must be a cosine from -1 to 1; got %r" % (name, text))
    return value


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
    """The JSON value of a request's body (bytes); ValueError when it is not UTF-8 JSON, or nested too deeply for
    the parser (which would raise RecursionError: '[' * 100000)."""
    try:
        return json.loads(body.decode("utf-8"))
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None
