"""The loader of ``--augment-on device``: whole batches of uint8 canvases plus the numbers to warp them.

A batch is gathered in one call (``__getitem__`` takes the batch's keys, not one sample): each image is
read once from the prepared cache (one slice of the memory map, copied straight into its slot of the
batch buffer, no intermediate array), the uncovered part of its canvas is filled grey, and the
sample's affine, HSV factors and boxes are computed with the CPU path's rng draws and box function
(:func:`turboyolo.data.device_augment.plan_sample`). A mosaic takes 4 canvases and a mixup two
composed images: the same partners, draws and boxes as the CPU path
(:func:`turboyolo.data.augment.mosaic_partners`, :func:`~turboyolo.data.augment.plan_mosaic`,
:func:`~turboyolo.data.augment.mixup_partner`), with a :class:`~turboyolo.data.device_augment.PartLayout`
saying which canvas goes where. The device then runs
:func:`turboyolo.data.device_augment.augment_batch` (or ``compose_batch``) after the non-blocking copy
(:meth:`CanvasBatch.to_device`, which :func:`turboyolo.data.loader.move_to_device` calls).

Without a cache the originals are decoded, each once per partner pool in the process that makes the
pool's batches (its decoded images are held until that process has planned the pool), as on the CPU
path; with several workers a pool's requests go to the workers in turn, each decoding what its own
batches draw.

The buffer is allocated where it will travel from: page-locked memory in-process (``workers=0`` with
CUDA), shared memory in a worker process (so sending it to the main process copies nothing).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from turboyolo.data.augment import (
    AugmentParams,
    letterbox_matrix,
    mixup_partner,
    mosaic_partners,
    plan_mosaic,
    sample_rng,
)
from turboyolo.data.device_augment import (
    PartLayout,
    augment_batch,
    compose_batch,
    place_on_canvas,
    plan_mosaic_parts,
    plan_sample,
    sampled_regions,
)
from turboyolo.data.loader import DetectionDataset, DetectionLoader, MetaBatch, _worker_init
from turboyolo.data.sampler import BatchGroup, ConsecutiveGroups, Requests
from turboyolo.errors import DataError


@dataclass
class CanvasBatch:
    """What the device augmentation needs for one batch (host side).

    Attributes:
        canvases: uint8 ``[P, C, C, 3]`` (HWC): each prepared image at its canvas's top-left, grey around
            (one per batch image, or more with mosaics and mixups: ``layout`` says where each goes).
        theta: float32 ``[P, 2, 3]`` for ``F.affine_grid`` (normalised output -> normalised canvas).
        hsv: float32 ``[Q, 3]`` (hue shift, saturation factor, value factor) per composed image.
        out_size: side of the network input of this batch.
        layout: None when canvas i is batch image i (no mosaic or mixup in the batch).
    """

    canvases: torch.Tensor
    theta: torch.Tensor
    hsv: torch.Tensor
    out_size: int
    layout: PartLayout | None = None

    @property
    def shape(self) -> torch.Size:
        """Shape of the images this batch becomes on the device: ``[B, 3, out, out]``."""
        count = self.canvases.shape[0] if self.layout is None else self.layout.count
        return torch.Size((count, 3, self.out_size, self.out_size))

    def pin_memory(self) -> CanvasBatch:
        """Page-locked copies (DataLoader's pinning thread calls this)."""
        if self.canvases.is_pinned():
            return self
        return CanvasBatch(self.canvases.pin_memory(), self.theta.pin_memory(), self.hsv.pin_memory(),
                           self.out_size, None if self.layout is None else self.layout.pin_memory())

    def to_device(self, device: torch.device | str, dtype: torch.dtype = torch.float32,
                  channels_last: bool = False) -> torch.Tensor:
        """Non-blocking copy, then warp + colour on ``device``: ``dtype`` ``[B, 3, out, out]`` in [0, 1]."""
        images = self.canvases.to(device, non_blocking=True).permute(0, 3, 1, 2)
        if self.layout is None:
            out = augment_batch(images, self.theta, self.hsv, self.out_size)
        else:
            out = compose_batch(images, self.theta, self.hsv, self.out_size, self.layout)
        if channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        return out if out.dtype == dtype else out.to(dtype)


@dataclass
class _Composed:
    """One image a batch slot is made of (the sample, or its mixup partner): its parts and numbers."""

    images: list[np.ndarray]  # the prepared images, one per part
    thetas: np.ndarray  # float32 [parts, 2, 3]
    rects: np.ndarray  # int32 [parts, 4]
    hsv: np.ndarray  # float32 [3]
    boxes: np.ndarray  # float32 [M, 5]
    matrix: np.ndarray  # the first image's original px -> output px (ImageMeta.matrix)


class DeviceAugmentDataset(DetectionDataset):
    """Batch-level dataset: ``dataset[keys]`` with ``keys`` a list of ``(index, epoch, size[, mix])``
    (one size), the sampler's keys.

    Returns ``(CanvasBatch, targets float32 [N, 6], MetaBatch)``; targets as the CPU path's collate.
    Mosaics and mixups are the CPU path's (same partners, same draws, same box function).
    """

    def __init__(self, samples: Sequence, augment: AugmentParams | None, decode_size: int, seed: int = 0,
                 cache=None, pin: bool = False):
        super().__init__(samples, augment, decode_size, seed, cache)
        self.canvas = max(decode_size, cache.size if cache is not None else 0)
        self.pin = pin
        self.copy_whole = False  # True: every image copied whole onto its canvas (not only what is sampled)
        self.ring = 0  # > 0: each process reuses this many buffers in turn (set by the loader)
        self._buffers: list[torch.Tensor] = []  # oldest first
        self._ring_pid = os.getpid()  # the process whose buffers these are
        self._largest = 0  # the most canvases a request of this process has needed

    def _buffer(self, count: int) -> torch.Tensor:
        """A ``[count, canvas, canvas, 3]`` uint8 buffer for a request's canvases, reused in turn.

        In a worker, shared memory from the start: the hand-over to the main process sends a handle, not
        bytes. In-process and pinning: a fresh page-locked buffer each time (see below). Otherwise reused
        in turn: a worker has at most the loader's ``prefetch_factor`` requests in flight and the consumer
        (or the pinning thread) holds one more, so with ``ring`` >= that + 2 a buffer is free again when
        its turn comes (no new pages, no new mapping:
        a fresh 4 MB buffer per batch cost the in-process path a third of its time, by the allocator's
        state). A buffer too small for this request's canvases (mosaics vary their number; an epoch's last
        group is short) is replaced by one as large as the largest request so far, so the ring settles
        at that size instead of allocating (and first touching) new pages whenever a larger request
        follows a smaller one. Each process keeps its own ring (a forked worker does not reuse its
        parent's).
        """
        in_worker = torch.utils.data.get_worker_info() is not None

        def fresh(rows: int) -> torch.Tensor:
            shape = (rows, self.canvas, self.canvas, 3)
            return _shared_uint8(shape) if in_worker else torch.empty(shape, dtype=torch.uint8,
                                                                      pin_memory=self.pin)

        if self.ring <= 0 or (self.pin and not in_worker):
            # in-process and page-locked: a non-blocking copy to the GPU may still read this buffer when
            # the loader makes the next batches (the step syncs once per iteration, after up to
            # `subdivisions` batches); PyTorch's pinned allocator waits for that copy before it hands the
            # memory out again, a ring would not
            return fresh(count)
        if self._ring_pid != os.getpid():
            self._buffers, self._ring_pid, self._largest = [], os.getpid(), 0
        self._largest = max(self._largest, count)
        buffer = self._buffers.pop(0) if len(self._buffers) >= self.ring else None
        if buffer is None or buffer.shape[0] < count:
            buffer = fresh(self._largest)
        self._buffers.append(buffer)
        return buffer[:count]

    def _compose_plan(self, loaded: tuple[np.ndarray, tuple[int, int], int], index: int, epoch: int,
                      size: int, mix: bool, failures: list[tuple[str, str]], stream: int = 0,
                      pool: tuple[int, ...] | None = None) -> _Composed:
        """The numbers of sample ``index`` as the CPU path's ``_compose`` draws them (a mosaic, partners
        from ``pool``, when drawn so), its images read but not yet copied."""
        image, orig_hw, chosen = loaded
        labels = self.samples[chosen].labels
        params = self.augment
        partners = (mosaic_partners(self.seed, epoch, index, len(self.samples), params.mosaic, stream, pool)
                    if mix and params is not None else None)
        rng = sample_rng(self.seed, epoch, index, stream) if params is not None else None
        if partners is None:
            theta, hsv, boxes, matrix = plan_sample(image.shape[:2], orig_hw, labels, self.canvas, size,
                                                    params, rng)
            return _Composed([image], theta[None], np.array([[0, 0, size, size]], np.int32), hsv, boxes,
                             matrix)
        parts = [(image, labels, orig_hw)]
        for other in partners:
            o_image, o_hw, o_chosen = self._load_robust(other, epoch, failures)
            parts.append((o_image, self.samples[o_chosen].labels, o_hw))
        plan = plan_mosaic([(part_labels, hw) for _, part_labels, hw in parts], size, params, rng)
        thetas, rects = plan_mosaic_parts(plan, [part[0].shape[:2] for part in parts],
                                          [part[2] for part in parts], self.canvas, size)
        return _Composed([part[0] for part in parts], thetas, rects, np.array(plan.hsv, np.float32),
                         plan.boxes, plan.matrices[0])

    def _plan_slot(self, key: tuple, failures: list[tuple[str, str]]
                   ) -> tuple[list[_Composed], list[float], tuple[np.ndarray, tuple[int, int], int]]:
        """A batch slot: its composed images (the sample; its mixup partner when drawn), their weights
        and what was loaded for the sample itself; loads in the CPU path's order."""
        index, epoch, size, *rest = key
        mix = rest[0] if rest else True
        pool = rest[1] if len(rest) > 1 else None  # where partners come from (the sampler's key says)
        loaded = self._load_robust(index, epoch, failures)
        composed = [self._compose_plan(loaded, index, epoch, size, mix, failures, pool=pool)]
        params = self.augment
        drawn = (mixup_partner(self.seed, epoch, index, len(self.samples), params.mixup, pool)
                 if mix and params is not None else None)
        if drawn is None:
            return composed, [1.0], loaded
        partner, ratio = drawn
        partner_loaded = self._load_robust(partner, epoch, failures)
        composed.append(self._compose_plan(partner_loaded, partner, epoch, size, mix, failures, 1, pool))
        return composed, [ratio, 1.0 - ratio], loaded

    def __getitem__(self, request):
        """One batch (``request`` = its keys): ``(CanvasBatch, targets, MetaBatch)``; or a
        :class:`~turboyolo.data.sampler.BatchGroup` of consecutive batches: a :class:`CanvasGroup`, their
        canvases in one buffer."""
        if not isinstance(request, BatchGroup):
            planned = self._plan_batch(request)
            buffer = self._buffer(planned.parts)
            return self._pack(planned, buffer)
        batches = [self._plan_batch(keys) for keys in request]
        buffer = self._buffer(sum(planned.parts for planned in batches))
        items, start = [], 0
        for planned in batches:
            batch, targets, meta = self._pack(planned, buffer[start:start + planned.parts])
            items.append((start, planned.parts, batch.theta, batch.hsv, batch.out_size, batch.layout,
                          targets, meta))
            start += planned.parts
        return CanvasGroup(buffer, items)

    def _plan_batch(self, keys) -> _PlannedBatch:
        """A batch's numbers and the images to copy (loads in the CPU path's order), its metas (with the
        samples decoded for it)."""
        if self.cache is None:
            self._hold(keys)
        try:
            planned = self._plan_keys(keys)
        except BaseException:
            self._release(done=True)  # nothing half-counted carries over
            raise
        if self.cache is None:
            self._release()
        return planned

    def _plan_keys(self, keys) -> _PlannedBatch:
        size = keys[0][2]
        slots, failures_by_slot = [], {}
        for slot, key in enumerate(keys):
            failures: list[tuple[str, str]] = []
            slots.append(self._plan_slot(key, failures))
            if failures:
                failures_by_slot[slot] = tuple(failures)
        count = len(keys)
        orig = np.array([loaded[1] for _, _, loaded in slots], np.int64).reshape(count, 2)
        ratio, pad = np.empty(count, np.float64), np.empty((count, 2), np.float64)
        for slot, hw in enumerate(orig):
            _, ratio[slot], pad[slot] = letterbox_matrix((int(hw[0]), int(hw[1])), size)
        matrices = np.array([composed[0].matrix for composed, _, _ in slots], np.float64).reshape(count, 2, 3)
        paths = [str(self.samples[loaded[2]].image) for _, _, loaded in slots]
        composed = [sub for sub, _, _ in slots]
        return _PlannedBatch(composed, [weights for _, weights, _ in slots], size,
                             sum(len(part.images) for slot in composed for part in slot),
                             MetaBatch(paths, orig, ratio, pad, matrices, failures_by_slot,
                                       decoded=tuple(self._decoded_now)))

    def _pack(self, planned: _PlannedBatch, buffer: torch.Tensor
              ) -> tuple[CanvasBatch, torch.Tensor, MetaBatch]:
        """Copy every part's image into ``buffer`` (``[planned.parts, canvas, canvas, 3]``); gather the
        numbers and the targets."""
        slots, weights, size = planned.slots, planned.weights, planned.size
        subs = [sub for composed in slots for sub in composed]
        canvases = buffer.numpy()
        thetas = np.concatenate([sub.thetas for sub in subs])
        rects = np.concatenate([sub.rects for sub in subs])
        images = [image for sub in subs for image in sub.images]
        regions = ([None] * len(images) if self.copy_whole
                   else sampled_regions(thetas, rects, self.canvas, size).tolist())
        for part, (image, region) in enumerate(zip(images, regions, strict=True)):
            place_on_canvas(image, self.canvas, out=canvases[part], region=region)
        theta = torch.from_numpy(thetas)
        hsv = torch.from_numpy(np.stack([sub.hsv for sub in subs]).astype(np.float32))
        rows = [np.concatenate([np.full((len(sub.boxes), 1), slot, np.float32), sub.boxes], axis=1)
                for slot, composed in enumerate(slots) for sub in composed if len(sub.boxes)]
        targets = torch.from_numpy(np.concatenate(rows) if rows else np.zeros((0, 6), np.float32))
        layout = None
        if planned.parts != len(slots):
            layout = PartLayout(
                torch.from_numpy(rects.astype(np.int32)),
                torch.from_numpy(np.repeat(np.arange(len(subs)), [len(sub.images) for sub in subs])),
                torch.from_numpy(np.repeat(np.arange(len(slots)), [len(composed) for composed in slots])),
                torch.from_numpy(np.concatenate(weights).astype(np.float32)), len(slots))
        return CanvasBatch(buffer, theta, hsv, size, layout), targets, planned.meta


@dataclass
class _PlannedBatch:
    """A batch planned but not yet copied: per slot its composed images and weights, the output size,
    the number of canvases (parts) and the metas."""

    slots: list[list[_Composed]]
    weights: list[list[float]]
    size: int
    parts: int
    meta: MetaBatch


@dataclass
class CanvasGroup:
    """Consecutive batches made in one request: their canvases in one buffer (one hand-over to the main
    process, one pinning copy), and per batch ``(start, parts, theta, hsv, out_size, layout, targets,
    meta)``; :meth:`unpack` gives each batch as the loader yields it."""

    buffer: torch.Tensor
    items: list[tuple]

    def unpack(self):
        for start, parts, theta, hsv, out_size, layout, targets, meta in self.items:
            yield CanvasBatch(self.buffer[start:start + parts], theta, hsv, out_size, layout), targets, meta

    def pin_memory(self) -> CanvasGroup:
        """Page-locked copies (DataLoader's pinning thread calls this): the buffer in one copy."""
        buffer = self.buffer if self.buffer.is_pinned() else self.buffer.pin_memory()
        items = [(start, parts, theta.pin_memory(), hsv.pin_memory(), out_size,
                  None if layout is None else layout.pin_memory(), targets.pin_memory(), meta)
                 for start, parts, theta, hsv, out_size, layout, targets, meta in self.items]
        return CanvasGroup(buffer, items)


def _shared_uint8(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised uint8 tensor in shared memory (no copy, unlike ``empty().share_memory_()``)."""
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:
        return torch.empty(shape, dtype=torch.uint8).share_memory_()
    storage = new_shared(int(np.prod(shape)))
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, shape)


def _one_request_per_batch(sampler):
    return sampler  # the dataset makes a whole batch per request


def _whole_batch(batch):
    return batch  # the dataset already returns a batch; DataLoader must not convert it


DEVICE_REQUEST_IMAGES = 16  # images one request makes at least (consecutive batches, one buffer): what
# the main process pays per request to receive it (the buffer's file descriptor over a socket, unpickling,
# the DataLoader's bookkeeping: ~1 ms here) is then shared by that many images


def device_group_size(batch_size: int, epoch_batches: int, workers: int) -> int:
    """Batches per request of the device path's loader: with workers, enough for
    :data:`DEVICE_REQUEST_IMAGES` images, but no more than leaves every worker a request in an epoch; one
    in-process (nothing to hand over, and a larger buffer is only more pages to touch)."""
    if workers <= 0:
        return 1
    group = max(1, -(-DEVICE_REQUEST_IMAGES // max(1, batch_size)))
    if workers > 1:
        group = min(group, max(1, -(-epoch_batches // workers)))
    return group


class DeviceAugmentLoader(DetectionLoader):
    """:class:`DetectionLoader` over a :class:`DeviceAugmentDataset` (same sampler, epochs, replacements).

    A request makes :func:`device_group_size` consecutive batches with their canvases in one buffer (a
    :class:`CanvasGroup`, yielded batch by batch). That buffer is reused by its process (a worker, or
    in-process without pinning) a few requests later (``ring``): consume each batch
    (``move_to_device``, which the pinning thread's copy precedes on CUDA) before keeping the next; keep
    ``canvases.clone()`` to hold one longer. The canvases hold only what the device's warp reads of each
    image (``sampled_region``).
    """

    def __init__(self, dataset: DeviceAugmentDataset, batch_sampler, workers: int, prefetch_factor: int = 4,
                 pin_memory: bool | None = None):
        self.dataset, self.batch_sampler, self.workers = dataset, batch_sampler, workers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.group = device_group_size(batch_sampler.batch_size, len(batch_sampler), workers)
        # requests in flight per worker: the batches prefetch_factor asks for, and two requests at least
        # where it asks for two batches or more
        self.prefetch_factor = max(min(2, prefetch_factor), -(-prefetch_factor // self.group))
        # in-process, the buffer is allocated page-locked; from workers, DataLoader's thread pins it
        dataset.pin = self.pin_memory and workers == 0
        dataset.ring = self.prefetch_factor + 2
        self._requests_of = (functools.partial(ConsecutiveGroups, size=self.group) if self.group > 1
                             else _one_request_per_batch)
        self._requests = Requests(self._requests_of(batch_sampler))
        self._loader = self._make(self._requests, workers)
        self._init_state()

    @property
    def request_batches(self) -> int:
        """Batches one request makes (within an epoch; what a timing aligns to)."""
        return self.group

    @staticmethod
    def _flat(delivered):
        for item in delivered:
            if isinstance(item, CanvasGroup):
                yield from item.unpack()
            else:
                yield item

    def _make(self, sampler, workers: int) -> torch.utils.data.DataLoader:
        kwargs = {}
        if workers > 0:
            kwargs = dict(persistent_workers=True, prefetch_factor=self.prefetch_factor,
                          worker_init_fn=_worker_init)
            if "fork" in torch.multiprocessing.get_all_start_methods():
                kwargs["multiprocessing_context"] = "fork"
        return torch.utils.data.DataLoader(self.dataset, sampler=sampler, batch_size=None,
                                           num_workers=workers, collate_fn=_whole_batch,
                                           pin_memory=self.pin_memory and workers > 0, **kwargs)

    def _tail_loader(self, sampler) -> torch.utils.data.DataLoader:
        if self.workers == 0:
            return self._make(sampler, 0)
        # a one-off loader: one non-persistent worker (the dataset's buffers come from shared memory)
        return torch.utils.data.DataLoader(self.dataset, sampler=sampler, batch_size=None, num_workers=1,
                                           collate_fn=_whole_batch, pin_memory=self.pin_memory,
                                           worker_init_fn=_worker_init)


# AugmentParams fields the device path does as the CPU path does; a field added to AugmentParams and
# left out here makes the device path refuse (and ``auto`` not pick it) until the device does it too.
DEVICE_AUGMENTS = frozenset({"degrees", "scale", "translate", "jitter", "hue", "saturation", "exposure",
                             "flip", "flipud", "min_box_px", "min_visible", "mosaic", "mixup"})


def device_augment_unsupported(augment: AugmentParams | None) -> str | None:
    """Why ``--augment-on device`` would not do the same augmentation as the CPU path with ``augment``, or
    None when it does (boxes bit for bit, pixels up to interpolation rounding; mosaic and mixup
    included): what an automatic choice of ``--augment-on`` asks before it picks the device path."""
    if augment is None:
        return None
    for field in dataclasses.fields(augment):
        value = getattr(augment, field.name)
        if field.name not in DEVICE_AUGMENTS and value != field.default:
            return f"the device path does not do {field.name}={value!r}"
    return None


def check_device_augment(augment: AugmentParams | None) -> None:
    """Raise when ``augment`` asks for something the device path does not do."""
    reason = device_augment_unsupported(augment)
    if reason is not None:
        raise DataError(f"--augment-on device: {reason}; use --augment-on cpu")
