"""``--loader darknet``: training batches drawn and made as pjreddie's ``darknet detector train`` makes them.

Darknet draws every iteration's ``batch`` images as random entries of the training list, with replacement
(``get_random_paths``: ``rand() % m`` per slot), so a list shorter than the batch still fills it and an
entry listed twice is drawn twice as often; each image goes through ``load_data_detection``
(:mod:`turboyolo.exact.augment`) at full resolution, and the network receives the float32 result
(no uint8 rounding on the way: :func:`turboyolo.data.loader.move_to_device` passes float batches on).

Here each mini-batch draws its ``mini_batch`` entries i.i.d. uniformly from (seed, epoch, rank, batch),
which is the same distribution (the draws are independent, so how an iteration's are split into
mini-batches does not matter); an "epoch" is ceil(list / batch) iterations, the unit the run's schedule
and logs count in. Each drawn image has its own random numbers (:class:`Draws` from (seed, epoch, rank,
slot)), so results do not depend on the number of workers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from turboyolo.data.decode import decode_image
from turboyolo.data.loader import DetectionDataset, DetectionLoader, ImageMeta
from turboyolo.data.scan import Sample
from turboyolo.errors import DataError
from turboyolo.exact.augment import DarknetAugment, Draws, darknet_sample


class DarknetBatchSampler(torch.utils.data.Sampler):
    """Yields lists of ``(index, epoch, (width, height), slot)``: ``batch_size`` list entries drawn with
    replacement per mini-batch, ``batches_per_iteration`` mini-batches per iteration, ceil(samples /
    images per iteration) iterations per epoch (all ranks together)."""

    def __init__(self, num_samples: int, batch_size: int, batches_per_iteration: int, size: tuple[int, int],
                 seed: int = 0, rank: int = 0, world_size: int = 1):
        if batch_size < 1 or num_samples < 1:
            raise ValueError("batch_size and num_samples must be >= 1")
        self.num_samples, self.batch_size, self.size = num_samples, batch_size, size
        self.batches_per_iteration = max(batches_per_iteration, 1)
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch, self.start, self.mix = 0, 0, False
        self.pool_batches = 0  # no mosaic partners: the loader requests one batch at a time

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        self.epoch, self.start = epoch, start

    def __len__(self) -> int:
        per_iteration = self.batch_size * self.batches_per_iteration * self.world_size
        return -(-self.num_samples // per_iteration) * self.batches_per_iteration

    def __iter__(self) -> Iterator[list[tuple]]:
        skip = self.start // max(self.batch_size * self.world_size, 1)  # a resumed epoch's batches done
        for batch in range(skip, len(self)):
            rng = np.random.default_rng([self.seed & 0xFFFFFFFF, self.epoch, self.rank, batch, 0xD4])
            slots = range(batch * self.batch_size, (batch + 1) * self.batch_size)
            yield [(int(index), self.epoch, self.size, slot)
                   for index, slot in zip(rng.integers(self.num_samples, size=self.batch_size), slots)]


class DarknetDataset(DetectionDataset):
    """A training sample as ``load_data_detection`` makes it: float32 ``[h, w, 3]`` in [0, 1], its boxes
    relative to it, and a meta (``matrix``: original px -> network px of the placement before the flip)."""

    def __init__(self, samples: Sequence[Sample], params: DarknetAugment | None, seed: int = 0,
                 rank: int = 0):
        super().__init__(samples, None, 0, seed)
        self.params, self.rank = params, rank

    def load(self, index: int) -> tuple[np.ndarray, tuple[int, int]]:
        return decode_image(self.samples[index].image)  # the whole file, as Darknet reads it

    def __getitem__(self, key: tuple):
        index, epoch, (width, height), slot = key
        failures: list[tuple[str, str]] = []
        image, orig_hw, chosen = self._load_robust(index, epoch, failures)
        rng = np.random.default_rng([self.seed & 0xFFFFFFFF, epoch, self.rank, slot, 0xDA])
        params = self.params or DarknetAugment(flip=0.0)
        out, boxes, placement = darknet_sample(image, self.samples[chosen].labels, (width, height), params,
                                               Draws(rng) if self.params else _Centred(rng))
        ratio_x, ratio_y = int(placement.nw) / orig_hw[1], int(placement.nh) / orig_hw[0]
        matrix = np.array([[ratio_x, 0.0, int(placement.dx)], [0.0, ratio_y, int(placement.dy)]])
        meta = ImageMeta(self.samples[chosen].image, orig_hw, min(ratio_x, ratio_y),
                         (float(int(placement.dx)), float(int(placement.dy))), matrix, tuple(failures))
        return out, boxes, meta


class _Centred(Draws):
    """``--no-augment``: the placement's offset in the middle of its range, no colour change, no flip."""

    def unit(self) -> float:
        return 0.5


def build_darknet_loader(samples: Sequence[Sample], *, net_wh: tuple[int, int], batch_size: int,
                         batches_per_iteration: int, params: DarknetAugment | None, workers: int,
                         seed: int = 0, rank: int = 0, world_size: int = 1,
                         prefetch_factor: int = 4, pin_memory: bool | None = None) -> DetectionLoader:
    """The training loader of ``--loader darknet`` (``params`` None: ``--no-augment``)."""
    if not samples:
        raise DataError("no usable samples; check the scan report for excluded files")
    sampler = DarknetBatchSampler(len(samples), batch_size, batches_per_iteration, net_wh, seed, rank,
                                  world_size)
    return DetectionLoader(DarknetDataset(samples, params, seed, rank), sampler, workers, prefetch_factor,
                           pin_memory)
