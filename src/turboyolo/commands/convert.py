"""``turboyolo convert``: import Pascal VOC XML or COCO JSON labels into YOLO ``.txt`` files."""

from __future__ import annotations

import argparse

from turboyolo.errors import FlagError, printable, writable_folder
from turboyolo.formats.convert import convert_labels

SHOWN = 50  # skipped entries listed one by one


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a COCO .json file, a VOC .xml file, or a folder of VOC .xml files")
    parser.add_argument("--out", required=True, help="folder for the YOLO label files and classes.names")
    parser.add_argument("--format", choices=("auto", "voc", "coco"), default="auto",
                        help="input format (auto: .json = COCO, .xml or folder = VOC)")
    parser.add_argument("--names", help="fixed class list (.names file); other classes are skipped (VOC)")
    parser.add_argument("--map", action="append", default=[], metavar="FROM=TO",
                        help="rename a class before the look-up, e.g. --map Alive=tree (VOC, repeatable)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace label files and classes.names that exist in --out")


def run(args: argparse.Namespace) -> int:
    mapping = {}
    for item in args.map:
        if "=" not in item:
            raise FlagError(f"--map {item!r}: expected FROM=TO")
        key, value = item.split("=", 1)
        mapping[key] = value
    writable_folder(args.out, "--out", create=False)
    report = convert_labels(args.source, args.out, format=args.format, names_file=args.names, mapping=mapping,
                            overwrite=args.overwrite)
    print(f"convert: {report.summary()} -> {args.out}")
    for where, reason in report.skipped[:SHOWN]:
        print(f"  skipped {printable(where)}: {printable(reason)}")
    if len(report.skipped) > SHOWN:
        print(f"  and {len(report.skipped) - SHOWN} more skipped")
    for note in report.notes:
        print(f"note: {note}")
    return 0
