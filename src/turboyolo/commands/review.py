"""``turboyolo review DATA``: check and correct labels in the browser, model-made ones first.

The options are :class:`turboyolo.review.server.ReviewArgs`' fields; ``--weights`` (and ``--cfg``) show
a model's boxes beside the labels. The server is :func:`turboyolo.review.server.serve`.
"""

from __future__ import annotations

import argparse

from turboyolo.cli import add_model_flags
from turboyolo.options import add_flags, device_option, read_flags
from turboyolo.review.server import ReviewArgs, open_review, serve

GROUPS = {"review": ReviewArgs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("data", help="a data.yaml, .data, image folder, or a `turboyolo label` run directory")
    add_model_flags(parser)
    parser.add_argument("--device", default="auto", help=device_option().metadata["help"])
    add_flags(parser, GROUPS)


def run(args: argparse.Namespace) -> int:
    review = read_flags(args, GROUPS)["review"]
    predict = None
    if args.weights:
        from turboyolo.infer.predict import Predictor
        from turboyolo.options import NMS_THRES
        from turboyolo.review.images import predictor_rows

        predictor = Predictor.load(args.weights, args.cfg, device=args.device)
        predict = predictor_rows(predictor, review.conf_thres, NMS_THRES)
    serve(open_review(args.data, review, predict))
    return 0
