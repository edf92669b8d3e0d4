"""``turboyolo anchors --data X``: fit anchors to a data set's boxes; compare them with the current ones."""

from __future__ import annotations

import argparse

from turboyolo.cli import img_size_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="a .data, data.yaml or image folder")
    parser.add_argument("--split", default="train", choices=("train", "val"), help="boxes of this split")
    parser.add_argument(
        "-n", "--num", type=int, default=None, help="anchors to fit (default: the cfg's count, else 9)"
    )
    parser.add_argument(
        "--img-size", type=int, nargs="+", help="network input S or W H (default: the cfg's, else 416)"
    )
    parser.add_argument(
        "-m", "--cfg", "--model", dest="cfg", help="compare with (and with -o, rewrite) this cfg's anchors"
    )
    parser.add_argument("--thresh", type=float, default=0.5, help="IoU a box needs with its best anchor")
    parser.add_argument("--restarts", type=int, default=10, help="k-means++ starts; the best one is kept")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", help="write --cfg with the fitted anchors to this file")


def run(args: argparse.Namespace) -> int:
    from turboyolo.train.anchors import anchor_report

    report = anchor_report(args.data, args.split, cfg=args.cfg, num=args.num,
                           img_size=img_size_flag(args.img_size), thresh=args.thresh, restarts=args.restarts,
                           seed=args.seed, output=args.output)
    print(report.summary())
    return 0
