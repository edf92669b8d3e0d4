"""``build_loader``: the training or validation loader of a list of samples, on the CPU or device path.

It stands above both loaders (:mod:`turboyolo.data.loader` for augmentation in the loader processes,
:mod:`turboyolo.data.device_loader` for augmentation on the training device), so neither imports the
other's factory.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence

import numpy as np

from turboyolo.data.augment import AugmentParams
from turboyolo.data.device_loader import DeviceAugmentDataset, DeviceAugmentLoader, check_device_augment
from turboyolo.data.loader import DetectionDataset, DetectionLoader, default_workers
from turboyolo.data.sampler import MultiScaleBatchSampler, default_pool_batches, round_up
from turboyolo.data.scan import Sample
from turboyolo.errors import DataError

# Test-only (not a user option): batches per partner pool for every loader built with the default
# ``partner_pool``, 0 = each mosaic/mixup partner drawn independently from the whole data set (the
# behaviour before the pools); how bench/defaults_250.py compares the two on the same runs.
PARTNER_POOL_ENV = "TURBOYOLO_PARTNER_POOL"


def build_loader(samples: Sequence[Sample], *, img_size: int, batch_size: int, augment: AugmentParams | None,
                 workers: int | None = None, shuffle: bool, seed: int = 0,
                 multiscale: tuple[int, int] | None = None, cache=None, rank: int = 0, world_size: int = 1,
                 drop_last: bool = False, prefetch_factor: int = 4, pin_memory: bool | None = None,
                 augment_on: str = "cpu", drop_broken: bool | None = None,
                 image_weights: Sequence[float] | None = None, rect: bool = False,
                 partner_pool: int | None = None) -> DetectionLoader:
    """Build the training (``augment`` given) or validation (``augment=None``) loader.

    Args:
        samples: scanned samples (:func:`turboyolo.data.scan.scan_dataset`).
        img_size: network input side (multiple of 32).
        batch_size: images per batch (per rank).
        augment: training augmentation, or None for letterbox only.
        workers: loader processes; None = :func:`default_workers`.
        shuffle: reshuffle every epoch from (seed, epoch).
        multiscale: (min, max) sizes, multiples of 32; one size per batch.
        cache: a :class:`turboyolo.data.cache.PreparedCache` over the same samples, or None to decode
            the original files.
        rank, world_size: this process's share of every epoch.
        drop_last: drop the last partial batch.
        augment_on: ``"cpu"`` (images arrive augmented) or ``"device"``: batches carry uint8 canvases
            and the per-image warp/colour numbers; :func:`move_to_device` augments on the device
            (:mod:`turboyolo.data.device_loader`).
        drop_broken: a sample that fails to load is left out (and listed in ``loader.dropped``) instead
            of replaced by another one; what evaluation needs, so no image is counted twice. Default
            (None): drop in an evaluation loader (``augment=None`` and not ``shuffle``), else replace.
        image_weights: per sample, its relative chance to be drawn (shuffled training: each epoch draws
            ``len(samples)`` samples with replacement); None = every sample once per epoch.
        rect: validation only: batches of similar aspect ratio letterboxed to a rectangle
            (:class:`MultiScaleBatchSampler`); images whose size the scan did not record count as square.
        partner_pool: batches per mosaic/mixup partner pool (:mod:`turboyolo.data.sampler`; partners
            come from images a worker has in hand, so each original is decoded once per epoch); None =
            :func:`default_pool_batches` of ``batch_size`` (or :data:`PARTNER_POOL_ENV`, when set: tests
            and benchmarks); 0 = partners from the whole data set (each mosaic decodes its 3 partners
            again without a cache).

    Returns:
        :class:`DetectionLoader` (``__iter__``, ``__len__``, ``set_epoch``, ``replaced_count``).
    """
    if not samples:
        raise DataError("no usable samples; check the scan report for excluded files")
    decode_size = max(img_size, multiscale[1] if multiscale else 0)
    if cache is not None:
        if len(cache) != len(samples):
            raise DataError(f"prepared cache {cache.root} has {len(cache)} images but the data set "
                            f"{len(samples)}; rebuild it with `turboyolo prepare`")
        if cache.size < decode_size:
            where = cache.root or "(RAM)"
            warnings.warn(f"prepared cache {where} stores {cache.size} px images but batches go up to "
                          f"{decode_size} px; they are upscaled (prepare it at {decode_size})", stacklevel=2)
    if augment_on not in ("cpu", "device"):
        raise DataError(f"--augment-on {augment_on!r}: use cpu or device")
    decode_size = round_up(decode_size) if multiscale else decode_size
    if rect and (augment is not None or shuffle or multiscale):
        raise DataError("rectangular batches are for evaluation: no augmentation, shuffle or multiscale")
    rect_hw = np.array([s.hw or (1, 1) for s in samples], np.float64) if rect else None
    weights = None
    if image_weights is not None:
        weights = np.asarray(image_weights, np.float64)
        if len(weights) != len(samples) or not np.all(weights >= 0) or weights.sum() <= 0:
            raise DataError("image weights: one non-negative weight per sample, not all zero")
    sampler = MultiScaleBatchSampler(len(samples), batch_size, img_size, shuffle=shuffle, seed=seed,
                                     multiscale=multiscale, rank=rank, world_size=world_size,
                                     drop_last=drop_last, weights=weights, rect_hw=rect_hw)
    if augment is not None and (augment.mosaic > 0 or augment.mixup > 0):
        # of the global batch: DDP ranks and one process draw from the same pools
        if partner_pool is None:
            partner_pool = _partner_pool_from_env()
        sampler.pool_batches = (default_pool_batches(batch_size * world_size) if partner_pool is None
                                else partner_pool)
    if workers is None:
        workers = default_workers(world_size)
    if augment_on == "device":
        check_device_augment(augment)
        dataset = DeviceAugmentDataset(samples, augment, decode_size, seed, cache)
        return DeviceAugmentLoader(dataset, sampler, workers, prefetch_factor, pin_memory)
    if drop_broken is None:
        drop_broken = augment is None and not shuffle
    dataset = DetectionDataset(samples, augment, decode_size, seed, cache, drop_broken=drop_broken)
    return DetectionLoader(dataset, sampler, workers, prefetch_factor, pin_memory)


def _partner_pool_from_env() -> int | None:
    """:data:`PARTNER_POOL_ENV` as batches per partner pool (None when unset: the default pools)."""
    value = os.environ.get(PARTNER_POOL_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise DataError(f"{PARTNER_POOL_ENV}={value!r}: a number of batches per partner pool "
                        "(0 = partners from the whole data set); unset it for the default pools")
    return int(value)
