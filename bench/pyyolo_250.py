"""PyTorch-YOLOv3 1.8.0's trainer for the same ~250 iterations (trees or BCCD), scored like our runs.

Two parts. Run with turboyolo's Python, this script starts PyTorch-YOLOv3's own loop (``pytorchyolo
.train.run``, unmodified, in its venv ``--pyyolo-python``: ``pytorchyolo==1.8.0 --no-deps`` + ``numpy<2
pillow<10 imgaug==0.4.0 ...``) with its defaults, then evaluates the final weights with the code of
``turboyolo test`` at 416 and 512 (NMS IoU 0.45) and appends a row to the CSV of
``bench/defaults_250.py``.

What PyTorch-YOLOv3 gets: Darknet's ``yolov3-tiny.cfg`` (Debian ``darknet`` package; the pip wheel ships
no cfgs) for the data set's classes (``filters`` before each ``[yolo]`` to match), ``batch=8
subdivisions=1`` so one of its optimizer steps is one of our iterations of 8 images, and ``burn_in=20``
instead of 1000 (``--burn-in 0`` keeps the stock 1000, which ramps its LR linearly over the whole
~250-step run; the calibration in shared/research/trees-calibration.md used 20). Everything else is the
cfg's and the trainer's: Adam (its choice when the cfg names no optimizer) at lr 0.001, its imgaug
augmentation, CIoU + BCE loss, no EMA, no LR decay within 250 iterations. Pretrained weights: the
official ``yolov3-tiny.weights`` under the name ``yolov3-tiny.conv.15``, PyTorch-YOLOv3's convention for
a backbone cut (layers 0-14 loaded; the file cannot load whole into a cfg of another class count).
Trees: 37 tiles at batch 8 are 5 steps per epoch, 50 epochs; BCCD: 205 photos, 26 steps, 10 epochs.
``--seed`` is its ``--seed``.

With one class its class logit is never trained (``compute_loss`` adds a class loss only for nc > 1),
so scores are objectness x sigmoid(an untrained logit): evaluated as it trained. Its tiny max-pool
(size 2, stride 1) pads with zeros where ours ignores the outside; the weights are evaluated here
with ours.

Usage: ``PYTHONPATH=src .venv/bin/python bench/pyyolo_250.py --data bccd --seed 0 [--burn-in 0]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path

DARKNET_TINY = Path("/usr/share/darknet/cfg/yolov3-tiny.cfg")
EPOCHS = {"trees": 50, "bccd": 10, "shapes": 10}  # 5, 26 and 25 steps of 8 images per epoch: ~250 steps


def tiny_cfg(num_classes: int, burn_in: int | None) -> str:
    """Darknet's yolov3-tiny.cfg for ``num_classes`` classes, batch 8, subdivisions 1 and ``burn_in``
    (None: the cfg's own 1000)."""
    text = DARKNET_TINY.read_text()
    text = re.sub(r"(?m)^batch=\d+", "batch=8", text, count=1)
    text = re.sub(r"(?m)^subdivisions=\d+", "subdivisions=1", text, count=1)
    if burn_in is not None:
        text = re.sub(r"(?m)^burn_in=\d+", f"burn_in={burn_in}", text, count=1)
    return text.replace("filters=255", f"filters={3 * (5 + num_classes)}").replace("classes=80",
                                                                                  f"classes={num_classes}")


def inner(out: Path, data: Path, weights: Path, seed: int, epochs: int) -> None:
    """In PyTorch-YOLOv3's venv: its training loop, then its weights as a Darknet .weights file."""
    import numpy as np
    import torch
    from PIL import Image

    if "ANTIALIAS" not in dir(Image):
        Image.ANTIALIAS = Image.LANCZOS
    import pytorchyolo.train as train
    from pytorchyolo.models import load_model

    os.chdir(out)
    sys.argv = ["pytorchyolo-train", "--model", str(out / "yolov3-tiny.cfg"), "--data", str(data),
                "--epochs", str(epochs), "--pretrained_weights", str(weights), "--n_cpu", "1",
                "--checkpoint_interval", str(epochs), "--evaluation_interval", str(epochs),
                "--seed", str(seed)]
    train.run()
    model = load_model(str(out / "yolov3-tiny.cfg"))
    model.load_state_dict(torch.load(out / "checkpoints" / f"yolov3_ckpt_{epochs}.pth", map_location="cpu"))
    # Darknet header 0.2 (a 64-bit `seen`): a fresh model's header is all zeros, which reads as 0.0
    model.header_info = np.array([0, 2, 0, 0, 0], dtype=np.int32)
    model.save_darknet_weights(str(out / "final.weights"), cutoff=len(model.module_defs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="trees", help="trees, bccd or shapes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=None, help="its epochs (default: ~250 steps)")
    parser.add_argument("--burn-in", type=int, default=20, help="the cfg's burn_in (0: keep the stock 1000)")
    parser.add_argument("--pyyolo-python", default="/work/venvs/pyyolo/bin/python")
    parser.add_argument("--csv", default="bench/results/defaults_250.csv")
    parser.add_argument("--out", default="/tmp/defaults250/pyyolo")
    parser.add_argument("--inner", nargs=3, metavar=("OUT", "DATA", "WEIGHTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    epochs = args.epochs or EPOCHS[args.data]
    if args.inner:
        inner(Path(args.inner[0]), Path(args.inner[1]), Path(args.inner[2]), args.seed, epochs)
        return 0

    import time

    sys.path.insert(0, str(Path(__file__).parent))  # defaults_250 and bccd beside this file
    from defaults_250 import append_row, commit, data_file, machine

    from turboyolo import assets
    from turboyolo.formats.datasets import load_data_config
    from turboyolo.train.testing import TestArgs, TestRequest, run_test

    data = data_file(args.data)
    num_classes = len(load_data_config(data).names)
    burn_in = args.burn_in or None
    variant = f"pytorchyolo-1.8.0{'' if burn_in else '-stock-burn-in'}"
    out = Path(args.out) / args.data / f"{variant}-s{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "yolov3-tiny.cfg").write_text(tiny_cfg(num_classes, burn_in))
    cut = out / "yolov3-tiny.conv.15"
    if not cut.exists():
        cut.symlink_to(assets.fetch("yolov3-tiny"))
    started = time.perf_counter()
    subprocess.run([args.pyyolo_python, str(Path(__file__).resolve()), "--seed", str(args.seed),
                    "--epochs", str(epochs), "--inner", str(out), str(data), str(cut)], check=True)
    minutes = (time.perf_counter() - started) / 60
    scores = {}
    for size in (416, 512):
        options = TestArgs(img_size=size, workers=1, nms_thres=0.45)
        report = run_test(TestRequest(out / "final.weights", data, str(out / "yolov3-tiny.cfg"), options))
        scores[size], names = report.result, report.names
    images = len(Path(load_data_config(data).train[0]).read_text().split())  # its list of training images
    steps = -(-images // 8)  # batches per epoch, the last one partial
    row = {"date": datetime.datetime.now().isoformat(timespec="minutes"), "machine": machine(),
           "data": args.data, "arch": "yolov3-tiny", "variant": variant, "seed": args.seed,
           "changes": json.dumps({"trainer": "PyTorch-YOLOv3 1.8.0", "burn_in": burn_in or 1000}),
           "iterations": epochs * steps, "epochs": epochs, "train_minutes": "",
           "wall_minutes": f"{minutes:.2f}",
           "stop_reason": "epochs", "best_epoch": "", "best_416": "", "best_512": "",
           "last_416": f"{scores[416].map50:.4f}", "last_512": f"{scores[512].map50:.4f}",
           "best_416_map50_95": f"{scores[416].map50_95:.4f}",
           "per_class_416": json.dumps({n: round(float(a), 4)
                                        for n, a in zip(names, scores[416].ap50_per_class)}),
           "run_dir": str(out), "commit": commit()}
    append_row(Path(args.csv), row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
