"""``turboyolo export --format onnx``: the network as ONNX, checked against PyTorch with onnxruntime.

The options are the fields of :class:`turboyolo.infer.export.ExportRequest`'s groups; the job is
:func:`turboyolo.infer.export.run_export`.
"""

from __future__ import annotations

import argparse

from turboyolo.infer.export import GROUPS, ExportRequest, run_export
from turboyolo.options import add_flags, add_input_flags, read_flags, refuse_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_input_flags(parser, "cfg", "weights")
    add_flags(parser, GROUPS)
    refuse_flag(parser, "--iou-thres")


def run(args: argparse.Namespace) -> int:
    report = run_export(ExportRequest(args.weights, args.cfg, **read_flags(args, GROUPS)))
    print(report.summary())
    return 0
