"""``turboyolo prepare``: decode every image once into the prepared cache (pre-resized uint8).

The job is :func:`turboyolo.data.cache.run_prepare`.
"""

from __future__ import annotations

import argparse

from turboyolo.data.cache import run_prepare


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help=".data, data.yaml or image folder")
    parser.add_argument("--img-size", type=int, default=416,
                        help="largest training size (longer side stored)")
    parser.add_argument("--split", choices=("train", "val", "all"), default="all", help="which split(s)")
    parser.add_argument("--out", help="cache folder (default: $TURBOYOLO_CACHE/prepared/...)")
    parser.add_argument("--workers", type=int, help="decode processes (default: all CPUs)")


def run(args: argparse.Namespace) -> int:
    splits = ("train", "val") if args.split == "all" else (args.split,)
    run_prepare(args.data, args.img_size, splits, out=args.out, workers=args.workers, log=print)
    return 0
