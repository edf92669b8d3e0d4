"""``turboyolo anchors --data X``: fit anchors to a data set's boxes; compare them with the current ones.

The options are the fields of :class:`turboyolo.train.anchors.AnchorsArgs`; the job is
:func:`turboyolo.train.anchors.run_anchors`.
"""

from __future__ import annotations

import argparse

from turboyolo.options import add_flags, read_flags
from turboyolo.train.anchors import GROUPS, AnchorsRequest, run_anchors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="a .data, data.yaml or image folder")
    parser.add_argument("-m", "--cfg", "--model", dest="cfg",
                        help="compare with (and with -o, rewrite) this cfg's anchors")
    add_flags(parser, GROUPS)


def run(args: argparse.Namespace) -> int:
    report = run_anchors(AnchorsRequest(args.data, args.cfg, **read_flags(args, GROUPS)), log=print)
    print(report.summary())
    return 0
