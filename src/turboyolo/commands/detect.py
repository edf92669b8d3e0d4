"""``turboyolo detect``: images in; drawings, YOLO labels and COCO-format predictions out."""

from __future__ import annotations

import argparse

from turboyolo.cli import add_model_flags, add_run_flags, img_size_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source", nargs="*", help="images, folders, globs, .txt lists, videos, stream URLs, camera index"
    )
    parser.add_argument(
        "-i",
        "--images",
        "--source",
        dest="images",
        action="append",
        default=[],
        help="same as the positional SOURCE (PyTorch-YOLOv3's -i/--images)",
    )
    add_model_flags(parser)
    parser.add_argument(
        "-c",
        "--classes",
        "--names",
        dest="names",
        help="class names file (.names / .txt); default: COCO's 80 for 80-class models",
    )
    parser.add_argument("--conf-thres", type=float, default=0.25, help="objectness and class-score threshold")
    parser.add_argument("--nms-thres", "--iou-thres", type=float, default=0.45, help="per-class NMS IoU")
    parser.add_argument(
        "--img-size", type=int, nargs="+", help="network input: S or W H (default: the cfg's)"
    )
    parser.add_argument("--class-filter", nargs="+", help="keep only these classes (names or indices)")
    parser.add_argument(
        "--single-label", action="store_true", help="one class per box (the best), not Darknet's multi-label"
    )
    parser.add_argument("--max-det", type=int, default=None, help="cap detections per image")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N, a GPU index N, or auto")
    parser.add_argument("--half", action="store_true", help="fp16 on CUDA (bf16 on CPU)")
    parser.add_argument("-b", "--batch-size", type=int, default=8, help="images per forward pass")
    parser.add_argument("--save-txt", action="store_true", help="write YOLO labels under labels/")
    parser.add_argument("--save-conf", action="store_true", help="append the confidence to each label line")
    parser.add_argument("--no-draw", action="store_true", help="do not write drawn images")
    parser.add_argument("--coco-gt", help="COCO ground-truth json: take image_id from it by file_name")
    parser.add_argument(
        "--coco-ids", action="store_true", help="category_id as COCO's 91 ids (80-class models)"
    )
    parser.add_argument(
        "--fast-decode",
        action="store_true",
        help="decode large JPEGs at reduced size (faster; moves scores slightly)",
    )
    parser.add_argument(
        "--tile",
        type=int,
        default=None,
        metavar="SIZE",
        help="detect large images on overlapping SIZE x SIZE tiles at full resolution, merged",
    )
    parser.add_argument("--overlap", type=float, default=0.2, help="with --tile: share of a tile overlapped")
    parser.add_argument(
        "--tile-whole", action="store_true", help="with --tile: also detect on the whole (downscaled) image"
    )
    parser.add_argument(
        "--vid-stride", type=int, default=1, help="videos: detect on every N-th frame (output video at fps/N)"
    )
    parser.add_argument("--n-cpu", "--workers", dest="workers", type=int, default=4, help="decode threads")
    add_run_flags(parser, "detect")


def run(args: argparse.Namespace) -> int:
    from turboyolo.infer.detect import DetectOptions, run_detection

    options = DetectOptions(
        sources=list(args.source) + list(args.images), cfg=args.cfg, weights=args.weights, names=args.names,
        conf_thres=args.conf_thres, nms_thres=args.nms_thres, img_size=img_size_flag(args.img_size),
        class_filter=args.class_filter, single_label=args.single_label, max_det=args.max_det,
        device=args.device, half=args.half, batch_size=args.batch_size,
        save_txt=args.save_txt or args.save_conf, save_conf=args.save_conf, draw=not args.no_draw,
        coco_gt=args.coco_gt, coco_ids=args.coco_ids, fast_decode=args.fast_decode,
        workers=max(1, args.workers), tile=args.tile, overlap=args.overlap, tile_whole=args.tile_whole,
        vid_stride=args.vid_stride, run_dir=(args.project, args.name, args.exist_ok))
    return run_detection(options)
