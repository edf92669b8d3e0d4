"""``turboyolo test``: evaluate Darknet weights or a checkpoint on a data split.

Prints mAP@0.5, mAP@0.5:0.95 (pycocotools, or faster-coco-eval with ``--backend``), the per-class table
and precision / recall / F1 at ``--conf-thres`` (matches at ``--iou-thres``) with the best-F1 confidence.
The options are the fields of :class:`turboyolo.train.testing.TestArgs`; the job is
:func:`turboyolo.train.testing.run_test`.
"""

from __future__ import annotations

import argparse

from turboyolo.options import add_flags, add_input_flags, read_flags
from turboyolo.train.testing import GROUPS, TestRequest, run_test


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_flags(parser, "cfg", "weights", "data", required=("weights", "data"))
    add_flags(parser, GROUPS)
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="PyTorch-YOLOv3's flag, accepted: the per-class table is always printed")


def run(args: argparse.Namespace) -> int:
    report = run_test(TestRequest(args.weights, args.data, args.cfg, **read_flags(args, GROUPS)), log=print)
    print(report.summary())
    return 0
