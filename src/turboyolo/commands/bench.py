"""``turboyolo bench data``: images/s (and per core) of the data pipeline, cold and warm."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="what", metavar="WHAT", parser_class=type(parser))
    data = sub.add_parser("data", help="measure the data pipeline on a data set")
    data.add_argument("--data", required=True, help=".data, data.yaml or image folder")
    data.add_argument("--img-size", type=int, default=416, help="network input size")
    data.add_argument("--workers", "--n-cpu", type=int, default=0, help="loader processes (0 = in-process)")
    data.add_argument("--batch-size", type=int, default=16, help="images per batch")
    data.add_argument("--images", type=int, default=64, help="images per measurement")
    data.add_argument("--split", default="train", help="train or val")
    data.add_argument("--cache-dir", help="prepared cache folder for the warm path (default: a temp folder)")


def run(args: argparse.Namespace) -> int:
    from turboyolo.data.bench import bench_data_command
    from turboyolo.errors import TurboYoloError

    if args.what != "data":
        raise TurboYoloError("usage: turboyolo bench data --data X [--img-size 416] [--workers N]")
    return bench_data_command(args)
