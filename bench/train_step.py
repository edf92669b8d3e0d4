"""Training-step time: turboyolo vs PyTorch-YOLOv3 (pytorchyolo 1.8.0), same model, batch and data.

One step = uint8 batch -> float on the device, forward, loss, backward, optimizer step (SGD, momentum),
zero_grad. turboyolo's step also clips the gradient norm and (``--ema``) updates EMA weights, as it
does in training. PyTorch-YOLOv3 runs in its own virtualenv (``--peer-python``), in a subprocess, with
its ``load_model`` and ``compute_loss``. Rounds alternate between the two so that load from other
processes hits both alike; each round times ``--steps`` steps after ``--warmup``; the median step is
reported. One intra-op thread each by default (``--threads``).

    python bench/train_step.py --peer-python /tmp/pyyolo-venv/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEER_SNIPPET = r"""
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[5]))
from pytorchyolo.models import load_model
from pytorchyolo.utils.loss import compute_loss
cfg = sys.argv[1]
size, batch, steps, warmup = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[6])
torch.manual_seed(0)
model = load_model(cfg)
model.train()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
targets = torch.load(sys.argv[7])
times = []
for i in range(warmup + steps):
    begin = time.perf_counter()
    imgs = images.float() / 255.0
    outputs = model(imgs)
    loss, _ = compute_loss(outputs, targets, model)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    times.append(time.perf_counter() - begin)
print(json.dumps(times[warmup:]))
"""


def targets_for(batch: int):
    import torch

    generator = torch.Generator().manual_seed(0)
    rows = []
    for image in range(batch):
        for _ in range(5):
            cx, cy = torch.rand(2, generator=generator) * 0.6 + 0.2
            w, h = torch.rand(2, generator=generator) * 0.3 + 0.05
            rows.append([image, int(torch.randint(0, 80, (1,), generator=generator)), cx, cy, w, h])
    return torch.tensor(rows, dtype=torch.float32)


def ours(cfg: Path, size: int, batch: int, steps: int, warmup: int, ema: bool, channels_last: bool,
         compile_model: bool, threads: int, obj_iou: bool = True) -> list[float]:
    import torch

    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.model.darknet import Darknet
    from turboyolo.train.engine import StepOptions, TrainState, _step
    from turboyolo.train.loss import YoloLoss
    from turboyolo.train.optim import ModelEMA, Schedule

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    spec = parse_cfg(cfg)
    model = Darknet(spec).train()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    forward = torch.compile(model) if compile_model else model
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    state = TrainState(model=model, optimizer=optimizer, schedule=Schedule.from_net(spec.net),
                       loss_fn=YoloLoss(model.heads, obj_iou=obj_iou), images_per_iteration=batch,
                       subdivisions=1,
                       ema=ModelEMA(model) if ema else None)
    options = StepOptions(channels_last=channels_last)
    from turboyolo.data.loader import move_to_device

    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
    targets = targets_for(batch)
    times = []
    for _ in range(warmup + steps):
        begin = time.perf_counter()
        x = move_to_device(images, "cpu", channels_last=channels_last)
        total, _ = state.loss_fn(forward(x), targets, (size, size))
        (total / batch).backward()
        _step(state, options)
        times.append(time.perf_counter() - begin)
    return times[warmup:]


def peer(python: str, cfg: Path, size: int, batch: int, steps: int, warmup: int, threads: int,
         targets_path: Path) -> list[float]:
    command = [python, "-c", PEER_SNIPPET, str(cfg), str(size), str(batch), str(steps), str(threads),
               str(warmup), str(targets_path)]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", default="/tmp/pyyolo-venv/bin/python")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", default="plain,ema,channels_last",
                        help="comma list of turboyolo variants: plain, ema, channels_last, compile, "
                             "no_obj_iou (objectness target 1 instead of the trainer's default IoU)")
    args = parser.parse_args()

    import torch

    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec

    work = Path(tempfile.mkdtemp(prefix="train-step-"))
    cfg = write_cfg(make_spec("yolov3-tiny", num_classes=80, width=args.size, height=args.size,
                              batch=args.batch, subdivisions=1), work / "yolov3-tiny.cfg")
    targets_path = work / "targets.pt"
    torch.save(targets_for(args.batch), targets_path)
    variants = [v for v in args.variants.split(",") if v]
    results: dict[str, list[float]] = {"pytorchyolo": []}
    for name in variants:
        results[f"turboyolo {name}"] = []
    for round_index in range(args.rounds):
        results["pytorchyolo"] += peer(args.peer_python, cfg, args.size, args.batch, args.steps, args.warmup,
                                       args.threads, targets_path)
        for name in variants:
            results[f"turboyolo {name}"] += ours(cfg, args.size, args.batch, args.steps, args.warmup,
                                                 ema=name == "ema", channels_last=name == "channels_last",
                                                 compile_model=name == "compile", threads=args.threads,
                                                 obj_iou=name != "no_obj_iou")
        print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    base = statistics.median(results["pytorchyolo"])
    print(f"yolov3-tiny, batch {args.batch}, {args.size} px, CPU, {args.threads} thread(s), "
          f"{args.rounds} x {args.steps} steps")
    print(f"{'implementation':<28} {'median s/step':>13} {'vs pytorchyolo':>15}")
    for name, times in results.items():
        median = statistics.median(times)
        print(f"{name:<28} {median:13.4f} {100 * (median / base - 1):+14.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
