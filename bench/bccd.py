"""Lay BCCD (../shared/data/bccd: 364 microscope photos, 3 classes, VOC XML) out as a YOLO data set.

The official split (BCCD/ImageSets/Main/train.txt and val.txt: 205 and 87 photos) becomes
``images/{train,val}`` + ``labels/{train,val}`` (labels by ``turboyolo convert``) and ``bccd.data``.
BCCD is a benchmark set of this repository's machines, not shipped to users.

Usage::

    .venv/bin/python bench/bccd.py [--source ../shared/data/bccd] [--out /work/data/bccd]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from turboyolo.formats.datasets import write_darknet_data

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "bccd"


def build_bccd(source: Path, out: Path) -> Path:
    """The ``bccd.data`` file of the laid-out set (built once; an existing complete one is reused)."""
    data_file = out / "bccd.data"
    if data_file.exists():
        return data_file
    root = source / "BCCD"
    labels_all = out / "labels_all"
    subprocess.run([sys.executable, "-m", "turboyolo", "convert", str(root / "Annotations"), "--out",
                    str(labels_all)], check=True)
    lists = {}
    for split in ("train", "val"):
        ids = (root / "ImageSets" / "Main" / f"{split}.txt").read_text().split()
        (out / "images" / split).mkdir(parents=True, exist_ok=True)
        (out / "labels" / split).mkdir(parents=True, exist_ok=True)
        paths = []
        for name in ids:
            image = out / "images" / split / f"{name}.jpg"
            shutil.copyfile(root / "JPEGImages" / f"{name}.jpg", image)
            shutil.copyfile(labels_all / f"{name}.txt", out / "labels" / split / f"{name}.txt")
            paths.append(str(image))
        lists[split] = out / f"{split}.txt"
        lists[split].write_text("\n".join(paths) + "\n")
    shutil.copyfile(labels_all / "classes.names", out / "bccd.names")
    shutil.rmtree(labels_all)
    return write_darknet_data(data_file, 3, lists["train"], lists["val"], out / "bccd.names")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE)
    parser.add_argument("--out", type=Path, default=Path("/work/data/bccd"))
    args = parser.parse_args()
    print(build_bccd(args.source, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
