"""Which samples, at which size, make each batch: the multiscale (and class-weighted, and rectangular)
batch sampler of :mod:`turboyolo.data.loader`, decided in the main process so every worker and every
rank agree."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import torch

SIZE_STEP = 32  # multiscale sizes are multiples of the network stride


class MultiScaleBatchSampler(torch.utils.data.Sampler):
    """Yields lists of ``(index, epoch, size)``; one size per batch, all ranks agree.

    Order: a permutation of (seed, epoch) when shuffling (with ``weights``: ``num_samples`` draws with
    replacement, each index with probability proportional to its weight); for ``world_size > 1`` the
    order is padded to a multiple of ``world_size`` (repeating the start) and rank r takes positions
    r, r+W, ... The size of batch b is drawn from (seed, epoch) so it is the same on every rank.
    While :attr:`mix` is False (``--close-mosaic``) keys are ``(index, epoch, size, False)``: no mosaic
    or mixup.

    With ``rect_hw`` (each image's (height, width); validation) the order is sorted by aspect ratio and
    each batch is letterboxed to the smallest multiple-of-32 rectangle that holds the ``img_size``
    letterbox of its most extreme image (Ultralytics' ``--rect``): ``size`` is then (width, height).
    """

    def __init__(self, num_samples: int, batch_size: int, img_size: int, *, shuffle: bool, seed: int = 0,
                 multiscale: tuple[int, int] | None = None, rank: int = 0, world_size: int = 1,
                 drop_last: bool = False, weights: np.ndarray | None = None,
                 rect_hw: np.ndarray | None = None):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.num_samples, self.batch_size, self.img_size = num_samples, batch_size, img_size
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size
        self.drop_last = drop_last
        self.weights = None if weights is None else np.asarray(weights, np.float64)
        self.aspect = None if rect_hw is None else np.asarray(rect_hw, np.float64).reshape(-1, 2)
        if self.aspect is not None:
            self.aspect = self.aspect[:, 0] / self.aspect[:, 1]  # height / width
        self.mix = True
        self.epoch = 0
        self.start = 0  # global position in the epoch's order to start from (resume on another world size)
        if multiscale:
            lo, hi = multiscale
            self.sizes = list(range(round_up(lo), round_up(hi) + 1, SIZE_STEP))
        else:
            self.sizes = [img_size]

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Select the epoch; ``start`` skips that many samples of its global order (all ranks together).

        Rank r takes positions r, r+W, ... of the order, so after k batches on every rank the first
        k * batch_size * W positions are consumed: a run resumed on another world size continues at
        that global position and re-shards what is left.
        """
        self.epoch, self.start = epoch, start

    def _indices(self) -> np.ndarray:
        if self.shuffle:
            rng = np.random.default_rng([self.seed & 0xFFFFFFFF, self.epoch, 0x5A3D])
            if self.weights is not None:
                chance = self.weights / self.weights.sum()
                order = rng.choice(self.num_samples, size=self.num_samples, p=chance)
            else:
                order = rng.permutation(self.num_samples)
        elif self.aspect is not None:
            order = np.argsort(self.aspect, kind="stable")
        else:
            order = np.arange(self.num_samples)
        order = order[self.start:]
        if self.world_size > 1:
            total = -(-len(order) // self.world_size) * self.world_size
            order = np.resize(order, total)[self.rank::self.world_size]
        return order

    def __len__(self) -> int:
        per_rank = -(-max(self.num_samples - self.start, 0) // self.world_size)
        return per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)

    def __iter__(self) -> Iterator[list[tuple[int, int, int]]]:
        order = self._indices()
        size_rng = np.random.default_rng([self.seed & 0xFFFFFFFF, self.epoch, 0x51E])
        sizes = size_rng.choice(self.sizes, size=len(self))
        for b in range(len(self)):
            chunk = order[b * self.batch_size:(b + 1) * self.batch_size]
            size = int(sizes[b]) if self.aspect is None else rect_shape(self.aspect[chunk], int(sizes[b]))
            # (index, epoch, size) as before --close-mosaic; a 4th element only when mosaic/mixup are off
            yield [(int(i), self.epoch, size) if self.mix else (int(i), self.epoch, size, False)
                   for i in chunk]


def rect_shape(aspects: np.ndarray, img_size: int) -> int | tuple[int, int]:
    """The (width, height) of a rectangular batch of images with ``aspects`` (height / width), or the
    side when that is square: the ``img_size`` letterbox of every image fits, each side a multiple of 32."""
    low, high = float(aspects.min()), float(aspects.max())
    width, height = 1.0, 1.0
    if high < 1:  # all wider than high
        height = high
    elif low > 1:  # all taller than wide
        width = 1 / low
    shape = (round_up(width * img_size), round_up(height * img_size))
    return shape[0] if shape[0] == shape[1] else shape


class TailSampler(torch.utils.data.Sampler):
    """The batches of ``sampler``'s current epoch after the first ``skip``."""

    def __init__(self, sampler, skip: int):
        self.sampler, self.skip = sampler, skip

    def __iter__(self):
        return itertools.islice(iter(self.sampler), self.skip, None)

    def __len__(self) -> int:
        return max(len(self.sampler) - self.skip, 0)


def round_up(size: int) -> int:
    """``size`` rounded up to a multiple of the network stride (:data:`SIZE_STEP`)."""
    return -(-int(size) // SIZE_STEP) * SIZE_STEP
