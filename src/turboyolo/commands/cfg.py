"""``turboyolo cfg ARCH --num-classes N``: write a Darknet .cfg generated from the architecture."""

from __future__ import annotations

import argparse
from pathlib import Path

from turboyolo.errors import ConfigError
from turboyolo.formats.darknet_cfg import parse_anchor_list, write_cfg
from turboyolo.model.zoo import ARCHITECTURES, make_spec
from turboyolo.rundir import check_outputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("architecture", choices=ARCHITECTURES)
    parser.add_argument("-n", "--num-classes", type=int, required=True, help="number of classes")
    canonical = "default: the canonical cfg's (yolov3 family: 416, 64, 16, 0.001)"
    parser.add_argument("--width", type=int, help=f"network input width ({canonical})")
    parser.add_argument("--height", type=int, help="network input height")
    parser.add_argument("--batch", type=int, help="images per iteration ([net] batch)")
    parser.add_argument("--subdivisions", type=int, help="mini-batches per iteration")
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--anchors", help="w,h pairs: '10,13, 16,30, ...' (e.g. from `turboyolo anchors`)")
    parser.add_argument("-o", "--output", help="file to write (default: <architecture>-<N>c.cfg)")
    parser.add_argument("--overwrite", action="store_true", help="replace the output file if it exists")


def run(args: argparse.Namespace) -> int:
    anchors = parse_anchor_list(args.anchors) if args.anchors else None
    spec = make_spec(
        args.architecture,
        args.num_classes,
        args.width,
        args.height,
        args.batch,
        args.subdivisions,
        args.learning_rate,
        anchors,
    )
    if spec.net.batch % spec.net.subdivisions:
        raise ConfigError(
            f"batch {spec.net.batch} is not divisible by subdivisions {spec.net.subdivisions} "
            "(--batch / --subdivisions)"
        )
    out = Path(args.output or f"{args.architecture}-{args.num_classes}c.cfg")
    check_outputs({"-o/--output": out}, {}, overwrite=args.overwrite)  # the output rule (rundir.py)
    write_cfg(spec, out)
    print(out)
    return 0
