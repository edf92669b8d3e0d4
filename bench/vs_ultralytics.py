"""Side-by-side data-path benchmark: turboyolo's training loader against ultralytics', per core.

Both tools load the same photos (the JPEGs of /usr/share/backgrounds, or ``--photos``, between 2.5 and
20 MP; 3 synthetic boxes each, deterministic) at 416 px, batch 8, one process, no loader workers, one
thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``), and are timed in CPU seconds of that process
(so other load on a shared machine does not count against either). Each measurement runs in a fresh
process of the tool's own Python; the tools alternate (which goes first swaps every repeat) and each row
reports the median over repeats and the median of the paired ratios.

- turboyolo: the train loader as ``turboyolo train`` builds it
  (``turboyolo.train.loaders.build_loaders`` of a :class:`TrainConfig` with ``workers=0``, ``--cache`` and
  ``--mosaic`` as the row says, yolov3-tiny.cfg for the 416 px input; everything else its defaults).
- ultralytics (its own venv, ``make bench-ultralytics`` builds it): ``build_yolo_dataset`` and
  ``build_dataloader`` called as its ``DetectionTrainer`` calls them (stride 32, ``mode="train"``), with
  ``get_cfg`` defaults plus ``imgsz=416, batch=8, workers=0`` and the row's ``mosaic`` / ``cache``; no
  model or weights are needed for the data path.

Rows: cold = the first epoch of a freshly built dataset (every image decoded from its file: ultralytics
keeps up to ``8 x batch`` recently decoded images for mosaic partners, so on 16 photos later epochs
would be warm); warm = epochs after a RAM cache was built (``cache=ram`` / ``--cache ram``, build not
timed). For turboyolo the decodes per sample are counted too (``DetectionLoader.epoch_decoded``).

Usage: ``make bench-ultralytics`` or
``.venv/bin/python bench/vs_ultralytics.py [--ultra-python .venv-ultralytics/bin/python] [--repeats 3]``.
Prints a Markdown table for docs/PERFORMANCE.md. The runner half (``--runner``) imports only its own
tool, so the same file runs in both venvs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMG_SIZE, BATCH = 416, 8
CFG = "/usr/share/darknet/cfg/yolov3-tiny.cfg"  # width=height=416 (the input size of every row)
ROWS = {  # name: (cache, mosaic)
    "cold, defaults (mosaic on)": ("none", 1.0),
    "cold, mosaic off": ("none", 0.0),
    "warm (RAM cache), mosaic on": ("ram", 1.0),
    "warm (RAM cache), mosaic off": ("ram", 0.0),
}
MP_RANGE = (2.5e6, 20e6)


# ----------------------------------------------------------------------------------------- runners


def _one_thread() -> None:
    import cv2
    import torch

    cv2.setNumThreads(1)
    torch.set_num_threads(1)


def run_turboyolo(root: Path, cache: str, mosaic: float, epochs: int) -> dict:
    """images, CPU seconds and decodes of ``epochs`` epochs of turboyolo's train loader."""
    _one_thread()
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.train.config import TrainConfig
    from turboyolo.train.loaders import build_loaders
    from turboyolo.train.resolve import resolve_options

    def make():
        # --augment-on cpu: what auto chooses where the step runs on the CPU (and the device path needs
        # a device to finish the augmentation, so a loader-only comparison is the CPU path's)
        config = TrainConfig.build(cfg=CFG, data=str(root / "bench.data"), workers=0, cache=cache,
                                   augment_on="cpu", mosaic=mosaic, project=str(root / "runs"))
        resolved = resolve_options(config, parse_cfg(CFG), say=lambda *_: None)
        return build_loaders(resolved, BATCH, log=lambda *_: None).train

    images = cpu = decodes = 0
    loader = make() if cache != "none" else None
    for epoch in range(epochs):
        if cache == "none":
            loader = make()  # cold: a fresh loader, its first epoch
        loader.set_epoch(0 if cache == "none" else epoch)
        start = time.process_time()
        for batch in loader:
            images += batch[0].shape[0]
        cpu += time.process_time() - start
        decodes += sum(loader.epoch_decoded.values())
    return {"images": images, "cpu_s": cpu, "decodes": decodes}


def run_ultralytics(root: Path, cache: str, mosaic: float, epochs: int) -> dict:
    """images and CPU seconds of ``epochs`` epochs of ultralytics' training dataloader."""
    os.environ["YOLO_VERBOSE"] = "False"
    _one_thread()
    from ultralytics.cfg import get_cfg
    from ultralytics.data.build import build_dataloader, build_yolo_dataset
    from ultralytics.utils import DEFAULT_CFG

    args = get_cfg(DEFAULT_CFG, {"imgsz": IMG_SIZE, "batch": BATCH, "workers": 0, "mosaic": mosaic,
                                 "cache": "ram" if cache == "ram" else False})
    data = {"names": {0: "thing"}, "nc": 1, "channels": 3, "path": str(root)}

    def make():
        # as DetectionTrainer.build_dataset / get_dataloader (stride 32, one process, CPU consumer)
        dataset = build_yolo_dataset(args, str(root / "images"), BATCH, data, mode="train", rect=False,
                                     stride=32)
        return build_dataloader(dataset, batch=BATCH, workers=0, shuffle=True, rank=-1, device="cpu")

    images = cpu = 0
    loader = make() if cache != "none" else None
    for _ in range(epochs):
        if cache == "none":
            loader = make()
        start = time.process_time()
        for batch in loader:
            images += batch["img"].shape[0]
        cpu += time.process_time() - start
    return {"images": images, "cpu_s": cpu}


# ------------------------------------------------------------------------------------------ driver


def pick_photos(folder: Path) -> list[Path]:
    from PIL import Image

    chosen = []
    for path in sorted(folder.glob("*.jp*g")):
        with Image.open(path) as img:
            if MP_RANGE[0] <= img.size[0] * img.size[1] <= MP_RANGE[1]:
                chosen.append(path)
    return chosen


def measure(python: str, tool: str, root: Path, row: str, epochs: int) -> dict:
    # absolute: the runner starts in the data's folder (a relative venv path would not be found there)
    cmd = [os.path.abspath(python), os.path.abspath(__file__), "--runner", tool, "--root", str(root),
           "--row", row, "--epochs", str(epochs)]
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root)
    if proc.returncode != 0:
        raise SystemExit(f"{tool} runner failed on {row!r}:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main_driver(args) -> int:
    from turboyolo.doctor.throughput import cpu_model

    photos = pick_photos(Path(args.photos))
    for photo in photos:  # page cache: both tools read from memory
        photo.read_bytes()
    version = subprocess.run([args.ultra_python, "-c", "import ultralytics;print(ultralytics.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    print(f"# {cpu_model()}, {os.cpu_count()} cores; {len(photos)} photos from {args.photos}; "
          f"ultralytics {version}; {IMG_SIZE} px, batch {BATCH}, 1 process, 1 thread, CPU time")
    results: dict[str, dict[str, list]] = {row: {"turboyolo": [], "ultralytics": [], "decodes": []}
                                           for row in ROWS}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        from data_pipeline import make_dataset  # the driver's side only: it imports turboyolo

        make_dataset(photos, root)
        for repeat in range(args.repeats):
            for row in args.rows or ROWS:
                epochs = args.cold_epochs if ROWS[row][0] == "none" else args.warm_epochs
                tools = ["ultralytics", "turboyolo"] if repeat % 2 == 0 else ["turboyolo", "ultralytics"]
                for tool in tools:
                    python = args.ultra_python if tool == "ultralytics" else sys.executable
                    m = measure(python, tool, root, row, epochs)
                    results[row][tool].append(m["images"] / m["cpu_s"])
                    if tool == "turboyolo":
                        results[row]["decodes"].append(m["decodes"] / m["images"])
                    print(f"# repeat {repeat} {row}: {tool} {m['images'] / m['cpu_s']:.1f} img/s per core",
                          flush=True)
    print_table(results)
    return 0


def print_table(results: dict) -> None:
    print("\n| data path, per core | ultralytics | turboyolo | turboyolo / ultralytics | "
          "turboyolo decodes per sample |")
    print("|---|---|---|---|---|")
    for row, r in results.items():
        if not r["turboyolo"]:
            continue
        ratios = [t / u for t, u in zip(r["turboyolo"], r["ultralytics"], strict=True)]
        print(f"| {row} | {statistics.median(r['ultralytics']):.1f} img/s | "
              f"{statistics.median(r['turboyolo']):.1f} img/s | **{statistics.median(ratios):.2f}** "
              f"({min(ratios):.2f}-{max(ratios):.2f}) | {statistics.median(r['decodes']):.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ultra-python", default=".venv-ultralytics/bin/python",
                        help="python of a venv with ultralytics (make bench-ultralytics builds one)")
    parser.add_argument("--photos", default="/usr/share/backgrounds", help="folder of large JPEGs")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats per row")
    parser.add_argument("--cold-epochs", type=int, default=2, help="fresh datasets per cold measurement")
    parser.add_argument("--warm-epochs", type=int, default=20, help="epochs per warm measurement")
    parser.add_argument("--rows", nargs="*", choices=list(ROWS), help="rows to measure (default: all)")
    parser.add_argument("--runner", choices=("turboyolo", "ultralytics"), help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runner:
        run = run_turboyolo if args.runner == "turboyolo" else run_ultralytics
        print(json.dumps(run(Path(args.root), *ROWS[args.row], args.epochs)))
        return 0
    return main_driver(args)


if __name__ == "__main__":
    sys.exit(main())
