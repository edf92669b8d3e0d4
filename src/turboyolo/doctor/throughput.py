"""Loader throughput measurement: images/s and images per CPU-second of all loader processes.

Per core = images / CPU-seconds of the main process (all threads, pinning included) and every live
DataLoader worker (user + system, from /proc). Used by ``turboyolo bench data`` (:func:`run_bench`)
and ``turboyolo doctor``. Hand-off = main-process CPU time per image spent receiving, collating and
pinning, measured with at least one worker so that the main process does nothing else.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import cv2
import torch

from turboyolo.data.augment import AugmentParams
from turboyolo.data.cache import prepare_cache
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import scan_dataset
from turboyolo.data.timing import Measurement, measure_loader  # noqa: F401  (re-exported)
from turboyolo.devices import cpu_model


def train_default_augment() -> AugmentParams:
    """The augmentation ``turboyolo train`` uses on a stock cfg without flags: the cfg's ``[net]`` colour
    values, jitter 0.3, flips, and a mosaic per sample (``DEFAULT_MOSAIC``)."""
    from turboyolo.train.defaults import DEFAULT_MOSAIC

    return AugmentParams.from_net(mosaic=DEFAULT_MOSAIC)


class BenchRow(NamedTuple):
    """One row of ``turboyolo bench data``: its label, whether it reads the prepared cache, the
    augmentation (None: letterbox only) and where augmentation runs."""

    label: str
    warm: bool
    augment: AugmentParams | None
    where: str = "cpu"

    @property
    def key(self) -> tuple[str, str]:
        return ("warm" if self.warm else "cold", self.label)


def bench_rows(augment_on: str = "both") -> list[BenchRow]:
    """What ``turboyolo bench data`` measures, ``train``'s default first (named so), then the faster
    settings beside it, each named by the flags that select it."""
    default, plain = train_default_augment(), AugmentParams.from_net(mosaic=0.0)
    rows = []
    if augment_on in ("cpu", "both"):
        rows += [BenchRow("train's default: --cache none, --augment-on cpu, mosaic 1", False, default),
                 BenchRow("--cache none, mosaic 0", False, plain),
                 BenchRow("--cache ram|disk (prepared cache), mosaic 1", True, default),
                 BenchRow("--cache ram|disk, mosaic 0", True, plain),
                 BenchRow("--cache ram|disk, no augmentation (evaluation)", True, None)]
    if augment_on in ("device", "both"):
        rows.append(BenchRow("--cache ram|disk --augment-on device, mosaic 0 (CPU side)", True, plain,
                             "device"))
    return rows


def run_bench(
    data: str | Path,
    *,
    split: str = "train",
    img_size: int = 416,
    workers: int = 0,
    batch_size: int = 16,
    images: int = 256,
    cache_dir: str | Path | None = None,
    augment_on: str = "both",
    log: Callable[[str], object] = lambda _: None,
) -> dict:
    """``turboyolo bench data``: the data pipeline's images/s and images per core, each row given to ``log``
    as it is measured (the table ``turboyolo bench data`` prints).

    The first row is what ``turboyolo train`` does without flags (original files decoded in the loader,
    CPU augmentation with mosaic); the others are the settings that make it cheaper (a prepared cache,
    mosaic off, device augmentation), each labelled with its flags (:func:`bench_rows`); then the
    hand-off. Every row also counts the decodes per image.

    Args:
        data: a .data, data.yaml or image folder.
        workers: loader processes (0 = in-process); the hand-off row uses at least one.
        images: images per measurement (epochs repeat).
        cache_dir: the prepared cache for the warm rows (default: a temporary folder, built first).
        augment_on: ``cpu``, ``device`` or ``both``: which augmentation mode(s) to measure.
    Returns:
        :class:`Measurement` keyed by :attr:`BenchRow.key` (``cold``/``warm``, the row's label), and
        ``"handoff_ms"``: main-process ms per image.
    """
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    scan = scan_dataset(data, split)
    log(scan.summary())
    samples = scan.samples
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(cache_dir) if cache_dir else Path(tmp) / "prepared"
        cache = prepare_cache(samples, img_size, root, workers=max(1, workers), log=log)
        log(f"bench data: {len(samples)} images, img-size {img_size}, workers {workers}, batch {batch_size}, "
            f"{images} images per row; CPU {cpu_model()}, {os.cpu_count()} cores")
        results = {}
        for row in bench_rows(augment_on):
            loader = build_loader(samples, img_size=img_size, batch_size=batch_size, augment=row.augment,
                                  workers=workers, shuffle=True, cache=cache if row.warm else None,
                                  augment_on=row.where)
            m = measure_loader(loader, images)
            # decodes of every batch delivered: the measured ones and those before them
            decodes = sum(loader.decoded.values()) / (m.images + m.untimed_images)
            del loader
            results[row.key] = m
            label = ("warm: " if row.warm else "cold: ") + row.label
            log(f"  {label:<72} {m.images_per_s:8.1f} img/s  {m.images_per_core_s:8.1f} img/s per core  "
                f"{decodes:.2f} decodes per image")
        loader = build_loader(samples, img_size=img_size, batch_size=batch_size,
                              augment=train_default_augment(), workers=max(1, workers), shuffle=True,
                              cache=cache)
        handoff = measure_loader(loader, images)
        del loader
        log(f"  hand-off (main process, receive + collate + pin): {handoff.main_ms_per_image:.3f} ms per "
            f"image ({max(1, workers)} worker(s), pin_memory={torch.cuda.is_available()})")
        results["handoff_ms"] = handoff.main_ms_per_image
    return results
