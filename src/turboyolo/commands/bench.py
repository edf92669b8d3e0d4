"""``turboyolo bench data``: images/s (and per core) of the data pipeline, cold and warm.

The measurement is :func:`turboyolo.doctor.throughput.run_bench` (its docstring defines per core and
hand-off); this module only declares the flags.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from turboyolo.doctor.throughput import run_bench
from turboyolo.errors import TurboYoloError
from turboyolo.options import add_flags, add_input_flags, img_size_option, option, read_flags


@dataclass
class BenchArgs:
    """What is measured."""

    img_size: int = img_size_option(default=416)
    workers: int = option(0, "loader processes (0 = in-process)", "--workers", "--n-cpu", type=int)
    batch_size: int = option(16, "images per batch", type=int)
    images: int = option(256, "images per measurement (epochs repeat)", type=int)
    split: str = option("train", "which split", choices=("train", "val"))
    cache_dir: str | None = option(None, "prepared cache folder for the warm path (default: a temp folder)")
    augment_on: str = option("both", "which augmentation mode(s) to measure; device = the CPU side of "
                             "--augment-on device (uint8 canvases + warp numbers, warm path only)",
                             choices=("cpu", "device", "both"))


GROUPS = {"bench": BenchArgs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", metavar="WHAT", parser_class=type(parser))
    data = sub.add_parser("data", help="measure the data pipeline on a data set")
    add_input_flags(data, "data", required=("data",))
    add_flags(data, GROUPS)


def run(args: argparse.Namespace) -> int:
    if args.what != "data":
        raise TurboYoloError("usage: turboyolo bench data --data X [--img-size 416] [--workers N]")
    bench = read_flags(args, GROUPS)["bench"]
    run_bench(args.data, split=bench.split, img_size=bench.img_size, workers=bench.workers,
              batch_size=bench.batch_size, images=bench.images, cache_dir=bench.cache_dir,
              augment_on=bench.augment_on, log=print)
    return 0
