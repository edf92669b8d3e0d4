"""The loader of ``--augment-on device``: whole batches of uint8 canvases plus the numbers to warp them.

A batch is gathered in one call (``__getitem__`` takes the batch's keys, not one sample): each image is
read once from the prepared cache (one slice of the memory map, copied straight into its slot of the
batch buffer, no intermediate array), the uncovered part of its canvas is filled grey, and the
sample's affine, HSV factors and boxes are computed with the CPU path's rng draws and box function
(:func:`turboyolo.data.device_augment.plan_sample`). The device then runs
:func:`turboyolo.data.device_augment.augment_batch` after the non-blocking copy
(:meth:`CanvasBatch.to_device`, which :func:`turboyolo.data.loader.move_to_device` calls).

The buffer is allocated where it will travel from: page-locked memory in-process (``workers=0`` with
CUDA), shared memory in a worker process (so sending it to the main process copies nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from turboyolo.data.augment import AugmentParams, letterbox_matrix, sample_rng
from turboyolo.data.device_augment import augment_batch, place_on_canvas, plan_sample
from turboyolo.data.loader import DetectionDataset, DetectionLoader, MetaBatch, _worker_init
from turboyolo.errors import DataError


@dataclass
class CanvasBatch:
    """What the device augmentation needs for one batch (host side).

    Attributes:
        canvases: uint8 ``[B, C, C, 3]`` (HWC): each prepared image at its canvas's top-left, grey around.
        theta: float32 ``[B, 2, 3]`` for ``F.affine_grid`` (normalised output -> normalised canvas).
        hsv: float32 ``[B, 3]`` (hue shift, saturation factor, value factor).
        out_size: side of the network input of this batch.
    """

    canvases: torch.Tensor
    theta: torch.Tensor
    hsv: torch.Tensor
    out_size: int

    @property
    def shape(self) -> torch.Size:
        """Shape of the images this batch becomes on the device: ``[B, 3, out, out]``."""
        return torch.Size((self.canvases.shape[0], 3, self.out_size, self.out_size))

    def pin_memory(self) -> CanvasBatch:
        """Page-locked copies (DataLoader's pinning thread calls this)."""
        if self.canvases.is_pinned():
            return self
        return CanvasBatch(self.canvases.pin_memory(), self.theta.pin_memory(), self.hsv.pin_memory(),
                           self.out_size)

    def to_device(self, device: torch.device | str, dtype: torch.dtype = torch.float32,
                  channels_last: bool = False) -> torch.Tensor:
        """Non-blocking copy, then warp + colour on ``device``: ``dtype`` ``[B, 3, out, out]`` in [0, 1]."""
        images = self.canvases.to(device, non_blocking=True).permute(0, 3, 1, 2)
        out = augment_batch(images, self.theta, self.hsv, self.out_size)
        if channels_last:
            out = out.contiguous(memory_format=torch.channels_last)
        return out if out.dtype == dtype else out.to(dtype)


class DeviceAugmentDataset(DetectionDataset):
    """Batch-level dataset: ``dataset[keys]`` with ``keys`` a list of ``(index, epoch, size)`` (one size).

    Returns ``(CanvasBatch, targets float32 [N, 6], MetaBatch)``; targets as the CPU path's collate.
    """

    def __init__(self, samples: Sequence, augment: AugmentParams | None, decode_size: int, seed: int = 0,
                 cache=None, pin: bool = False):
        super().__init__(samples, augment, decode_size, seed, cache)
        self.canvas = max(decode_size, cache.size if cache is not None else 0)
        self.pin = pin
        self.ring = 0  # > 0: a worker reuses this many shared buffers in turn (set by the loader)
        self._pool: dict[tuple[int, ...], list[torch.Tensor]] = {}

    def _buffer(self, count: int) -> torch.Tensor:
        shape = (count, self.canvas, self.canvas, 3)
        if torch.utils.data.get_worker_info() is not None:
            # shared memory from the start: the hand-over to the main process sends a handle, not bytes.
            # Reused in turn: a worker has at most prefetch_factor batches in flight and the consumer
            # holds one more, so with ring >= prefetch_factor + 2 a buffer is free again when its turn
            # comes (and the main process keeps it mapped: no new pages, no new mapping).
            if self.ring <= 0:
                return _shared_uint8(shape)
            pool = self._pool.setdefault(shape, [])  # oldest first
            buffer = _shared_uint8(shape) if len(pool) < self.ring else pool.pop(0)
            pool.append(buffer)
            return buffer
        return torch.empty(shape, dtype=torch.uint8, pin_memory=self.pin)

    def __getitem__(self, keys):
        size = keys[0][2]
        count = len(keys)
        buffer = self._buffer(count)
        canvases = buffer.numpy()
        theta = np.empty((count, 2, 3), np.float32)
        hsv = np.empty((count, 3), np.float32)
        matrices = np.empty((count, 2, 3), np.float64)
        orig = np.empty((count, 2), np.int64)
        ratio = np.empty(count, np.float64)
        pad = np.empty((count, 2), np.float64)
        paths, rows, failures_by_slot = [], [], {}
        params = self.augment
        for slot, (index, epoch, *_) in enumerate(keys):
            failures: list[tuple[str, str]] = []
            image, orig_hw, chosen = self._load_robust(index, epoch, failures)
            rng = sample_rng(self.seed, epoch, index) if params is not None else None
            theta[slot], hsv[slot], boxes, matrices[slot] = plan_sample(
                image.shape[:2], orig_hw, self.samples[chosen].labels, self.canvas, size, params, rng)
            place_on_canvas(image, self.canvas, out=canvases[slot])
            _, ratio[slot], pad[slot] = letterbox_matrix(orig_hw, size)
            orig[slot] = orig_hw
            paths.append(str(self.samples[chosen].image))
            if len(boxes):
                rows.append(np.concatenate([np.full((len(boxes), 1), slot, np.float32), boxes], axis=1))
            if failures:
                failures_by_slot[slot] = tuple(failures)
        targets = torch.from_numpy(np.concatenate(rows) if rows else np.zeros((0, 6), np.float32))
        batch = CanvasBatch(buffer, torch.from_numpy(theta), torch.from_numpy(hsv), size)
        return batch, targets, MetaBatch(paths, orig, ratio, pad, matrices, failures_by_slot)


def _shared_uint8(shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialised uint8 tensor in shared memory (no copy, unlike ``empty().share_memory_()``)."""
    new_shared = getattr(torch.UntypedStorage, "_new_shared", None)
    if new_shared is None:
        return torch.empty(shape, dtype=torch.uint8).share_memory_()
    storage = new_shared(int(np.prod(shape)))
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, shape)


def _whole_batch(batch):
    return batch  # the dataset already returns a batch; DataLoader must not convert it


class DeviceAugmentLoader(DetectionLoader):
    """:class:`DetectionLoader` over a :class:`DeviceAugmentDataset` (same sampler, epochs, replacements).

    With workers, a batch's ``canvases`` live in a shared buffer that its worker reuses
    ``prefetch_factor + 2`` batches later: consume each batch (``move_to_device``, which the pinning
    thread's copy precedes on CUDA) before keeping the next; keep ``canvases.clone()`` to hold one longer.
    """

    def __init__(self, dataset: DeviceAugmentDataset, batch_sampler, workers: int, prefetch_factor: int = 4,
                 pin_memory: bool | None = None):
        self.dataset, self.batch_sampler, self.workers = dataset, batch_sampler, workers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.prefetch_factor = prefetch_factor
        # in-process, the buffer is allocated page-locked; from workers, DataLoader's thread pins it
        dataset.pin = self.pin_memory and workers == 0
        dataset.ring = prefetch_factor + 2
        self._loader = self._make(batch_sampler, workers)
        self._reset_reports()

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


def device_augment_unsupported(augment: AugmentParams | None) -> str | None:
    """None when the device path does the same augmentation as the CPU path for ``augment``; else why not.

    The one answer to "may ``--augment-on device`` replace the CPU path without changing what is
    learned?": ``--augment-on auto`` asks it, and :func:`check_device_augment` refuses an explicit
    ``--augment-on device`` with its reason.
    """
    if augment is not None and augment.mosaic > 0:
        return (f"does not build mosaics (mosaic={augment.mosaic:g}); set mosaic=0 in the cfg [net] or "
                "--mosaic 0")
    if augment is not None and augment.mixup > 0:
        return f"does not blend images (mixup={augment.mixup:g}); use --mixup 0"
    return None


def check_device_augment(augment: AugmentParams | None) -> None:
    """Raise when ``augment`` asks for something the device path does not do."""
    why = device_augment_unsupported(augment)
    if why is not None:
        raise DataError(f"--augment-on device {why}, or use --augment-on cpu")
