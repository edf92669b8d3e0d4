"""Does the doctor predict the wall-clock images/s the loader delivers? Trees, BCCD and large photos.

For each data set and augmentation (the defaults, mosaic included, with the CPU path; and mosaic 0,
which the device path also does), ``turboyolo doctor`` in data-only mode (``--assume-gpu h100``) predicts
the loader's wall-clock images/s for workers 0 / 1 x cache none / ram x augment cpu / device
(``verdict.loader_predictions``, from the per-image costs it measures on a sample: the model ``auto``
decides with). Then, separately, each cell is measured with the real loader
(:func:`turboyolo.data.timing.measure_loader`, the same augmentation) and the ratio predicted / measured
is printed. Target: every cell within 0.8-1.25.

The machine is what it is: on a shared machine (other processes on the cores) the measured rates fall
below the prediction, which assumes the loader has its cores to itself; say so with the numbers.

Usage: ``.venv/bin/python bench/doctor_check.py [--photos DIR] [--trees DATA] [--bccd DATA]
[--images N]``. Prints Markdown (the table of docs/PERFORMANCE.md, "Does the doctor predict wall-clock?").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import cv2
import torch

sys.path.insert(0, str(Path(__file__).parent))
from data_pipeline import make_dataset  # noqa: E402

from turboyolo.data.cache import prepare_cache  # noqa: E402
from turboyolo.data.device_loader import device_augment_unsupported  # noqa: E402
from turboyolo.data.pipeline import build_loader  # noqa: E402
from turboyolo.data.scan import scan_dataset  # noqa: E402
from turboyolo.data.timing import measure_loader  # noqa: E402
from turboyolo.doctor.throughput import cpu_model  # noqa: E402
from turboyolo.doctor.verdict import loader_key  # noqa: E402
from turboyolo.formats.darknet_cfg import parse_cfg, write_cfg  # noqa: E402
from turboyolo.model.zoo import make_spec  # noqa: E402
from turboyolo.train.config import TrainConfig  # noqa: E402
from turboyolo.train.resolve import resolve_options  # noqa: E402

CACHE = Path.home() / ".cache/turboyolo/datasets"
IMG_SIZE, BATCH = 416, 8


def doctor(data: Path, cfg: Path, out: Path, name: str, images: int) -> dict:
    subprocess.run([sys.executable, "-m", "turboyolo", "doctor", "--data", str(data), "--model", str(cfg),
                    "--assume-gpu", "h100", "--batch", str(BATCH), "--subdivisions", "1", "--workers", "1",
                    "--worker-counts", "0,1", "--images", str(images), "--cache", "ram", "--augment-on",
                    "cpu", "--img-size", str(IMG_SIZE), "--repeats", "1", "--project", str(out), "--name",
                    name], check=True, capture_output=True)
    return json.loads((out / name / "doctor.json").read_text())


def measured(data: Path, cfg: Path, images: int) -> dict[str, tuple[float, float]]:
    """For each cell, the real loader's wall-clock images/s, and the images/s its processes' CPU time
    allows (what wall-clock would be with a core each: the busiest process's CPU-seconds per image), with
    the augmentation train resolves."""
    config = TrainConfig.build(str(cfg), str(data), img_size=IMG_SIZE, batch=BATCH, subdivisions=1)
    augment = resolve_options(config, parse_cfg(cfg), say=lambda *_: None).augment
    samples = scan_dataset(data, "train").samples
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = prepare_cache(samples, IMG_SIZE, Path(tmp) / "prep", memory="ram", workers=1,
                              log=lambda *_: None)
        for workers in (0, 1):
            for kind, use in (("none", None), ("ram", cache)):
                for where in ("cpu", "device"):
                    if where == "device" and device_augment_unsupported(augment) is not None:
                        continue
                    loader = build_loader(samples, img_size=IMG_SIZE, batch_size=BATCH, augment=augment,
                                          workers=workers, shuffle=True, cache=use, augment_on=where)
                    count = images if kind == "ram" else max(2 * BATCH, images // 4)
                    m = measure_loader(loader, count)
                    busiest = max(m.cpu_s - m.main_cpu_s, m.main_cpu_s) if workers else m.cpu_s
                    rates[loader_key(workers, kind, where)] = (m.images_per_s, m.images / max(busiest, 1e-9))
                    del loader
    return rates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", default="/usr/share/backgrounds", help="folder of large JPEGs")
    parser.add_argument("--trees", default=str(CACHE / "trees/trees.data"))
    parser.add_argument("--bccd", default=str(CACHE / "bccd/bccd.data"))
    parser.add_argument("--images", type=int, default=256, help="images per warm measurement")
    args = parser.parse_args()
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    print(f"CPU {cpu_model()}, {len(os.sched_getaffinity(0))} usable cores; loadavg "
          f"{os.getloadavg()[0]:.1f} at the start (others on the machine lower the measured rates)\n")
    print("| data set | augmentation | workers | cache | augment on | predicted img/s | measured img/s "
          "(wall) | predicted / measured | measured, CPU time (a core each) | predicted / CPU-time rate | "
          "load avg |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        photos = sorted(p for p in Path(args.photos).iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
        sets = (("trees", Path(args.trees)), ("BCCD", Path(args.bccd)),
                ("large photos", make_dataset(photos, tmp / "large")))
        spec = make_spec("yolov3-tiny", num_classes=1, width=IMG_SIZE, height=IMG_SIZE)
        cfgs = {"defaults (mosaic 1)": write_cfg(spec, tmp / "default.cfg"),
                "mosaic 0": write_cfg(spec.with_net(mosaic=0), tmp / "mosaic0.cfg")}
        for name, data in sets:
            for label, cfg in cfgs.items():
                report = doctor(data, cfg, tmp / "runs", f"{name.replace(' ', '_')}-{label[:6]}", 32)
                predicted = report["verdict"]["loader_predictions"]
                for key, (rate, cpu_rate) in measured(data, cfg, args.images).items():
                    workers, cache, where = (part.split()[-1] for part in key.split(", "))
                    guess = predicted.get(key)
                    ratio = f"{guess / rate:.2f}" if guess else "n/a"
                    cpu_ratio = f"{guess / cpu_rate:.2f}" if guess else "n/a"
                    load = os.getloadavg()[0]
                    print(f"| {name} | {label} | {workers} | {cache} | {where} | {guess or 0:,.0f} | "
                          f"{rate:,.0f} | {ratio} | {cpu_rate:,.0f} | {cpu_ratio} | {load:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
