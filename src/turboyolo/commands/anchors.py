"""``turboyolo anchors --data X``: fit anchors to a data set's boxes; compare them with the current ones.

With ``--cfg``, the fitted anchors are compared with that cfg's (and ``-o`` rewrites it with them). The
options are the fields of :class:`turboyolo.train.anchors.AnchorsArgs`; the job is
:func:`turboyolo.train.anchors.run_anchors`.
"""

from __future__ import annotations

import argparse

from turboyolo.options import add_flags, add_input_flags, read_flags
from turboyolo.train.anchors import GROUPS, AnchorsRequest, run_anchors


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_flags(parser, "data", "cfg", required=("data",))
    add_flags(parser, GROUPS)


def run(args: argparse.Namespace) -> int:
    report = run_anchors(AnchorsRequest(args.data, args.cfg, **read_flags(args, GROUPS)), log=print)
    print(report.summary())
    return 0
