"""Models for the engine: each builds a `parallel.model.ModelSpec`, and imports the engine never.

Quiet by default, as `parallel` is: TensorFlow's C++ log is read once, when TensorFlow is imported, which
a model module does first. A value the user set is kept.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
