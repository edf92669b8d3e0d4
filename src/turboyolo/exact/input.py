"""The training loader of ``--loader darknet`` (the ``darknet`` recipe) and the lines that say, once, at the
start, what the run reproduces of Darknet's input and what it cannot (Darknet's random numbers) or does not
use (turboyolo's own augmentation options, which pjreddie's ``load_data_detection`` has no counterpart for:
the run names them, :func:`turboyolo.train.engines.darknet_loader`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from turboyolo.data.loader import DetectionLoader
from turboyolo.data.scan import Sample
from turboyolo.exact.augment import DarknetAugment, jitter_note
from turboyolo.exact.loader import build_darknet_loader

DARKNET_MAX_BOXES = 90  # [yolo] max


def darknet_train_loader(samples: Sequence[Sample], *, net_wh: tuple[int, int], mini_batch: int,
                         batches_per_iteration: int, world_size: int, params: DarknetAugment | None,
                         workers: int, seed: int, rank: int, ignored: Sequence[str] = (),
                         log: Callable[[str], None] = print) -> DetectionLoader:
    """The loader, and the one line (two with ``ignored``, the run's options it does not apply) that says
    what it does. ``params`` None: ``--no-augment``."""
    what = (jitter_note(params) if params is not None
            else "--no-augment: placed in the middle, no colour, no flip")
    entries = mini_batch * batches_per_iteration * world_size
    log(f"loader: darknet (pjreddie's load_data_detection): {entries} list entries drawn at random, with "
        f"replacement, per iteration; the whole image placed on a 0.5-grey {net_wh[0]}x{net_wh[1]} canvas "
        f"keeping its aspect; {what}")
    if ignored:
        log("loader: darknet does not apply " + ", ".join(ignored) + " (Darknet has no such augmentation)")
    return build_darknet_loader(samples, net_wh=net_wh, batch_size=mini_batch,
                                batches_per_iteration=batches_per_iteration, params=params, workers=workers,
                                seed=seed, rank=rank, world_size=world_size)
