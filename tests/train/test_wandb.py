"""``turboyolo train --wandb`` offline: the W&B run holds the metrics, the curves and the images.

The run is read back with wandb's own reader of the transaction log (``wandb leet inspect --json``);
the images are the files the offline run keeps under ``files/media/images``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import turboyolo
from synth import make_dataset, micro_cfg

pytest.importorskip("wandb")


def _history(run_file: Path) -> list[dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_file)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


@pytest.mark.slow
def test_train_wandb_offline_run_holds_metrics_curves_and_images(tmp_path):
    data = make_dataset(tmp_path / "data", 4, 2, num_classes=2)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2, batch=2, extra="optimizer=adam")
    home = tmp_path / "wandb-home"
    src = str(Path(turboyolo.__file__).parents[1])  # the subprocess imports this turboyolo
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(home),
        "WANDB_CONFIG_DIR": str(home / "config"),
        "WANDB_CACHE_DIR": str(home / "cache"),
        "WANDB_DATA_DIR": str(home / "data"),
        "WANDB_SILENT": "true",
    }
    command = [
        sys.executable, "-m", "turboyolo", "train", "--model", str(cfg), "--data", str(data), "--epochs", "2",
        "--n-cpu", "0", "--project", str(tmp_path / "runs"), "--name", "wb", "--checkpoint-interval", "0",
        "--wandb",
    ]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "wb"
    (run_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    history = _history(run_file)
    keys = {key.split(".")[0] for item in history for key in item}
    # metrics: logged by the loop as it was before the plots
    assert {"train/loss", "train/lr", "val/mAP50", "val/mAP50-95", "val/precision", "val/recall"} <= keys
    assert sum("val/mAP50" in item for item in history) == 2  # both evaluations
    # Needs the fit wiring (RunLogger.evaluation / label_statistics / first_batches called by the
    # training loop): best-F1 numbers, the curves, the confusion matrix and the prediction images.
    assert {"val/best_f1", "val/best_f1_conf"} <= keys
    images = {"val/PR_curve", "val/F1_curve", "val/P_curve", "val/R_curve", "val/confusion_matrix",
              "val/val_batch0_labels", "val/val_batch0_pred", "train/labels", "train/train_batch0",
              "train/train_batch1"}  # 4 images, mini-batch 2: two batches in the first epoch
    assert images <= keys, images - keys
    for item in history:
        for key in images & {k.split(".")[0] for k in item}:
            assert item[f"{key}._type"] == "image-file"
            assert (run_file.parent / "files" / item[f"{key}.path"]).is_file()
    # and the run directory has the same files
    names = {p.name for p in run_dir.iterdir()}
    assert {"labels.jpg", "train_batch0.jpg", "PR_curve.png", "confusion_matrix.png", "per_class.csv",
            "val_batch0_pred.jpg"} <= names
