"""DataLoader wiring: dataset, multiscale batch sampler, collate in workers, pinning, device hand-off.

Batches are ``(images uint8 [B, 3, S, S], targets float32 [N, 6], metas)`` where a target row is
(batch index, cls, cx, cy, w, h) relative to the delivered image and ``metas[i]`` maps network pixels
back to the original: ``orig = (net - pad) / ratio`` (exact for validation; with augmentation use
``ImageMeta.matrix``). uint8 crosses the process boundary and the bus; :func:`move_to_device`
normalises on the device.

A sample that fails to load after the scan (the file changed or broke) is replaced by another one in a
training loader, so batches keep their size; an evaluation loader (``drop_broken``) leaves it out, so
each image is evaluated once or not at all. Both are counted and named: ``DetectionLoader.replaced``,
``DetectionLoader.dropped`` and their ``*_summary()`` lines.

Determinism: the batch sampler (:mod:`turboyolo.data.sampler`, in the main process) decides which
sample indices, epoch and output size every batch has, and whether mosaic and mixup are on
(``--close-mosaic`` turns them off for the last epochs: the sampler's key carries it, so persistent
workers need no message); each sample's augmentation rng is ``sample_rng(seed, epoch, index)``. So
batches do not depend on the number of workers, and all ranks agree on the size sequence.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch

from turboyolo.data.augment import (
    AugmentParams,
    augment_sample,
    letterbox_matrix,
    mixup,
    mixup_rng,
    mosaic_rng,
    mosaic_sample,
    sample_rng,
)
from turboyolo.data.decode import decode_image
from turboyolo.data.sampler import MultiScaleBatchSampler, TailSampler
from turboyolo.data.scan import Sample
from turboyolo.devices import usable_cpus
from turboyolo.errors import DataError, printable

MAX_REPLACEMENTS = 16  # tries before a batch slot gives up (only with an almost entirely broken data set)


@dataclass
class ImageMeta:
    """Where a delivered image came from and how to map back to it.

    Attributes:
        path: the image file actually used for this slot.
        orig_hw: (height, width) of the original (EXIF-oriented) image.
        ratio: letterbox scale (network px per original px).
        pad: (pad_x, pad_y) letterbox offsets in network px; ``orig = (net - pad) / ratio``.
        matrix: 2x3 original px -> network px (equals ratio/pad for validation; includes augmentation).
        failures: (path, reason) of every broken sample this slot replaced (mosaics load 4 images).
    """

    path: Path
    orig_hw: tuple[int, int]
    ratio: float
    pad: tuple[float, float]
    matrix: np.ndarray | None = None
    failures: tuple[tuple[str, str], ...] = ()

    @property
    def replaced(self) -> tuple[str, str] | None:
        """The first (path, reason) this slot replaced, or None."""
        return self.failures[0] if self.failures else None


class MetaBatch(Sequence):
    """The metas of one batch, as a read-only sequence of :class:`ImageMeta` built on access.

    Crosses the worker -> main process boundary as a few arrays and one list of strings, so the
    hand-off costs little per image whether or not the training loop looks at the metas.
    """

    def __init__(self, paths: list[str], orig_hw: np.ndarray, ratio: np.ndarray, pad: np.ndarray,
                 matrix: np.ndarray, failures: dict[int, tuple[tuple[str, str], ...]],
                 dropped: tuple[tuple[str, str], ...] = ()):
        self.paths, self.orig_hw, self.ratio, self.pad = paths, orig_hw, ratio, pad
        self.matrix, self.failures = matrix, failures
        self.dropped = dropped  # (path, reason) of samples left out of this batch (evaluation loaders)

    @classmethod
    def from_metas(cls, metas: Sequence[ImageMeta], dropped: tuple[tuple[str, str], ...] = ()) -> MetaBatch:
        return cls([str(m.path) for m in metas],
                   np.array([m.orig_hw for m in metas], np.int64).reshape(-1, 2),
                   np.array([m.ratio for m in metas], np.float64),
                   np.array([m.pad for m in metas], np.float64).reshape(-1, 2),
                   np.array([m.matrix for m in metas], np.float64).reshape(-1, 2, 3),
                   {i: m.failures for i, m in enumerate(metas) if m.failures}, dropped)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        h, w = self.orig_hw[index]
        return ImageMeta(Path(self.paths[index]), (int(h), int(w)), float(self.ratio[index]),
                         (float(self.pad[index, 0]), float(self.pad[index, 1])), self.matrix[index],
                         self.failures.get(index, ()))

    def pin_memory(self) -> MetaBatch:
        """Nothing to pin (host-side metadata); keeps DataLoader pinning from rebuilding the list."""
        return self

    def __reduce__(self):
        return (MetaBatch, (self.paths, self.orig_hw, self.ratio, self.pad, self.matrix, self.failures,
                            self.dropped))


@dataclass(frozen=True)
class DroppedSample:
    """What an evaluation dataset returns for a sample that failed to load: :func:`collate` leaves it
    out of the batch and lists it in ``MetaBatch.dropped``."""

    path: str
    reason: str


class DetectionDataset(torch.utils.data.Dataset):
    """Map-style dataset keyed by ``(index, epoch, size[, mix])`` (what the batch sampler yields).

    ``size`` is the square side, or (width, height) for a rectangular validation batch; ``mix``
    (default True) allows mosaic and mixup for this sample.

    Never returns None. A sample that fails to load is replaced by another one chosen from
    (seed, epoch, index, attempt), and the slot's meta records the failure; with ``drop_broken`` (an
    evaluation set, where a substitute would be counted twice) it becomes a :class:`DroppedSample`.
    """

    def __init__(self, samples: Sequence[Sample], augment: AugmentParams | None, decode_size: int,
                 seed: int = 0, cache=None, drop_broken: bool = False):
        self.samples = list(samples)
        self.augment = augment
        self.decode_size = decode_size
        self.seed = seed
        self.cache = cache
        self.drop_broken = drop_broken

    def __len__(self) -> int:
        return len(self.samples)

    def load(self, index: int) -> tuple[np.ndarray, tuple[int, int]]:
        """Decoded image (longer side ``decode_size``) and original (h, w) of sample ``index``."""
        if self.cache is not None:
            return self.cache.get(index)
        return decode_image(self.samples[index].image, self.decode_size)

    def _load_robust(self, index: int, epoch: int, failures: list[tuple[str, str]]
                     ) -> tuple[np.ndarray, tuple[int, int], int]:
        """Load ``index``, or replacements chosen from (seed, epoch, index, attempt) when it breaks."""
        chosen = index
        for attempt in range(MAX_REPLACEMENTS):
            try:
                image, orig_hw = self.load(chosen)
                return image, orig_hw, chosen
            except (DataError, OSError, ValueError, cv2.error) as err:
                failures.append((str(self.samples[chosen].image), str(err)))
                chosen = int(sample_rng(self.seed, epoch, index * MAX_REPLACEMENTS + attempt + 1)
                             .integers(len(self.samples)))
        raise DataError(f"{MAX_REPLACEMENTS} samples in a row failed to load (first: {failures[0]}); "
                        "run the scan again, the data set changed")

    def __getitem__(self, key: tuple):
        index, epoch, size, *rest = key
        mix = rest[0] if rest else True
        failures: list[tuple[str, str]] = []
        if self.drop_broken:
            try:
                image, orig_hw = self.load(index)
            except (DataError, OSError, ValueError, cv2.error) as err:
                return DroppedSample(str(self.samples[index].image), _reason(err, self.samples[index].image))
            loaded = (image, orig_hw, index)
        else:
            loaded = self._load_robust(index, epoch, failures)
        out, boxes, matrix = self._compose(loaded, index, epoch, size, mix, failures)
        params = self.augment
        if mix and params is not None and params.mixup > 0:
            draw = mixup_rng(self.seed, epoch, index)
            if draw.random() < params.mixup:
                partner, ratio = int(draw.integers(len(self.samples))), float(draw.beta(32.0, 32.0))
                partner_loaded = self._load_robust(partner, epoch, failures)
                other = self._compose(partner_loaded, partner, epoch, size, mix, failures, stream=1)
                out, boxes = mixup((out, boxes), (other[0], other[1]), ratio)
        _, orig_hw, chosen = loaded
        _, ratio, pad = letterbox_matrix(orig_hw, size)
        meta = ImageMeta(self.samples[chosen].image, orig_hw, ratio, pad, matrix, tuple(failures))
        return out, boxes, meta

    def _compose(self, loaded: tuple[np.ndarray, tuple[int, int], int], index: int, epoch: int, size,
                 mix: bool, failures: list[tuple[str, str]], stream: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample ``index`` (``loaded``: its image, original size and the sample actually read) as the
        network sees it, a mosaic when drawn so; ``stream`` > 0 draws anew (a mixup partner is not the
        copy of its own sample in this epoch)."""
        image, orig_hw, chosen = loaded
        labels = self.samples[chosen].labels
        params = self.augment
        use_mosaic = mix and params is not None and params.mosaic > 0
        mosaic_draw = mosaic_rng(self.seed, epoch, index, stream) if use_mosaic else None
        rng = sample_rng(self.seed, epoch, index, stream) if params is not None else None
        if mosaic_draw is not None and mosaic_draw.random() < params.mosaic:
            parts = [(image, labels, orig_hw)]
            for other in mosaic_draw.integers(len(self.samples), size=3):
                o_image, o_hw, o_chosen = self._load_robust(int(other), epoch, failures)
                parts.append((o_image, self.samples[o_chosen].labels, o_hw))
            out, boxes, matrix = mosaic_sample(parts, size, params, rng)
        else:
            out, boxes, matrix = augment_sample(image, labels, orig_hw, size, params, rng)
        return out, boxes, matrix


def collate(items: list) -> tuple[torch.Tensor, torch.Tensor, MetaBatch]:
    """Stack into uint8 [B, 3, S, S], float32 [N, 6] (batch index, cls, cx, cy, w, h) and the metas.

    :class:`DroppedSample` items are left out (B counts the others; 0 when all were dropped) and listed
    in ``metas.dropped``.
    """
    dropped = tuple((item.path, item.reason) for item in items if isinstance(item, DroppedSample))
    items = [item for item in items if not isinstance(item, DroppedSample)]
    if not items:
        return (torch.zeros((0, 3, 0, 0), dtype=torch.uint8), torch.zeros((0, 6)),
                MetaBatch.from_metas([], dropped))
    images = np.stack([item[0] for item in items])
    images_t = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    rows = [np.concatenate([np.full((len(b), 1), i, np.float32), b], axis=1)
            for i, (_, b, _) in enumerate(items)]
    targets = torch.from_numpy(np.concatenate(rows) if rows else np.zeros((0, 6), np.float32))
    return images_t, targets, MetaBatch.from_metas([item[2] for item in items], dropped)


def _reason(err: Exception, path) -> str:
    """The error's text without the file name it starts with (the report names the file already)."""
    return str(err).removeprefix(f"{path}: ")


def default_workers(world_size: int = 1) -> int:
    """Loader workers per process: the CPUs this process may use, shared by ranks, minus one for the
    main process (0 on a one-core machine), at most 16."""
    return max(0, min(16, usable_cpus() // max(1, world_size) - 1))


def _worker_init(_: int) -> None:
    # One thread per worker: parallelism comes from the workers, not from nested thread pools.
    cv2.setNumThreads(0)
    torch.set_num_threads(1)
    # Ctrl-C reaches the whole process group: the main process decides (training saves its exact
    # position first); a worker that died of it would fail the batch being loaded.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class DetectionLoader:
    """Iterable over batches with ``set_epoch`` and the broken samples: ``replaced`` (training) and
    ``dropped`` (evaluation), each (path, reason), all epochs; ``epoch_*`` for the current one. A batch
    whose samples were all dropped is not yielded."""

    def __init__(self, dataset: DetectionDataset, batch_sampler: MultiScaleBatchSampler, workers: int,
                 prefetch_factor: int = 4, pin_memory: bool | None = None):
        self.dataset, self.batch_sampler, self.workers = dataset, batch_sampler, workers
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        kwargs = {}
        if workers > 0:
            kwargs = dict(persistent_workers=True, prefetch_factor=prefetch_factor,
                          worker_init_fn=_worker_init)
            if "fork" in torch.multiprocessing.get_all_start_methods():
                kwargs["multiprocessing_context"] = "fork"
        self._loader = torch.utils.data.DataLoader(dataset, batch_sampler=batch_sampler, num_workers=workers,
                                                   collate_fn=collate, pin_memory=self.pin_memory, **kwargs)
        self._reset_reports()

    def _reset_reports(self) -> None:
        self.replaced: list[tuple[str, str]] = []  # (path, reason) of every replacement, all epochs
        self.epoch_replaced: list[tuple[str, str]] = []  # the current/last epoch only
        self.dropped: list[tuple[str, str]] = []  # (path, reason) of every sample left out, all epochs
        self.epoch_dropped: list[tuple[str, str]] = []

    @property
    def replaced_count(self) -> int:
        return len(self.replaced)

    def set_epoch(self, epoch: int, start: int = 0, mix: bool = True) -> None:
        """Select the epoch (and its start, see the sampler); ``mix=False``: no mosaic or mixup in it."""
        self.batch_sampler.set_epoch(epoch, start)
        self.batch_sampler.mix = mix

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __iter__(self):
        return self._tracked(self._loader)

    def remaining(self, skip: int):
        """The batches of the current epoch after the first ``skip`` (mid-epoch resume).

        Every batch derives from (seed, epoch, index), so skipping in the sampler yields exactly the
        batches the interrupted run would have seen; no image of the skipped part is decoded.
        """
        return self._tracked(self._tail_loader(TailSampler(self.batch_sampler, skip)))

    def _tail_loader(self, sampler) -> torch.utils.data.DataLoader:
        # a one-off loader: at most one non-persistent worker for the rest of one epoch
        return torch.utils.data.DataLoader(self.dataset, batch_sampler=sampler,
                                           num_workers=min(self.workers, 1), collate_fn=collate,
                                           pin_memory=self.pin_memory,
                                           worker_init_fn=_worker_init if self.workers else None)

    def _tracked(self, batches):
        self.epoch_replaced, self.epoch_dropped = [], []
        for images, targets, metas in batches:
            for _, failures in sorted(metas.failures.items()):
                self.epoch_replaced.extend(failures)
                self.replaced.extend(failures)
            dropped = getattr(metas, "dropped", ())
            self.epoch_dropped.extend(dropped)
            self.dropped.extend(dropped)
            if len(metas):
                yield images, targets, metas

    def dropped_summary(self) -> str | None:
        """One line after an evaluation, or None when no sample was left out."""
        if not self.epoch_dropped:
            return None
        return (f"{len(self.epoch_dropped)} image(s) failed to load and were left out of this evaluation: "
                + "; ".join(f"{printable(p)}: {printable(r)}" for p, r in self.epoch_dropped)[:2000])

    def replaced_summary(self) -> str | None:
        """One line for the end of an epoch, or None when nothing was replaced."""
        if not self.epoch_replaced:
            return None
        files = sorted({p for p, _ in self.epoch_replaced})
        named = "; ".join(f"{printable(p)}: {printable(r)}" for p, r in dict(self.epoch_replaced).items())
        return (f"{len(self.epoch_replaced)} sample(s) failed to load and were replaced this epoch: "
                + named[:2000]
                + ("" if len(files) < 2 else f" ({len(files)} files)"))


def move_to_device(images: torch.Tensor, device: torch.device | str, dtype: torch.dtype = torch.float32,
                   channels_last: bool = False) -> torch.Tensor:
    """uint8 [B, 3, H, W] -> ``dtype`` in [0, 1] on ``device`` (non-blocking copy, divide there); float
    images (already in [0, 1]) are only copied.

    A :class:`turboyolo.data.device_loader.CanvasBatch` (``--augment-on device``) is copied and then
    augmented on the device.
    """
    if hasattr(images, "to_device"):
        return images.to_device(device, dtype, channels_last)
    if images.is_floating_point():  # the Darknet loader's float [0, 1] images (data/darknet_mode.py)
        images = images.to(device, dtype, non_blocking=True)
        return images.contiguous(memory_format=torch.channels_last) if channels_last else images
    images = images.to(device, non_blocking=True)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    return images.to(dtype).div_(255.0)
