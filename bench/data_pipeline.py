"""Side-by-side data-pipeline benchmark on large real photos: turboyolo vs PyTorch-YOLOv3.

Photos: Debian's ``lomiri-wallpapers-16.04`` and ``-20.04`` (6-20 MP JPEGs, many progressive),
fetched with ``apt-get download`` + ``dpkg-deb -x`` into a temporary folder unless ``--photos`` is given.
Each photo gets 3 synthetic boxes (deterministic), so the box code runs too.

Everything is measured in one run, single core (``torch.set_num_threads(1)``, ``cv2.setNumThreads(1)``,
in-process, no workers), at 416 px with ``turboyolo train``'s default augmentation (mosaic 1, see
:func:`turboyolo.doctor.throughput.train_default_augment`) and, named so, with mosaic off, as CPU time of
the measuring process (so other load on a shared machine does not count against a pipeline):

- decode floor: turboyolo's reduced-size decode + resize to 416 alone (and OpenCV's IMREAD_REDUCED for
  reference);
- turboyolo cold: original files -> decode (each original once per epoch: mosaic partners come from the
  images in hand) -> mosaic or one-warp augmentation + HSV -> collate (uint8);
- turboyolo warm: the prepared cache (built beforehand, not timed) -> augmentation -> collate;
- hand-off: main-process CPU per image with one worker (warm path);
- PyTorch-YOLOv3 (PyPI ``pytorchyolo==1.8.0`` in its own venv, ``--pyyolo-python``): its ``ListDataset``
  with ``AUGMENTATION_TRANSFORMS`` and ``collate_fn`` at 416, unmodified; and the seed's resize-first fix
  (the same pipeline with every image resized to a 1200 px longer side right after ``Image.open``).

Usage: ``.venv/bin/python bench/data_pipeline.py [--photos DIR] [--pyyolo-python PY]``
(default PY: /tmp/pyyolo-venv/bin/python).
Prints a Markdown table for docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
import torch

from turboyolo.data.augment import AugmentParams
from turboyolo.data.cache import prepare_cache
from turboyolo.data.decode import load_image
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import scan_dataset
from turboyolo.doctor.throughput import cpu_model, measure_loader, train_default_augment
from turboyolo.formats.datasets import write_darknet_data
from turboyolo.formats.labels import write_yolo_labels

PACKAGES = ("lomiri-wallpapers-16.04", "lomiri-wallpapers-20.04")
IMG_SIZE = 416
BATCH = 16
PYYOLO_ROW = "PyTorch-YOLOv3 1.8.0 (ListDataset + AUGMENTATION_TRANSFORMS)"
SEED_FIX_ROW = "seed's fix: same, resized to 1200 px after Image.open"

PYYOLO_RUNNER = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
from PIL import Image
import pytorchyolo.utils.datasets as datasets
from pytorchyolo.utils.augmentations import AUGMENTATION_TRANSFORMS

list_path, img_size, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
resize_first = sys.argv[4] == "1"
if resize_first:  # the seed's fix: resize right after loading, before any augmentation
    class _ResizeFirst:
        @staticmethod
        def open(path):
            img = Image.open(path)
            scale = 1200 / max(img.size)
            if scale < 1:
                img = img.convert("RGB").resize((round(img.size[0] * scale), round(img.size[1] * scale)),
                                                Image.BILINEAR)
            return img
    datasets.Image = _ResizeFirst
dataset = datasets.ListDataset(list_path, img_size=img_size, multiscale=False,
                               transform=AUGMENTATION_TRANSFORMS)
n = len(dataset)
dataset.collate_fn([dataset[0]])  # warm-up (imports, first allocation)
start_cpu, start_wall = time.process_time(), time.perf_counter()
batch, count = [], 0
for p in range(passes):
    for i in range(n):
        batch.append(dataset[i])
        count += 1
        if len(batch) == 16:
            dataset.collate_fn(batch)
            batch = []
if batch:
    dataset.collate_fn(batch)
print(json.dumps({"images": count, "cpu_s": time.process_time() - start_cpu,
                  "wall_s": time.perf_counter() - start_wall}))
"""


def fetch_photos(dest: Path) -> Path:
    """Download the wallpaper packages and unpack their JPEGs into ``dest`` (not into the repository)."""
    folder = dest / "usr" / "share" / "backgrounds"
    if folder.is_dir() and any(folder.glob("*.jpg")):
        return folder
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", *PACKAGES], cwd=dest, check=True, capture_output=True)
    for deb in sorted(dest.glob("*.deb")):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    return folder


def make_dataset(photos: list[Path], root: Path) -> Path:
    """``root/images`` (symlinks), ``root/labels`` (3 deterministic boxes each), ``root/train.txt``."""
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True)
    lines = []
    for photo in photos:
        link = root / "images" / photo.name
        link.symlink_to(photo)
        wh = rng.uniform(0.05, 0.3, size=(3, 2))
        cxy = rng.uniform(0.2, 0.8, size=(3, 2))
        write_yolo_labels(root / "labels" / (photo.stem + ".txt"), np.hstack([np.zeros((3, 1)), cxy, wh]))
        lines.append(str(link))
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    (root / "bench.names").write_text("thing\n")
    write_darknet_data(root / "bench.data", 1, root / "train.txt", root / "train.txt", root / "bench.names")
    return root / "bench.data"


def cpu_per_image(fn, items, passes: int) -> float:
    fn(items[0])  # warm-up
    start = time.process_time()
    for _ in range(passes):
        for item in items:
            fn(item)
    return (time.process_time() - start) / (passes * len(items))


def cv2_reduced(path: Path, target: int = IMG_SIZE) -> np.ndarray:
    """OpenCV's reduced decode (1/2, 1/4, 1/8 by the header size) + INTER_AREA, for reference."""
    from PIL import Image

    with Image.open(path) as img:
        w, h = img.size
    factor = 1
    while factor < 8 and max(w, h) / (factor * 2) >= target:
        factor *= 2
    flag = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
            8: cv2.IMREAD_REDUCED_COLOR_8}[factor]
    image = cv2.imread(str(path), flag)
    scale = target / max(image.shape[:2])
    return cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)),
                      interpolation=cv2.INTER_AREA)


def loader_cpu_per_image(samples, cache, passes: int, mosaic: bool = True) -> float:
    augment = train_default_augment() if mosaic else AugmentParams.from_net()
    loader = build_loader(samples, img_size=IMG_SIZE, batch_size=BATCH, augment=augment,
                          workers=0, shuffle=True, cache=cache)
    m = measure_loader(loader, passes * len(samples))
    return m.cpu_s / m.images


def run_pyyolo(python: str, list_path: Path, passes: int, resize_first: bool) -> dict:
    proc = subprocess.run([python, "-c", PYYOLO_RUNNER, str(list_path), str(IMG_SIZE), str(passes),
                           "1" if resize_first else "0"], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    if proc.returncode != 0:
        raise SystemExit(f"pytorchyolo runner failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", help="folder of large JPEGs (default: fetch the lomiri wallpapers)")
    parser.add_argument("--pyyolo-python", default="/tmp/pyyolo-venv/bin/python",
                        help="python of a venv with pytorchyolo==1.8.0 (skip PyTorch-YOLOv3 if missing)")
    parser.add_argument("--passes", type=int, default=3, help="passes over the photos for turboyolo rows")
    parser.add_argument("--pyyolo-passes", type=int, default=1, help="passes for the PyTorch-YOLOv3 rows")
    args = parser.parse_args()

    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    default = Path(tempfile.gettempdir()) / "turboyolo-photos"
    folder = Path(args.photos) if args.photos else fetch_photos(default)
    photos = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    for photo in photos:  # page cache: every pipeline reads from memory
        photo.read_bytes()
    sizes = []
    for photo in photos:
        from PIL import Image

        with Image.open(photo) as img:
            sizes.append((img.size[0] * img.size[1] / 1e6, "progressive" in img.info))
    mp = np.array([s[0] for s in sizes])
    mb = np.array([p.stat().st_size for p in photos]) / 1e6
    print(f"# machine: {cpu_model()}, {os.cpu_count()} cores, {platform.python_version()}, "
          f"torch {torch.__version__}, OpenCV {cv2.__version__}")
    print(f"# photos: {len(photos)} from {folder}, {mp.min():.1f}-{mp.max():.1f} MP "
          f"(median {np.median(mp):.1f}), "
          f"{mb.min():.1f}-{mb.max():.1f} MB, {sum(s[1] for s in sizes)} progressive")

    with tempfile.TemporaryDirectory() as tmp:
        data = make_dataset(photos, Path(tmp) / "ds")
        samples = scan_dataset(data, "train", use_cache=False).samples
        assert len(samples) == len(photos)
        rows = {}
        rows["decode floor (reduced decode + resize, turboyolo)"] = cpu_per_image(
            lambda p: load_image(p, IMG_SIZE), photos, args.passes)
        rows["decode floor, OpenCV IMREAD_REDUCED + INTER_AREA (reference)"] = cpu_per_image(
            cv2_reduced, photos, args.passes)
        rows["turboyolo cold (original files), train's default: mosaic 1"] = loader_cpu_per_image(
            samples, None, args.passes)
        rows["turboyolo cold (original files), mosaic 0"] = loader_cpu_per_image(
            samples, None, args.passes, mosaic=False)
        cache = prepare_cache(samples, IMG_SIZE, Path(tmp) / "prepared", workers=1, log=lambda *_: None)
        rows["turboyolo warm (prepared cache), train's default: mosaic 1"] = loader_cpu_per_image(
            samples, cache, max(args.passes, 20))
        rows["turboyolo warm (prepared cache), mosaic 0"] = loader_cpu_per_image(
            samples, cache, max(args.passes, 20), mosaic=False)
        handoff_ms = {}
        for batch in (8, 16, 32):
            loader = build_loader(samples, img_size=IMG_SIZE, batch_size=batch,
                                  augment=train_default_augment(), workers=1, shuffle=True, cache=cache)
            handoff_ms[batch] = measure_loader(loader, 30 * len(samples)).main_ms_per_image
            del loader
        if Path(args.pyyolo_python).exists():
            for name, resize_first in ((PYYOLO_ROW, False), (SEED_FIX_ROW, True)):
                result = run_pyyolo(args.pyyolo_python, Path(tmp) / "ds" / "train.txt", args.pyyolo_passes,
                                    resize_first)
                rows[name] = result["cpu_s"] / result["images"]
        else:
            print(f"# {args.pyyolo_python} missing: PyTorch-YOLOv3 rows skipped")

    floor = rows["decode floor (reduced decode + resize, turboyolo)"]
    base = rows.get(PYYOLO_ROW)
    seed_fix = rows.get(SEED_FIX_ROW)
    print("\n| pipeline (1 core, 416 px) | ms per image | images/s per core | x decode floor | "
          "x PyTorch-YOLOv3 | x seed's fix |")
    print("|---|---|---|---|---|---|")
    for name, seconds in rows.items():
        ratio_base = f"{base / seconds:.1f}" if base else "-"
        ratio_seed = f"{seed_fix / seconds:.1f}" if seed_fix else "-"
        print(f"| {name} | {1000 * seconds:.1f} | {1 / seconds:.2f} | {seconds / floor:.2f} | {ratio_base} | "
              f"{ratio_seed} |")
    per_batch = ", ".join(f"batch {b}: {ms:.3f} ms" for b, ms in handoff_ms.items())
    print(f"\nhand-off (main process CPU per image, 1 worker, warm path; "
          f"pin_memory={torch.cuda.is_available()}): {per_batch}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
