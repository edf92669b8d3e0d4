"""Which samples, at which size, make each batch: the multiscale (and class-weighted, and rectangular)
batch sampler of :mod:`turboyolo.data.loader`, decided in the main process so every worker and every
rank agree; and which images a mosaic (or mixup) may draw its partners from.

Partner pools: with ``pool_batches`` = G > 0, an epoch's batches are cut into runs of G consecutive
batches (a short last run joins the one before) and every training key of a run carries the run's
sample indices, its *pool*: mosaic and mixup partners are drawn from it
(:func:`turboyolo.data.augment.partner_draw`). The
loader hands a whole run to one worker (:class:`BatchGroups`), which decodes each image of the pool at
most once and composes every mosaic from images already in hand. Pools are a function of (seed, epoch)
and the global batch size, like the order (under DDP a pool spans the ranks' batches of its run, so the
processes draw the partners one process would): a sample stays a function of (seed, epoch, index, its
pool), so batches do not depend on the number of workers, on the cache, or on a mid-epoch resume. In
epoch 1's first pool a sample draws only from the pool's samples up to itself
(:class:`~turboyolo.data.augment.FillingPool`): the run's first step waits for its own batch's images,
not a whole pool's.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator

import numpy as np
import torch

from turboyolo.data.augment import FillingPool

SIZE_STEP = 32  # multiscale sizes are multiples of the network stride
POOL_IMAGES = 64  # a partner pool holds at least this many images (Ultralytics' buffer at batch 8)
POOL_IMAGES_MAX = 256  # ... and at most this many (8 batches; a worker holds one pool decoded at a time)


def default_pool_batches(batch_size: int) -> int:
    """Batches per partner pool: about 8 batches (so a batch of mosaics draws its 3 partners per sample
    from 8x as many images as it has, as Ultralytics' buffer does), at least :data:`POOL_IMAGES` and
    at most :data:`POOL_IMAGES_MAX` images."""
    images = min(POOL_IMAGES_MAX, max(POOL_IMAGES, 8 * batch_size))
    return max(1, -(-images // batch_size))


def longest_pool(pool_batches: int) -> int:
    """Batches in the longest partner pool of ``pool_batches``: an epoch's last run, when shorter than
    half the others, joins the run before it (:meth:`MultiScaleBatchSampler._pools`)."""
    return pool_batches + _joined_tail(pool_batches) - 1 if pool_batches > 0 else 0


def _joined_tail(pool_batches: int) -> int:
    """A last run of fewer batches than this joins the run before it."""
    return max(1, pool_batches // 2)


class MultiScaleBatchSampler(torch.utils.data.Sampler):
    """Yields lists of ``(index, epoch, size)``; one size per batch, all ranks agree.

    Order: a permutation of (seed, epoch) when shuffling (with ``weights``: ``num_samples`` draws with
    replacement, each index with probability proportional to its weight); for ``world_size > 1`` the
    order is padded to a multiple of ``world_size`` (repeating the start) and rank r takes positions
    r, r+W, ... The size of batch b is drawn from (seed, epoch) so it is the same on every rank.
    While :attr:`mix` is False (``--close-mosaic``) keys are ``(index, epoch, size, False)``: no mosaic
    or mixup. With :attr:`pool_batches` > 0 (training with mosaic or mixup) keys are
    ``(index, epoch, size, True, pool)`` while mixing (see the module's partner pools).

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
        self.pool_batches = 0  # > 0: keys carry their partner pool (set by the loader's factory)
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
        """This rank's positions of the epoch's (global) order."""
        order = self._global_order()
        return order[self.rank::self.world_size] if self.world_size > 1 else order

    def _global_order(self) -> np.ndarray:
        """The epoch's order for all ranks together, from ``start``, padded to a multiple of the world
        size."""
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
            order = np.resize(order, -(-len(order) // self.world_size) * self.world_size)
        return order

    def __len__(self) -> int:
        per_rank = -(-max(self.num_samples - self.start, 0) // self.world_size)
        return per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)

    def __iter__(self) -> Iterator[list[tuple]]:
        order = self._indices()
        size_rng = np.random.default_rng([self.seed & 0xFFFFFFFF, self.epoch, 0x51E])
        sizes = size_rng.choice(self.sizes, size=len(self))
        chunks = [order[b * self.batch_size:(b + 1) * self.batch_size] for b in range(len(self))]
        pools = [None] * len(chunks)
        if self.mix and self.pool_batches > 0:
            # pools over the global order: rank r's batch b lies in the global batch b (positions
            # b*B*W .. (b+1)*B*W), so every rank draws the partners a single process would draw
            step = self.batch_size * self.world_size
            everyone = self._global_order() if self.world_size > 1 else order
            pools = self._pools([everyone[b * step:(b + 1) * step] for b in range(len(chunks))])
        for b, chunk in enumerate(chunks):
            size = int(sizes[b]) if self.aspect is None else rect_shape(self.aspect[chunk], int(sizes[b]))
            # (index, epoch, size) as before --close-mosaic and pools; a 4th element when mosaic/mixup
            # are off, a 5th (the partner pool) when they draw from one
            if not self.mix:
                yield [(int(i), self.epoch, size, False) for i in chunk]
            elif pools[b] is None:
                yield [(int(i), self.epoch, size) for i in chunk]
            else:
                yield [(int(i), self.epoch, size, True, pools[b]) for i in chunk]

    def _pools(self, chunks: list[np.ndarray]) -> list[tuple[int, ...]]:
        """Per batch, its partner pool: the indices of its run of :attr:`pool_batches` batches (one tuple
        object per run, shared by its batches); a last run shorter than half the others joins the one
        before, so no pool is a handful of images. Epoch 1's first pool is a
        :class:`~turboyolo.data.augment.FillingPool`: the first step waits for its own batch's decodes
        only."""
        size = self.pool_batches
        starts = list(range(0, len(chunks), size))
        if len(starts) > 1 and len(chunks) - starts[-1] < _joined_tail(size):
            starts.pop()
        pools = []
        for k, start in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else len(chunks)
            pool = tuple(int(i) for chunk in chunks[start:end] for i in chunk)
            if k == 0 and self.epoch == 0 and not self.start:  # the run's first batches (not a resume's
                # remainder, re-pooled on another world size): each from the pool's samples so far
                pool = FillingPool(pool)
            pools.extend([pool] * (end - start))
        return pools


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


class BatchGroups(torch.utils.data.Sampler):
    """``sampler``'s batches, consecutive batches sharing one partner pool gathered into one
    :class:`BatchGroup` of at most ``size`` batches (a batch without a pool is a group of its own): what
    one loader worker makes at a time, so each image of the pool is decoded there once (a pool cut into
    k groups made by different workers: at most k times). ``first``: the first group holds at most this
    many batches (the first batch is not kept waiting for its whole pool; the process that makes the
    next group too still decodes each image of the pool once). The run's first batch (its pool a
    :class:`~turboyolo.data.augment.FillingPool`) is a group of its own whatever ``first`` says."""

    def __init__(self, sampler, size: int | None = None, first: int | None = None):
        self.sampler, self.size, self.first = sampler, size, first

    def __iter__(self) -> Iterator[BatchGroup]:
        group, pool = BatchGroup(), None
        limit = self.first or self.size
        for batch in self.sampler:
            key_pool = batch[0][4] if batch and len(batch[0]) > 4 else None
            if pool is None and not group and isinstance(key_pool, FillingPool):
                # the run's first batch, a request of its own with any number of workers: the first step
                # waits for its own images only (another worker making the rest of the pool decodes
                # them again as partners: one batch's images, once in a run)
                limit = 1
            full = limit is not None and len(group) >= limit
            if group and (key_pool is None or key_pool is not pool or full):
                yield group
                group = BatchGroup()
                limit = self.size
            group.append(batch)
            pool = key_pool
        if group:
            yield group

    def __len__(self) -> int:
        return sum(1 for _ in self)


class EpochChain(torch.utils.data.Sampler):
    """The requests of ``sampler``'s epochs one after another, from ``epoch`` on: each epoch's batches
    exactly as ``sampler`` makes them for that epoch from its start, with the mix (mosaic and mixup on
    or off) that ``mix_of(epoch)`` says when the chain gets there; the chain ends before the first
    epoch for which ``mix_of`` says None (the run plans no such epoch). ``wrap`` turns one epoch's
    sampler into what the DataLoader requests (:class:`BatchGroups`, or the batches themselves).

    What a training loader's persistent workers iterate (:meth:`DetectionLoader.set_epoch` with
    ``upcoming``): they go on from an epoch's last batches into the next epoch's first ones while the
    trainer still consumes the last, so no epoch starts with an empty pipeline. Keys still carry their
    epoch, so a batch is the same as when its epoch is iterated on its own. :attr:`made` records the mix
    each epoch's requests were made with; :attr:`ended` whether the chain ran out.
    """

    def __init__(self, sampler, epoch: int, mix_of: Callable[[int], bool | None],
                 wrap: Callable[[object], object]):
        self.sampler, self.epoch, self.mix_of, self.wrap = sampler, epoch, mix_of, wrap
        self.made: dict[int, bool] = {}
        self.ended = False

    def __iter__(self) -> Iterator:
        epoch = self.epoch
        mix = self.mix_of(epoch)
        while mix is not None:
            one = copy.copy(self.sampler)
            one.set_epoch(epoch, 0)
            one.mix = mix
            self.made[epoch] = mix
            yield from self.wrap(one)
            epoch += 1
            mix = self.mix_of(epoch)
        self.ended = True


class Requests(torch.utils.data.Sampler):
    """What a DataLoader iterates, switchable between iterations: :attr:`source` (one epoch's requests or
    an :class:`EpochChain`). A DataLoader's sampler cannot be replaced once it is built, and persistent
    workers belong to the DataLoader, so the loader keeps one DataLoader and switches this."""

    def __init__(self, source):
        self.source = source

    def __iter__(self):
        return iter(self.source)

    def __len__(self) -> int:
        return len(self.source)


class BatchGroup(list):
    """Batches (each a list of keys) that one worker makes in one go (:class:`BatchGroups`)."""


class ConsecutiveGroups(torch.utils.data.Sampler):
    """``sampler``'s batches ``size`` at a time, in order, as :class:`BatchGroup` s (the last may be
    shorter): one request per group, whatever the batches' partner pools (the device path's loader, which
    reads a prepared cache, makes a group's canvases in one buffer and hands it over once)."""

    def __init__(self, sampler, size: int):
        self.sampler, self.size = sampler, max(1, int(size))

    def __iter__(self) -> Iterator[BatchGroup]:
        group = BatchGroup()
        for batch in self.sampler:
            group.append(batch)
            if len(group) >= self.size:
                yield group
                group = BatchGroup()
        if group:
            yield group

    def __len__(self) -> int:
        return -(-len(self.sampler) // self.size)


def round_up(size: int) -> int:
    """``size`` rounded up to a multiple of the network stride (:data:`SIZE_STEP`)."""
    return -(-int(size) // SIZE_STEP) * SIZE_STEP
