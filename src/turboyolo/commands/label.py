"""``turboyolo label``: a model's detections as YOLO labels for images without one, plus a review list."""

from __future__ import annotations

import argparse

from turboyolo.cli import add_model_flags, add_run_flags, img_size_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser, weights_required=True)
    parser.add_argument("--data", required=True, help="a .data, data.yaml or image folder")
    parser.add_argument(
        "--split",
        default="unlabeled",
        choices=("unlabeled", "train", "val"),
        help="images to label (unlabeled: the data file's `unlabeled` entry, or the folder)",
    )
    parser.add_argument("--conf-thres", type=float, default=0.25, help="keep detections above this score")
    parser.add_argument("--nms-thres", "--iou-thres", type=float, default=0.45, help="per-class NMS IoU")
    parser.add_argument("--single-label", action="store_true", help="one class per box (the best)")
    parser.add_argument("--overwrite", action="store_true", help="also replace existing (human) label files")
    parser.add_argument("--img-size", type=int, nargs="+", help="network input S or W H (default: the cfg's)")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda when available)")
    parser.add_argument("-b", "--batch-size", type=int, default=8)
    parser.add_argument("--sheet-max", type=int, default=64, help="images on the contact sheet")
    add_run_flags(parser, "label")


def run(args: argparse.Namespace) -> int:
    from turboyolo.infer.labeling import LabelOptions, label_images

    options = LabelOptions(
        split=args.split, conf_thres=args.conf_thres, nms_thres=args.nms_thres,
        single_label=args.single_label, overwrite=args.overwrite, img_size=img_size_flag(args.img_size),
        device=args.device, batch_size=args.batch_size, sheet_max=args.sheet_max,
        run_dir=(args.project, args.name, args.exist_ok),
    )
    report = label_images(args.weights, args.data, options, cfg=args.cfg)
    print(report.summary())
    return 0
