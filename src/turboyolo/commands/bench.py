"""``turboyolo bench data``: images/s (and per core) of the data pipeline, cold and warm.

The measurement is :func:`turboyolo.doctor.throughput.run_bench` (its docstring defines per core and
hand-off); this module only declares the flags.
"""

from __future__ import annotations

import argparse

from turboyolo.doctor.throughput import run_bench
from turboyolo.errors import TurboYoloError


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


def run(args: argparse.Namespace) -> int:
    if args.what != "data":
        raise TurboYoloError("usage: turboyolo bench data --data X [--img-size 416] [--workers N]")
    run_bench(args.data, split=args.split, img_size=args.img_size, workers=args.workers,
              batch_size=args.batch_size, images=args.images, cache_dir=args.cache_dir,
              augment_on=args.augment_on, log=print)
    return 0
