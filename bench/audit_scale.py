"""What scoring an audit costs at the sizes users have: `turboyolo audit --predictions` on a large set.

Training the folds grows with the data set as any training does; what the audit adds after it (reading
the out-of-sample predictions, calibrating, scoring every box, writing the lists) runs on the CPU once.
This script writes predictions of the shape an audit makes for every image of ``--data`` (each labelled
box seen again near its place, most of them at its class, plus ``--background`` low-confidence boxes per
image at random places, as a detector at ``--conf-thres 0.01`` gives), as ``predictions.json`` and
``image_ids.json``, then times the command a user types to score them again and reads its peak memory
(``/usr/bin/time -v``).

Usage::

    python bench/scale_data.py small work/s120k --train 120000 --val 5000
    python bench/audit_scale.py --data work/s120k/scale.data --out work/audit-scale
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def write_predictions(data: str, out: Path, background: int, seed: int) -> tuple[int, int]:
    """predictions.json + image_ids.json for every image of both splits; returns (images, predictions)."""
    from turboyolo.boxes import cxcywh_to_xyxy
    from turboyolo.data.scan import scan_dataset
    from turboyolo.formats.datasets import load_data_config

    rng = np.random.default_rng(seed)
    config = load_data_config(data)
    samples = {}
    for split in ("train", "val"):
        for s in scan_dataset(data, split, config.names).samples:
            samples.setdefault(os.path.realpath(s.image), s)
    out.mkdir(parents=True, exist_ok=True)
    classes, total = len(config.names), 0
    with (out / "predictions.json").open("w") as handle:
        handle.write("[")
        first = True
        for index, sample in enumerate(samples.values()):
            height, width = sample.hw
            labels = np.asarray(sample.labels, np.float64).reshape(-1, 5)
            boxes = cxcywh_to_xyxy(labels[:, 1:]) * [width, height, width, height]
            sides = np.tile(boxes[:, 2:] - boxes[:, :2], 2)
            jitter = rng.normal(0, 0.05, boxes.shape) * sides
            seen = np.clip(boxes + jitter, 0, [width, height, width, height])
            cls = np.where(rng.random(len(labels)) < 0.95, labels[:, 0],
                           rng.integers(0, classes, len(labels)))
            score = rng.uniform(0.3, 0.95, len(labels))
            size = rng.uniform(0.05, 0.5, (background, 2)) * [width, height]
            corner = rng.uniform(0, 1, (background, 2)) * ([width, height] - size)
            noise = np.concatenate([corner, corner + size], 1)
            rows = np.concatenate([np.c_[seen, score, cls],
                                   np.c_[noise, rng.uniform(0.01, 0.2, background),
                                         rng.integers(0, classes, background)]])
            for x1, y1, x2, y2, conf, c in rows.tolist():
                handle.write(("" if first else ",") + json.dumps(
                    {"image_id": index, "category_id": int(c),
                     "bbox": [round(x1, 2), round(y1, 2), round(x2 - x1, 2), round(y2 - y1, 2)],
                     "score": round(conf, 5)}))
                first = False
            total += len(rows)
        handle.write("]")
    (out / "image_ids.json").write_text(json.dumps({str(i): key for i, key in enumerate(samples)}))
    return len(samples), total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--background", type=int, default=30, help="low-confidence boxes per image")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.time()
    images, total = write_predictions(args.data, args.out / "made", args.background, args.seed)
    size = (args.out / "made" / "predictions.json").stat().st_size
    print(f"{images} images, {total} predictions ({size / 1e6:.0f} MB of JSON) written in "
          f"{time.time() - started:.0f} s")
    command = [sys.executable, "-m", "turboyolo", "audit", "--data", args.data, "--weights", "yolov3-tiny",
               "--predictions", str(args.out / "made" / "predictions.json"), "--project", str(args.out),
               "--name", "scored", "--exist-ok"]
    started = time.time()
    done = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    seconds = time.time() - started
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    print(done.stdout[-2000:])
    if done.returncode:
        print(done.stderr[-3000:])
        return done.returncode
    print(f"turboyolo audit --predictions: {seconds:.0f} s, peak memory "
          f"{int(peak.group(1)) / 1e6:.2f} GB" if peak else f"{seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
