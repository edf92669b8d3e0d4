"""turboyolo: Darknet-compatible YOLO training, evaluation and detection that keeps the GPU busy.

Public API (imported lazily, so ``import turboyolo`` stays light): :func:`turboyolo.load`,
:func:`turboyolo.detect` and :func:`turboyolo.train` (``turboyolo.train(cfg=..., data=..., **options)``),
all three defined in :mod:`turboyolo.api`.

The name ``turboyolo.train`` is that function; the training package of the same name is imported by
its modules' names (``from turboyolo.train.fit import fit``, ``from turboyolo.train import config``).
"""

import importlib
import os

# PyTorch's CPU allocator hands every tensor of 2 MB or more to the kernel as transparent huge pages when
# this is set before torch's first allocation (it is read once). Without it each large activation is a fresh
# mmap that page-faults 4 KB at a time: on the CPU training step (yolov3-tiny, batch 8 at 416) that was 20 %
# of its time (docs/PERFORMANCE.md, "Compute at the hardware's pace"). A value the user set is kept.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
# OpenMP's threads (torch's intra-op pool on the CPU) sleep as soon as they wait, instead of spinning first
# (libgomp's default spins ~300,000 rounds at each barrier): read once, when torch loads its OpenMP library,
# so it must be set before `import torch`. On a machine whose cores are shared (the loader worker, other
# jobs), a spinning thread holds the core the thread it waits for needs: on a 2-core machine with other
# jobs, the CPU training step took 2.2-3.7 s spinning against 0.57-1.46 s passive; almost idle, the same
# time for 13 % less CPU (docs/PERFORMANCE.md, "OpenMP's wait policy"). A value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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
