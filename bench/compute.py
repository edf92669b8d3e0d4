"""Compute at the hardware's pace: the training step against ultralytics and the matmul peak, detection
against OpenCV DNN and onnxruntime; both tables in one run.

Every time is the CPU time of the process that does the work (``time.process_time``), one intra-op thread
everywhere (torch, OpenCV, onnxruntime): the development machine is a shared 2-core VM, and CPU time of a
single-threaded process is what other load disturbs least. Rounds alternate between the contenders and
the tables report medians and the median of per-round ratios.

Training step (batch 8 at 416, yolov3-tiny, the same in-memory batch): turboyolo's real step
(``train_one_epoch``: forward, loss, backward, clip, SGD, EMA) against ultralytics' own (its
``yolov3-tinyu.yaml`` DetectionModel built from the yaml, no weights: forward, ``v8DetectionLoss``,
backward, clip at 10, SGD, its ``ModelEMA``) in its own venv (``--ultra-python``). GFLOPs of both are
counted by the same ``torch.utils.flop_counter`` (2 per multiply-add); the matmul peak is a 2048^3
``torch.mm`` on one thread.

Detection (batch 1): turboyolo's whole call (``Predictor.predict_arrays``: letterbox, forward, decode,
NMS, boxes in original pixels) per backend against OpenCV DNN's forward alone (``readNetFromDarknet``,
same cfg and weights) and onnxruntime's session run alone on turboyolo's ONNX export.

    .venv/bin/python bench/compute.py                        # both tables (about 10 minutes here)
    .venv/bin/python bench/compute.py train --rounds 3
    .venv/bin/python bench/compute.py detect --archs yolov3-tiny
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ULTRA_PYTHON = "/work/venvs/ultra/bin/python"
PHOTO = Path("/usr/share/darknet/data/dog.jpg")

ULTRA_STEP = r"""
import json, sys, time, torch
torch.set_num_threads(1)
from copy import deepcopy
from ultralytics.nn.tasks import DetectionModel
from ultralytics.cfg import get_cfg
from ultralytics.utils.torch_utils import ModelEMA
from torch.utils.flop_counter import FlopCounterMode
size, batch, steps, warmup = (int(v) for v in sys.argv[1:5])
torch.manual_seed(0)
model = DetectionModel("yolov3-tinyu.yaml", nc=80, verbose=False)
model.args = get_cfg()
model.train()
with FlopCounterMode(display=False) as counter:
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, size, size))
model.train()
gflops = counter.get_total_flops() / 1e9
params = sum(p.numel() for p in model.parameters())
ema = ModelEMA(model)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, nesterov=True)
gen = torch.Generator().manual_seed(0)
images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=gen)
targets = torch.load(sys.argv[5])  # [N, 6] image, class, cx, cy, w, h (relative)
data = {"img": images, "batch_idx": targets[:, 0], "cls": targets[:, 1:2], "bboxes": targets[:, 2:6]}
times = []
for i in range(warmup + steps):
    begin = time.process_time()
    batch_dict = dict(data, img=data["img"].float() / 255)
    loss, _ = model.loss(batch_dict)
    loss.sum().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
    optimizer.step()
    optimizer.zero_grad()
    ema.update(model)
    times.append(time.process_time() - begin)
print(json.dumps({"times": times[warmup:], "gflops": gflops, "params": params}))
"""


def targets_for(batch: int):
    import torch

    generator = torch.Generator().manual_seed(0)
    rows = []
    for image in range(batch):
        for _ in range(5):
            cx, cy = (torch.rand(2, generator=generator) * 0.6 + 0.2).tolist()
            w, h = (torch.rand(2, generator=generator) * 0.3 + 0.05).tolist()
            rows.append([image, int(torch.randint(0, 80, (1,), generator=generator)), cx, cy, w, h])
    return torch.tensor(rows, dtype=torch.float32)


def matmul_peak(seconds: float = 2.0, n: int = 2048) -> float:
    """fp32 GFLOP/s of ``torch.mm`` on the current thread count (CPU time, best of a few)."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best, spent = 0.0, 0.0
    while spent < seconds:
        begin = time.process_time()
        torch.mm(a, b)
        took = time.process_time() - begin
        spent += took
        best = max(best, 2 * n**3 / took / 1e9)
    return best


def ours_worker(size: int, batch: int, steps: int, warmup: int, variant: str) -> dict:
    """turboyolo's real training step (train_one_epoch) on one in-memory batch."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from turboyolo.model.darknet import Darknet
    from turboyolo.model.zoo import make_spec
    from turboyolo.train.engine import StepOptions, TrainState, train_one_epoch
    from turboyolo.train.loss import YoloLoss
    from turboyolo.train.optim import ModelEMA, Schedule, build_optimizer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = make_spec("yolov3-tiny", num_classes=80, width=size, height=size, batch=batch, subdivisions=1)
    model = Darknet(spec)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.eval()(torch.zeros(1, 3, size, size))
    gflops = counter.get_total_flops() / 1e9
    model.train()
    channels_last = "channels_last" in variant
    if channels_last:
        model.to(memory_format=torch.channels_last)
    state = TrainState(model=model, optimizer=build_optimizer(model, spec.net),
                       schedule=Schedule.from_net(spec.net), loss_fn=YoloLoss(model.heads),
                       images_per_iteration=batch, subdivisions=1, ema=ModelEMA(model))
    if "compile" in variant:
        state.forward = torch.compile(model)
    gen = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, generator=gen)
    batches = [(images, targets_for(batch), None)] * (warmup + steps)
    options = StepOptions(channels_last=channels_last, log_interval=10**9, say=lambda _: None)
    times, begin = [], time.process_time()
    for _ in train_one_epoch(state, batches, len(batches), options):
        now = time.process_time()
        times.append(now - begin)
        begin = now
    return {"times": times[warmup:], "gflops": gflops, "params": sum(p.numel() for p in model.parameters()),
            "compile_s": times[0] if "compile" in variant else None}


def run_json(command: list[str]) -> dict:
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{command[:3]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def train_table(args) -> list[str]:
    import torch

    work = Path(tempfile.mkdtemp(prefix="compute-"))
    torch.save(targets_for(args.batch), work / "targets.pt")
    common = [str(args.size), str(args.batch), str(args.steps), str(args.warmup)]
    variants = args.variants.split(",")
    runs: dict[str, list[dict]] = {name: [] for name in ["ultralytics", *variants]}
    peaks = []
    for round_index in range(args.rounds):
        peaks.append(run_json([sys.executable, __file__, "peak"])["gflops"])
        if args.ultra_python:
            runs["ultralytics"].append(run_json([args.ultra_python, "-c", ULTRA_STEP, *common,
                                                 str(work / "targets.pt")]))
        for name in variants:
            runs[name].append(run_json([sys.executable, __file__, "train-worker", *common, name]))
        print(f"train round {round_index + 1}/{args.rounds}", file=sys.stderr)
    peak = statistics.median(peaks)
    lines = [f"Training step, yolov3-tiny, batch {args.batch} at {args.size}, 1 thread, CPU time, "
             f"{args.rounds} rounds x {args.steps} steps; fp32 matmul peak {peak:.1f} GFLOP/s",
             "", "| step | params | GFLOPs (fwd, 1 image) | ms / iteration | ms / iteration / GFLOP | "
             "x ultralytics (per round) | fraction of matmul peak |", "|---|---|---|---|---|---|---|"]
    base = [statistics.median(r["times"]) / r["gflops"] for r in runs["ultralytics"]]
    for name, results in runs.items():
        if not results:
            continue
        ms = 1000 * statistics.median(t for r in results for t in r["times"])
        gflops = results[0]["gflops"]
        per = [statistics.median(r["times"]) / r["gflops"] for r in results]
        ratio = f"{statistics.median(p / b for p, b in zip(per, base)):.2f}" if base else "-"
        # training = forward + backward (input and weight gradients): about 3x the forward's FLOPs
        fraction = 3 * gflops * args.batch / (ms / 1000) / peak
        label = name if name == "ultralytics" else f"turboyolo {name}"
        lines.append(f"| {label} | {results[0]['params'] / 1e6:.2f} M | {gflops:.2f} | {ms:.0f} | "
                     f"{ms / gflops:.0f} | {ratio} | {fraction:.2f} |")
    return lines


def detect_worker(arch: str, backend: str, rounds: int, repeats: int) -> dict:
    """Medians of turboyolo's whole call and of OpenCV's and onnxruntime's forward, alternating."""
    raise NotImplementedError


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all",
                        choices=("all", "train", "detect", "peak", "train-worker"))
    parser.add_argument("worker_args", nargs="*")
    parser.add_argument("--ultra-python", default=ULTRA_PYTHON)
    parser.add_argument("--size", type=int, default=416)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default="plain")
    args = parser.parse_args()
    if args.what == "peak":
        import torch

        torch.set_num_threads(1)
        print(json.dumps({"gflops": matmul_peak()}))
        return 0
    if args.what == "train-worker":
        size, batch, steps, warmup, variant = args.worker_args
        print(json.dumps(ours_worker(int(size), int(batch), int(steps), int(warmup), variant)))
        return 0
    print(f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}")
    if args.what in ("all", "train"):
        print("\n".join(train_table(args)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
