"""``turboyolo cfg ARCH --num-classes N``: write a Darknet .cfg generated from the architecture."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from turboyolo.errors import ConfigError
from turboyolo.formats.darknet_cfg import parse_anchor_list, write_cfg
from turboyolo.model.zoo import ARCHITECTURES, make_spec
from turboyolo.options import add_flags, option, output_file_option, overwrite_option, read_flags
from turboyolo.rundir import check_outputs

CANONICAL = "default: the canonical cfg's (yolov3 family: 416, 64, 16, 0.001)"


@dataclass
class CfgArgs:
    """The network's classes, input and [net] values, and the file written."""

    num_classes: int = option(None, "number of classes", "-n", "--num-classes", type=int, required=True)
    width: int | None = option(None, f"network input width ({CANONICAL})", type=int)
    height: int | None = option(None, "network input height", type=int)
    batch: int | None = option(None, "images per iteration ([net] batch)", type=int)
    subdivisions: int | None = option(None, "mini-batches per iteration", type=int)
    learning_rate: float | None = option(None, "[net] learning_rate", type=float)
    anchors: str | None = option(None, "w,h pairs: '10,13, 16,30, ...' (e.g. from `turboyolo anchors`)")
    output: str | None = output_file_option("<architecture>-<N>c.cfg")
    overwrite: bool = overwrite_option()


GROUPS = {"cfg": CfgArgs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("architecture", choices=ARCHITECTURES)
    add_flags(parser, GROUPS)


def run(args: argparse.Namespace) -> int:
    flags = read_flags(args, GROUPS)["cfg"]
    anchors = parse_anchor_list(flags.anchors) if flags.anchors else None
    spec = make_spec(args.architecture, flags.num_classes, flags.width, flags.height, flags.batch,
                     flags.subdivisions, flags.learning_rate, anchors)
    if spec.net.batch % spec.net.subdivisions:
        raise ConfigError(
            f"batch {spec.net.batch} is not divisible by subdivisions {spec.net.subdivisions} "
            "(--batch / --subdivisions)"
        )
    out = Path(flags.output or f"{args.architecture}-{flags.num_classes}c.cfg")
    check_outputs({"-o/--output": out}, {}, overwrite=flags.overwrite)  # the output rule (rundir.py)
    write_cfg(spec, out)
    print(out)
    return 0
