"""The tests' one home for synthetic data: tiny detection sets (coloured boxes) and tiny cfgs.

* :func:`make_image_folder`: ``images/`` + ``labels/`` + names, no splits (data pipeline, anchors, label);
* :func:`make_dataset`: train/val splits, list files and a ``.data`` (training, evaluation);
* :func:`random_batch_norm`: batch-norm statistics of a trained model's kind (folding, inference copies).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch
from PIL import Image

from turboyolo.formats.darknet_cfg import write_cfg
from turboyolo.formats.labels import write_yolo_labels
from turboyolo.model.layers import DarknetBatchNorm2d
from turboyolo.model.zoo import make_spec

COLORS = ((255, 60, 60), (60, 255, 60))


def read_labels(path: Path) -> np.ndarray:
    """The rows of a YOLO label file as the scan reads them (float32 [N, 5]); the test fails on a bad one."""
    from turboyolo.formats.labels import parse_yolo_labels
    from turboyolo.formats.text import read_text

    check = parse_yolo_labels(read_text(path))
    assert check.error is None, f"{path}: {check.error}"
    return check.rows


def make_dataset(
    root: Path,
    num_train: int,
    num_val: int,
    size: int = 64,
    num_classes: int = 1,
    seed: int = 0,
    val_is_train: bool = False,
) -> Path:
    """Write images/{train,val}, labels/{train,val}, train.txt, valid.txt, names and d.data under root."""
    rng = np.random.default_rng(seed)
    lists = {}
    for split, count in (("train", num_train), ("val", num_val)):
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        paths = []
        for index in range(count):
            image = rng.integers(0, 40, (size, size, 3), dtype=np.uint8)
            rows = []
            for _ in range(int(rng.integers(1, 3))):
                side = int(rng.integers(size // 5, size // 2.5))
                x0, y0 = (int(v) for v in rng.integers(0, size - side, 2))
                cls = int(rng.integers(0, num_classes))
                image[y0 : y0 + side, x0 : x0 + side] = COLORS[cls]
                rows.append(
                    f"{cls} {(x0 + side / 2) / size:.6f} {(y0 + side / 2) / size:.6f} "
                    f"{side / size:.6f} {side / size:.6f}"
                )
            path = root / "images" / split / f"{split}{index}.png"
            Image.fromarray(image).save(path)
            (root / "labels" / split / f"{split}{index}.txt").write_text("\n".join(rows) + "\n")
            paths.append(str(path))
        lists[split] = paths
    if val_is_train:
        lists["val"] = lists["train"]
    (root / "train.txt").write_text("\n".join(lists["train"]) + "\n")
    (root / "valid.txt").write_text("\n".join(lists["val"]) + "\n")
    (root / "names").write_text("\n".join(f"c{k}" for k in range(num_classes)) + "\n")
    data = root / "d.data"
    data.write_text(
        f"classes={num_classes}\ntrain={root / 'train.txt'}\nvalid={root / 'valid.txt'}\n"
        f"names={root / 'names'}\n"
    )
    return data


def tiny_cfg(
    path: Path, num_classes: int = 1, size: int = 64, batch: int = 4, subdivisions: int = 1, **net
) -> Path:
    anchors = ((6, 6), (10, 10), (14, 14), (18, 18), (24, 24), (30, 30))
    spec = make_spec(
        "yolov3-tiny",
        num_classes=num_classes,
        width=size,
        height=size,
        batch=batch,
        subdivisions=subdivisions,
        learning_rate=net.pop("learning_rate", 0.01),
        anchors=anchors,
    )
    # A far-away step instead of policy=constant: write_cfg renders empty steps as an unparsable "steps=".
    spec = spec.with_net(
        burn_in=net.pop("burn_in", 0),
        max_batches=net.pop("max_batches", 0),
        policy="steps",
        steps=(10**6,),
        scales=(1.0,),
        **net,
    )
    return write_cfg(spec, path)


MICRO_CFG = """[net]
batch={batch}
subdivisions={subdivisions}
width={size}
height={size}
channels=3
momentum=0.9
decay=0.0005
learning_rate={learning_rate}
burn_in={burn_in}
max_batches={max_batches}
policy=steps
steps=1000000
scales=1
{extra}

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=32
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=32
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=64
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=64
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=64
size=3
stride=1
pad=1
activation=leaky

[convolutional]
size=1
stride=1
pad=1
filters={filters}
activation=linear

[yolo]
mask=3,4,5
anchors=6,6, 10,10, 14,14, 18,18, 24,24, 30,30
classes={classes}
num=6
jitter=0
ignore_thresh=.7
truth_thresh=1
random=0

[route]
layers=-3

[upsample]
stride=2

[route]
layers=-1,8

[convolutional]
batch_normalize=1
filters=32
size=3
stride=1
pad=1
activation=leaky

[convolutional]
size=1
stride=1
pad=1
filters={filters}
activation=linear

[yolo]
mask=0,1,2
anchors=6,6, 10,10, 14,14, 18,18, 24,24, 30,30
classes={classes}
num=6
jitter=0
ignore_thresh=.7
truth_thresh=1
random=0
"""


def micro_cfg(
    path: Path,
    num_classes: int = 1,
    size: int = 64,
    batch: int = 4,
    subdivisions: int = 1,
    learning_rate: float = 0.001,
    burn_in: int = 0,
    max_batches: int = 0,
    extra: str = "",
) -> Path:
    """A 16-64 filter two-head network: fast enough on two CPU cores to train in seconds."""
    path.write_text(
        MICRO_CFG.format(
            batch=batch,
            subdivisions=subdivisions,
            size=size,
            learning_rate=learning_rate,
            burn_in=burn_in,
            max_batches=max_batches,
            extra=extra,
            filters=3 * (5 + num_classes),
            classes=num_classes,
        )
    )
    return path


def make_image_folder(root, count=10, size=(90, 120), seed=0, ext=".jpg", num_classes=2):
    """``root/images/img000<ext>...`` with coloured boxes on a plain background, ``root/labels/*.txt`` and
    ``root/k.names`` (``num_classes`` names); image sizes vary a little around ``size`` (h, w).
    Returns the image paths."""
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "k.names").write_text("".join(f"{chr(97 + k)}\n" for k in range(num_classes)))
    paths = []
    for i in range(count):
        h, w = size[0] + 7 * (i % 3), size[1] + 5 * (i % 4)
        image = np.full((h, w, 3), rng.integers(0, 255, 3), np.uint8)
        rows = []
        for _ in range(1 + i % 3):
            bw, bh = rng.uniform(0.1, 0.4, 2)
            cx, cy = rng.uniform(bw / 2, 1 - bw / 2), rng.uniform(bh / 2, 1 - bh / 2)
            x1, y1 = int((cx - bw / 2) * w), int((cy - bh / 2) * h)
            x2, y2 = int((cx + bw / 2) * w), int((cy + bh / 2) * h)
            image[y1:y2, x1:x2] = rng.integers(0, 255, 3)
            rows.append([i % num_classes, cx, cy, bw, bh])
        path = root / "images" / f"img{i:03d}{ext}"
        cv2.imwrite(str(path), cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
        write_yolo_labels(root / "labels" / f"img{i:03d}.txt", rows)
        paths.append(path)
    return paths


def random_batch_norm(model: torch.nn.Module, seed: int = 0) -> None:
    """Give every Darknet batch norm of ``model`` random running statistics and affine terms (a fresh
    model's are 0 / 1, which folding would leave untested)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, DarknetBatchNorm2d):
                channels = module.num_features
                module.running_mean.copy_(torch.randn(channels, generator=gen) * 0.1)
                module.running_var.copy_(0.5 + torch.rand(channels, generator=gen))
                module.weight.copy_(0.5 + torch.rand(channels, generator=gen))
                module.bias.copy_(torch.randn(channels, generator=gen) * 0.1)
