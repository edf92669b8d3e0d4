"""One section of the GPU benchmark (bench/gpu.sh runs them in turn); writes ``$OUT/<section>.json``.

Sections:
  data        build the training set: every photo in --photos linked --copies times (3 boxes each)
  ceiling     synthetic-data ceiling: the same model, mini-batch and precision, images already on the GPU
  ours-cpu    turboyolo's loader (--cache ram, CPU augmentation) + engine.train_one_epoch
  ours-device the same with --augment-on device
  checkpoint  how long a full-state save (model + optimizer) blocks training, and until it is on disk
  train-auto  `turboyolo train` as a user runs it, no loader flags (the automatic choices, where the run
              makes them; else the defaults): images/s and data-wait of its epochs after the first
  train-tuned the same with the hand-tuned `--cache ram --augment-on device`
  table       the Markdown table of every section's JSON (also $OUT/table.md)

MFU = 3 x forward FLOPs per image x images/s / 790 TFLOP/s (the bf16 matrix rate measured on an H200)
and / 989 TFLOP/s (datasheet). Usage: see bench/gpu.sh.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

PEAK_MEASURED, PEAK_DATASHEET = 790e12, 989e12


def write(out: Path, section: str, values: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{section}.json").write_text(json.dumps(values, indent=2))
    print(f"[{section}] " + json.dumps(values), flush=True)


def make_data(photos: Path, root: Path, copies: int) -> Path:
    """Every photo copied ``copies`` times (copies, not links: the scan lists a linked file once)."""
    import shutil

    from turboyolo.formats.labels import write_yolo_labels

    files = sorted(p for p in photos.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    rng = np.random.default_rng(0)
    (root / "images").mkdir(parents=True, exist_ok=True)
    lines = []
    for copy in range(copies):
        for photo in files:
            link = root / "images" / f"{photo.stem}_{copy}.jpg"
            if not link.exists():
                shutil.copyfile(photo, link)
            boxes = np.hstack([np.zeros((3, 1)), rng.uniform(0.2, 0.8, (3, 2)),
                               rng.uniform(0.05, 0.3, (3, 2))])
            write_yolo_labels(root / "labels" / f"{link.stem}.txt", boxes)
            lines.append(str(link))
    (root / "train.txt").write_text("\n".join(lines) + "\n")
    (root / "bench.names").write_text("thing\n")
    data = root / "bench.data"
    data.write_text(f"classes=1\ntrain={root / 'train.txt'}\nvalid={root / 'train.txt'}\n"
                    f"names={root / 'bench.names'}\n")
    return data


def setup(args):
    """The run `turboyolo train` would resolve for this cfg and batch, and its state as `build_state`
    builds it (the doctor's code: one model, one optimizer, one loss, one step)."""
    from turboyolo.doctor.measure import DoctorOptions, resolved_run, train_state
    from turboyolo.formats.darknet_cfg import parse_cfg

    device = torch.device(args.device)
    spec = parse_cfg(args.cfg)
    options = DoctorOptions(img_size=args.img_size, batch=args.batch, subdivisions=1, device=device,
                            workers=0, worker_counts=(0,), cfg=args.cfg, data=args.data or "data")
    resolved = resolved_run(spec, options)
    return device, resolved.spec, resolved, train_state(resolved, device)


def step_options(device):
    from turboyolo.train.engine import StepOptions

    return StepOptions(device=device, amp_dtype=torch.bfloat16 if device.type == "cuda" else None,
                       channels_last=True, log_interval=10, say=lambda *_: None)


def mfu(spec, images_per_s: float, img_size: int) -> tuple[float, float]:
    flops = train_flops(spec, img_size) * images_per_s
    return flops / PEAK_MEASURED, flops / PEAK_DATASHEET


def train_flops(spec, img_size: int) -> float:
    """3 x forward FLOPs of one image (forward + backward)."""
    from turboyolo.train.facts import forward_flops

    return 3 * forward_flops(spec, img_size)


def amp(device):
    return torch.autocast(device.type, dtype=torch.bfloat16) if device.type == "cuda" else torch.autocast(
        "cpu", enabled=False)


def ceiling(args) -> dict:
    """`turboyolo train`'s step (engine.train_one_epoch) on one batch that stays on the device."""
    from turboyolo.train.engine import train_one_epoch
    from turboyolo.train.gpu_monitor import GpuMonitor

    device, spec, resolved, state = setup(args)
    x = torch.randint(0, 255, (args.batch, 3, args.img_size, args.img_size), dtype=torch.uint8, device=device)
    targets = torch.tensor([[i, 0, 0.5, 0.5, 0.2, 0.3] for i in range(args.batch)], dtype=torch.float32)
    monitor = GpuMonitor(device, interval_s=0.2)

    def batches(count):
        for _ in range(count):
            yield x, targets, None

    def run(count):
        state.epoch_batches = 0
        for _ in train_one_epoch(state, batches(count), count, step_options(device)):
            pass

    run(3)
    if device.type == "cuda":
        torch.cuda.synchronize()
    monitor.read()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        run(10)
        steps += 10
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    rate = steps * args.batch / wall
    gpu = monitor.read()
    monitor.close()
    m790, m989 = mfu(spec, rate, args.img_size)
    return {"what": "synthetic ceiling (data on the GPU)", "images_per_s": rate, "data_wait": 0.0,
            "train_flops_per_image": train_flops(spec, args.img_size),
            "gpu_util": gpu.get("gpu_util"), "mfu_790": m790, "mfu_989": m989, "steps": steps}


def ours(args, augment_on: str) -> dict:
    from turboyolo.data.augment import AugmentParams
    from turboyolo.data.cache import prepare_cache
    from turboyolo.data.pipeline import build_loader
    from turboyolo.data.scan import scan_dataset
    from turboyolo.train.engine import EpochStats, train_one_epoch
    from turboyolo.train.gpu_monitor import GpuMonitor

    device, spec, resolved, state = setup(args)
    samples = scan_dataset(args.data, "train").samples
    cache = prepare_cache(samples, args.img_size, None, memory="ram", workers=os.cpu_count(),
                          log=lambda *_: None)
    loader = build_loader(samples, img_size=args.img_size, batch_size=args.batch,
                          augment=AugmentParams.from_net(), workers=args.workers, shuffle=True, cache=cache,
                          augment_on=augment_on, drop_last=True)
    options = step_options(device)
    monitor = GpuMonitor(device, interval_s=0.2)
    results, start, epoch = [], time.perf_counter(), 0
    while time.perf_counter() - start < args.seconds + args.warmup:
        loader.set_epoch(epoch)
        state.epoch_batches = 0
        began = time.perf_counter() - start
        epoch_stats = EpochStats(device)
        for _ in train_one_epoch(state, monitor.wrap(loader), len(loader), options, epoch_stats):
            pass  # a generator since the training library's restructuring: run the epoch to its end
        stats = epoch_stats.summary()
        gpu = monitor.read()
        if began >= args.warmup:  # whole epochs that started after the warm-up (workers, cuDNN, caches)
            results.append((stats, gpu))
        epoch += 1
    monitor.close()
    if not results:
        results = [(stats, gpu)]
    seconds = sum(s["seconds"] for s, _ in results)
    images = sum(s["images_per_s"] * s["seconds"] for s, _ in results)
    rate = images / seconds
    wait = sum(s["data_wait"] * s["seconds"] for s, _ in results) / seconds
    utils = [g["gpu_util"] for _, g in results if "gpu_util" in g]
    idles = [g["gpu_idle"] for _, g in results if "gpu_idle" in g]
    m790, m989 = mfu(spec, rate, args.img_size)
    return {"what": f"turboyolo, --cache ram, augment on {augment_on}, {args.workers} workers",
            "images_per_s": rate, "data_wait": wait, "gpu_util": float(np.mean(utils)) if utils else None,
            "gpu_idle": float(np.mean(idles)) if idles else None, "mfu_790": m790, "mfu_989": m989,
            "epochs": len(results), "images_per_epoch": len(loader) * args.batch}


def checkpoint(args) -> dict:
    from turboyolo.doctor.measure import measure_checkpoint

    device, spec, resolved, state = setup(args)
    model = state.model
    folder = Path(args.out) / "ckpt-tmp"
    folder.mkdir(parents=True, exist_ok=True)
    blocking, total = measure_checkpoint(state, resolved, folder)
    folder.rmdir()
    naive_start = time.perf_counter()
    torch.save(model.state_dict(), folder.parent / "naive.pth")  # what PyTorch-YOLOv3 does every epoch
    naive = time.perf_counter() - naive_start
    (folder.parent / "naive.pth").unlink()
    return {"what": "checkpoint stall", "blocking_s": blocking, "on_disk_s": total,
            "pytorch_yolov3_torch_save_s": naive}


# The train-* rows: the same augmentation in both (mosaic 1, train's default on the CPU path), the
# loader settings the only difference; the first epoch (cache build, workers, cuDNN) is left out.
TRAIN_ROWS = {"train-auto": (), "train-tuned": ("--cache", "ram", "--augment-on", "device")}


def train_cli(args, name: str) -> dict:
    """``turboyolo train`` in its own process, as typed; its results.csv's epochs after the first."""
    import csv
    import subprocess
    import tempfile

    flags = TRAIN_ROWS[name]
    with tempfile.TemporaryDirectory() as project:
        command = [sys.executable, "-m", "turboyolo", "train", "--cfg", args.cfg, "--data", args.data,
                   "--epochs", str(args.epochs), "--mosaic", "1", "--evaluation-interval", "0",
                   "--checkpoint-interval", "0", "--project", project, "--device", args.device, *flags]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.train_timeout)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as err:  # the epochs done so far still count
            code, output = f"timed out after {args.train_timeout:g} s", _text(err.stdout) + _text(err.stderr)
        (Path(args.out) / f"{name}.log").write_text(output)
        results = sorted(Path(project).glob("*/results.csv"))
        rows = list(csv.DictReader(results[0].open())) if results else []
        chosen = [line for line in output.splitlines() if "(auto)" in line][:6]  # the start lines
    later = rows[1:]
    if not later:
        return {"error": f"turboyolo train: exit {code}, {len(rows)} epoch(s) done (see {name}.log)"}
    rate = float(np.mean([float(r["images_per_s"]) for r in later]))
    from turboyolo.formats.darknet_cfg import parse_cfg

    m790, m989 = mfu(parse_cfg(args.cfg), rate, args.img_size)

    def mean(key):
        values = [float(r[key]) for r in later if r.get(key) not in (None, "")]
        return float(np.mean(values)) if values else None

    gpu_util = mean("gpu_util")
    return {"what": f"turboyolo train {' '.join(flags) or '(no loader flags)'}, epochs 2-{len(rows)}",
            "images_per_s": rate, "data_wait": mean("data_wait"), "gpu_util": gpu_util,
            "gpu_idle": mean("gpu_idle"), "mfu_790": m790, "mfu_989": m989, "epochs": len(later),
            "auto_lines": chosen}


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else (output or "")


def table(out: Path) -> str:
    rows, rates = [], {}
    flops = None
    if (out / "ceiling.json").exists():
        flops = json.loads((out / "ceiling.json").read_text()).get("train_flops_per_image")
    for name in ("ceiling", "pyyolo", "ours-cpu", "ours-device", *TRAIN_ROWS):
        path = out / f"{name}.json"
        if not path.exists():
            rows.append(f"| {name} | (missing) | | | | |")
            continue
        r = json.loads(path.read_text())
        if "error" in r:
            rows.append(f"| {name} | error: {r['error'][:80]} | | | | |")
            continue

        def pct(key, r=r):
            return "-" if r.get(key) is None else f"{100 * r[key]:.1f}%"

        if r.get("mfu_790") is None and flops:
            achieved = flops * r["images_per_s"]
            r["mfu_790"], r["mfu_989"] = achieved / PEAK_MEASURED, achieved / PEAK_DATASHEET
        rates[name] = r
        util = "-" if r.get("gpu_util") is None else f"{r['gpu_util']:.0f}%"
        rows.append(f"| {r['what']} | {r['images_per_s']:,.1f} | {pct('data_wait')} | {util} | "
                    f"{pct('mfu_790')} / {pct('mfu_989')} | {pct('gpu_idle')} |")
    text = ("| run | images/s | data-wait | GPU util (NVML) | MFU vs 790 / 989 TFLOP/s | "
            "GPU idle (events) |\n"
            "|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")
    targets = []
    for name in ("ours-cpu", "ours-device"):
        if name in rates:
            r = rates[name]
            parts = [f"data-wait {100 * r['data_wait']:.1f}% (target < 3%)"]
            if "ceiling" in rates:
                parts.append(f"{r['images_per_s'] / rates['ceiling']['images_per_s']:.2f}x the ceiling "
                             "(target >= 0.9)")
            if "pyyolo" in rates and rates["pyyolo"]["images_per_s"] > 0:
                parts.append(f"{r['images_per_s'] / rates['pyyolo']['images_per_s']:.1f}x PyTorch-YOLOv3 "
                             "(target >= 10)")
            targets.append(f"- {name}: " + ", ".join(parts))
    if "train-auto" in rates and "train-tuned" in rates:
        auto, tuned = rates["train-auto"], rates["train-tuned"]
        ratio = auto["images_per_s"] / tuned["images_per_s"]
        targets.append(f"- turboyolo train, no loader flags vs hand-tuned: {ratio:.2f}x the images/s, "
                       f"data-wait {100 * (auto['data_wait'] or 0):.1f}% vs "
                       f"{100 * (tuned['data_wait'] or 0):.1f}% (target: auto <= 5%, >= 0.95x hand-tuned)")
    if targets:
        text += "\n" + "\n".join(targets) + "\n"
    ckpt = out / "checkpoint.json"
    if ckpt.exists():
        c = json.loads(ckpt.read_text())
        text += (f"\ncheckpoint: blocks training {c['blocking_s']:.3f} s (written in the background, on disk "
                 f"after {c['on_disk_s']:.2f} s); PyTorch-YOLOv3's synchronous torch.save of the weights: "
                 f"{c['pytorch_yolov3_torch_save_s']:.2f} s\n")
    (out / "table.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench/out"))
    parser.add_argument("--photos")
    parser.add_argument("--root")
    parser.add_argument("--copies", type=int, default=54)
    parser.add_argument("--cfg")
    parser.add_argument("--data")
    parser.add_argument("--img-size", type=int, default=416)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=8)
    parser.add_argument("--epochs", type=int, default=4, help="train-* sections: epochs of the run")
    parser.add_argument("--train-timeout", type=float, default=240, help="train-* sections: seconds")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    out = Path(args.out)
    if args.section == "data":
        print(make_data(Path(args.photos), Path(args.root), args.copies))
        return 0
    if args.section == "table":
        print(table(out))
        return 0
    functions = {"ceiling": ceiling, "ours-cpu": lambda a: ours(a, "cpu"),
                 "ours-device": lambda a: ours(a, "device"), "checkpoint": checkpoint,
                 **{name: (lambda a, name=name: train_cli(a, name)) for name in TRAIN_ROWS}}
    try:
        values = functions[args.section](args)
    except Exception as err:  # noqa: BLE001 - one failed section must not cost the others
        import traceback

        traceback.print_exc()
        values = {"error": f"{type(err).__name__}: {err}"}
    write(out, args.section, values)
    return 0


if __name__ == "__main__":
    sys.exit(main())
