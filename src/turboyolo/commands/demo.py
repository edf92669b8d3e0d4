"""``turboyolo demo``: the main job on real sample data (what ``make demo`` runs).

1. fetch the official yolov3-tiny COCO weights (pinned) and detect on real photos;
2. build the ``trees`` sample data set (aerial photos, human-drawn boxes) and fine-tune yolov3-tiny on it
   as ``turboyolo train --config trees`` does (the packaged recipe: resources/recipes/trees.yaml);
3. evaluate the best weights (``turboyolo test``) and detect on the held-out tiles.

Each step calls its job (:func:`~turboyolo.infer.detect.run_detect`, :func:`~turboyolo.train.fit.fit`,
:func:`~turboyolo.train.testing.run_test`) and prints the command line that does the same.
"""

from __future__ import annotations

import argparse
import csv
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from turboyolo import assets
from turboyolo.data.trees import build_trees
from turboyolo.formats.yamlfile import read_yaml
from turboyolo.infer.detect import DetectOutputArgs, DetectRequest, run_detect
from turboyolo.infer.predict import PredictArgs
from turboyolo.options import add_flags, option, project_option, read_flags
from turboyolo.rundir import next_run_dir
from turboyolo.train.config import TrainConfig, read_config
from turboyolo.train.fit import fit
from turboyolo.train.testing import TestArgs, TestRequest, run_test

DARKNET_PHOTOS = Path("/usr/share/darknet/data")


@dataclass
class DemoArgs:
    """How much of the demo runs, and where it writes."""

    iterations: int | None = option(None, "stop the fine-tune after this many iterations of 8 images "
                                    "(default: the recipe's 50 epochs = 250)", type=int)
    seed: int = option(0, "random seed of the fine-tune", type=int)
    skip_train: bool = option(False, "only the pretrained detection part", action="store_true")
    project: str = project_option("runs/demo")


GROUPS = {"demo": DemoArgs}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_flags(parser, GROUPS)


def _photos(trees_dir: Path) -> list[str]:
    """Darknet's sample photos when the Debian package is installed, else the trees val tiles."""
    if DARKNET_PHOTOS.is_dir() and any(DARKNET_PHOTOS.glob("*.jpg")):
        return [str(DARKNET_PHOTOS / "*.jpg")]
    return [str(trees_dir / "images" / "val")]


def run(args: argparse.Namespace) -> int:
    return run_demo(read_flags(args, GROUPS)["demo"])


def run_demo(args: DemoArgs) -> int:
    """The demo's three steps (the module's docstring), each command line printed."""
    started = time.time()
    project = Path(args.project)
    weights = assets.fetch("yolov3-tiny")
    print(f"[demo] pretrained weights: {weights}")
    trees_dir = build_trees(assets.cache_dir() / "datasets" / "trees")
    print(f"[demo] trees data set: {trees_dir}")
    out = next_run_dir(project, "detect-coco")
    output = DetectOutputArgs(save_txt=True, save_conf=True)
    print(run_detect(DetectRequest(_photos(trees_dir), weights="yolov3-tiny", output=output,
                                   out_dir=out)).summary())
    print(
        f"[demo] COCO detections drawn in {out}, YOLO labels in {out / 'labels'}, "
        f"COCO json {out / 'predictions.json'}"
    )
    if args.skip_train:
        return 0
    run_dir = next_run_dir(project, "trees-finetune")
    data = str(trees_dir / "trees.data")
    options = dict(seed=args.seed, project=str(project), name=run_dir.name, exist_ok=True)
    if args.iterations:
        options["max_batches"] = args.iterations
    flags = " ".join(f"--{key.replace('_', '-')}" + ("" if value is True else f" {value}")
                     for key, value in options.items())
    print(f"[demo] turboyolo train --config trees --data {data} {flags}")
    config = TrainConfig.build(data=data, base=read_config("trees"), **options)
    threads = torch.get_num_threads()
    torch.set_num_threads(torch.multiprocessing.cpu_count() or threads)  # every core computes
    try:
        result = fit(config)
    finally:
        torch.set_num_threads(threads)
    print(f"run directory: {result.run_dir}")
    _print_curve(run_dir)
    _evaluate_and_detect(run_dir, trees_dir, project)
    print(f"[demo] done in {(time.time() - started) / 60:.1f} min")
    return 0


def _print_curve(run_dir: Path) -> None:
    """The run's evaluations from results.csv (iteration, training minutes, mAP), then its files."""
    with open(run_dir / "results.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("mAP50")]
    size = _saved_config(run_dir)["eval"]["val_img_size"]
    print(f"[demo] learning curve (trees val at {size}, EMA weights):")
    print("  iteration  minutes  mAP@0.5  mAP@0.5:0.95")
    for row in rows:
        print(f"  {int(row['iteration']):9d}  {float(row['minutes']):7.2f}  {float(row['mAP50']):7.3f}  "
              f"{float(row['mAP50-95']):12.3f}")
    files = sorted(f"{p.name}/" if p.is_dir() else p.name for p in run_dir.iterdir() if p.name[0] != ".")
    print(f"[demo] run directory {run_dir}: {' '.join(files)}")


def _saved_config(run_dir: Path) -> dict:
    return read_yaml(run_dir / "config.yaml")


def _evaluate_and_detect(run_dir: Path, trees_dir: Path, project: Path) -> None:
    """The fine-tuned model on the held-out tiles: mAP at 416 and at the run's evaluation size, then
    drawn detections and labels (what ``turboyolo test`` and ``turboyolo detect`` do)."""
    weights_dir = run_dir / "weights"
    checkpoint = weights_dir / "best.pt" if (weights_dir / "best.pt").exists() else weights_dir / "last.pt"
    evaluation = _saved_config(run_dir)["eval"]
    size, nms = int(evaluation["val_img_size"]), float(evaluation["nms_thres"])
    data = trees_dir / "trees.data"
    for test_size in dict.fromkeys((416, size)):
        print(f"[demo] turboyolo test --weights {checkpoint} --data {data} --img-size {test_size} "
              f"--nms-thres {nms} --workers 1")
        args = TestArgs(img_size=test_size, nms_thres=nms, workers=1)
        print(run_test(TestRequest(checkpoint, data, test=args), log=print).summary())
    out = next_run_dir(project, "detect-trees")
    predict = PredictArgs(conf_thres=0.25, img_size=size, nms_thres=nms, single_label=True)
    report = run_detect(DetectRequest([str(trees_dir / "images" / "val")], weights=str(checkpoint),
                                      names=str(trees_dir / "trees.names"), predict=predict,
                                      output=DetectOutputArgs(save_txt=True, save_conf=True), out_dir=out))
    print(report.summary())
    print(f"[demo] tree detections on held-out tiles: {out} (labels in {out / 'labels'})")
