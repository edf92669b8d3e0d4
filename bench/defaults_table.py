"""The tables of ``bench/results/defaults_250.csv`` (rows written by bench/defaults_250.py and
bench/pyyolo_250.py): per data set, network and variant, mAP@0.5 at 416 per seed (the CSV's ``changes``
column says what each variant changed).

A row's score is ``best.pt`` re-evaluated at 416 (``last`` for PyTorch-YOLOv3, which keeps no best); the
mean is over every seed present.

Usage: ``python bench/defaults_table.py [bench/results/defaults_250.csv]``
"""

from __future__ import annotations

import csv
import sys
from collections import defaultdict


def score(row: dict, size: int = 416) -> float | None:
    value = row.get(f"best_{size}") or row.get(f"last_{size}")
    return float(value) if value else None


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/defaults_250.csv"
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    groups: dict[tuple[str, str, str], dict[int, dict]] = defaultdict(dict)
    for row in rows:
        groups[(row["data"], row["arch"], row["variant"])][int(row["seed"])] = row  # a later run replaces
    for data in sorted({key[0] for key in groups}):
        print(f"\n{data}: mAP@0.5 of best.pt at 416 (512), per seed; mAP@0.5:0.95 at 416, mean")
        print("| network | variant | seed 0 | seed 1 | mean 416 | mean 0.5:0.95 | commit |")
        print("|---|---|---|---|---|---|---|")
        for (name, arch, variant), seeds in sorted(groups.items()):
            if name != data:
                continue
            cells, values, strict = [], [], []
            for seed in (0, 1):
                row = seeds.get(seed)
                if row is None or score(row) is None:
                    cells.append("-")
                    continue
                values.append(score(row))
                high = score(row, 512)
                cells.append(f"{score(row):.3f}" + (f" ({high:.3f})" if high is not None else ""))
                if row.get("best_416_map50_95"):
                    strict.append(float(row["best_416_map50_95"]))
            mean = f"{sum(values) / len(values):.3f}" if values else "-"
            mean_strict = f"{sum(strict) / len(strict):.3f}" if strict else "-"
            commits = "/".join(sorted({row["commit"] for row in seeds.values()}))
            print(f"| {arch} | {variant} | {cells[0]} | {cells[1]} | {mean} | {mean_strict} | {commits} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
