"""``turboyolo label``: a model's detections as YOLO labels for images without one, plus a review list.

The options are the fields of :class:`turboyolo.infer.labeling.LabelRequest`'s groups (the prediction
group is ``turboyolo detect``'s); the job is :func:`turboyolo.infer.labeling.run_label`.
"""

from __future__ import annotations

import argparse

from turboyolo.cli import add_model_flags
from turboyolo.infer.labeling import GROUPS, LabelRequest, run_label
from turboyolo.options import add_flags, read_flags, refuse_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser, weights_required=True)
    parser.add_argument("--data", required=True, help="a .data, data.yaml or image folder")
    add_flags(parser, GROUPS)
    refuse_flag(parser, "--iou-thres")


def run(args: argparse.Namespace) -> int:
    report = run_label(LabelRequest(args.weights, args.data, args.cfg, **read_flags(args, GROUPS)))
    print(report.summary())
    return 0
