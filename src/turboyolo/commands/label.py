"""``turboyolo label``: a model's detections as YOLO labels for images without one, plus a review list."""

from __future__ import annotations

import argparse

from turboyolo.cli import add_model_flags, add_run_flags


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
    from pathlib import Path

    from turboyolo.devices import resolve_device
    from turboyolo.errors import ConfigError
    from turboyolo.infer.labeling import LabelOptions, auto_label, split_images
    from turboyolo.infer.predict import Predictor
    from turboyolo.model.loading import build_model, resolve_model
    from turboyolo.rundir import next_run_dir

    for flag, value in (("--conf-thres", args.conf_thres), ("--nms-thres", args.nms_thres)):
        if not 0 <= value <= 1:
            raise ConfigError(f"{flag} must lie in [0, 1], got {value}")
    images = split_images(args.data, args.split)
    spec, weights = resolve_model(args.cfg, args.weights)
    img_size = (args.img_size[0], args.img_size[-1]) if args.img_size else None
    device = resolve_device(args.device)
    predictor = Predictor(build_model(spec, weights), device=device, img_size=img_size)
    opts = LabelOptions(
        data=args.data,
        split=args.split,
        out_dir=next_run_dir(args.project, args.name, args.exist_ok),
        conf_thres=args.conf_thres,
        nms_thres=args.nms_thres,
        single_label=args.single_label,
        overwrite=args.overwrite,
        batch_size=max(1, args.batch_size),
        sheet_max=args.sheet_max,
    )
    rows = auto_label(predictor, images, opts, Path(str(weights)).name)
    written = [r for r in rows if r.status == "written"]
    kept = sum(r.status == "kept" for r in rows)
    boxes = sum(len(r.scores) for r in written)
    print(
        f"{len(images)} images: {len(written)} labelled by the model ({boxes} boxes, "
        f"{sum(len(r.scores) == 0 for r in written)} with none), {kept} kept their existing labels, "
        f"{len(rows) - len(written) - kept} unreadable"
    )
    print(f"review (lowest confidence first): {opts.out_dir}/review.csv, contact_sheet.jpg")
    return 0
