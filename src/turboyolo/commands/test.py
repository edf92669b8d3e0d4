"""``turboyolo test``: evaluate Darknet weights or a checkpoint on a data split.

Prints mAP@0.5, mAP@0.5:0.95 (pycocotools, or faster-coco-eval with ``--backend``), the per-class table
and precision / recall / F1 at ``--conf-thres`` (matches at ``--iou-thres``) with the best-F1 confidence.
"""

from __future__ import annotations

import argparse

from turboyolo.cli import add_model_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser, weights_required=True)
    parser.add_argument("-d", "--data", required=True, help=".data file or data.yaml")
    parser.add_argument("--split", default="val", choices=("val", "train"), help="which split to evaluate")
    parser.add_argument("-b", "--batch-size", type=int, default=16, help="images per forward pass")
    parser.add_argument("--img-size", type=int, default=None, help="network input side (default: the cfg's)")
    parser.add_argument("--n-cpu", "--workers", dest="workers", type=int, default=None, help="loader workers")
    parser.add_argument(
        "--iou-thres",
        type=float,
        default=0.5,
        help="IoU a detection needs to count as found in precision/recall/F1 "
        "(AP is always COCO's: at 0.5 and over 0.5:0.95)",
    )
    parser.add_argument(
        "--conf-thres",
        type=float,
        default=0.01,
        help="score where precision/recall/F1 are read (AP uses every detection >= 0.001)",
    )
    parser.add_argument("--nms-thres", type=float, default=0.4, help="IoU of per-class NMS")
    parser.add_argument("--max-det", type=int, default=300, help="detections kept per image")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, a GPU index N, or auto")
    parser.add_argument("--amp", default="auto", choices=("auto", "off", "bf16", "fp16"))
    parser.add_argument("--backend", default="pycocotools", choices=("pycocotools", "faster-coco-eval"))
    parser.add_argument("--rect", action="store_true",
                        help="batches of similar aspect ratio, each letterboxed to its own rectangle")
    parser.add_argument("-v", "--verbose", action="store_true", help="accepted (the table is always printed)")


def run(args: argparse.Namespace) -> int:
    from turboyolo.train.testing import TestOptions, test_weights

    options = TestOptions(cfg=args.cfg, split=args.split, img_size=args.img_size, batch_size=args.batch_size,
                          workers=args.workers, conf_thres=args.conf_thres, iou_thres=args.iou_thres,
                          nms_thres=args.nms_thres, max_det=args.max_det, device=args.device, amp=args.amp,
                          backend=args.backend, rect=args.rect)
    result, names = test_weights(args.weights, args.data, options)
    print(result.table(names))
    print(f"mAP@0.5 {result.map50:.4f}  mAP@0.5:0.95 {result.map50_95:.4f}")
    return 0
