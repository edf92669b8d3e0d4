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
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--amp", default="auto", choices=("auto", "off", "bf16", "fp16"))
    parser.add_argument("--backend", default="pycocotools", choices=("pycocotools", "faster-coco-eval"))
    parser.add_argument("-v", "--verbose", action="store_true", help="accepted (the table is always printed)")


def run(args: argparse.Namespace) -> int:
    from turboyolo.commands.train import _device, load_pretrained
    from turboyolo.data.loader import build_loader
    from turboyolo.data.scan import scan_dataset
    from turboyolo.errors import ConfigError
    from turboyolo.formats.darknet_cfg import parse_cfg, parse_cfg_text
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.loading import is_checkpoint, read_checkpoint
    from turboyolo.train.engine import amp_dtype_for, evaluate

    state = read_checkpoint(args.weights) if is_checkpoint(args.weights) else None
    if args.cfg:
        spec = parse_cfg(args.cfg)
    elif state is not None:
        spec = parse_cfg_text(state["cfg_text"], f"{args.weights}:cfg_text")
    else:
        raise ConfigError("--model/--cfg is required with Darknet .weights (a checkpoint carries its cfg)")
    size = args.img_size
    if not size and state is not None:  # evaluate where the run evaluated
        size = (state.get("config") or {}).get("val_img_size")
        if size:
            print(f"input {size} x {size}: the run's --val-img-size (--img-size overrides)")
    if size:
        spec = spec.with_net(width=size, height=size)
    model = Darknet(spec)
    for line in load_pretrained(model, args.weights, checkpoint=state):
        print(line)
    device = _device(args.device)
    model.to(device)
    scan = scan_dataset(args.data, args.split)
    names = scan.names or [str(k) for k in range(model.num_classes)]
    loader = build_loader(
        scan.samples,
        img_size=spec.net.width,
        batch_size=args.batch_size,
        augment=None,
        workers=args.workers,
        shuffle=False,
    )
    result, _ = evaluate(
        model,
        loader,
        device=device,
        num_classes=model.num_classes,
        conf_thres=args.conf_thres,
        iou_thres=args.iou_thres,
        nms_thres=args.nms_thres,
        max_det=args.max_det,
        amp_dtype=amp_dtype_for(device, args.amp),
        backend=args.backend,
    )
    print(result.table(names))
    print(f"mAP@0.5 {result.map50:.4f}  mAP@0.5:0.95 {result.map50_95:.4f}")
    return 0
