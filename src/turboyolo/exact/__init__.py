"""Darknet-exact training: pjreddie's Darknet reproduced in its own float32 operations, an engine that a
run uses only when it asks for it (``turboyolo train --config darknet``, or ``--arithmetic darknet``,
``--bn-train darknet``, ``--loader darknet``). A default run never imports this package: the one place
that selects it is :mod:`turboyolo.train.engines` (an import-linter contract in ``pyproject.toml`` keeps it
so).

- :mod:`~turboyolo.exact.arithmetic`: Darknet's float32 forward operations (convolution, batch norm,
  leaky ReLU), bit for bit;
- :mod:`~turboyolo.exact.modules`: the modules that carry them, swapped into a network's blocks
  (:func:`~turboyolo.exact.modules.to_darknet`), as the CPU tuner swaps convolutions;
- :mod:`~turboyolo.exact.step`: Darknet's whole training step (forward, ``[yolo]`` deltas, backward,
  update), a :class:`~turboyolo.train.engine.TrainStep`;
- :mod:`~turboyolo.exact.augment`, :mod:`~turboyolo.exact.loader`, :mod:`~turboyolo.exact.input`:
  ``load_data_detection`` and Darknet's random list entries (``--loader darknet``).

docs/DARKNET_TRAINING.md says what it reproduces and how it is checked against the ``darknet`` binary.
"""
