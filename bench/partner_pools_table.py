"""The seed table of ``bench/results/partner_pools_250.csv``: per data set, the 250-iteration defaults
with the partner pools (variant ``pools``) and with independent partner draws (``independent``,
``bench/defaults_250.py --partner-pool 0``): mAP@0.5 of ``best.pt`` at 416 per seed, mean, spread.

Spread: the sample standard deviation over the seeds (and min-max). The last column compares the
mAP@0.5 means: the pools' mean minus the independent draws', against the larger of the two spreads.

Usage: ``python bench/partner_pools_table.py [bench/results/partner_pools_250.csv]``
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict

VARIANTS = ("pools", "independent")


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/partner_pools_250.csv"
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    runs: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for row in rows:
        if row["best_416"]:
            runs[(row["data"], row["variant"])][int(row["seed"])] = row  # a later run replaces
    seeds = sorted({0, 1, 2} | {seed for by_seed in runs.values() for seed in by_seed})
    print("| data set | partners | " + " | ".join(f"seed {s}" for s in seeds)
          + " | mean | std | min-max | mAP@0.5:0.95 mean (std) | pools - independent |")
    print("|---|---|" + "---|" * len(seeds) + "---|---|---|---|---|")
    for data in sorted({key[0] for key in runs}):
        means: dict[str, tuple[float, float | None]] = {}
        for variant in VARIANTS:
            by_seed = runs.get((data, variant), {})
            cells = [f"{float(by_seed[s]['best_416']):.3f}" if s in by_seed else "-" for s in seeds]
            values = [float(row["best_416"]) for row in by_seed.values()]
            if not values:
                print(f"| {data} | {variant} | " + " | ".join(cells) + " | - | - | - | - | |")
                continue
            strict_values = [float(row["best_416_map50_95"]) for row in by_seed.values()]
            strict = f"{statistics.fmean(strict_values):.3f}"
            strict += f" ({statistics.stdev(strict_values):.3f})" if len(strict_values) > 1 else ""
            std = statistics.stdev(values) if len(values) > 1 else None
            means[variant] = (statistics.fmean(values), std)
            compare = ""
            if len(means) == len(VARIANTS):
                spread = max((s for _, s in means.values() if s is not None), default=None)
                compare = f"{means['pools'][0] - means['independent'][0]:+.3f}"
                compare += f" (spread {spread:.3f})" if spread is not None else ""
            print(f"| {data} | {variant} | " + " | ".join(cells) + f" | {means[variant][0]:.3f} | "
                  + ("-" if std is None else f"{std:.3f}") + f" | {min(values):.3f}-{max(values):.3f} | "
                  f"{strict} | {compare} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
