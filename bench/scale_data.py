"""Data sets at the sizes users have, generated for the start-up and scale benchmarks.

- :func:`make_small_set`: COCO-count small JPEGs (random sizes 160-640 x 120-480 px, textured), about 8
  boxes each over 80 classes;
- :func:`make_large_set`: copies of camera photos (default: the lomiri wallpapers in
  ``/usr/share/backgrounds``, 2.5-20 MP) as separate files (each its own inode), random boxes.

Both write ``images/{train,val}``, ``labels/{train,val}``, ``train.txt``, ``valid.txt``, ``scale.names``
and ``scale.data`` under ``root`` and return the ``.data`` path. Reproducible for a seed; an existing
complete set (its marker file) is reused.

Usage::

    PYTHONPATH=src .venv/bin/python bench/scale_data.py small /work/scale/s10k --train 10000 --val 500
    PYTHONPATH=src .venv/bin/python bench/scale_data.py large /work/scale/s2 --train 2000 --val 100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import cv2
import numpy as np

NUM_CLASSES = 80
BOXES_PER_IMAGE = 8  # the mean (Poisson)
MARKER = ".scale-set.json"
DEFAULT_SOURCES = Path("/usr/share/backgrounds")
CHUNK = 500  # images per task of the process pool


def random_boxes(rng: np.random.Generator, mean: float = BOXES_PER_IMAGE) -> np.ndarray:
    """float ``[n, 5]`` YOLO rows (cls cx cy w h, relative), n ~ Poisson(mean): sizes from 2% to 60% of
    the side, any aspect, wholly inside the image."""
    n = int(rng.poisson(mean))
    w = rng.uniform(0.02, 0.6, n)
    h = np.clip(w * np.exp(rng.normal(0.0, 0.6, n)), 0.02, 0.9)
    cx = rng.uniform(w / 2, 1 - w / 2)
    cy = rng.uniform(h / 2, 1 - h / 2)
    cls = rng.integers(0, NUM_CLASSES, n)
    return np.stack([cls, cx, cy, w, h], 1) if n else np.zeros((0, 5))


def _label_text(rows: np.ndarray) -> str:
    return "".join(f"{int(r[0])} {r[1]:.6f} {r[2]:.6f} {r[3]:.6f} {r[4]:.6f}\n" for r in rows)


def _textured(rng: np.random.Generator, width: int, height: int, rows: np.ndarray) -> np.ndarray:
    """A smooth colour field plus noise, each box a filled rectangle of its class colour."""
    coarse = rng.integers(0, 256, (max(2, height // 32), max(2, width // 32), 3), dtype=np.uint8)
    image = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    noise = rng.integers(-24, 25, (height, width, 1), dtype=np.int16)
    image = np.clip(image.astype(np.int16) + noise, 0, 255).astype(np.uint8)
    for cls, cx, cy, w, h in rows:
        x0, y0 = int((cx - w / 2) * width), int((cy - h / 2) * height)
        x1, y1 = int((cx + w / 2) * width), int((cy + h / 2) * height)
        colour = tuple(int(c) for c in np.random.default_rng(int(cls)).integers(0, 256, 3))
        cv2.rectangle(image, (x0, y0), (x1, y1), colour, -1)
    return image


def _small_chunk(task: tuple[str, str, int, int, int]) -> list[str]:
    root, split, start, stop, seed = task
    paths = []
    for index in range(start, stop):
        rng = np.random.default_rng([seed, 0 if split == "train" else 1, index])
        width, height = int(rng.integers(160, 641)), int(rng.integers(120, 481))
        rows = random_boxes(rng)
        image = Path(root) / "images" / split / f"{index:07d}.jpg"
        ok, data = cv2.imencode(".jpg", _textured(rng, width, height, rows), [cv2.IMWRITE_JPEG_QUALITY, 85])
        assert ok
        image.write_bytes(data.tobytes())
        (Path(root) / "labels" / split / f"{index:07d}.txt").write_text(_label_text(rows))
        paths.append(str(image))
    return paths


def _write_set(root: Path, lists: dict[str, list[str]], info: dict) -> Path:
    names = root / "scale.names"
    names.write_text("".join(f"class{k}\n" for k in range(NUM_CLASSES)))
    files = {}
    for split, paths in lists.items():
        files[split] = root / ("train.txt" if split == "train" else "valid.txt")
        files[split].write_text("".join(f"{p}\n" for p in paths))
    data = root / "scale.data"
    data.write_text(f"classes = {NUM_CLASSES}\ntrain = {files['train']}\nvalid = {files['val']}\n"
                    f"names = {names}\n")
    (root / MARKER).write_text(json.dumps(info))
    return data


def _reuse(root: Path, info: dict) -> Path | None:
    try:
        if json.loads((root / MARKER).read_text()) == info:
            return root / "scale.data"
    except (OSError, ValueError):
        pass
    return None


def _folders(root: Path) -> None:
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)


def make_small_set(root: str | Path, n_train: int, n_val: int, seed: int = 0,
                   workers: int | None = None) -> Path:
    """``n_train`` + ``n_val`` small textured JPEGs with their labels under ``root``; the ``.data`` path."""
    root = Path(root)
    info = {"kind": "small", "train": n_train, "val": n_val, "seed": seed}
    if (done := _reuse(root, info)) is not None:
        return done
    _folders(root)
    lists: dict[str, list[str]] = {}
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        for split, count in (("train", n_train), ("val", n_val)):
            tasks = [(str(root), split, s, min(s + CHUNK, count), seed) for s in range(0, count, CHUNK)]
            lists[split] = [p for chunk in pool.map(_small_chunk, tasks) for p in chunk]
    return _write_set(root, lists, info)


def make_large_set(root: str | Path, n_train: int, n_val: int,
                   sources: Sequence[str | Path] | str | Path = DEFAULT_SOURCES, seed: int = 0) -> Path:
    """``n_train`` + ``n_val`` copies (each a file of its own, not a link) of the camera JPEGs in
    ``sources`` (a folder or a list of files), taken in turn, with random boxes; the ``.data`` path."""
    if isinstance(sources, (str, Path)):
        files = sorted(p for p in Path(sources).iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    else:
        files = [Path(p) for p in sources]
    if not files:
        raise SystemExit(f"{sources}: no JPEG files to copy (install lomiri-wallpapers or pass --sources)")
    root = Path(root)
    info = {"kind": "large", "train": n_train, "val": n_val, "seed": seed, "sources": [str(f) for f in files]}
    if (done := _reuse(root, info)) is not None:
        return done
    _folders(root)
    lists: dict[str, list[str]] = {}
    for split, count in (("train", n_train), ("val", n_val)):
        lists[split] = []
        for index in range(count):
            rng = np.random.default_rng([seed, 0 if split == "train" else 1, index])
            source = files[index % len(files)]
            image = root / "images" / split / f"{index:06d}{source.suffix.lower()}"
            shutil.copyfile(source, image)
            (root / "labels" / split / f"{index:06d}.txt").write_text(_label_text(random_boxes(rng)))
            lists[split].append(str(image))
    return _write_set(root, lists, info)


def remove_images(root: str | Path) -> None:
    """Delete the images (the bulk of the bytes) and the marker; labels and lists stay."""
    shutil.rmtree(Path(root) / "images", ignore_errors=True)
    (Path(root) / MARKER).unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("small", "large"))
    parser.add_argument("root", type=Path)
    parser.add_argument("--train", type=int, required=True)
    parser.add_argument("--val", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sources", type=Path, default=DEFAULT_SOURCES, help="large: folder of JPEGs")
    args = parser.parse_args()
    if args.kind == "small":
        print(make_small_set(args.root, args.train, args.val, args.seed))
    else:
        print(make_large_set(args.root, args.train, args.val, args.sources, args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
