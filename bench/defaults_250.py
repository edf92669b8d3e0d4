"""One ~250-iteration fine-tune with `turboyolo train`'s defaults (plus changes), scored, appended to a CSV.

The set-up a new user has: a ``turboyolo cfg`` network for the data set's class count (batch 8,
subdivisions 1, 416), ``--weights yolov3-tiny`` (or ``yolov4-tiny``), ``--epochs`` giving about 250
iterations, nothing else. ``--set name=value`` changes one training option by its flat name (values read
as YAML), ``--net key=value`` one ``[net]`` value of the generated cfg. ``best.pt`` and ``last.pt`` are
then evaluated by the code of ``turboyolo test`` at 416 (and 512) on the val split, NMS IoU 0.45.
The measure is per iteration: the machine's speed moves only the minutes.

Data sets: ``trees`` (37 train / 10 val tiles, 1 class; 5 iterations per epoch: 50 epochs) and ``bccd``
(205 / 87 photos, 3 classes, bench/bccd.py; 26 iterations per epoch: 10 epochs); ``shapes`` (200 / 60
synthetic pictures of large objects, 3 classes, bench/shapes.py; 25 iterations per epoch: 10 epochs).

``--config trees`` runs a recipe instead (its network, weights and values over the defaults).

``--partner-pool 0`` draws every mosaic/mixup partner independently from the whole data set (the
behaviour before the partner pools; ``TURBOYOLO_PARTNER_POOL``, a test-only switch of the loader).

Usage::

    .venv/bin/python bench/defaults_250.py --data bccd --variant defaults --seed 0 [--set mosaic=0]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import time
from pathlib import Path

from turboyolo.formats.yamlfile import parse_yaml

FIELDS = ("date", "machine", "data", "arch", "variant", "seed", "changes", "iterations", "epochs",
          "train_minutes", "wall_minutes", "stop_reason", "best_epoch", "best_416", "best_512", "last_416",
          "last_512", "best_416_map50_95", "per_class_416", "run_dir", "commit")
EPOCHS = {"trees": 50, "bccd": 10, "shapes": 10}  # ~250 iterations of 8 images: 5, 26 and 25 per epoch


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return f"{model}, {os.cpu_count()} CPUs"


def commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=Path(__file__).parent).stdout.strip()
        return out + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return ""


def append_row(path: Path, row: dict) -> None:
    """One run's row at the end of the CSV (its header first when the file is new); echoed as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, FIELDS)
        if new:
            writer.writeheader()
        writer.writerow(row)
    print(json.dumps(row))


def data_file(name: str) -> Path:
    from turboyolo import assets

    if name == "trees":
        from turboyolo.data.trees import build_trees

        return build_trees(assets.cache_dir() / "datasets" / "trees") / "trees.data"
    if name == "bccd":
        from bccd import DEFAULT_SOURCE, build_bccd

        return build_bccd(DEFAULT_SOURCE, assets.cache_dir() / "datasets" / "bccd")
    if name == "shapes":
        from shapes import build_shapes

        out = assets.cache_dir() / "datasets" / "shapes"
        return out / "shapes.data" if (out / "shapes.data").exists() else build_shapes(out)
    return Path(name)


def parse_pairs(items: list[str]) -> dict:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        out[name] = parse_yaml(value, name)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="trees, bccd, shapes or a .data/.yaml file")
    parser.add_argument("--arch", default="yolov3-tiny")
    parser.add_argument("--variant", required=True, help="name of the row (what changed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=None, help="default: ~250 iterations (a recipe's own)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--net", action="append", default=[], metavar="KEY=VALUE",
                        help="a [net] value of the generated cfg")
    parser.add_argument("--config", default=None,
                        help="a recipe (e.g. trees) instead of the generated cfg and the defaults")
    parser.add_argument("--partner-pool", type=int, default=None, metavar="N",
                        help="batches per mosaic/mixup partner pool (0: partners drawn independently from "
                             "the whole set, the behaviour before the pools); default: the loader's own")
    parser.add_argument("--csv", default="bench/results/defaults_250.csv")
    parser.add_argument("--project", default="/tmp/defaults250")
    args = parser.parse_args()

    import torch

    from turboyolo import assets
    from turboyolo.data.pipeline import PARTNER_POOL_ENV
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.formats.datasets import load_data_config
    from turboyolo.model.loading import read_checkpoint
    from turboyolo.model.zoo import make_spec
    from turboyolo.train.config import TrainConfig, read_config
    from turboyolo.train.fit import fit
    from turboyolo.train.testing import TestArgs, TestRequest, run_test

    code = commit()  # the code this run imports (the tree may move while it trains)
    data = data_file(args.data)
    num_classes = len(load_data_config(data).names)
    changes, net = parse_pairs(args.set), parse_pairs(args.net)
    pool = {} if args.partner_pool is None else {"partner_pool": args.partner_pool}
    if args.partner_pool is not None:  # the loader's test-only switch (read where the loader is built)
        os.environ[PARTNER_POOL_ENV] = str(args.partner_pool)
    project = Path(args.project) / args.data / f"{args.variant}-s{args.seed}"
    project.mkdir(parents=True, exist_ok=True)
    if args.config:  # a recipe: its cfg, weights, epochs and data-specific values over the defaults
        config = TrainConfig.build(data=str(data), base=read_config(args.config), project=str(project),
                                   name="run", seed=args.seed,
                                   **({"epochs": args.epochs} if args.epochs else {}), **changes)
    else:
        spec = make_spec(args.arch, num_classes=num_classes, batch=8, subdivisions=1)
        if net:
            spec = spec.with_net(**{k: tuple(v) if isinstance(v, list) else v for k, v in net.items()})
        cfg = write_cfg(spec, project / f"{args.arch}-{num_classes}c.cfg")
        weights = assets.fetch(args.arch)
        epochs = args.epochs or EPOCHS.get(args.data, 30)
        options = {"epochs": epochs, "workers": 1, "project": str(project), "name": "run", "seed": args.seed,
                   "checkpoint_interval": 0, **changes}
        config = TrainConfig.build(str(cfg), str(data), str(weights), **options)
    torch.set_num_threads(torch.multiprocessing.cpu_count())
    started = time.perf_counter()
    result = fit(config, quiet=not os.environ.get("VERBOSE"))
    wall = (time.perf_counter() - started) / 60
    weights_dir = result.run_dir / "weights"
    scores: dict = {}
    for which in ("best", "last"):
        path = weights_dir / f"{which}.pt"
        for size in (416, 512):
            if not path.exists():
                scores[f"{which}_{size}"] = None
                continue
            test = TestArgs(img_size=size, workers=1, nms_thres=0.45)
            report = run_test(TestRequest(path, data, test=test))
            scores[f"{which}_{size}"], names = report.result, report.names
    best = weights_dir / "best.pt"
    best_epoch = read_checkpoint(best).get("epoch") if best.exists() else None
    b416 = scores.get("best_416")
    per_class = ""
    if b416 is not None:
        per_class = json.dumps({n: round(float(a), 4) for n, a in zip(names, b416.ap50_per_class)})
    row = {
        "date": datetime.datetime.now().isoformat(timespec="minutes"), "machine": machine(),
        "data": args.data, "arch": args.arch, "variant": args.variant, "seed": args.seed,
        "changes": json.dumps({**changes, **({"net": net} if net else {}),
                               **pool,
                               **({"config": args.config} if args.config else {})}, sort_keys=True),
        "iterations": result.iterations, "epochs": result.epochs, "train_minutes": f"{result.minutes:.2f}",
        "wall_minutes": f"{wall:.2f}", "stop_reason": result.stop_reason, "best_epoch": best_epoch,
        **{key: (f"{value.map50:.4f}" if value is not None else "") for key, value in scores.items()},
        "best_416_map50_95": f"{b416.map50_95:.4f}" if b416 is not None else "",
        "per_class_416": per_class, "run_dir": str(result.run_dir), "commit": code,
    }
    append_row(Path(args.csv), row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
