"""``turboyolo convert``: import Pascal VOC XML or COCO JSON labels into YOLO ``.txt`` files."""

from __future__ import annotations

import argparse

from turboyolo.errors import FlagError, writable_folder
from turboyolo.formats.labels import convert_labels


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a COCO .json file, a VOC .xml file, or a folder of VOC .xml files")
    parser.add_argument("--out", required=True, help="folder for the YOLO label files and classes.names")
    parser.add_argument("--format", choices=("auto", "voc", "coco"), default="auto",
                        help="input format (auto: .json = COCO, .xml or folder = VOC)")
    parser.add_argument("--names", help="fixed class list (.names file); other classes are skipped (VOC)")
    parser.add_argument("--map", action="append", default=[], metavar="FROM=TO",
                        help="rename a class before the look-up, e.g. --map Alive=tree (VOC, repeatable)")


def run(args: argparse.Namespace) -> int:
    mapping = {}
    for item in args.map:
        if "=" not in item:
            raise FlagError(f"--map {item!r}: expected FROM=TO")
        key, value = item.split("=", 1)
        mapping[key] = value
    writable_folder(args.out, "--out", create=False)
    report = convert_labels(args.source, args.out, format=args.format, names_file=args.names, mapping=mapping)
    print(f"convert: {report.summary()} -> {args.out}")
    for where, reason in report.skipped:
        print(f"  skipped {where}: {reason}")
    return 0
