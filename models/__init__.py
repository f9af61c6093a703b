"""Models for the engine: each builds a `parallel.model.ModelSpec`, and imports the engine never.

Quiet by default, as `parallel` is: the first `import tensorflow`, which a model module may be the first to
write, prints only what TF_CPP_MIN_LOG_LEVEL lets through (parallel/native_log.py, standard library only).
"""

from parallel.native_log import quiet_first_import

quiet_first_import()
