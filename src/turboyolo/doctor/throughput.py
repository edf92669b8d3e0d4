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

import cv2
import torch

from turboyolo.data.augment import AugmentParams
from turboyolo.data.cache import prepare_cache
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import scan_dataset
from turboyolo.data.timing import Measurement, measure_loader  # noqa: F401  (re-exported)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``unknown CPU`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


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

    Measures cold (original files) and warm (prepared cache) x augment / no augment with CPU
    augmentation, the CPU side of device augmentation (warm), and the hand-off.

    Args:
        data: a .data, data.yaml or image folder.
        workers: loader processes (0 = in-process); the hand-off row uses at least one.
        images: images per measurement (epochs repeat).
        cache_dir: the prepared cache for the warm rows (default: a temporary folder, built first).
        augment_on: ``cpu``, ``device`` or ``both``: which augmentation mode(s) to measure.
    Returns:
        :class:`Measurement` keyed by (``cold``/``warm``, ``augment``/``no augment``/``device augment``),
        and ``"handoff_ms"``: main-process ms per image.
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
        augment = AugmentParams.from_net()
        rows = []
        if augment_on in ("cpu", "both"):
            rows += [(p, c, a, g, "cpu") for p, c in (("cold", None), ("warm", cache))
                     for a, g in (("augment", augment), ("no augment", None))]
        if augment_on in ("device", "both"):
            rows.append(("warm", cache, "device augment", augment, "device"))
        for path_name, path_cache, aug_name, aug, where in rows:
            loader = build_loader(samples, img_size=img_size, batch_size=batch_size, augment=aug,
                                  workers=workers, shuffle=True, cache=path_cache, augment_on=where)
            m = measure_loader(loader, images)
            del loader
            results[(path_name, aug_name)] = m
            source = "original files" if path_cache is None else "prepared cache"
            label = f"{path_name} ({source}), {aug_name}" + (" (CPU side)" if where == "device" else "")
            log(f"  {label:<50} {m.images_per_s:8.1f} img/s  {m.images_per_core_s:8.1f} img/s per core")
        loader = build_loader(samples, img_size=img_size, batch_size=batch_size, augment=augment,
                              workers=max(1, workers), shuffle=True, cache=cache)
        handoff = measure_loader(loader, images)
        del loader
        log(f"  hand-off (main process, receive + collate + pin): {handoff.main_ms_per_image:.3f} ms per "
            f"image ({max(1, workers)} worker(s), pin_memory={torch.cuda.is_available()})")
        results["handoff_ms"] = handoff.main_ms_per_image
    return results
