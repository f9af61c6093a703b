"""Models for the engine: each builds a `parallel.model.ModelSpec`, and imports the engine never.

Quiet by default, as `parallel` is: importing that package (which imports no TensorFlow) makes the first
`import tensorflow`, which a model module may be the first to write, print only what TF_CPP_MIN_LOG_LEVEL
lets through (parallel/native_log.py).
"""

import parallel  # noqa: F401 -- for its import's effect above
