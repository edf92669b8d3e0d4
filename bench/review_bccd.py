"""What a partial review of model-made labels is worth, and what `--unreviewed` should do with the rest.

The labelling loop on BCCD (bench/bccd.py: 205 train / 87 val microscope photos, 3 classes), small enough
for a CPU:

1. the official train split is cut in two halves: A keeps its true (human) labels, B loses them;
2. model M0 is trained on A alone (yolov3-tiny from the COCO weights, ``--iterations`` at ``--size``);
3. ``turboyolo label`` (:func:`run_label`) labels B with M0: model-made labels and a review order;
4. the review is simulated: the first ``--review`` share of B in the review order (no detection first,
   then lowest confidence) gets its true labels back and is marked reviewed (what a save in
   ``turboyolo review`` records);
5. A + B is trained again from the same start for the same iterations, once per ``--unreviewed`` rule
   (include, exclude, ignore), and once on the true labels of all of B (the bound a full review reaches).

Every model is scored by the code of ``turboyolo test`` (mAP@0.5 and @0.5:0.95 on the val split, at
``--size``, NMS 0.45); one CSV row per model (bench/results/review_bccd.csv).

Usage::

    .venv/bin/python bench/review_bccd.py [--iterations 150] [--size 320] [--review 0.25] [--rules ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from defaults_250 import append_row, commit, machine  # noqa: E402

FIELDS = ("date", "machine", "variant", "iterations", "size", "review_share", "train_images",
          "model_made", "reviewed", "map50", "map50_95", "train_minutes", "commit")


def lay_out(bccd: Path, work: Path) -> tuple[list[Path], list[Path], Path]:
    """``work/set/images`` (links to the 205 train photos), ``work/set/labels`` with A's true labels,
    ``work/truth`` (B's true labels), ``val.txt``; returns (A images, B images, names file)."""
    from turboyolo.formats.datasets import label_path_for, list_images, load_data_config

    config = load_data_config(bccd)
    train = sorted(list_images(config.train[0]))
    half_a, half_b = train[0::2], train[1::2]
    if work.exists():
        shutil.rmtree(work)
    for folder in ("set/images", "set/labels", "truth"):
        (work / folder).mkdir(parents=True)
    for image in train:
        os.symlink(image.resolve(), work / "set" / "images" / image.name)
        target = work / ("set/labels" if image in half_a else "truth") / f"{image.stem}.txt"
        shutil.copyfile(label_path_for(image), target)
    val = list_images(config.val[0])
    (work / "val.txt").write_text("".join(f"{p}\n" for p in val))
    names = work / "bccd.names"
    names.write_text("".join(f"{n}\n" for n in config.names))
    images = lambda half: [work / "set" / "images" / p.name for p in half]  # noqa: E731
    return images(half_a), images(half_b), names


def data_file(work: Path, name: str, images: list[Path], names: Path) -> Path:
    from turboyolo.formats.datasets import write_darknet_data

    listing = work / f"{name}.txt"
    listing.write_text("".join(f"{p}\n" for p in images))
    return write_darknet_data(work / f"{name}.data", 3, listing, work / "val.txt", names)


def train(data: Path, cfg: Path, weights: Path, work: Path, name: str, args, rule: str = "include"):
    """One fine-tune; returns (run directory, minutes, the scan's counts)."""
    from turboyolo.train.config import TrainConfig
    from turboyolo.train.fit import fit

    config = TrainConfig.build(str(cfg), str(data), str(weights), epochs=1000, max_batches=args.iterations,
                               img_size=args.size, workers=1, project=str(work / "runs"), name=name,
                               seed=0, checkpoint_interval=0, evaluation_interval=0, unreviewed=rule)
    started = time.perf_counter()
    result = fit(config, quiet=not os.environ.get("VERBOSE"))
    return result.run_dir, (time.perf_counter() - started) / 60


def score(run_dir: Path, data: Path, size: int):
    from turboyolo.train.testing import TestArgs, TestRequest, run_test

    report = run_test(TestRequest(run_dir / "weights" / "last.pt", data,
                                  test=TestArgs(img_size=size, workers=1, nms_thres=0.45)))
    return report.result


def label_half(weights: Path, folder: Path, work: Path):
    """``turboyolo label`` on the images without labels (B); returns the review rows (review order)."""
    from turboyolo.infer.labeling import LabelArgs, LabelRequest, run_label
    from turboyolo.infer.predict import PredictArgs

    request = LabelRequest(weights, folder, predict=PredictArgs(device="cpu", conf_thres=0.25),
                           label=LabelArgs(split="unlabeled"), out_dir=work / "label")
    return run_label(request).rows


def review(rows, share: float, work: Path) -> int:
    """The first ``share`` of the review order gets its true labels back, marked reviewed."""
    from turboyolo.data.autolabels import record_reviewed

    written = [row for row in rows if row.status == "written"]
    count = round(share * len(written))
    for row in written[:count]:
        shutil.copyfile(work / "truth" / row.label.name, row.label)
        record_reviewed(row.label)
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--review", type=float, default=0.25, help="share of B reviewed")
    parser.add_argument("--rules", nargs="+", default=["include", "exclude", "ignore", "truth"])
    parser.add_argument("--work", type=Path, default=Path("/tmp/review_bccd"))
    parser.add_argument("--csv", default="bench/results/review_bccd.csv")
    args = parser.parse_args()

    import defaults_250
    import torch

    from turboyolo import assets
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec

    defaults_250.FIELDS = FIELDS  # the same CSV writer, this bench's columns
    code = commit()
    torch.set_num_threads(torch.multiprocessing.cpu_count())
    bccd = defaults_250.data_file("bccd")
    half_a, half_b, names = lay_out(bccd, args.work)
    spec = make_spec("yolov3-tiny", num_classes=3, batch=8, subdivisions=1)
    cfg = write_cfg(spec.with_net(width=args.size, height=args.size), args.work / "yolov3-tiny-3c.cfg")
    weights = assets.fetch("yolov3-tiny")

    def row(variant, run_dir, minutes, data, images, model_made=0, reviewed=0):
        result = score(run_dir, data, args.size)
        append_row(Path(args.csv), {
            "date": datetime.datetime.now().isoformat(timespec="minutes"), "machine": machine(),
            "variant": variant, "iterations": args.iterations, "size": args.size,
            "review_share": args.review, "train_images": images, "model_made": model_made,
            "reviewed": reviewed, "map50": f"{result.map50:.4f}", "map50_95": f"{result.map50_95:.4f}",
            "train_minutes": f"{minutes:.2f}", "commit": code})

    data_a = data_file(args.work, "half_a", half_a, names)
    run_a, minutes = train(data_a, cfg, weights, args.work, "m0", args)
    row(f"A only ({len(half_a)} true)", run_a, minutes, data_a, len(half_a))
    rows = label_half(run_a / "weights" / "last.pt", args.work / "set" / "images", args.work)
    reviewed = review(rows, args.review, args.work)
    data_all = data_file(args.work, "all", half_a + half_b, names)
    print(json.dumps({"labelled": len(rows), "reviewed": reviewed}))
    for rule in args.rules:
        if rule == "truth":
            continue
        run_dir, minutes = train(data_all, cfg, weights, args.work, f"all-{rule}", args, rule)
        row(f"A + B, --unreviewed {rule}", run_dir, minutes, data_all,
            len(half_a) + len(half_b) if rule != "exclude" else len(half_a) + reviewed,
            len(half_b) - reviewed, reviewed)
    if "truth" in args.rules:  # B reviewed in full: the bound
        for label in (args.work / "truth").glob("*.txt"):
            shutil.copyfile(label, args.work / "set" / "labels" / label.name)
        run_dir, minutes = train(data_all, cfg, weights, args.work, "all-truth", args)
        row("A + B, all true labels", run_dir, minutes, data_all, len(half_a) + len(half_b))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
