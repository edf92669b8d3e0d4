"""The table of ``bench/results/recipe_250.csv``: per variant, best.pt's mAP@0.5 at 416 and 512 per seed
and their mean (markdown, for docs/PERFORMANCE.md). Seeds 0 and 1 have their columns (the bar names
them); further seeds are listed in the last column and enter the means.

Usage: ``python bench/recipe_table.py [bench/results/recipe_250.csv]``
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/recipe_250.csv"
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    runs: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for row in rows:
        runs[(row["variant"], row["changes"])][int(row["seed"])] = row
    print("| variant | changes | seed 0: 416 / 512 | seed 1: 416 / 512 | mean 416 | mean 512 | "
          "mean mAP@0.5:0.95 (512) | minutes | other seeds: 416 / 512 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (variant, changes), seeds in runs.items():
        cells, at416, at512, strict = [], [], [], []
        order = sorted(set(seeds) | {0, 1})  # seeds 0 and 1 always have a cell ("-" when not run)
        for seed in order:
            row = seeds.get(seed)
            if row is None:
                cells.append("-")
                continue
            a, b = (row["best_416"] or row["last_416"]), (row["best_512"] or row["last_512"])
            cells.append(f"{float(a):.3f} / {float(b):.3f}")
            at416.append(float(a))
            at512.append(float(b))
            if row["best_512_map50_95"]:
                strict.append(float(row["best_512_map50_95"]))
        mean = lambda values: f"{sum(values) / len(values):.3f}" if values else "-"  # noqa: E731
        minutes = "/".join(r["train_minutes"] or r["wall_minutes"] for r in seeds.values())
        others = ", ".join(f"seed {seed}: {cell}" for seed, cell in zip(order, cells) if seed > 1) or "-"
        print(f"| {variant} | `{changes}` | {cells[0]} | {cells[1]} | {mean(at416)} | {mean(at512)} | "
              f"{mean(strict)} | {minutes} | {others} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
