"""A third kind of data for the 250-iteration defaults bench: large objects, a few per photo.

trees (crowns of 16-70 px, ~20 per tile) and BCCD (cells of 20-200 px, many per photo) both hold small
or medium objects in crowds. This set is the other end, drawn deterministically: 3 classes (ellipse,
rectangle, triangle), up to 5 objects per picture of 15-65% of its shorter side (one that would hide
more than 20% of another is left out), in random colours with texture, over smooth random
backgrounds, pictures of 320-640 px of varied aspect, JPEG quality 90.
It is synthetic: it checks that the defaults do not depend on small crowded objects, nothing more.

Usage::

    .venv/bin/python bench/shapes.py --out /work/data/shapes
    .venv/bin/python bench/defaults_250.py --data shapes --variant defaults   # builds it in the cache
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np

from turboyolo.formats.datasets import write_darknet_data

NAMES = ("ellipse", "rectangle", "triangle")


def _background(rng: np.random.Generator, h: int, w: int) -> np.ndarray:
    small = rng.uniform(0, 255, (4 + h // 80, 4 + w // 80, 3)).astype(np.float32)
    base = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    return base + rng.normal(0, 12, (h, w, 3)).astype(np.float32)


def _covered(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether boxes a and b overlap by more than 20% of the smaller one."""
    iw, ih = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    smaller = min((a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1]))
    return iw > 0 and ih > 0 and iw * ih > 0.2 * smaller


def _picture(rng: np.random.Generator) -> tuple[np.ndarray, list[tuple[int, float, float, float, float]]]:
    h, w = int(rng.integers(320, 641)), int(rng.integers(320, 641))
    image = _background(rng, h, w)
    rows, boxes = [], []
    for _ in range(int(rng.integers(1, 6))):
        cls = int(rng.integers(0, 3))
        side = min(h, w)
        bw, bh = (int(side * rng.uniform(0.15, 0.65)) for _ in range(2))
        x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
        if any(_covered((x0, y0, x0 + bw, y0 + bh), box) for box in boxes):
            continue  # one object hiding much of another would make a box nobody could see
        boxes.append((x0, y0, x0 + bw, y0 + bh))
        mask = np.zeros((h, w), np.uint8)
        if cls == 0:
            cv2.ellipse(mask, (x0 + bw // 2, y0 + bh // 2), (bw // 2, bh // 2), 0, 0, 360, 255, -1)
        elif cls == 1:
            cv2.rectangle(mask, (x0, y0), (x0 + bw - 1, y0 + bh - 1), 255, -1)
        else:
            apex = x0 + int(rng.integers(0, bw))
            cv2.fillPoly(mask, [np.array([[apex, y0], [x0, y0 + bh - 1], [x0 + bw - 1, y0 + bh - 1]])], 255)
        colour = rng.uniform(0, 255, 3).astype(np.float32)
        texture = rng.normal(0, 20, (h, w, 3)).astype(np.float32)
        inside = mask > 0
        image[inside] = colour + texture[inside]
        ys, xs = np.nonzero(mask)
        x1, x2, y1, y2 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
        rows.append((cls, (x1 + x2) / 2 / w, (y1 + y2) / 2 / h, (x2 - x1) / w, (y2 - y1) / h))
    return np.clip(image, 0, 255).astype(np.uint8), rows


def build_shapes(out: Path, train: int = 200, val: int = 60, seed: int = 0) -> Path:
    """The set under ``out`` (images/, labels/ per split) and its Darknet ``shapes.data`` (list files,
    names; PyTorch-YOLOv3 reads only this kind); returns that file."""
    rng = np.random.default_rng(seed)
    for split, count in (("train", train), ("val", val)):
        (out / split / "images").mkdir(parents=True, exist_ok=True)
        (out / split / "labels").mkdir(parents=True, exist_ok=True)
        for i in range(count):
            image, rows = _picture(rng)
            cv2.imwrite(str(out / split / "images" / f"{i:04d}.jpg"), image, [cv2.IMWRITE_JPEG_QUALITY, 90])
            text = "".join(f"{c} {x:.6f} {y:.6f} {bw:.6f} {bh:.6f}\n" for c, x, y, bw, bh in rows)
            (out / split / "labels" / f"{i:04d}.txt").write_text(text)
    return write_index(out)


def write_index(out: Path) -> Path:
    """``shapes.data``, its list files and ``shapes.names`` for the pictures under ``out``."""
    for split in ("train", "val"):
        images = sorted((out / split / "images").glob("*.jpg"))
        (out / f"{split}.txt").write_text("".join(f"{p}\n" for p in images))
    (out / "shapes.names").write_text("".join(f"{n}\n" for n in NAMES))
    return write_darknet_data(out / "shapes.data", len(NAMES), out / "train.txt", out / "val.txt",
                              out / "shapes.names")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/work/data/shapes"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(build_shapes(args.out, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
