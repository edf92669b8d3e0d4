"""Anchors fitted on a sample of the boxes against the fit on all of them (autoanchor's sample size).

For each data set: the training split's box sizes at the training size, k-means anchors (the start's
fit: 10 restarts, seed 0) on every box, then on seeded random samples of ``--samples`` boxes; each fit
scored on every box (mean best IoU and best-possible recall at IoU 0.5, what `turboyolo anchors`
reports). Prints a Markdown table; CPU seconds are this process's.

Usage::

    PYTHONPATH=src .venv/bin/python bench/anchor_sample.py --data trees bccd /work/scale/s120k/scale.data \
        --size 416 416 320 [--num 6 9] [--samples 5000 10000 20000 50000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from turboyolo.data.anchors import anchor_fit, kmeans_anchors, letterbox_box_sizes  # noqa: E402
from turboyolo.data.scan import scan_dataset  # noqa: E402


def box_sizes(data: str, size: int):
    from defaults_250 import data_file

    samples = [s for s in scan_dataset(data_file(data), "train").samples if len(s.labels)]
    return letterbox_box_sizes([s.labels for s in samples], [s.hw for s in samples], (size, size))


def fit_row(name: str, boxes, num: int, sample: int | None, full) -> dict:
    start = time.process_time()
    fit = kmeans_anchors(boxes, num, sample=sample)
    cpu = time.process_time() - start
    fit = anchor_fit(boxes, fit.anchors)  # on every box
    row = {"data": name, "boxes": len(boxes), "num": num, "sample": sample or len(boxes),
           "mean_iou": fit.mean_iou, "recall": fit.recall, "cpu_s": cpu, "anchors": fit.text()}
    if full is not None:
        row["diff"] = (fit.mean_iou - full["mean_iou"]) / full["mean_iou"]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", required=True, help="trees, bccd or .data files")
    parser.add_argument("--size", nargs="+", type=int, required=True, help="one training size per --data")
    parser.add_argument("--num", nargs="+", type=int, default=[6])
    parser.add_argument("--samples", nargs="+", type=int, default=[5000, 10000, 20000, 50000])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    print("| data | boxes | anchors | fitted on | mean IoU (all boxes) | vs full fit | recall@0.5 "
          "| fit CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for data, size in zip(args.data, args.size, strict=True):
        boxes = box_sizes(data, size)
        name = f"{Path(data).parent.name if data.endswith('.data') else data} at {size}"
        for num in args.num:
            full = fit_row(name, boxes, num, None, None)
            batch = [full] + [fit_row(name, boxes, num, n, full) for n in args.samples if n < len(boxes)]
            for row in batch:
                diff = f"{100 * row['diff']:+.2f}%" if "diff" in row else "(full fit)"
                print(f"| {row['data']} | {row['boxes']:,} | {num} | {row['sample']:,} "
                      f"| {row['mean_iou']:.4f} | {diff} | {row['recall']:.3f} | {row['cpu_s']:.1f} |",
                      flush=True)
            rows += batch
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
