"""The checks of a loaded index.json and index.faiss: what `Index.load` and the searches read, with its types.

A hand-edited or damaged file (a JSON list, a missing key, a kind that is not index.faiss's) is a
ValueError naming the first thing wrong; `Index.load` turns it into "index=... is damaged (...):
build it again".
"""

from search.kinds import KINDS, import_faiss

VERSION = 1

# The faiss class of each kind's index.faiss (a function: faiss is imported on first use).
_FAISS_CLASSES = {"exact": lambda: import_faiss().IndexFlat, "hnsw": lambda: import_faiss().IndexHNSW,
                  "ivfpq": lambda: import_faiss().IndexPreTransform}


def checked_meta(meta):
    """`meta` (index.json, parsed) if it holds what `load` and `search` read, with their types.

    Raises:
      ValueError: naming the first key missing or of the wrong type (a hand-edited or damaged file).
    """
    def need(container, key, kinds, where="index.json"):
        value = container.get(key) if isinstance(container, dict) else None
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise ValueError("%s: %s=%r" % (where, key, value))
        return value

    if not isinstance(meta, dict):
        raise ValueError("index.json holds a %s, not an object" % type(meta).__name__)
    if meta.get("version") != VERSION:
        raise ValueError("index.json: version=%r" % meta.get("version"))
    if meta.get("kind") not in KINDS:
        raise ValueError("index.json: kind=%r, not one of %s" % (meta.get("kind"), ", ".join(KINDS)))
    feature_size = need(meta, "feature_size", int)
    if need(meta, "rows", int) < 0 or feature_size < 1:
        raise ValueError("index.json: rows=%r, feature_size=%r" % (meta["rows"], feature_size))
    mean = need(meta, "mean", list)
    if len(mean) != feature_size or not all(isinstance(value, (int, float)) for value in mean):
        raise ValueError("index.json: mean is not %d numbers" % feature_size)
    source = need(meta, "source", dict)
    need(source, "output", str, "index.json source")
    need(source, "settings", dict, "index.json source")
    search = need(meta, "parameters", dict).get("search", {})
    if not isinstance(search, dict) or not all(isinstance(value, int) and not isinstance(value, bool) and value >= 1
                                               for value in search.values()):
        raise ValueError("index.json: parameters.search=%r" % (search,))
    return meta


def check_faiss_index(faiss_index, meta):
    """Raises ValueError when `faiss_index` is not of the kind and dimensions `meta` (checked) says."""
    if not isinstance(faiss_index, _FAISS_CLASSES[meta["kind"]]()) or faiss_index.d != meta["feature_size"]:
        raise ValueError("index.faiss is a %s of %d dimensions, not the %s index of %d that index.json says"
                         % (type(faiss_index).__name__, faiss_index.d, meta["kind"], meta["feature_size"]))
