"""turboyolo: Darknet-compatible YOLOv3 that keeps the GPU busy.

Public API (imported lazily, so ``import turboyolo`` stays light): :func:`turboyolo.load` and
:func:`turboyolo.detect` (see :mod:`turboyolo.api`).
"""

__version__ = "0.1.0"
__all__ = ["load", "detect", "__version__"]


def __getattr__(name: str):
    if name in ("load", "detect"):
        from turboyolo import api

        return getattr(api, name)
    raise AttributeError(f"module 'turboyolo' has no attribute {name!r}")
