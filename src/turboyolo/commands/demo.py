"""``turboyolo demo``: the main job on real sample data (what ``make demo`` runs).

1. fetch the official yolov3-tiny COCO weights (pinned) and detect on real photos;
2. build the ``trees`` sample data set (aerial photos, human-drawn boxes), fine-tune yolov3-tiny on
   it, evaluate it, and detect on held-out tiles.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from turboyolo.rundir import next_run_dir

DARKNET_PHOTOS = Path("/usr/share/darknet/data")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=8.0, help="training time budget for the fine-tune")
    parser.add_argument("--skip-train", action="store_true", help="only the pretrained detection part")
    parser.add_argument("--project", default="runs/demo", help="parent folder of the demo's run directories")


def _photos(trees_dir: Path) -> list[str]:
    """Darknet's sample photos when the Debian package is installed, else the trees val tiles."""
    if DARKNET_PHOTOS.is_dir() and any(DARKNET_PHOTOS.glob("*.jpg")):
        return [str(DARKNET_PHOTOS / "*.jpg")]
    return [str(trees_dir / "images" / "val")]


def run(args: argparse.Namespace) -> int:
    from turboyolo import assets
    from turboyolo.data.trees import build_trees
    from turboyolo.infer.detect import DetectOptions, run_detection

    started = time.time()
    project = Path(args.project)
    weights = assets.fetch("yolov3-tiny")
    print(f"[demo] pretrained weights: {weights}")
    trees_dir = build_trees(assets.cache_dir() / "datasets" / "trees")
    print(f"[demo] trees data set: {trees_dir}")
    out = next_run_dir(project, "detect-coco")
    run_detection(
        DetectOptions(
            sources=_photos(trees_dir),
            cfg=None,
            weights="yolov3-tiny",
            out_dir=out,
            save_txt=True,
            save_conf=True,
        )
    )
    print(
        f"[demo] COCO detections drawn in {out}, YOLO labels in {out / 'labels'}, "
        f"COCO json {out / 'predictions.json'}"
    )
    if args.skip_train:
        return 0
    from turboyolo.commands.train import demo_finetune

    run_dir = demo_finetune(trees_dir, weights, project, minutes=args.minutes)
    print(f"[demo] fine-tuned run: {run_dir} (results.csv, results.png, TensorBoard logs)")
    _evaluate_and_detect(run_dir, trees_dir, project)
    print(f"[demo] done in {(time.time() - started) / 60:.1f} min")
    return 0


def _evaluate_and_detect(run_dir: Path, trees_dir: Path, project: Path) -> None:
    """The fine-tuned model on the held-out tiles: mAP, then drawn detections and YOLO labels."""
    from turboyolo.cli import main as cli
    from turboyolo.commands.train import DEMO_VAL_SIZE

    weights_dir = run_dir / "weights"
    checkpoint = weights_dir / "best.pt" if (weights_dir / "best.pt").exists() else weights_dir / "last.pt"
    print(f"[demo] evaluating {checkpoint} on the trees val split")
    size = str(DEMO_VAL_SIZE)
    cli(["test", "--weights", str(checkpoint), "--data", str(trees_dir / "trees.data"), "--n-cpu", "1",
         "--img-size", size, "--nms-thres", "0.45"])
    out = next_run_dir(project, "detect-trees")
    cli(["detect", str(trees_dir / "images" / "val"), "--weights", str(checkpoint), "--conf-thres", "0.25",
         "--img-size", size,
         "--single-label", "--save-txt", "--save-conf", "--names", str(trees_dir / "trees.names"),
         "--project", str(project), "--name", out.name, "--exist-ok"])
    print(f"[demo] tree detections on held-out tiles: {out} (labels in {out / 'labels'})")
