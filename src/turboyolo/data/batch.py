"""One batch as the training loop receives it: the images' metadata (:class:`ImageMeta`,
:class:`MetaBatch`), evaluation's left-out samples (:class:`DroppedSample`) and :func:`collate`.

Batches are ``(images uint8 [B, 3, S, S], targets float32 [N, 6], metas)``; see
:mod:`turboyolo.data.loader` for what the values mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


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
        decoded: sample indices whose original was decoded while making this slot's batch (set on one
            slot per batch by :meth:`DetectionDataset.__getitems__`).
    """

    path: Path
    orig_hw: tuple[int, int]
    ratio: float
    pad: tuple[float, float]
    matrix: np.ndarray | None = None
    failures: tuple[tuple[str, str], ...] = ()
    decoded: tuple[int, ...] = ()

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
                 dropped: tuple[tuple[str, str], ...] = (), decoded: tuple[int, ...] = ()):
        self.paths, self.orig_hw, self.ratio, self.pad = paths, orig_hw, ratio, pad
        self.matrix, self.failures = matrix, failures
        self.dropped = dropped  # (path, reason) of samples left out of this batch (evaluation loaders)
        self.decoded = decoded  # sample indices whose original was decoded to make this batch

    @classmethod
    def from_metas(cls, metas: Sequence[ImageMeta], dropped: tuple[tuple[str, str], ...] = ()) -> MetaBatch:
        return cls([str(m.path) for m in metas],
                   np.array([m.orig_hw for m in metas], np.int64).reshape(-1, 2),
                   np.array([m.ratio for m in metas], np.float64),
                   np.array([m.pad for m in metas], np.float64).reshape(-1, 2),
                   np.array([m.matrix for m in metas], np.float64).reshape(-1, 2, 3),
                   {i: m.failures for i, m in enumerate(metas) if m.failures}, dropped,
                   tuple(i for m in metas for i in m.decoded))

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
                            self.dropped, self.decoded))


@dataclass(frozen=True)
class DroppedSample:
    """What an evaluation dataset returns for a sample that failed to load: :func:`collate` leaves it
    out of the batch and lists it in ``MetaBatch.dropped``."""

    path: str
    reason: str


def collate(items: list) -> tuple[torch.Tensor, torch.Tensor, MetaBatch]:
    """Stack into uint8 [B, 3, S, S] (channels-last in memory), float32 [N, 6] (batch index, cls, cx,
    cy, w, h) and the metas.

    :class:`DroppedSample` items are left out (B counts the others; 0 when all were dropped) and listed
    in ``metas.dropped``.
    """
    dropped = tuple((item.path, item.reason) for item in items if isinstance(item, DroppedSample))
    items = [item for item in items if not isinstance(item, DroppedSample)]
    if not items:
        return (torch.zeros((0, 3, 0, 0), dtype=torch.uint8), torch.zeros((0, 6)),
                MetaBatch.from_metas([], dropped))
    images = np.stack([item[0] for item in items])
    images_t = torch.from_numpy(images).permute(0, 3, 1, 2)  # NCHW shape, NHWC memory: no copy
    rows = [np.concatenate([np.full((len(b), 1), i, np.float32), b], axis=1)
            for i, (_, b, _) in enumerate(items)]
    targets = torch.from_numpy(np.concatenate(rows) if rows else np.zeros((0, 6), np.float32))
    return images_t, targets, MetaBatch.from_metas([item[2] for item in items], dropped)


def collate_group(batches: list[list]) -> list[tuple[torch.Tensor, torch.Tensor, MetaBatch]]:
    """:func:`collate` of each batch of a group (what :meth:`DetectionDataset.__getitems__` returns)."""
    return [collate(items) for items in batches]
