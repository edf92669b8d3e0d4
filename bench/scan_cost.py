"""The scan's per-image check: its cost on one thread and the wall time of the whole scan with its pool.

Two sets: small generated JPEGs (160-640 x 120-480 px, textured, about the size of a COCO-count set's
images, one label file each) and large camera photos (``--large``, default ``/usr/share/backgrounds``:
Debian's lomiri wallpapers, 1.5-26 MP, most of them progressive), each copied into the set with a
label file. Reported per image:

- ``check 1 thread``: :func:`turboyolo.data.scan._check_one` (the image's check and its label file),
  one after another in this process: wall and CPU ms per image (the median of ``--repeats`` passes);
- ``scan wall``: :func:`turboyolo.data.scan.scan_images` without the cache, with its default pool (a
  process per CPU for a long list), and the CPU seconds of the whole process tree over that wall time
  (how many cores it used); then the same with threads in one process only (the pool before processes:
  the checks are mostly Python, so the GIL lets about one core work);
- ``PIL header check``: a header-only check as Ultralytics' ``verify_image_label`` makes it (Pillow
  opens the file, ``verify()``, the EXIF size, and for a JPEG whether the last two bytes are the end
  marker), reimplemented here as a yardstick on the same files.

The files are read from the page cache (each pass reads them all first), so this is the check's CPU
cost, not the disk's.

    PYTHONPATH=src python bench/scan_cost.py --small 400 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps


def make_small(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` textured JPEGs of random size (160-640 x 120-480), one box each."""
    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    (folder / "labels").mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        width, height = int(rng.integers(160, 641)), int(rng.integers(120, 481))
        y, x = np.mgrid[0:height, 0:width]
        base = 127 + 90 * np.sin(x / rng.uniform(4, 30) + y / rng.uniform(4, 30))[..., None]
        noise = rng.normal(0, 18, (height, width, 3))
        pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
        path = folder / "images" / f"s{index:06d}.jpg"
        Image.fromarray(pixels).save(path, quality=int(rng.integers(75, 96)))
        _label(folder, path, rng)
        paths.append(path)
    return paths


def copy_large(folder: Path, source: Path, seed: int = 0) -> list[Path]:
    """Every JPEG of ``source`` copied into ``folder/images`` (own inodes), one box each."""
    rng = np.random.default_rng(seed)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    (folder / "labels").mkdir(parents=True, exist_ok=True)
    paths = []
    for index, photo in enumerate(sorted(source.glob("*.jpg"))):
        path = folder / "images" / f"l{index:03d}.jpg"
        shutil.copyfile(photo, path)
        _label(folder, path, rng)
        paths.append(path)
    return paths


def _label(folder: Path, image: Path, rng) -> None:
    cx, cy = rng.uniform(0.3, 0.7, 2)
    (folder / "labels" / f"{image.stem}.txt").write_text(f"0 {cx:.4f} {cy:.4f} 0.2 0.3\n")


def pil_header_check(path: Path) -> tuple[int, int]:
    """Ultralytics' image check (``verify_image_label``): open, verify, EXIF size, JPEG end marker."""
    with Image.open(path) as img:
        img.verify()
        shape = img.size
        fmt = img.format
    with Image.open(path) as img:
        exif = img.getexif()
        if exif.get(0x0112, 1) in (6, 8):
            shape = shape[::-1]
    if fmt == "JPEG":
        with open(path, "rb") as handle:
            handle.seek(-2, 2)
            if handle.read() != b"\xff\xd9":
                ImageOps.exif_transpose(Image.open(path))  # Ultralytics re-saves it; only the cost here
    return shape


def _warm(paths: list[Path]) -> None:
    for path in paths:
        path.read_bytes()


def per_image(check, paths: list[Path], repeats: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per image of ``check`` over ``paths`` in this thread: medians over passes."""
    walls, cpus = [], []
    for _ in range(repeats):
        _warm(paths)
        wall, cpu = time.perf_counter(), time.thread_time()
        for path in paths:
            check(path)
        walls.append((time.perf_counter() - wall) * 1000 / len(paths))
        cpus.append((time.thread_time() - cpu) * 1000 / len(paths))
    return statistics.median(walls), statistics.median(cpus)


def _tree_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def scan_wall(paths: list[Path], repeats: int, workers: int | None, threads_only: bool = False
              ) -> tuple[float, float]:
    """(wall ms per image, cores used) of a whole uncached scan with its pool: the fastest pass;
    ``threads_only``: its thread pool in this process whatever the list's length (as before processes)."""
    import turboyolo.data.scan as scan
    from turboyolo.data.scan import scan_images

    saved = getattr(scan, "PROCESS_MIN", None)
    if threads_only:
        scan.PROCESS_MIN = 1 << 62
    try:
        return _scan_wall(scan_images, paths, repeats, workers)
    finally:
        if saved is not None:
            scan.PROCESS_MIN = saved


def _scan_wall(scan_images, paths: list[Path], repeats: int, workers: int | None) -> tuple[float, float]:
    best = None
    for _ in range(repeats):
        _warm(paths)
        wall, cpu = time.perf_counter(), _tree_cpu()
        result = scan_images(paths, ["thing"], workers=workers)
        elapsed, used = time.perf_counter() - wall, _tree_cpu() - cpu
        assert len(result.samples) == len(paths), result.console_text()
        if best is None or elapsed < best[0]:
            best = (elapsed, used / elapsed)
    return best[0] * 1000 / len(paths), best[1]


def measure(name: str, paths: list[Path], repeats: int, workers: int | None) -> dict:
    from turboyolo.data.scan import _check_one

    check = per_image(lambda p: _check_one(p, 1), paths, repeats)
    pil = per_image(pil_header_check, paths, repeats)
    wall, cores = scan_wall(paths, repeats, workers)
    thread_wall, thread_cores = scan_wall(paths, repeats, workers, threads_only=True)
    mb = sum(p.stat().st_size for p in paths) / len(paths) / 1e6
    return {"set": name, "images": len(paths), "mb": mb, "check_wall": check[0], "check_cpu": check[1],
            "scan_wall": wall, "cores": cores, "thread_wall": thread_wall, "thread_cores": thread_cores,
            "pil_wall": pil[0], "pil_cpu": pil[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=400, help="small generated JPEGs")
    parser.add_argument("--large", type=Path, default=Path("/usr/share/backgrounds"),
                        help="folder of large camera JPEGs (skipped when missing)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="the scan's pool (default: its own)")
    parser.add_argument("--keep", type=Path, default=None, help="write the sets here and keep them")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="scan_cost-"))
    try:
        rows = [measure("small", make_small(root / "small", args.small), args.repeats, args.workers)]
        if args.large.is_dir() and any(args.large.glob("*.jpg")):
            rows.append(measure("large", copy_large(root / "large", args.large), args.repeats, args.workers))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at the end")
    print("| set | images | MB/image | check 1 thread: wall / CPU ms per image | scan wall ms per image "
          "(cores used) | the same, threads only | PIL header check: wall / CPU ms |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['set']} | {r['images']} | {r['mb']:.2f} | "
              f"{r['check_wall']:.3f} / {r['check_cpu']:.3f} | {r['scan_wall']:.3f} ({r['cores']:.1f}) | "
              f"{r['thread_wall']:.3f} ({r['thread_cores']:.1f}) | "
              f"{r['pil_wall']:.3f} / {r['pil_cpu']:.3f} |")


if __name__ == "__main__":
    main()
