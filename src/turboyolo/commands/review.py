"""``turboyolo review DATA``: check and correct labels in the browser, model-made ones first.

The options are :class:`turboyolo.review.server.ReviewArgs`' fields; ``--weights`` (and ``--cfg``) show
a model's boxes beside the labels. The server is :func:`turboyolo.review.server.serve`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from turboyolo.options import add_flags, add_input_flags, device_option, read_flags
from turboyolo.review.server import ReviewArgs, open_review, serve


@dataclass
class ModelDeviceArgs:
    """Where the model of ``--weights`` runs."""

    device: str = device_option()


GROUPS = {"review": ReviewArgs, "model_device": ModelDeviceArgs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data", help="a data.yaml, .data, image folder, or a `turboyolo label` run directory")
    add_input_flags(parser, "cfg", "weights")
    add_flags(parser, GROUPS)


def run(args: argparse.Namespace) -> int:
    flags = read_flags(args, GROUPS)
    review = flags["review"]
    predict = None
    if args.weights:
        from turboyolo.infer.predict import Predictor
        from turboyolo.options import NMS_THRES
        from turboyolo.review.images import predictor_rows

        predictor = Predictor.load(args.weights, args.cfg, device=flags["model_device"].device)
        predict = predictor_rows(predictor, review.conf_thres, NMS_THRES)
    serve(open_review(args.data, review, predict))
    return 0
