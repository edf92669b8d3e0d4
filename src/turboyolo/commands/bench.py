"""``turboyolo bench data``: images/s (and per core) of the data pipeline, cold and warm.

Definitions: per core = images / CPU-seconds of all loader processes (main and workers, user + system);
hand-off = main-process CPU time per image spent receiving, collating and pinning, measured with at
least one worker so that the main process does nothing else.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

# measure_loader and cpu_model are imported from here by bench/ scripts
from turboyolo.doctor.throughput import Measurement, cpu_model, measure_loader  # noqa: F401


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", metavar="WHAT", parser_class=type(parser))
    data = sub.add_parser("data", help="measure the data pipeline on a data set")
    data.add_argument("--data", required=True, help=".data, data.yaml or image folder")
    data.add_argument("--img-size", type=int, default=416, help="network input size")
    data.add_argument("--workers", "--n-cpu", type=int, default=0, help="loader processes (0 = in-process)")
    data.add_argument("--batch-size", type=int, default=16, help="images per batch")
    data.add_argument("--images", type=int, default=256, help="images per measurement (epochs repeat)")
    data.add_argument("--split", default="train", help="train or val")
    data.add_argument("--cache-dir", help="prepared cache folder for the warm path (default: a temp folder)")
    data.add_argument("--augment-on", default="both", choices=("cpu", "device", "both"),
                      help="which augmentation mode(s) to measure; device = the CPU side of "
                      "--augment-on device (uint8 canvases + warp numbers, warm path only)")


def bench_data(data: str | Path, *, split: str = "train", img_size: int = 416, workers: int = 0,
               batch_size: int = 16, images: int = 256, cache_dir: str | Path | None = None, log=print,
               augment_on: str = "both") -> dict:
    """Measure cold/warm x augment/no-augment (CPU augmentation), the CPU side of device augmentation
    (warm) and the hand-off; returns the numbers keyed by (path, mode), logs a table."""
    import cv2
    import torch

    from turboyolo.data.augment import AugmentParams
    from turboyolo.data.cache import prepare_cache
    from turboyolo.data.pipeline import build_loader
    from turboyolo.data.scan import scan_dataset

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


def run(args: argparse.Namespace) -> int:
    from turboyolo.errors import TurboYoloError

    if args.what != "data":
        raise TurboYoloError("usage: turboyolo bench data --data X [--img-size 416] [--workers N]")
    bench_data(args.data, split=args.split, img_size=args.img_size, workers=args.workers,
               batch_size=args.batch_size, images=args.images, cache_dir=args.cache_dir,
               augment_on=args.augment_on)
    return 0
