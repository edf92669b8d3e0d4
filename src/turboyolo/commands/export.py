"""``turboyolo export --format onnx``: the network as ONNX, checked against PyTorch with onnxruntime."""

from __future__ import annotations

import argparse
from pathlib import Path

from turboyolo.cli import add_model_flags, add_run_flags


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
    import numpy as np

    from turboyolo.errors import ConfigError
    from turboyolo.infer.export import ExportOptions, compare_with_torch, export_onnx
    from turboyolo.model.loading import build_model, resolve_model
    from turboyolo.rundir import next_run_dir

    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ConfigError("--format onnx needs the onnx extra: pip install 'turboyolo[onnx]'") from None
    spec, weights = resolve_model(args.cfg, args.weights)
    model = build_model(spec, weights)
    if args.img_size and len(args.img_size) not in (1, 2):
        raise ConfigError("--img-size takes one size or a width and a height")
    img_size = (args.img_size[0], args.img_size[-1]) if args.img_size else (spec.net.width, spec.net.height)
    options = ExportOptions(
        img_size=img_size,
        decoded=args.decoded or args.nms,
        nms=args.nms,
        dynamic_batch=args.dynamic_batch,
        conf_thres=args.conf_thres,
        nms_thres=args.nms_thres,
        max_det=args.max_det,
        opset=args.opset,
        exporter=args.exporter,
    )
    if args.output:
        out = Path(args.output)
    else:
        out = next_run_dir(args.project, args.name, args.exist_ok) / f"{Path(str(weights)).stem}.onnx"
    path = export_onnx(model, out, options)
    size_mb = path.stat().st_size / 1e6
    shape = f"[B, 3, {img_size[1]}, {img_size[0]}]"
    print(f"{path} ({size_mb:.1f} MB, {options.mode} outputs, input images {shape})")
    if not args.no_check:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            print("onnxruntime not installed: comparison skipped (pip install 'turboyolo[onnx]')")
            return 0
        batch = 2 if args.dynamic_batch else 1
        images = np.random.default_rng(0).random((batch, 3, img_size[1], img_size[0]), dtype=np.float32)
        diff = compare_with_torch(model, path, options, images)
        print(f"onnxruntime (CPU) vs PyTorch on {batch} random image(s): max abs difference {diff:.2g}")
    return 0
