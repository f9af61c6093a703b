"""The faiss index of each kind: which kind for a size, its training, its parameters.

    exact   IndexFlatIP's storage, every vector compared (numpy's matrix product: search/exact.py);
            the default while its vectors take at most EXACT_MAX_BYTES: one query reads them all (16-28 ms
            at 256 MiB, 43-55 ms at 100k rows of fc7, where hnsw took 0.5-1.2 ms: docs/benchmarks.md#search).
    hnsw    IndexHNSWFlat (M 32, efConstruction 40, efSearch 64 or more: `search_steps`): a graph over
            the full vectors, while they take at most half the available memory.
    ivfpq   a PCA to 256 dimensions (a randomised SVD of a sample), normalised again, then
            IndexIVFPQ (about 4 sqrt(N) lists, as many as its sample trains with TRAIN_PER_LIST rows
            each: `training_rows`; 16 codes of 8 bits, nprobe 1/32 of the lists, at least 32, or more:
            `search_steps`; at least IVFPQ_MIN_ROWS rows to train),
            its candidates re-ranked with the 256-dimension vectors as 8-bit scalars (IndexRefine, k_factor
            8): about 280 bytes a row in memory. The PCA loses what the 256 axes do not hold, so the index
            folder also keeps every normalised vector in float16 on disk (vectors.f16, 2 D bytes a row,
            read a row at a time, never whole): the best RERANK x k candidates of a search are re-ranked
            with them, so the scores and the order are those of the full D dimensions.

The search parameters of hnsw and ivfpq are chosen at build (search.build): the defaults, then each of
`search_steps` in turn until the recall@10 measured at build reaches RECALL_TARGET.

faiss is imported on first use; without it, a SearchError says how to install it.
"""

import math
import os

import numpy as np

KINDS = ("exact", "hnsw", "ivfpq")
EXACT_MAX_BYTES = 256 << 20  # exact by default up to 16,384 rows of 4,096 floats: a query reads every byte
PCA_DIMS = 256
HNSW_M = 32
EF_SEARCH = 64             # hnsw: recall@10 1.0 at 100k fc7-like rows, 0.05x brute force (docs/benchmarks.md#search)
PQ_CODES = 16
RERANK = 3                 # ivfpq: candidates re-ranked with the full vectors, per neighbour asked for
RERANK_STEPS = (3, 5, 10, 20)  # ... or the first of these whose recall at build reaches RECALL_TARGET
EF_SEARCH_STEPS = (64, 128, 256, 512)  # hnsw: likewise
NPROBE_DOUBLINGS = 3       # ivfpq: then nprobe x 2, x 4, x 8 (at most every list)
# The recall@10 at build the search parameters are raised to reach: 0.95 for new queries, with a margin
# (on the hard generator at 20k rows, a rerank that reached 0.954 at build found 0.939 of new queries').
RECALL_TARGET = 0.97
TRAIN_ROWS = 32_768        # rows sampled to train the PCA and the IVF-PQ, at least (512 MB at 4096 floats) ...
TRAIN_PER_LIST = 39        # ... or, to train each IVF list on this many rows (faiss's minimum) ...
TRAIN_BYTES = 1 << 30      # ... as many as this many bytes of float32 rows hold (1 GiB: 524,288 rows of 512)
PQ_BITS = 8
IVFPQ_MIN_ROWS = 2 ** PQ_BITS  # faiss's k-means of each code needs a training row per centroid
BLOCK_ROWS = 65_536        # a training sample's rows transformed at a time (not copied whole)


class SearchError(ValueError):
    """An index that cannot be built, read or queried as asked; the message says what to do."""


def import_faiss():
    try:
        import faiss
    except ImportError:
        raise SearchError("faiss is not installed: pip install -e '.[search]' (or pip install faiss-cpu)") from None
    return faiss


def normalise(vectors, mean):
    """float32 [N, D] -> float32 [N, D]: minus `mean`, then each row of norm 1 (a zero row stays 0)."""
    centred = np.asarray(vectors, dtype=np.float32) - mean
    norms = np.linalg.norm(centred, axis=1, keepdims=True)
    return np.divide(centred, norms, out=np.zeros_like(centred), where=norms > 0)


def normalise_in_place(vectors, mean, rows=BLOCK_ROWS):
    """`normalise` written over `vectors` (float32 [N, D]), `rows` at a time: a training sample of a
    gigabyte is not copied."""
    for start in range(0, len(vectors), rows):
        vectors[start:start + rows] = normalise(vectors[start:start + rows], mean)
    return vectors


def choose_kind(rows, feature_size, available_bytes=None):
    """The kind for `rows` vectors of `feature_size` floats, by the time of one query (what the command
    line and the page ask): exact while the vectors take at most EXACT_MAX_BYTES, HNSW while the vectors
    and the graph take at most half the available memory, else ivfpq."""
    if rows * feature_size * 4 <= EXACT_MAX_BYTES:
        return "exact"
    if available_bytes is None:
        available_bytes = _available_memory()
    return "hnsw" if rows * (feature_size * 4 + HNSW_M * 2 * 4 + 16) <= available_bytes // 2 else "ivfpq"


def training_rows(kind, rows, feature_size):
    """Rows of an output of `rows` rows of `feature_size` floats that train an index of `kind` (a sample held
    while it is built): 0 for exact and hnsw; for ivfpq TRAIN_PER_LIST rows for each of the lists `rows` asks
    for, in at most TRAIN_BYTES, and at least TRAIN_ROWS (never more than `rows`). At 10,000,000 rows of 512
    it is 524,288 rows (8,192 lists); at 1,000,000 of 4,096, 65,536 (1,024 lists)."""
    if kind != "ivfpq":
        return 0
    wanted = min(TRAIN_PER_LIST * _lists_for(rows), TRAIN_BYTES // (4 * max(1, feature_size)))
    return int(min(rows, max(TRAIN_ROWS, wanted)))


def check_rows_for_kind(kind, rows, output):
    """Raises SearchError when `kind` cannot be trained on `rows` rows, naming the kinds that can."""
    if kind == "ivfpq" and rows < IVFPQ_MIN_ROWS:
        raise SearchError("kind=ivfpq needs at least %d rows to train its codes; output=%s holds %d: use --kind "
                          "exact or hnsw (or leave --kind out)" % (IVFPQ_MIN_ROWS, output, rows))


def _available_memory():
    try:
        with open("/proc/meminfo") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _lists_for(rows):
    """The IVF lists `rows` rows ask for: about 4 sqrt(N), a power of two."""
    return 2 ** round(math.log2(max(1.0, 4 * math.sqrt(rows))))


def _nlist(rows, trained_on):
    """IVF lists: those `rows` ask for (`_lists_for`), but no more than `trained_on` rows train with
    TRAIN_PER_LIST each (fewer leave centroids that faiss warns of and lists of uneven size): a power of two,
    at least 1."""
    trainable = 2 ** int(math.log2(max(1, trained_on // TRAIN_PER_LIST)))
    return int(min(_lists_for(rows), trainable))


def _nprobe(nlist):
    """Lists visited per query: a 32nd of them, at least 32 (at most all): the share visited stays the same
    as the index grows, where a fixed 32 of 4,096 lists at 1M rows found half the neighbours."""
    return int(min(nlist, max(32, nlist // 32)))


def new_index(faiss, kind, dims, rows, training):
    """An empty faiss index of `kind` for `rows` vectors of `dims`, trained on `training` (normalised
    float32 [S, dims]); and its parameters for the metadata."""
    if kind == "exact":
        index = faiss.IndexFlatIP(dims)
        _reserve(index, rows)
        return index, {"faiss": "IndexFlatIP"}
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dims, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 40
        index.hnsw.efSearch = EF_SEARCH
        _reserve(faiss.downcast_index(index.storage), rows)
        return index, {"faiss": "IndexHNSWFlat", "M": HNSW_M, "efConstruction": 40, "search": {"efSearch": EF_SEARCH}}
    # The PCA from the sample's first TRAIN_ROWS (it is in random order): its axes need no more, and its
    # randomised SVD holds a few copies of what it is given (float64 among them).
    axes_sample = training[:TRAIN_ROWS]
    pca_dims = min(PCA_DIMS, dims, len(axes_sample))
    pca, kept = _pca(faiss, axes_sample, pca_dims)
    # Normalised again after the PCA: the inner product stays a cosine (the dropped dimensions would
    # otherwise shrink every score, a near-copy's 0.99 to about the variance kept).
    unit = faiss.NormalizationTransform(pca_dims, 2.0)
    reduced = np.empty((len(training), pca_dims), dtype=np.float32)
    for start in range(0, len(training), BLOCK_ROWS):
        reduced[start:start + BLOCK_ROWS] = unit.apply(pca.apply(training[start:start + BLOCK_ROWS]))
    nlist = _nlist(rows, len(training))
    # Sub-vectors of at least 16 dimensions: faiss's k-means is slow on fewer (26 s for 64 codes of 4).
    codes = max(1, min(PQ_CODES, pca_dims // 16))
    while pca_dims % codes:
        codes -= 1
    quantizer = faiss.IndexFlatIP(pca_dims)
    ivf = faiss.IndexIVFPQ(quantizer, pca_dims, nlist, codes, PQ_BITS, faiss.METRIC_INNER_PRODUCT)
    # faiss prints a WARNING line on stderr below 39 training rows a centroid: the lists have them (`_nlist`);
    # the codes' 256 centroids may not (9,984 rows); they train all the same, and the recall measured at build
    # says how well: the line would only be noise.
    ivf.pq.cp.min_points_per_centroid = 1
    refine = faiss.IndexRefine(ivf, faiss.IndexScalarQuantizer(pca_dims, faiss.ScalarQuantizer.QT_8bit,
                                                              faiss.METRIC_INNER_PRODUCT))
    refine.train(reduced)  # trains the IVF-PQ and the scalar quantiser
    index = faiss.IndexPreTransform(refine)  # faiss's Python keeps the parts alive with it
    index.prepend_transform(unit)
    index.prepend_transform(pca)
    ivf.nprobe = _nprobe(nlist)
    refine.k_factor = 8
    return index, {"faiss": "LinearTransform (PCA) + NormalizationTransform + IndexIVFPQ + IndexRefine(SQ8)",
                   "pca_dims": pca_dims,
                   "pca_variance_kept": round(kept, 4), "trained_on": len(training), "nlist": nlist,
                   "pq_codes": codes, "pq_bits": PQ_BITS, "refine": "8-bit scalar of the PCA vectors",
                   "full_vectors": "float16", "search": {"nprobe": ivf.nprobe, "k_factor": 8, "rerank": RERANK}}


def search_steps(kind, parameters):
    """The search parameters an index of `kind` built with `parameters` tries after its defaults, in order
    (each more work a query), until its recall at build reaches RECALL_TARGET: [{name: value}, ...]."""
    search = parameters.get("search", {})
    if kind == "hnsw":
        return [{"efSearch": value} for value in EF_SEARCH_STEPS if value > search["efSearch"]]
    if kind != "ivfpq":
        return []
    # More candidates re-ranked first (cheap: reads from the page cache), then more lists visited.
    steps = [{"rerank": value} for value in RERANK_STEPS if value > search.get("rerank", RERANK_STEPS[-1])]
    last, nprobe = dict(steps[-1]) if steps else {}, search["nprobe"]
    for _ in range(NPROBE_DOUBLINGS):
        if nprobe >= parameters["nlist"]:
            break
        nprobe = min(parameters["nlist"], 2 * nprobe)
        steps.append(dict(last, nprobe=nprobe))
    return steps


def _reserve(flat_index, rows):
    """Makes room for `rows` vectors in an empty IndexFlat at once. Grown by add() instead, its storage (a
    std::vector) doubles: while it moves, the old copy and the new one are both resident, and at 100k
    rows of 4,096 floats the build's peak was the index plus 0.66 GiB. faiss's Python has no reserve():
    a resize up, then down, keeps the capacity (the zeros written are pages the adds write anyway)."""
    flat_index.codes.resize(rows * flat_index.code_size)
    flat_index.codes.resize(0)


def _pca(faiss, training, dims, seed=0):
    """The first `dims` principal axes of `training` (float32 [S, D]) as a faiss LinearTransform
    (x - mean) @ axes.T, and the share of the variance they keep.

    A randomised SVD (Halko et al., two power iterations): seconds, where faiss's PCAMatrix
    decomposes the full D x D covariance (about a minute for D = 4096 on 2 cores).
    """
    mean = training.mean(axis=0, dtype=np.float64).astype(np.float32)
    centred = training - mean
    rng = np.random.default_rng(seed)
    basis = centred @ rng.standard_normal((centred.shape[1], min(dims + 16, centred.shape[1])), dtype=np.float32)
    for _ in range(2):
        basis, _ = np.linalg.qr(basis)
        basis, _ = np.linalg.qr(centred @ (centred.T @ basis))
    _, singular, axes = np.linalg.svd(basis.T @ centred, full_matrices=False)
    axes = np.ascontiguousarray(axes[:dims], dtype=np.float32)
    total = float(np.square(centred, dtype=np.float64).sum())
    kept = float(np.square(singular[:dims], dtype=np.float64).sum() / total) if total > 0 else 1.0
    transform = faiss.LinearTransform(centred.shape[1], dims, True)
    faiss.copy_array_to_vector(axes.ravel(), transform.A)
    faiss.copy_array_to_vector(-(axes @ mean), transform.b)
    transform.is_trained = True
    return transform, kept
