"""The first pass of a build: the centre of an output's rows, and a sample of them.

    mean, sample, record = mean_and_sample(source, 4096, seed=0, progress=None, sample_rows=200)

The centre is the rows' mean, unless the collection cannot give one (`choose_centre`): then it is
zero, and the scores are raw cosines (docs/search.md, "What a score means at each size"). Rows with a
value that is not finite take no part (the fill leaves them out).

An output whose vectors share a space with a text tower's (CLIP's `embedding`: `uncentred_reason`) is
never centred: a sentence's embedding sits in another cluster than the images' (the modality gap), so
centring both on the images' mean would change which images a sentence finds. Raw, a text query's score
is the cosine of the two embeddings, CLIP's own zero-shot score.
"""

import numpy as np

from search.kinds import SearchError

CENTRE_MIN_ROWS = 10       # fewer rows: no centring (centred cosines average -1/(N-1): -0.11 at 10 rows)
CENTRE_MIN_SPREAD = 0.01   # ... nor when the rows keep less than this share of their energy off the mean


def uncentred_reason(settings):
    """Why an output of `settings` (its record's) is never centred, or None when `choose_centre` decides.

    Reads `models.text_queries.TEXT_LAYERS`, a table (no TensorFlow): which layer of which model is in a
    text tower's space.
    """
    from models.text_queries import SIGLIP_MODELS, shares_text_space
    if shares_text_space(settings):
        return ("%s %s is in its text tower's space: raw cosines, so that a sentence's score is %s's cosine"
                % (settings.get("model"), settings.get("layer"),
                   "SigLIP" if settings.get("model") in SIGLIP_MODELS else "CLIP"))
    return None


def mean_and_sample(source, batch_rows, seed, progress, sample_rows, centre=True):
    """First pass: the centre (`choose_centre`) and up to `sample_rows` rows chosen at random, shuffled;
    rows with a value that is not finite take no part (the fill leaves them out).

    Args:
      centre: False, or the reason (str) not to centre: the centre is zero whatever the rows.

    Returns:
      (centre float32 [D], sample float32 [S, D], the centre's record for index.json).

    Raises:
      SearchError: fewer than 2 rows with finite values.
    """
    rng = np.random.default_rng(seed)
    take = min(source.count, sample_rows)
    chosen = np.sort(rng.choice(source.count, size=take, replace=False))
    sums = np.zeros(source.feature_size, dtype=np.float64)
    squares, finite_rows = 0.0, 0
    # Filled in place and shuffled in place: a sample of a gigabyte is held once, not copied.
    sample, taken, start = np.empty((take, source.feature_size), dtype=np.float32), 0, 0
    for _, vectors in source.batches(batch_rows):
        finite = np.isfinite(vectors).all(axis=1)
        kept = vectors if finite.all() else vectors[finite]
        sums += kept.sum(axis=0, dtype=np.float64)
        squares += float(np.einsum("ij,ij->", kept, kept, dtype=np.float64))
        finite_rows += len(kept)
        stop = start + len(vectors)
        picked = chosen[np.searchsorted(chosen, start):np.searchsorted(chosen, stop)] - start
        picked = picked[finite[picked]]
        sample[taken:taken + len(picked)] = vectors[picked]
        taken += len(picked)
        start = stop
        if progress:
            progress(start, source.count, "reading")
    if finite_rows < 2:
        raise SearchError("output=%s holds %d rows with finite values: nothing to index"
                          % (source.output, finite_rows))
    if not taken:  # more rows than sampled, and every one sampled was not finite
        raise SearchError("output=%s: the %d rows sampled all hold values that are not finite: write it again"
                          % (source.output, take))
    sample = sample[:taken]
    rng.shuffle(sample)  # the order rng.permutation(taken) gives
    mean, record = choose_centre(sums, squares, finite_rows, centre)
    return mean, sample, record


def choose_centre(sums, squares, rows, centre=True):
    """The centre of the vectors whose sum is `sums` (float64 [D]) and sum of squared norms `squares`.

    The mean, unless the collection cannot give a centre: fewer than CENTRE_MIN_ROWS rows (each row
    weighs 1/N in its own centre: two rows centred always score -1), or rows that keep less than
    CENTRE_MIN_SPREAD of their energy off the mean (all alike: an image and its near-copies would be
    left with rounding noise, or with nothing), or `centre` is not True (False, or the reason why not:
    `uncentred_reason`). Then the centre is zero: scores are raw cosines.

    Returns:
      (float32 [D], {"centred": bool, "rows": N, "spread": the share of the energy off the mean}, with
      "reason": `centre` when it is a reason).
    """
    mean = sums / rows
    energy = squares / rows
    spread = max(0.0, energy - float(mean @ mean)) / energy if energy > 0 else 0.0
    centred = centre is True and rows >= CENTRE_MIN_ROWS and spread >= CENTRE_MIN_SPREAD
    vector = mean.astype(np.float32) if centred else np.zeros(len(sums), dtype=np.float32)
    record = {"centred": bool(centred), "rows": int(rows), "spread": round(spread, 6)}
    if isinstance(centre, str):
        record["reason"] = centre
    return vector, record
