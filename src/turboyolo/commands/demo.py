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
    run_dir = demo_finetune(trees_dir, weights, project, minutes=args.minutes)
    print(f"[demo] fine-tuned run: {run_dir} (results.csv, results.png, TensorBoard logs)")
    _evaluate_and_detect(run_dir, trees_dir, project)
    print(f"[demo] done in {(time.time() - started) / 60:.1f} min")
    return 0


def _evaluate_and_detect(run_dir: Path, trees_dir: Path, project: Path) -> None:
    """The fine-tuned model on the held-out tiles: mAP, then drawn detections and YOLO labels."""
    from turboyolo.cli import main as cli

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


# Anchors fitted to the trees boxes at 416 (`turboyolo anchors --data trees.data --num 6`): COCO's two
# largest tiny anchors (135x169, 344x319) are no crown's best anchor.
DEMO_ANCHORS = ((16, 17), (25, 29), (37, 35), (44, 49), (59, 59), (85, 86))
# Adam (scale-free in the loss). 2e-3 beat 1e-3 on trees from 90 iterations on (0.229 vs 0.209 mAP@0.5).
DEMO_LR = 0.002
DEMO_BURN_IN = 15
DEMO_ASSIGN_IOU = 0.213  # AlexeyAB's iou_thresh: ~4 anchors train on a typical crown instead of 1
# Nothing frozen: freezing layers 0-7 halves the backward time but learnt less per iteration on trees
# (0.185 vs 0.209 mAP@0.5 after 90 iterations); freezing layers 0-3 ran 1.24x the iterations but ended
# at 0.31 instead of 0.37.
DEMO_FREEZE = 0
# Training runs on 416 crops of the tiles zoomed 1.0-1.5x; evaluation (and the demo's detect) feeds
# whole tiles at 512 (1.23x), where the small crowns cover more cells. Same weights, zoom 0.75-1.25:
# 0.389 at 512 vs 0.352 at 416; zoom 1.0-1.5 then reached 0.42 at 512 in 7.6 minutes.
DEMO_VAL_SIZE = 512
DEMO_ZOOM = (1.0, 1.5)
# The cosine spans the iterations the probe predicts for the budget. The real loop is ~10% slower than
# the probe (loader, EMA, epoch ends), so the LR is near its floor when the time limit stops the run;
# a 1.3x span kept 25% of the peak LR at the end and finished 0.38-0.40 instead of 0.41-0.42 (seed 1).
DEMO_COSINE_SPAN = 1.0


def demo_finetune(data_dir: Path, weights: Path, out_project: Path, minutes: float = 8.0, *,
                  seed: int = 0, quiet: bool = False, learning_rate: float = DEMO_LR,
                  cosine_span: float = DEMO_COSINE_SPAN, **overrides) -> Path:
    """Fine-tune COCO yolov3-tiny on the trees sample within ``minutes`` of training; returns the run dir.

    Writes ``demo-yolov3-tiny-trees.cfg`` (one class, anchors for 16-70 px crowns, Adam with a 15-iteration
    burn-in and a cosine decay over the iterations that fit the budget), loads every COCO layer and the
    heads' box and objectness outputs (Darknet's ``seen`` is not carried over), trains every layer on
    416 crops zoomed 1.0-1.5x with GIoU box loss, extra anchors above shape IoU 0.213 and EMA, and
    evaluates every 3 epochs at ``DEMO_VAL_SIZE`` (evaluation time is not counted in the budget).
    """
    import time

    import torch

    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec
    from turboyolo.train.config import TrainConfig
    from turboyolo.train.fit import fit

    data_dir, out_project = Path(data_dir), Path(out_project)
    out_project.mkdir(parents=True, exist_ok=True)
    budget_s = minutes * 60.0
    start = time.perf_counter()
    threads = torch.get_num_threads()
    # Every core computes: the loader worker only augments cached 416 tiles (data-wait ~1%), and one
    # intra-op thread instead of two made each iteration 1.8x slower on the 2-core machine.
    torch.set_num_threads(torch.multiprocessing.cpu_count() or threads)
    try:
        spec = make_spec("yolov3-tiny", num_classes=1, width=416, height=416, batch=8, subdivisions=1,
                         learning_rate=learning_rate, anchors=DEMO_ANCHORS)
        seconds_per_iteration = _probe_iteration_seconds(spec)
        left = budget_s - (time.perf_counter() - start)
        # The run ends on the time limit, not on max_batches: on a shared CPU the real speed varies; a
        # slower run then stops a little before the LR floor, a faster one idles briefly at it.
        iterations = max(DEMO_BURN_IN + 10, int(cosine_span * left / seconds_per_iteration))
        spec = spec.with_net(burn_in=DEMO_BURN_IN, power=2.0, policy="cosine", max_batches=iterations,
                             optimizer="adam",
                             steps=(iterations + 1,), scales=(1.0,), saturation=1.5, exposure=1.5, hue=0.05)
        cfg_path = write_cfg(spec, out_project / "demo-yolov3-tiny-trees.cfg")
        if not quiet:
            print(f"demo cfg {cfg_path}: {seconds_per_iteration:.2f} s per iteration of 8 images measured, "
                  f"so {iterations} iterations (cosine LR from {learning_rate}, burn-in {DEMO_BURN_IN})")
        config = TrainConfig.build(
            cfg=str(cfg_path), data=str(data_dir / "trees.data"), weights=str(weights), epochs=10_000,
            workers=1, project=str(out_project), name="trees-finetune", conf_thres=0.25, nms_thres=0.45,
            evaluation_interval=3, checkpoint_interval=0, freeze=DEMO_FREEZE, ema_decay=0.98, ema_ramp=20.0,
            bn_momentum=0.03, seed=seed, time_limit_min=(left - 2.0) / 60.0, eval_batch=10, max_batches=0,
            assign_iou_thresh=DEMO_ASSIGN_IOU, box_loss="giou", val_img_size=DEMO_VAL_SIZE,
            aug_scale=DEMO_ZOOM)
        return fit(config.replace(**overrides), quiet=quiet).run_dir  # experiments: any option
    finally:
        torch.set_num_threads(threads)


def _probe_iteration_seconds(spec) -> float:
    """Seconds of one training iteration on random images (the doctor's step measurement, median of 2)."""
    import torch

    from turboyolo.doctor.measure import DoctorOptions, measure_step

    net = spec.net
    options = DoctorOptions(img_size=net.width, batch=net.batch, subdivisions=net.subdivisions,
                            device=torch.device("cpu"), workers=0, worker_counts=(), repeats=2)
    seconds, _, _ = measure_step(spec, options)
    return seconds * net.subdivisions
