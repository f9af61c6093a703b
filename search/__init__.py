"""Search over the features an output holds: an index, nearest neighbours, near-duplicates, a page.

    from search import Index, read_output
    index = Index.build("results/features.npy", "results/features.index")   # the kind follows the size
    paths, scores = Index.load("results/features.index").search(vectors, k=10)   # str [Q, k], float32 [Q, k]

The modules, one job each:

    vectors.py      an output's rows in batches (CSV, Parquet, npy, a kept shards folder) and its record
    index.py        Index: centred, L2-normalised vectors in a faiss index, the metadata beside it,
                    rows added later, saved and loaded, search
    build.py        a new index from an output: two passes over its rows, the kind trained, the search
                    tuned to the recall
    kinds.py        the faiss index of each kind (exact, HNSW, PCA + IVF-PQ): choice by size, training,
                    the search parameters tried at build
    exact.py        exact search: numpy's matrix product over the vectors faiss holds
    rerank.py       ivfpq's full vectors on disk, and the re-ranking of candidates with them
    recall.py       the recall measured at build against exact search
    duplicates.py   every pair above a cosine threshold in bounded memory, groups, the calibration histogram
                    and the threshold it suggests
    removals.py     what to remove: the row each group of near-duplicates keeps by a rule, the others, as
                    Parquet (`duplicates --removals`); captions.py: each row's caption score, where an
                    output has them
    leakage.py      the rows of one output with a near-copy in another (`duplicates --against`)
    export.py       the rows a query, a score or a removals file selects, as Parquet; export_tars.py:
                    their images as WebDataset tars, resumable
    commands.py     the command line's index, add and page; curation.py: its duplicates and export
    page.py         the static HTML report and its thumbnails
    server.py       the loopback server that shows it: its files only, stopped by SIGINT or SIGTERM; the Host
                    check, the signal policy, the security headers and a file opened only inside a folder,
                    which the service shares
    queries.py      queries as vectors (keys, .npy, image files, sentences) and their ranked rows: what the
                    command line and the service share; new images and sentences by an embedder given;
                    the values kept beside the rows shown (--keep), from the output's members index
    service.py      the live service's operations: search by sentence, image, key, row, vector; duplicate
                    groups; an indexed image by its row; bounded requests and queries at once
    indexed_images.py  an indexed image for the service, read only when it is the image indexed: inside
                    the images folder, unchanged (the output's manifest says), an image
    api.py          its HTTP side: routes, parameters, JSON answers and errors, on 127.0.0.1 by default
    connections.py  its connections: a deadline for each request; when all are taken, the one that has
                    waited longest for its client closed to make room
    image_rows.py   an image file given as a query that is an indexed image, unchanged (the output's
                    manifest says): its row answers, instead of the model
    captions.py     what a job's text tower gave the rows (<output>.text.parquet): each row's caption score,
                    queries compared with the rows' captions (image to text, text to text)

It reads outputs; it never imports the engine, the job layer or TensorFlow (tested in test_search_index.py):
only `parallel.output`'s readers, `parallel.messages`, the manifest (`parallel.inputs.manifest`), the tars'
members index and decode's warning filter and formats (`parallel.inputs.tars`, `parallel.inputs.decode`), the
readers of an object (`parallel.inputs.remote`, `parallel.inputs.locations`), which import neither, and the
table of `models.text_queries` (which layers are in a text tower's space: not centred, centre.py). faiss is
imported on first use (`pip install -e '.[search]'`).
Computing the vector of a new image or of a sentence is given to search as an object (an "embedder"):
the command line builds it from the engine and the models (models/query_embedder.py).
"""

from parallel.lazy import lazy_exports

_MODULES = {
    "vectors": ("read_output", "OutputVectors"),
    "index": ("Index", "SearchError"),
    "duplicates": ("find_pairs", "group_pairs", "nearest_scores", "histogram", "suggest_threshold"),
    "page": ("write_page",),
    "server": ("serve",),
    "service": ("Service", "Limits"),
}
_EXPORTS = {name: __name__ + "." + module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
