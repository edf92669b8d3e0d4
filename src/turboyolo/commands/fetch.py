"""``turboyolo fetch NAME``: pinned weights or the sample data set into the cache."""

from __future__ import annotations

import argparse
from pathlib import Path

from turboyolo import assets
from turboyolo.data.trees import build_trees
from turboyolo.errors import writable_folder

DATASETS = ("trees",)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(assets.ASSETS) + list(DATASETS), help="what to fetch")
    parser.add_argument("--dest", help="data sets only: folder to build into (default: the cache)")


def run(args: argparse.Namespace) -> int:
    if args.name in DATASETS:

        dest = Path(args.dest) if args.dest else assets.cache_dir() / "datasets" / args.name
        writable_folder(dest.absolute().parent, "--dest" if args.dest else "TURBOYOLO_CACHE", create=False)
        path = build_trees(dest)
    else:
        path = assets.fetch(args.name)
    print(path)
    return 0
