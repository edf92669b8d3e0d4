"""turboyolo: Darknet-compatible YOLO training, evaluation and detection that keeps the GPU busy.

Public API (imported lazily, so ``import turboyolo`` stays light): :func:`turboyolo.load`,
:func:`turboyolo.detect` (see :mod:`turboyolo.api`) and ``turboyolo.train(cfg=..., data=..., **options)``
(:func:`turboyolo.train.fit.train`).
"""

__version__ = "0.1.0"
__all__ = ["load", "detect", "train", "__version__"]


def __getattr__(name: str):
    if name in ("load", "detect"):
        from turboyolo import api

        return getattr(api, name)
    if name == "train":  # the training package, callable as the API's train()
        import importlib

        return importlib.import_module("turboyolo.train")
    raise AttributeError(f"module 'turboyolo' has no attribute {name!r}")
