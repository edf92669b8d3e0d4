"""PyTorch-YOLOv3 1.8.0's trainer for the same 250 iterations on the trees tiles, scored like our runs.

Two parts. Run with turboyolo's Python, this script starts PyTorch-YOLOv3's own loop (``pytorchyolo
.train.run``, unmodified, in its venv ``--pyyolo-python``: ``pytorchyolo==1.8.0 --no-deps`` + ``numpy<2
pillow<10 imgaug==0.4.0 ...``) on the trees sample with its defaults, then evaluates the final weights
with the code of ``turboyolo test`` at 416 and 512 (NMS IoU 0.45, as the demo) and appends a row to the
CSV of ``bench/recipe_250.py``.

What PyTorch-YOLOv3 gets: Darknet's ``yolov3-tiny.cfg`` (Debian ``darknet`` package; the pip wheel ships
no cfgs) for one class (``classes=1``, ``filters=18`` before each ``[yolo]``), ``batch=8
subdivisions=1`` so one of its optimizer steps is one of our iterations of 8 images, and ``burn_in=20``
instead of 1000 (1000 would keep the LR ramping for the whole 250-iteration run; the calibration in
/work/shared/research/trees-calibration.md used 20). Everything else is the cfg's and the trainer's:
Adam (its choice when the cfg names no optimizer) at lr 0.001, its imgaug augmentation, CIoU + BCE
loss, no EMA, no LR decay within 250 iterations. Pretrained weights: the official
``yolov3-tiny.weights`` under the name ``yolov3-tiny.conv.15``, PyTorch-YOLOv3's convention for a
backbone cut (layers 0-14 loaded; the file cannot load whole into a 1-class cfg). 37 tiles at batch 8
are 5 steps per epoch, so 50 epochs are 250 steps. ``--seed`` is its ``--seed``.

Its class logit is never trained for one class (``compute_loss`` adds a class loss only for nc > 1),
so scores are objectness x sigmoid(an untrained logit): evaluated as it trained. Its tiny max-pool
(size 2, stride 1) pads with zeros where ours ignores the outside; the weights are evaluated here
with ours.

Usage: ``PYTHONPATH=src .venv/bin/python bench/pyyolo_250.py --seed 0``
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
EPOCHS = 50  # 5 steps of 8 images per epoch on the 37 training tiles


def tiny_cfg_for_trees() -> str:
    text = DARKNET_TINY.read_text()
    text = re.sub(r"(?m)^batch=\d+", "batch=8", text, count=1)
    text = re.sub(r"(?m)^subdivisions=\d+", "subdivisions=1", text, count=1)
    text = re.sub(r"(?m)^burn_in=\d+", "burn_in=20", text, count=1)
    text = text.replace("filters=255", "filters=18").replace("classes=80", "classes=1")
    return text


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
    sys.argv = ["pytorchyolo-train", "--model", str(out / "yolov3-tiny-trees.cfg"), "--data", str(data),
                "--epochs", str(epochs), "--pretrained_weights", str(weights), "--n_cpu", "1",
                "--checkpoint_interval", str(epochs), "--evaluation_interval", str(epochs),
                "--seed", str(seed)]
    train.run()
    model = load_model(str(out / "yolov3-tiny-trees.cfg"))
    model.load_state_dict(torch.load(out / "checkpoints" / f"yolov3_ckpt_{epochs}.pth", map_location="cpu"))
    # Darknet header 0.2 (a 64-bit `seen`): a fresh model's header is all zeros, which reads as 0.0
    model.header_info = np.array([0, 2, 0, 0, 0], dtype=np.int32)
    model.save_darknet_weights(str(out / "final.weights"), cutoff=len(model.module_defs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="its epochs (50 = 250 steps)")
    parser.add_argument("--pyyolo-python", default="/work/venvs/pyyolo/bin/python")
    parser.add_argument("--csv", default="bench/results/recipe_250.csv")
    parser.add_argument("--out", default="/tmp/recipe250/pyyolo")
    parser.add_argument("--inner", nargs=3, metavar=("OUT", "DATA", "WEIGHTS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner(Path(args.inner[0]), Path(args.inner[1]), Path(args.inner[2]), args.seed, args.epochs)
        return 0

    import time

    from turboyolo import assets
    from turboyolo.commands.demo import DEMO_NMS
    from turboyolo.data.trees import build_trees
    from turboyolo.train.evaluation import TestOptions, test_weights

    sys.path.insert(0, str(Path(__file__).parent))
    from recipe_250 import append_row, machine

    trees = build_trees(assets.cache_dir() / "datasets" / "trees")
    out = Path(args.out) / f"s{args.seed}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "yolov3-tiny-trees.cfg").write_text(tiny_cfg_for_trees())
    cut = out / "yolov3-tiny.conv.15"
    if not cut.exists():
        cut.symlink_to(assets.fetch("yolov3-tiny"))
    started = time.perf_counter()
    subprocess.run([args.pyyolo_python, str(Path(__file__).resolve()), "--seed", str(args.seed),
                    "--epochs", str(args.epochs), "--inner",
                    str(out), str(trees / "trees.data"), str(cut)], check=True)
    minutes = (time.perf_counter() - started) / 60
    scores = {}
    for size in (416, 512):
        options = TestOptions(cfg=str(out / "yolov3-tiny-trees.cfg"), img_size=size, workers=1,
                              nms_thres=DEMO_NMS)
        scores[size], _ = test_weights(out / "final.weights", trees / "trees.data", options,
                                       log=lambda _: None)
    row = {"date": datetime.datetime.now().isoformat(timespec="minutes"), "machine": machine(),
           "variant": "pytorchyolo-1.8.0", "seed": args.seed,
           "changes": json.dumps({"trainer": "PyTorch-YOLOv3"}),
           "iterations": args.epochs * 5, "epochs": args.epochs, "train_minutes": "",
           "wall_minutes": f"{minutes:.2f}",
           "stop_reason": "epochs", "best_epoch": "", "best_416": "", "best_512": "",
           "last_416": f"{scores[416].map50:.4f}", "last_512": f"{scores[512].map50:.4f}",
           "best_512_map50_95": "", "run_dir": str(out),
           "commit": os.environ.get("TURBOYOLO_COMMIT", "")}
    append_row(Path(args.csv), row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
