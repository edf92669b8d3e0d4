"""``turboyolo anchors --data X``: fit anchors to a data set's boxes; compare them with the current ones."""

from __future__ import annotations

import argparse
from pathlib import Path


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
    import numpy as np

    from turboyolo.data.anchors import anchor_fit, kmeans_anchors, letterbox_box_sizes
    from turboyolo.data.scan import scan_dataset
    from turboyolo.errors import ConfigError, DataError
    from turboyolo.formats.darknet_cfg import YoloSpec, parse_cfg, write_cfg
    from turboyolo.model.zoo import COCO_ANCHORS, TINY_ANCHORS, with_anchors

    spec = parse_cfg(args.cfg) if args.cfg else None
    current, current_name = None, ""
    if spec is not None:
        yolo = next((layer for layer in spec.layers if isinstance(layer, YoloSpec)), None)
        if yolo is None:
            raise ConfigError(f"{args.cfg}: no [yolo] layer, so no anchors to compare with")
        current, current_name = yolo.anchors, Path(args.cfg).name
    num = args.num or (len(current) if current else 9)
    if current is None and num in (6, 9):
        current = TINY_ANCHORS if num == 6 else COCO_ANCHORS
        current_name = "yolov3-tiny COCO" if num == 6 else "yolov3 COCO"
    if num < 1:
        raise ConfigError(f"--num must be >= 1, got {num}")
    if args.output and spec is None:
        raise ConfigError("-o/--output rewrites a cfg: pass it with --cfg (or use `turboyolo cfg --anchors`)")
    if args.output and current is not None and len(current) != num:
        raise ConfigError(f"--num {num} but {args.cfg} has {len(current)} anchors; drop --num or -o")
    if args.img_size:
        if len(args.img_size) not in (1, 2):
            raise ConfigError("--img-size takes one size or a width and a height")
        img_size = (args.img_size[0], args.img_size[-1])
    else:
        img_size = (spec.net.width, spec.net.height) if spec is not None else (416, 416)
    if not 0 < args.thresh <= 1:
        raise ConfigError(f"--thresh must lie in (0, 1], got {args.thresh}")

    scan = scan_dataset(args.data, args.split)
    samples = [s for s in scan.samples if len(s.labels)]
    boxes = letterbox_box_sizes([s.labels for s in samples], [s.hw for s in samples], img_size)
    print(scan.console_text())
    if len(boxes) == 0:
        raise DataError(f"{args.data}: the {args.split} split has no boxes to fit anchors to")
    try:
        fitted = kmeans_anchors(boxes, num, restarts=args.restarts, seed=args.seed, thresh=args.thresh)
    except ValueError as err:
        raise DataError(f"{args.data}: {err}; lower --num") from None
    w, h = boxes[:, 0], boxes[:, 1]
    print(
        f"{len(boxes)} boxes at {img_size[0]}x{img_size[1]} letterbox: width {w.min():.0f}-{w.max():.0f} px "
        f"(median {np.median(w):.0f}), height {h.min():.0f}-{h.max():.0f} px (median {np.median(h):.0f})"
    )
    rows = [("fitted (k-means, 1 - IoU)", fitted)]
    if current is not None:
        rows.insert(0, (f"current ({current_name})", anchor_fit(boxes, current, args.thresh)))
    width = max(len(name) for name, _ in rows)
    print(f"{'anchors':<{width}}  mean IoU  recall@{args.thresh:g}  used")
    for name, fit in rows:
        print(f"{name:<{width}}  {fit.mean_iou:8.3f}  {fit.recall:10.1%}  {fit.used}/{len(fit.anchors)}")
    for name, fit in rows:
        print(f"{name.split(' ')[0]}: {fit.text()}")
    if args.output:
        out = write_cfg(with_anchors(spec, tuple(map(tuple, fitted.anchors))), args.output)
        print(f"wrote {out}")
    else:
        print(f'use them: turboyolo cfg ARCH --num-classes N --anchors "{fitted.text()}"')
    return 0
