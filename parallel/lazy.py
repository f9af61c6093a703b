"""Names a package imports on first use (PEP 562), so that importing the package costs nothing.

    _EXPORTS = {"open_writer": "parallel.output.writer", ...}   # name -> the submodule defining it
    __all__ = sorted(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
"""

import importlib


def lazy_exports(namespace, exports):
    """The module-level `__getattr__` and `__dir__` of a package whose names are imported on first use.

    Args:
      namespace: the package's globals(); a name, once imported, is stored there, so that later
        lookups do not come back to `__getattr__`.
      exports: {exported name: the name of the submodule that defines it}.

    Returns:
      (__getattr__, __dir__), the functions to bind under those names in the package.
    """
    def __getattr__(name):
        if name not in exports:
            raise AttributeError("module %r has no attribute %r" % (namespace["__name__"], name))
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value  # later lookups do not come here
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
