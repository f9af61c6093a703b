"""Each row's caption score, where the indexed output has one: what `--keep-rule highest-caption-score` and
`export --min-caption-score` read.

    scores = caption_scores(index)      # float32 [N] in the index's row order, NaN where a row has none

A caption score is the cosine of a row's caption embedded by the model's text tower and its image's embedding,
computed when the job ran with a caption column (issue 43, item 1). This is the one place that knows where an
output keeps them: until outputs carry them, every output has none, and `caption_scores` says so in one line.
"""

from search.kinds import SearchError


def caption_scores(index):
    """The caption score of each row of `index`.

    Args:
      index: a loaded `search.index.Index`.

    Returns:
      float32 [N], in the index's row order; NaN for a row without one (no caption, or a caption that failed).

    Raises:
      SearchError: the indexed output has no caption scores (one line: its job embedded no captions).
    """
    raise SearchError("%s has no caption scores: its job embedded no captions (a job with a text column "
                      "gives each row one)" % index.meta["source"]["output"])
