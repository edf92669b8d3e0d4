"""Simulated device: the real training loader feeding a consumer that takes exactly S ms per batch.

The consumer sleeps (``time.sleep``), so it uses no CPU: every core stays with the loader, as on a GPU
machine where the step runs on the device. S is an H100's YOLOv3 training step scaled to this
machine's cores: the H100's images/s is the doctor's assumed rate (``doctor.verdict.assumed_step_s``:
3 x forward FLOPs per image at 790 TFLOP/s x MFU 0.35; YOLOv3-416, 1 class: 1,412 images/s), times
``usable cores here / 16`` (the H100 machine's cores), so each loader core here must supply what a
core of a 16-core H100 machine must supply. On 2 cores: 176 images/s, S = 45.3 ms per batch of 8.

The data: ``--images`` large camera photos (Debian's wallpaper JPEGs, 1.5-26 MP; the 19 photos are
copied again when more are asked for: the scan lists a linked file once), 3 random boxes each. The
augmentation is what ``turboyolo train`` applies to the stock yolov3.cfg by default (mosaic 1, HSV,
flip, zoom, aspect jitter), the same in every row, so rows differ in speed only.

Each setting builds the loader through ``data.pipeline.build_loader`` (what ``turboyolo train`` builds)
with the settings' ``--cache``, ``--augment-on`` and ``--workers``; a RAM cache is built before the
first epoch (its time is reported, not counted as data-wait). Data-wait = time the consumer waited for
a batch / wall time, per epoch; the figure that counts is after the first epoch. Beside it: the part
of it spent waiting for each epoch's first batch (the loader is told the later epochs as `train` tells
it, so its workers go on into the next epoch's first batches before the epoch starts), and the loader's
CPU time per image (main process + workers, from /proc), which says what a
core could supply if nothing else ran on it.

Usage:
    .venv/bin/python bench/simulated_device.py [--images 96] [--batch 8] [--epochs 8] \\
        [--setting 'old defaults=--cache none --augment-on cpu' ...] [--json out.json]

Default settings: ``auto`` (what ``turboyolo train`` chooses with no flags on a CUDA device stepping
at S: the start-of-run measurement on a sample of these images, this machine's cores, RAM and disk,
``train.auto.choose_pipeline``; its lines are printed), ``old defaults`` (``--cache none --augment-on
cpu``), ``cache, CPU augmentation`` (``--cache ram --augment-on cpu``) and ``hand-tuned`` (``--cache ram
--augment-on device``). ``--setting 'NAME=auto'`` asks for the automatic choice under another name.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from turboyolo.data.augment import AugmentParams
from turboyolo.data.cache import default_cache_root, estimate_bytes, prepare_cache
from turboyolo.data.device_loader import device_augment_unsupported
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import scan_dataset
from turboyolo.devices import usable_cpus
from turboyolo.doctor.measure import forward_flops
from turboyolo.doctor.verdict import assumed_step_s
from turboyolo.formats.labels import write_yolo_labels
from turboyolo.model.zoo import make_spec
from turboyolo.train.auto import choose_pipeline
from turboyolo.train.facts import machine_facts, measure_costs

PHOTOS = Path("/usr/share/backgrounds")
GPU_MACHINE_CORES = 16  # the H100 machine's CPU cores
DEFAULT_SETTINGS = ("auto=auto",
                    "old defaults=--cache none --augment-on cpu",
                    "cache, CPU augmentation=--cache ram --augment-on cpu",
                    "hand-tuned=--cache ram --augment-on device")
# turboyolo train's default augmentation for the stock yolov3.cfg ([net] angle 0, saturation/exposure
# 1.5, hue 0.1, [yolo] jitter 0.3; mosaic 1 where the cfg gives none)
AUGMENT = AugmentParams.from_net(mosaic=1.0)


def make_photo_set(root: Path, count: int, photos: Path = PHOTOS) -> Path:
    """``root/images/*.jpg`` (copies of the photos, repeated up to ``count``) + 3 random boxes each."""
    files = sorted(p for p in photos.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    if not files:
        raise SystemExit(f"no JPEG photos in {photos}")
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    for index in range(count):
        photo = files[index % len(files)]
        link = root / "images" / f"{index:03d}_{photo.stem}.jpg"
        if not link.exists():
            shutil.copyfile(photo, link)
        boxes = np.hstack([rng.integers(0, 2, (3, 1)), rng.uniform(0.2, 0.8, (3, 2)),
                           rng.uniform(0.05, 0.3, (3, 2))])
        write_yolo_labels(root / "labels" / f"{link.stem}.txt", boxes)
    (root / "classes.names").write_text("a\nb\n")
    return root / "images"


def parse_setting(text: str) -> tuple[str, dict | None]:
    """``'NAME=--cache ram --augment-on device [--workers N]'`` -> (NAME, build_loader settings);
    ``'NAME=auto'`` -> (NAME, None): the automatic choice."""
    name, _, flags = text.partition("=")
    if flags.strip() == "auto":
        return name.strip(), None
    parser = argparse.ArgumentParser(prog=f"--setting {name}", add_help=False)
    parser.add_argument("--cache", choices=("none", "ram"), default="none")
    parser.add_argument("--augment-on", choices=("cpu", "device"), default="cpu")
    parser.add_argument("--workers", type=int, default=None)
    values = parser.parse_args(shlex.split(flags))
    return name.strip(), vars(values)


def auto_setting(samples, images: Path, args, step_s: float) -> dict:
    """What ``turboyolo train`` chooses with every pipeline flag left at ``auto``, for a CUDA step of
    ``step_s`` per batch: the same start-of-run measurement and rule (``train.facts``, ``train.auto``)."""
    costs = measure_costs(samples, args.img_size, args.batch, AUGMENT)
    machine = dataclasses.replace(machine_facts(torch.device("cpu"), default_cache_root(images, "train",
                                                                                      args.img_size)),
                                  device="cuda")
    choice = choose_pipeline({"cache": ("auto", "default"), "augment_on": ("auto", "default"),
                              "workers": (None, "default")}, costs, machine, step_s / args.batch,
                             estimate_bytes(samples, args.img_size), device_augment_unsupported(AUGMENT))
    for line in choice.lines():
        print(f"[auto] {line}", flush=True)
    return {"cache": choice.cache, "augment_on": choice.augment_on, "workers": choice.workers,
            "predicted_data_wait": choice.data_wait}


def step_seconds(img_size: int, batch: int, cores: int) -> tuple[float, float]:
    """(S per batch, the H100's images/s) for YOLOv3 at ``img_size``, scaled to ``cores``."""
    flops = forward_flops(make_spec("yolov3", num_classes=2, width=img_size, height=img_size), img_size)
    h100_rate = 1.0 / assumed_step_s("h100", flops, 1)
    return batch / (h100_rate * cores / GPU_MACHINE_CORES), h100_rate


def cpu_seconds() -> float:
    """CPU seconds of this process and its live children (the loader's workers), from /proc."""
    total = time.process_time()
    tick, me = os.sysconf("SC_CLK_TCK"), str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, ..., utime, stime
        except (OSError, IndexError):
            continue
        if fields[1] == me:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run_epoch(loader, epoch: int, epochs: int, step_s: float, max_s: float) -> dict:
    """One epoch of ``epochs`` against the sleeping consumer: the time not spent in the step is
    data-wait. The loader knows the later epochs as `train` tells it (the workers go on into the next
    epoch's first batches)."""
    loader.set_epoch(epoch, upcoming=lambda later: True if later < epochs else None)
    stepping, images, first_wait, start = 0.0, 0, None, time.perf_counter()
    iterator = iter(loader)
    for _ in range(len(loader)):  # exactly the epoch's batches, as the training loop takes them
        batch = next(iterator)
        first_wait = time.perf_counter() - start if first_wait is None else first_wait
        images += batch[0].shape[0]
        before = time.perf_counter()
        time.sleep(step_s)  # the device's step: no CPU
        stepping += time.perf_counter() - before
        if time.perf_counter() - start > max_s:
            break  # measured on part of the epoch
    elapsed = time.perf_counter() - start
    return {"wait_s": elapsed - stepping, "first_batch_wait_s": first_wait or 0.0, "seconds": elapsed,
            "images": images}


def run_setting(samples, setting: dict, args, step_s: float) -> dict:
    """One setting: build (cache, loader), then up to ``args.epochs`` epochs."""
    began = time.perf_counter()
    cache = None
    if setting["cache"] == "ram":
        cache = prepare_cache(samples, args.img_size, None, memory="ram", log=lambda *_: None)
    build_s = time.perf_counter() - began
    loader = build_loader(samples, img_size=args.img_size, batch_size=args.batch, augment=AUGMENT,
                          workers=setting["workers"], shuffle=True, seed=0, cache=cache,
                          augment_on=setting["augment_on"], drop_last=True)
    epochs, cpu_after_first = [], None
    for epoch in range(args.epochs):
        if epoch >= 2 and sum(e["seconds"] for e in epochs) > args.max_seconds:
            break  # a slow setting: its data-wait is clear from fewer epochs
        epochs.append(run_epoch(loader, epoch, args.epochs, step_s, args.max_seconds / 2))
        cpu_after_first = cpu_seconds() if epoch == 0 else cpu_after_first
    later = epochs[1:]
    seconds, images = sum(e["seconds"] for e in later), sum(e["images"] for e in later)
    return {"workers": loader.workers, "cache_build_s": build_s,
            "first_epoch_wait": epochs[0]["wait_s"] / epochs[0]["seconds"],
            "data_wait": sum(e["wait_s"] for e in later) / seconds,
            "epoch_start_wait": sum(e["first_batch_wait_s"] for e in later) / seconds,
            "images_per_s": images / seconds,
            # an epoch cut short leaves prefetched batches uncounted: no per-image figure then
            "cpu_ms_per_image": (1000 * (cpu_seconds() - cpu_after_first) / images
                                 if all(e["images"] == len(loader) * args.batch for e in later) else None),
            "epochs": epochs}


def table(rows: dict, target_rate: float) -> str:
    lines = [f"| setting | flags | predicted data-wait | cache build | data-wait, epoch 1 | data-wait after "
             f"epoch 1 (of it: epoch starts) | images/s after epoch 1 (the step takes {target_rate:.0f}) | "
             f"loader CPU ms per image | images/s per idle core |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        predicted = "-" if r.get("predicted_data_wait") is None else f"{100 * r['predicted_data_wait']:.1f}%"
        lines.append(f"| {name} | `{r['flags']}` | {predicted} | {r['cache_build_s']:.1f} s | "
                     f"{100 * r['first_epoch_wait']:.1f}% | **{100 * r['data_wait']:.1f}%** "
                     f"({100 * r['epoch_start_wait']:.1f}%) | {r['images_per_s']:.1f} | "
                     + (f"{cpu:.2f} | {1000 / cpu:,.0f} |" if (cpu := r["cpu_ms_per_image"])
                        else "- (epochs cut short) | - |"))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=96)
    parser.add_argument("--img-size", type=int, default=416)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=60,
                        help="a setting stops after 2 epochs past this many seconds (an epoch at half)")
    parser.add_argument("--cores", type=int, default=usable_cpus(), help="cores the scaling assumes")
    parser.add_argument("--step-ms", type=float, help="S per batch instead of the scaled H100 step")
    parser.add_argument("--setting", action="append", help="NAME=FLAGS (repeatable)")
    parser.add_argument("--photos", type=Path, default=PHOTOS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    step_s, h100_rate = step_seconds(args.img_size, args.batch, args.cores)
    if args.step_ms is not None:
        step_s = args.step_ms / 1000
    target = args.batch / step_s
    print(f"S = {1000 * step_s:.1f} ms per batch of {args.batch} ({target:.0f} images/s: the H100's "
          f"{h100_rate:.0f} x {args.cores} / {GPU_MACHINE_CORES} cores)", flush=True)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        images = make_photo_set(Path(tmp), args.images, args.photos)
        samples = scan_dataset(images, "train").samples
        for text in args.setting or DEFAULT_SETTINGS:
            name, setting = parse_setting(text)
            predicted = None
            if setting is None:
                setting = auto_setting(samples, images, args, step_s)
                predicted = setting.pop("predicted_data_wait")
            rows[name] = run_setting(samples, setting, args, step_s)
            rows[name]["flags"] = (f"--cache {setting['cache']} --augment-on {setting['augment_on']} "
                                   f"--workers {rows[name]['workers']}")
            rows[name]["predicted_data_wait"] = predicted
            summary = {k: v for k, v in rows[name].items() if k != "epochs"}
            print(f"[{name}] " + json.dumps(summary), flush=True)
    print(table(rows, target))
    if args.json:
        args.json.write_text(json.dumps({"step_s": step_s, "h100_images_per_s": h100_rate,
                                         "cores": args.cores, "settings": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
