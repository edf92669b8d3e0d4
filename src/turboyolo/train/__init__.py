"""The training wing: the loop (:mod:`~turboyolo.train.fit`), its step and evaluation, loss, schedule,
checkpoints, configuration, logging, DDP helpers and the ``turboyolo test`` job.

The Python API's training call, ``turboyolo.train(cfg=..., data=..., **options)``, is
:func:`turboyolo.api.train`: the attribute ``turboyolo.train`` is that function, so this package's modules
are imported by name (``from turboyolo.train.fit import fit``), not reached as attributes of ``turboyolo``.
"""
