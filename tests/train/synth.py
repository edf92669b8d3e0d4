"""Tiny synthetic detection sets (coloured squares on noise) and tiny cfgs for training tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from turboyolo.formats.darknet_cfg import write_cfg
from turboyolo.model.zoo import make_spec

COLORS = ((255, 60, 60), (60, 255, 60))


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
