"""The training wing: the loop (:mod:`~turboyolo.train.fit`), its step and evaluation, loss, schedule,
checkpoints, configuration, logging, DDP helpers and the ``turboyolo test`` evaluation.

The package is also the Python API's training call: ``turboyolo.train(cfg=..., data=..., weights=...,
**options)`` is :func:`turboyolo.train.fit.train`. (A package and a function cannot share the name
``turboyolo.train`` otherwise: importing the package would replace the function on ``turboyolo``.)
"""

import sys
import types


class _TrainPackage(types.ModuleType):
    def __call__(self, cfg=None, data=None, weights=None, **options):
        from turboyolo.train.fit import train

        return train(cfg, data, weights, **options)


sys.modules[__name__].__class__ = _TrainPackage
