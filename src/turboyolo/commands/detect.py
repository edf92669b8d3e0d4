"""``turboyolo detect``: images in; drawings, YOLO labels and COCO-format predictions out.

The options are the fields of :class:`turboyolo.infer.detect.DetectRequest`'s groups; the job is
:func:`turboyolo.infer.detect.run_detect`.
"""

from __future__ import annotations

import argparse
import sys

from turboyolo.errors import printable
from turboyolo.infer.detect import GROUPS, DetectRequest, run_detect
from turboyolo.infer.video import is_stream, is_video_file
from turboyolo.options import add_flags, add_input_flags, read_flags, refuse_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source", nargs="*", help="images, folders, globs, .txt lists, videos, stream URLs, camera index"
    )
    parser.add_argument("-i", "--images", "--source", dest="images", action="append", default=[],
                        help="same as the positional SOURCE (PyTorch-YOLOv3's -i/--images)")
    add_input_flags(parser, "cfg", "weights")
    parser.add_argument("-c", "--classes", "--names", dest="names",
                        help="class names file (.names / .txt); default: COCO's 80 for 80-class models")
    add_flags(parser, GROUPS)
    refuse_flag(parser, "--iou-thres")


def run(args: argparse.Namespace) -> int:
    request = DetectRequest(sources=list(args.source) + list(args.images), weights=args.weights, cfg=args.cfg,
                            names=args.names, **read_flags(args, GROUPS))
    report = run_detect(request)
    print(report.summary())
    for note in report.notes:
        print(f"note: {printable(note)}", file=sys.stderr)
    if report.skipped:
        listed = printable(report.out_dir / "skipped.txt")
        videos = sum(is_video_file(path) or is_stream(path) for path, _ in report.skipped)
        what = "images" if not videos else "videos" if videos == len(report.skipped) else "images and videos"
        print(f"{len(report.skipped)} unreadable {what} skipped (listed in {listed}):", file=sys.stderr)
        for path, reason in report.skipped:
            print(f"  {printable(path)}: {printable(reason)}", file=sys.stderr)
    return 0
