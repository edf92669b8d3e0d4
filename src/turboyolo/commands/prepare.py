"""``turboyolo prepare``: decode every image once into the prepared cache (pre-resized uint8).

``--img-size`` is the largest training size: each image is stored with its longer side at it. The job is
:func:`turboyolo.data.cache.run_prepare`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from turboyolo.data.cache import run_prepare
from turboyolo.options import add_flags, add_input_flags, img_size_option, option, read_flags


@dataclass
class PrepareArgs:
    """What is prepared, where."""

    img_size: int = img_size_option(default=416)
    split: str = option("all", "which split(s)", choices=("train", "val", "all"))
    out: str | None = option(None, "cache folder (default: $TURBOYOLO_CACHE/prepared/...)")
    workers: int | None = option(None, "decode processes (default: all CPUs)", type=int)


GROUPS = {"prepare": PrepareArgs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_flags(parser, "data", required=("data",))
    add_flags(parser, GROUPS)


def run(args: argparse.Namespace) -> int:
    prepare = read_flags(args, GROUPS)["prepare"]
    splits = ("train", "val") if prepare.split == "all" else (prepare.split,)
    run_prepare(args.data, prepare.img_size, splits, out=prepare.out, workers=prepare.workers, log=print)
    return 0
