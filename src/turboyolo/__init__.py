"""turboyolo: Darknet-compatible YOLO training, evaluation and detection that keeps the GPU busy.

Public API (imported lazily, so ``import turboyolo`` stays light): :func:`turboyolo.load`,
:func:`turboyolo.detect` and :func:`turboyolo.train` (``turboyolo.train(cfg=..., data=..., **options)``),
all three defined in :mod:`turboyolo.api`.

The name ``turboyolo.train`` is that function; the training package of the same name is imported by
its modules' names (``from turboyolo.train.fit import fit``, ``from turboyolo.train import config``).
"""

import importlib

__version__ = "0.2.0"
__all__ = ["load", "detect", "train", "__version__"]

# Importing a subpackage binds its name on this package; the training package is imported here (its
# __init__ is empty: this costs nothing) and its binding removed, so `turboyolo.train` always resolves
# through __getattr__ below to the API function, however the package is imported later.
importlib.import_module("turboyolo.train")
del train  # noqa: F821 - bound by the import above


def __getattr__(name: str):
    if name in ("load", "detect", "train"):
        from turboyolo import api

        return getattr(api, name)
    raise AttributeError(f"module 'turboyolo' has no attribute {name!r}")
