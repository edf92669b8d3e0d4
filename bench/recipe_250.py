"""One 250-iteration trees fine-tune (the demo recipe, with changes) and its scores, appended to a CSV.

The measure is per iteration, so the machine's speed moves only the minutes: the demo's recipe
(``turboyolo train --config trees``: src/turboyolo/resources/recipes/trees.yaml) for ``--iterations`` (250
of 8 images at 416), with any training option changed by ``--set name=value`` (flat option names, values
read as YAML), then
``best.pt`` and the final weights (``last.pt``'s EMA) evaluated on the trees val split by the code of
``turboyolo test`` at 416 and at 512 (NMS IoU 0.45, as the demo). One row per run goes to ``--csv``.

Usage::

    PYTHONPATH=src .venv/bin/python bench/recipe_250.py --variant mosaic --seed 0 --set mosaic=0.5
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import time
from pathlib import Path

import yaml

FIELDS = ("date", "machine", "variant", "seed", "changes", "iterations", "epochs", "train_minutes",
          "wall_minutes", "stop_reason", "best_epoch", "best_416", "best_512", "last_416", "last_512",
          "best_512_map50_95", "run_dir", "commit")


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return f"{model}, {os.cpu_count()} CPUs"


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", required=True, help="name of the row (what changed)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=250)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a training option by its flat name (repeatable)")
    parser.add_argument("--lr", type=float, default=None, help="the peak learning rate (--lr)")
    parser.add_argument("--csv", default="bench/results/recipe_250.csv")
    parser.add_argument("--project", default="/tmp/recipe250")
    args = parser.parse_args()

    import torch

    from turboyolo import assets
    from turboyolo.data.trees import build_trees
    from turboyolo.model.loading import read_checkpoint
    from turboyolo.train.config import TrainConfig, read_config
    from turboyolo.train.evaluation import TestOptions, test_weights
    from turboyolo.train.fit import fit

    changes = {}
    for item in args.set:
        name, _, value = item.partition("=")
        changes[name] = yaml.safe_load(value)
    if args.lr:
        changes["lr"] = args.lr
    recipe = read_config("trees")
    trees = build_trees(assets.cache_dir() / "datasets" / "trees")
    started = time.perf_counter()
    project = Path(args.project) / f"{args.variant}-s{args.seed}"
    config = TrainConfig.build(data=str(trees / "trees.data"), base=recipe, seed=args.seed,
                               max_batches=args.iterations, project=str(project), **changes)
    torch.set_num_threads(torch.multiprocessing.cpu_count())
    result = fit(config)
    wall = (time.perf_counter() - started) / 60
    weights_dir = result.run_dir / "weights"
    scores = {}
    for which in ("best", "last"):
        path = weights_dir / f"{which}.pt"
        for size in (416, 512):
            if not path.exists():
                scores[f"{which}_{size}"] = None
                continue
            options = TestOptions(img_size=size, workers=1, nms_thres=recipe["nms_thres"])
            metrics, _ = test_weights(path, trees / "trees.data", options, log=lambda _: None)
            scores[f"{which}_{size}"] = metrics
    best = weights_dir / "best.pt"
    best_epoch = read_checkpoint(best).get("epoch") if best.exists() else None
    row = {
        "date": datetime.datetime.now().isoformat(timespec="minutes"), "machine": machine(),
        "variant": args.variant, "seed": args.seed,
        "changes": json.dumps(changes, sort_keys=True),
        "iterations": result.iterations, "epochs": result.epochs, "train_minutes": f"{result.minutes:.2f}",
        "wall_minutes": f"{wall:.2f}", "stop_reason": result.stop_reason, "best_epoch": best_epoch,
        **{key: (f"{value.map50:.4f}" if value is not None else "") for key, value in scores.items()},
        "best_512_map50_95": f"{scores['best_512'].map50_95:.4f}" if scores["best_512"] else "",
        "run_dir": str(result.run_dir), "commit": os.environ.get("TURBOYOLO_COMMIT", ""),
    }
    append_row(Path(args.csv), row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
