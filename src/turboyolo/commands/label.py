"""``turboyolo label``: a model's detections as YOLO labels for images without one, plus a review list.

The options are the fields of :class:`turboyolo.infer.labeling.LabelRequest`'s groups (the prediction
group is ``turboyolo detect``'s); the job is :func:`turboyolo.infer.labeling.run_label`.
"""

from __future__ import annotations

import argparse
import sys

from turboyolo.infer.labeling import GROUPS, LabelRequest, run_label
from turboyolo.options import add_flags, add_input_flags, read_flags, refuse_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_flags(parser, "cfg", "weights", "data", required=("weights", "data"))
    add_flags(parser, GROUPS)
    refuse_flag(parser, "--iou-thres")


def run(args: argparse.Namespace) -> int:
    report = run_label(LabelRequest(args.weights, args.data, args.cfg, **read_flags(args, GROUPS)))
    print(report.summary())
    if report.caps:  # boxes the model saw and the label files lack: they would train as background
        print(f"note: {report.caps}", file=sys.stderr)
    return 0
