"""Index: an output's vectors, centred and L2-normalised, in a faiss index, and the metadata beside it.

    index = Index.build("results/features.npy", "results/features.index")    # kind by size: search/build.py
    index.add("results/features.npy")                                         # rows of a resumed output
    paths, scores = Index.load("results/features.index").search(vectors, k=10)

Centring on the mean, then normalising, makes the inner product a cosine of centred vectors:
fc7 after the ReLU is non-negative, and without centring every cosine is high (faiss #2636).
The mean is a centre only when the collection can give one (search/centre.py): with fewer than
CENTRE_MIN_ROWS rows, each row weighs too much in it (two rows always score -1 with each other), and
rows all alike (near-copies of one image) have nothing left once it is taken away; such an index
keeps the raw cosine (its centre is zero), and index.json says which (`centre`). So does an output in a
text tower's space (CLIP's embedding: search/centre.py), whose rows a sentence is compared with.

Rows with a value that is not finite (inf, nan) are left out of the index and named in index.json
(`left_out`): one would otherwise spoil the mean and every score.

Kinds (`KINDS`: exact, hnsw, ivfpq), chosen by size unless given: see search/kinds.py.

The index folder:
    index.faiss   the faiss index (with the PCA, for ivfpq): faiss.read_index reads it
    paths.csv     the path of each row, in order (one column `path`)
    vectors.f16   ivfpq only: every row's normalised vector, float16 [rows, D] little-endian, no
                  header; read by row (pread) to re-rank a search's candidates in the full D dimensions
    index.json    the metadata: source output, its settings, kind, parameters, the mean, the
                  recall measured at build time against exact search, rows; written last, so that
                  a build or add that stopped part-way leaves the previous index, or none
"""

import json
import os
from pathlib import Path

import numpy as np

from parallel.messages import error_line
from parallel.output.csv_rows import read_paths_csv, write_paths_csv
from parallel.output.durable import replace_atomically
from search.build import build_index
from search.kinds import KINDS, SearchError, choose_kind, import_faiss, normalise  # noqa: F401
from search.kinds import EF_SEARCH, RERANK
from search.exact import stored_matrix, top_k
from search.metadata import check_faiss_index, checked_meta
from search.rerank import FULL_VECTORS, appending, map_full_vectors, rerank
from search.vectors import read_output

LEFT_OUT_NAMED = 20        # paths of left-out rows recorded in index.json (the count is always)
_FILES = ("index.faiss", "paths.csv", "index.json")


class Index:
    """A built index, loaded. `Index.build` makes one, `Index.load` reads one.

    Attributes:
      folder: the index folder.
      meta: the metadata (index.json) as a dict.
      paths: list of str, the path of each row.
      mean: float32 [D], subtracted from every vector before normalising.
    """

    def __init__(self, folder, meta, faiss_index, paths, mean):
        self.folder, self.meta, self._index, self.paths, self.mean = Path(folder), meta, faiss_index, paths, mean
        self._rows = None
        self.left_out = {"rows": 0, "paths": []}  # of the last add (a build's are in meta["left_out"])
        self._full = None  # ivfpq: vectors.f16, float16 [rows, D] (search.rerank.FullVectors)

    @property
    def kind(self):
        return self.meta["kind"]

    @property
    def keeps_full_vectors(self):
        """Whether the index re-ranks with the full vectors it keeps (ivfpq; see search.rerank)."""
        return self._full is not None

    @property
    def settings(self):
        """The settings of the indexed output (layer, weights, precision, ...): its queries must match them."""
        return self.meta["source"]["settings"]

    def __len__(self):
        return len(self.paths)

    # ----------------------------------------------------------------------------------------- building
    @classmethod
    def build(cls, output, folder, kind=None, batch_rows=4096, progress=None, source=None, seed=0,
              full_vectors=True, centre=None):
        """Indexes every row of `output` into `folder` (created; an existing index there is replaced).

        See `search.build.build_index`: its arguments (but `index_class`: this class), what it returns, raises.
        """
        return build_index(cls, output, folder, kind, batch_rows, progress, source, seed, full_vectors, centre)

    def add(self, output=None, batch_rows=4096, progress=None, source=None):
        """Adds the rows of `output` (default: the indexed output, resumed or extended since) whose paths
        the index lacks, with the mean, PCA and training of the build; saves the index.

        Returns:
          int: rows added (`left_out` then names those left out: values not finite).

        Raises:
          SearchError: the output's settings or feature size differ from the indexed one's.
        """
        source = source or read_output(output or self.meta["source"]["output"])
        if source.feature_size != self.meta["feature_size"]:
            raise SearchError("%s has %d features a row, the index %d: index it separately"
                              % (source.output, source.feature_size, self.meta["feature_size"]))
        different = differences(self.settings, source.settings)
        if different:
            raise SearchError("%s was written with other settings than the indexed output (%s): index it "
                              "separately" % (source.output, different))
        before = len(self.paths)
        self._full = None  # its file grows: mapped again below
        self.left_out = self._fill(source, batch_rows, set(self.paths), progress, None, self._full_path())
        added = len(self.paths) - before
        if added:
            self.meta["source"]["complete"] = source.complete
            self.save()
        self._map_full(self._full_path())
        return added

    def _fill(self, source, batch_rows, skip, progress, recall, full_path):
        """Adds the rows of `source` not in `skip`; with full vectors, appends theirs to `full_path` (cut
        first to the rows the index holds: what an add that stopped part-way left after them is not ours).

        Returns:
          {"rows": int, "paths": the first LEFT_OUT_NAMED}: the rows left out, whose values are not finite.
        """
        done = 0
        left_out = {"rows": 0, "paths": []}
        keep = "full_vectors" in self.meta["parameters"]
        with appending(full_path if keep else None, len(self.paths), self.meta["feature_size"]) as full:
            for paths, vectors in source.batches(batch_rows, skip=skip):
                done += len(paths)
                finite = np.isfinite(vectors).all(axis=1)
                if not finite.all():
                    bad = np.flatnonzero(~finite)
                    left_out["rows"] += len(bad)
                    left_out["paths"] += [paths[row] for row in bad[:LEFT_OUT_NAMED - len(left_out["paths"])]]
                    paths, vectors = [paths[row] for row in np.flatnonzero(finite)], vectors[finite]
                unit = normalise(vectors, self.mean)
                if recall is not None:
                    recall.update(unit, len(self.paths))
                self._index.add(unit)
                full(unit)
                self.paths.extend(paths)
                if progress:
                    progress(done, source.count, "adding")
        self.meta["rows"] = len(self.paths)
        self._rows = None
        return left_out

    def _full_path(self, suffix=""):
        return self.folder / (FULL_VECTORS + suffix)

    def _map_full(self, path):
        """Maps the full vectors of an index that keeps them (see search.rerank); None for the others."""
        self._full = None
        if "full_vectors" in self.meta["parameters"]:
            self._full = map_full_vectors(path, len(self.paths), self.meta["feature_size"], self.folder)

    # ----------------------------------------------------------------------------------------- files
    def save(self):
        """Writes the index folder: index.faiss and paths.csv, then index.json last (each atomically)."""
        faiss = import_faiss()
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = self.folder / "index.faiss.tmp"
        faiss.write_index(self._index, str(temporary))
        os.replace(temporary, self.folder / "index.faiss")
        if self._full_path(".tmp").exists():  # a build's full vectors: in place before index.json says so
            os.replace(self._full_path(".tmp"), self._full_path())
        elif "full_vectors" not in self.meta["parameters"]:
            self._full_path().unlink(missing_ok=True)  # a replaced index's
        write_paths_csv(self.folder / "paths.csv", self.paths)
        self.meta["rows"] = len(self.paths)
        replace_atomically(self.folder / "index.json", (json.dumps(self.meta, indent=1) + "\n").encode("utf-8"))

    @classmethod
    def load(cls, folder, mmap=False):
        """The index in `folder`, as `build` wrote it.

        Args:
          folder: the index folder.
          mmap: map index.faiss instead of reading it (exact and ivfpq kinds; less memory, slower first queries).

        Raises:
          SearchError: not an index folder, one whose files disagree (a copy interrupted part-way), or
            whose index.json is not what `build` writes (search/metadata.py).
        """
        faiss = import_faiss()
        folder = Path(folder)
        missing = [name for name in _FILES if not (folder / name).is_file()]
        if missing:
            raise SearchError("index=%s is not an index folder (no %s): build one with `search-features index`"
                              % (folder, ", ".join(missing)))
        try:
            meta = checked_meta(json.loads((folder / "index.json").read_text(encoding="utf-8")))
            paths = read_paths_csv(folder / "paths.csv")
            flags = faiss.IO_FLAG_MMAP if mmap and meta["kind"] != "hnsw" else 0
            faiss_index = faiss.read_index(str(folder / "index.faiss"), flags)
            check_faiss_index(faiss_index, meta)
            if not len(paths) == faiss_index.ntotal == meta["rows"]:
                raise ValueError("%d paths, %d vectors, %d rows recorded" % (len(paths), faiss_index.ntotal,
                                                                            meta["rows"]))
            index = cls(folder, meta, faiss_index, paths, np.asarray(meta["mean"], dtype=np.float32))
            index._map_full(index._full_path())
            index._set_search_parameters()
        except SearchError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, RuntimeError, OSError) as error:
            raise SearchError("index=%s is damaged (%s): build it again" % (folder, error_line(error))) from None
        return index

    def set_search(self, **parameters):
        """Changes how the index searches, for this object (recorded by the next `save`): more is slower
        and finds more of the exact neighbours (docs/benchmarks.md#search measures both).

        Args:
          parameters: hnsw: efSearch; ivfpq: nprobe (lists visited), k_factor (candidates re-ranked
            with the PCA vectors per candidate, default 8) and, when the index keeps the full vectors,
            rerank (candidates re-ranked with them per neighbour). The defaults are chosen at build:
            the least work that finds RECALL_TARGET of the exact neighbours of the recall check
            (search.kinds.search_steps).

        Raises:
          SearchError: a parameter this kind does not have, or not a whole number >= 1.
        """
        allowed = {"hnsw": ("efSearch",), "ivfpq": ("nprobe", "k_factor")}.get(self.kind, ())
        if "full_vectors" in self.meta["parameters"]:
            allowed += ("rerank",)
        for name, value in parameters.items():
            if name not in allowed:
                raise SearchError("%s=%r: a %s index takes %s" % (name, value, self.kind,
                                                                  ", ".join(allowed) or "no search parameter"))
            if not isinstance(value, int) or value < 1:
                raise SearchError("%s=%r; expected a whole number of at least 1" % (name, value))
        self.meta["parameters"].setdefault("search", {}).update(parameters)
        self._set_search_parameters()

    def _set_search_parameters(self):
        search = self.meta["parameters"].get("search", {})
        inner = self._index
        faiss = import_faiss()
        if self.kind == "hnsw":
            inner.hnsw.efSearch = search.get("efSearch", EF_SEARCH)
        elif self.kind == "ivfpq":
            refine = faiss.downcast_index(faiss.downcast_index(inner).index)
            refine.k_factor = search.get("k_factor", 8)
            ivf = faiss.extract_index_ivf(refine.base_index)
            ivf.nprobe = search.get("nprobe", 32)

    # ----------------------------------------------------------------------------------------- search
    def row(self, path):
        """The row number of `path` in the index.

        Raises:
          SearchError: the index has no such path.
        """
        if self._rows is None:
            self._rows = {name: row for row, name in enumerate(self.paths)}
        try:
            return self._rows[path]
        except KeyError:
            raise SearchError("%r is not in index %s (paths are as in the output: relative to its images folder)"
                              % (path, self.folder)) from None

    def stored(self, rows):
        """float32 [len(rows), D]: the normalised vectors of `rows` as the index holds them (for ivfpq, its
        float16 full vectors, or without them, rebuilt from the PCA: an approximation)."""
        if self._full is not None:
            return np.asarray(self._full[np.asarray(rows, dtype=np.int64)], dtype=np.float32)
        return np.stack([self._index.reconstruct(int(row)) for row in rows]).astype(np.float32)

    def search_ids(self, unit_vectors, k):
        """The k nearest rows of already normalised float32 [Q, D] vectors: (int64 [Q, k], float32 [Q, k]),
        -1 and -inf where the index holds fewer than k rows. An ivfpq index with its full vectors re-ranks
        its best `rerank` x k candidates with them (search.rerank)."""
        k = int(k)
        if k < 1:
            raise SearchError("k=%d; expected at least 1" % k)
        unit_vectors = np.ascontiguousarray(unit_vectors, dtype=np.float32)
        if self.kind == "exact":  # numpy's matrix product over faiss's storage: see search/exact.py
            return top_k(stored_matrix(self._index), unit_vectors, k)
        if self._full is None:
            scores, ids = self._index.search(unit_vectors, k)
            return ids, scores
        per_neighbour = self.meta["parameters"]["search"].get("rerank", RERANK)
        _, candidates = self._index.search(unit_vectors, min(len(self.paths), k * per_neighbour))
        return rerank(self._full, unit_vectors, candidates, k)

    def compressed_search(self, unit_vectors, k):
        """The k nearest rows of normalised float32 [Q, D] vectors by the faiss index alone (ivfpq: no re-ranking
        with the full vectors): (int64 [Q, k], float32 [Q, k]), -1 and -inf where it holds fewer than k rows."""
        scores, ids = self._index.search(np.ascontiguousarray(unit_vectors, dtype=np.float32), int(k))
        return ids, scores

    def prepare(self, vectors):
        """Raw vectors (as the output holds them: float32 [Q, D] or [D]) -> centred, normalised [Q, D].

        Raises:
          SearchError: not D floats a row, or a value that is not finite.
        """
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim == 1:
            vectors = vectors[None]
        if vectors.ndim != 2 or vectors.shape[1] != self.meta["feature_size"]:
            raise SearchError("vectors of shape %s; the index holds %d features a row (%s)"
                              % (vectors.shape, self.meta["feature_size"], self.settings.get("layer", "?")))
        bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
        if len(bad):
            several = len(bad) > 1
            raise SearchError("query vector%s %s hold%s values that are not finite (inf or nan)"
                              % ("s" if several else "", ", ".join(map(str, bad[:10])), "" if several else "s"))
        return normalise(vectors, self.mean)

    def search(self, vectors, k=10):
        """The k nearest rows of each query vector, by cosine of the centred vectors.

        Args:
          vectors: float32 [Q, D] (or [D]), raw features as the indexed output holds them
            (same layer, weights and precision: see `settings`).
          k: neighbours per query (at most the rows of the index).

        Returns:
          (paths, scores): list of Q lists of k str; float32 [Q, k], the cosine similarities,
          highest first (ivfpq: approximate).
        """
        k = min(int(k), len(self.paths))
        ids, scores = self.search_ids(self.prepare(vectors), k)
        return [[self.paths[row] for row in row_ids if row >= 0] for row_ids in ids], scores


def differences(recorded, given):
    """'key=a, not b; ...' for the model settings that differ (the images folder may differ: an extended copy)."""
    keys = ("model", "layer", "weights", "precision", "resize", "image_size")
    return "; ".join("%s=%r, not %r" % (key, recorded.get(key), given.get(key)) for key in keys
                     if key in recorded and key in given and recorded[key] != given[key])
