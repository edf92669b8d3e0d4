"""``turboyolo export --format onnx``: the network as ONNX, checked against PyTorch with onnxruntime."""

from __future__ import annotations

import argparse

from turboyolo.cli import add_model_flags, add_run_flags, img_size_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    parser.add_argument("--format", default="onnx", choices=("onnx",), help="export format")
    parser.add_argument("--img-size", type=int, nargs="+", help="input S or W H (default: the cfg's)")
    parser.add_argument("--decoded", action="store_true", help="output decoded boxes [B, N, 5 + C]")
    parser.add_argument(
        "--nms", action="store_true", help="include NMS: output detections [K, 7] (implies --decoded)"
    )
    parser.add_argument("--dynamic-batch", action="store_true", help="any batch size (default: batch 1)")
    parser.add_argument("--conf-thres", type=float, default=0.25, help="with --nms: score threshold")
    parser.add_argument("--nms-thres", "--iou-thres", type=float, default=0.45, help="with --nms: NMS IoU")
    parser.add_argument("--max-det", type=int, default=100, help="with --nms: cap per image and class")
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset (default: the exporter's)")
    parser.add_argument(
        "--exporter",
        default="dynamo",
        choices=("dynamo", "torchscript"),
        help="torch.onnx exporter: torch.export based (default) or the older TorchScript one (faster)",
    )
    parser.add_argument("--no-check", action="store_true", help="skip the onnxruntime comparison")
    parser.add_argument("-o", "--output", help="file to write (default: <run dir>/<weights stem>.onnx)")
    add_run_flags(parser, "export")


def run(args: argparse.Namespace) -> int:
    from turboyolo.infer.export import ExportOptions, export_model

    options = ExportOptions(
        img_size=img_size_flag(args.img_size),
        decoded=args.decoded or args.nms,
        nms=args.nms,
        dynamic_batch=args.dynamic_batch,
        conf_thres=args.conf_thres,
        nms_thres=args.nms_thres,
        max_det=args.max_det,
        opset=args.opset,
        exporter=args.exporter,
    )
    report = export_model(args.weights, options, cfg=args.cfg, output=args.output,
                          run_dir=(args.project, args.name, args.exist_ok), check=not args.no_check)
    print(report.summary())
    return 0
