"""``turboyolo convert``: import Pascal VOC XML or COCO JSON labels into YOLO ``.txt`` files."""

from __future__ import annotations

import argparse
from pathlib import Path

from turboyolo.errors import DataError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a COCO .json file, a VOC .xml file, or a folder of VOC .xml files")
    parser.add_argument("--out", required=True, help="folder for the YOLO label files and classes.names")
    parser.add_argument("--format", choices=("auto", "voc", "coco"), default="auto",
                        help="input format (auto: .json = COCO, .xml or folder = VOC)")
    parser.add_argument("--names", help="fixed class list (.names file); other classes are skipped (VOC)")
    parser.add_argument("--map", action="append", default=[], metavar="FROM=TO",
                        help="rename a class before the look-up, e.g. --map Alive=tree (VOC, repeatable)")


def run(args: argparse.Namespace) -> int:
    from turboyolo.formats.datasets import read_names
    from turboyolo.formats.labels import convert_coco, convert_voc

    source = Path(args.source)
    if not source.exists():
        raise DataError(f"{source}: not found; pass a COCO .json, a VOC .xml or a folder of them")
    kind = args.format
    if kind == "auto":
        kind = "coco" if source.suffix.lower() == ".json" else "voc"
    if kind == "coco":
        report = convert_coco(source, args.out)
    else:
        mapping = {}
        for item in args.map:
            if "=" not in item:
                raise DataError(f"--map {item!r}: expected FROM=TO")
            key, value = item.split("=", 1)
            mapping[key] = value
        files = sorted(source.glob("*.xml")) if source.is_dir() else [source]
        if not files:
            raise DataError(f"{source}: no .xml files; pass a folder of VOC annotations")
        names = read_names(args.names) if args.names else None
        report = convert_voc(files, args.out, names, mapping or None)
    print(f"convert: {report.summary()} -> {args.out}")
    for where, reason in report.skipped:
        print(f"  skipped {where}: {reason}")
    return 0
