"""End-to-end training on synthetic squares: overfitting, exact resume, crash safety, CLI flags."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from synth import make_dataset, micro_cfg
from turboyolo.train.config import TrainConfig
from turboyolo.train.fit import fit
from turboyolo.train.logger import read_results

# the test of `make test` that covers the promise of a `full` one here (tests/conftest.py: the tiers)
SIGKILL_FORK = "tests/train/test_train.py::test_sigkill_during_checkpoint_write_resumes_from_previous[fork]"


def _config(cfg: Path, data: Path, project: Path, **changes) -> TrainConfig:
    values = dict(
        cfg=str(cfg),
        data=str(data),
        epochs=100,
        workers=0,
        project=str(project),
        conf_thres=0.25,
        evaluation_interval=0,
        checkpoint_interval=0,
        bn_momentum=0.1,
    )
    values.update(changes)
    return TrainConfig.build(**values)


@pytest.mark.slow
def test_overfits_four_images(tmp_path):
    data = make_dataset(tmp_path / "data", 4, 0, val_is_train=True)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=4, learning_rate=0.003, extra="optimizer=adam")
    run = fit(
        _config(cfg, data, tmp_path / "runs", epochs=90, evaluation_interval=30, augment=False, ema=False),
        quiet=True,
    ).run_dir
    rows = read_results(run / "results.csv")
    assert float(rows[-1]["mAP50"]) >= 0.9, rows[-1]
    assert (run / "results.png").exists() and (run / "weights" / "best.weights").exists()
    assert any((run / "tensorboard").iterdir())


def test_time_limit_mid_epoch_evaluates_the_final_weights(tmp_path, capsys):
    # 8 images at mini-batch 2: 4 iterations per epoch; a limit shorter than one iteration stops after
    # the first, in the middle of epoch 1, before any regular evaluation.
    data = make_dataset(tmp_path / "data", 8, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    run = fit(_config(cfg, data, tmp_path / "runs", evaluation_interval=1, time_limit_min=1e-6)).run_dir
    out = capsys.readouterr().out
    assert "time limit at iteration 1 (epoch 1 unfinished): mAP@0.5" in out
    state = torch.load(run / "weights" / "last.pt", weights_only=True)
    assert state["iteration"] == 1  # the exact position is kept for --resume
    assert (run / "weights" / "best.pt").exists()  # the only evaluation so far is the best one


def _train_state(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {
        **{f"model.{k}": v for k, v in state["model"].items()},
        **{f"ema.{k}": v for k, v in state["ema"].items()},
    }


@pytest.mark.slow
@pytest.mark.full(covered_by="tests/faults/test_training_faults.py::"
                  "test_ctrl_c_mid_epoch_saves_the_exact_position_and_resume_continues_it")
def test_resume_mid_epoch_is_exact(tmp_path):
    # 8 images, mini-batch 2, 2 subdivisions: 4 mini-batches and 2 iterations per epoch; stopping after
    # iteration 3 leaves the run in the middle of epoch 1. Augmentation on, one persistent worker.
    data = make_dataset(tmp_path / "data", 8, 2)
    cfg = micro_cfg(
        tmp_path / "micro.cfg", batch=4, subdivisions=2, learning_rate=0.01, burn_in=2, max_batches=5
    )
    common = dict(workers=1, evaluation_interval=1)
    straight = fit(_config(cfg, data, tmp_path / "a", **common), quiet=True).run_dir
    first = fit(_config(cfg, data, tmp_path / "b", **common), stop_at_iteration=3, quiet=True).run_dir
    saved = torch.load(first / "weights" / "last.pt", weights_only=True)
    assert (saved["iteration"], saved["epoch"], saved["epoch_batches"]) == (3, 1, 2)
    resumed = fit(TrainConfig.build(resume=str(first / "weights" / "last.pt")), quiet=True).run_dir
    assert resumed == first
    a, b = _train_state(straight / "weights" / "last.pt"), _train_state(resumed / "weights" / "last.pt")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    assert torch.load(resumed / "weights" / "last.pt", weights_only=True)["iteration"] == 5


@pytest.mark.slow  # make test: the fork writer here, the thread writer in test_training_faults.py's Ctrl-C
@pytest.mark.parametrize("writer", ["fork",
                                    pytest.param("thread", marks=pytest.mark.full(covered_by=SIGKILL_FORK))])
def test_sigkill_during_checkpoint_write_resumes_from_previous(tmp_path, writer):
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2, learning_rate=0.01, max_batches=6)
    project = tmp_path / "runs"
    script = (
        "from turboyolo.train.fit import fit\n"
        "from turboyolo.train.config import TrainConfig\n"
        f"fit(TrainConfig.build(cfg={str(cfg)!r}, data={str(data)!r}, epochs=3, workers=0,"
        f" project={str(project)!r}, evaluation_interval=0, checkpoint_interval=1), quiet=True)\n"
    )
    # die inside the 2nd write (epoch 2), in the forked writer or the writer thread
    env = {**os.environ, "TURBOYOLO_CHECKPOINT_FAULT": "kill:2", "TURBOYOLO_CHECKPOINT_WRITER": writer}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    weights = project / "exp" / "weights"
    names = sorted(p.name for p in weights.iterdir())
    assert "last.pt" in names and "epoch1.pt" in names and "epoch2.pt" not in names, names
    last = torch.load(weights / "last.pt", weights_only=True)
    assert last["epoch"] == 1 and last["iteration"] == 2  # the previous, complete checkpoint
    run = fit(TrainConfig.build(resume=str(weights / "last.pt")), quiet=True).run_dir
    assert torch.load(run / "weights" / "last.pt", weights_only=True)["iteration"] == 6
    for path in (run / "weights").glob("*.pt"):
        torch.load(path, weights_only=True)  # every checkpoint loads without running code
    assert not [p for p in (run / "weights").iterdir() if ".tmp" in p.name]  # the killed write's temp file
    # is never under a checkpoint name; resuming does not pick it up


def test_train_flags_accept_pytorch_yolov3_names():
    from turboyolo.cli import build_parser

    args = build_parser().parse_args(
        [
            "train",
            "--model",
            "a.cfg",
            "--data",
            "d.data",
            "--epochs",
            "3",
            "--n_cpu",
            "2",
            "--pretrained_weights",
            "w.weights",
            "--checkpoint_interval",
            "5",
            "--evaluation_interval",
            "2",
            "--multiscale_training",
            "--iou_thres",
            "0.6",
            "--conf_thres",
            "0.2",
            "--nms_thres",
            "0.4",
            "--logdir",
            "logs",
            "--seed",
            "-1",
            "--img_size",
            "320",
            "--val-img-size",
            "416",
            "--time-limit",
            "1.5",
        ]
    )
    config = TrainConfig.from_flags(args)
    get = config.get
    assert (config.cfg, config.data, config.weights, get("workers")) == ("a.cfg", "d.data", "w.weights", 2)
    assert (get("checkpoint_interval"), get("evaluation_interval"), get("multiscale")) == (5, 2, True)
    assert (get("iou_thres"), get("conf_thres"), get("nms_thres")) == (0.6, 0.2, 0.4)
    assert (get("project"), get("seed"), get("img_size"), get("time_limit_min")) == ("logs", 0, 320, 1.5)
    assert get("val_img_size") == 416
    assert get("epochs") == 3 and get("batch") is None  # a flag not passed stays unset


def test_evaluation_size_can_differ_from_training(tmp_path):
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.train.loaders import build_loaders
    from turboyolo.train.resolve import resolve_options

    data = make_dataset(tmp_path / "data", 2, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)  # 64 x 64
    config = _config(cfg, data, tmp_path / "runs", val_img_size=96, cache="none", augment_on="cpu")
    data = build_loaders(resolve_options(config, parse_cfg(cfg)), 2)
    assert next(iter(data.train))[0].shape[-2:] == (64, 64)
    assert next(iter(data.val))[0].shape[-2:] == (96, 96)


def test_bad_flags_name_the_flag():
    from turboyolo.errors import FlagError

    with pytest.raises(FlagError, match="--img-size"):
        TrainConfig.build(cfg="a.cfg", data="d.data", img_size=100)
    with pytest.raises(FlagError, match="--val-img-size"):
        TrainConfig.build(cfg="a.cfg", data="d.data", val_img_size=100)
    with pytest.raises(FlagError, match="--data"):
        TrainConfig.build(cfg="a.cfg")


@pytest.mark.slow
def test_train_and_test_commands_end_to_end(tmp_path, capsys):
    from turboyolo.cli import main

    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2, learning_rate=0.001, extra="optimizer=adam")
    code = main(
        [
            "train",
            "--model",
            str(cfg),
            "--data",
            str(data),
            "--epochs",
            "2",
            "--n_cpu",
            "0",
            "--logdir",
            str(tmp_path / "runs"),
            "--name",
            "cli",
            "--checkpoint_interval",
            "1",
            "--val-img-size",
            "96",
        ]
    )
    assert code == 0
    weights = tmp_path / "runs" / "cli" / "weights"
    assert {"last.pt", "best.pt", "epoch1.pt", "epoch2.pt", "last.weights", "best.weights"} <= {
        p.name for p in weights.iterdir()
    }
    capsys.readouterr()
    assert main(["test", "--weights", str(weights / "best.pt"), "--data", str(data), "--n_cpu", "0",
                 "--iou_thres", "0.4"]) == 0
    out = capsys.readouterr().out
    assert "mAP@0.5" in out and "input 96 x 96: the run's --val-img-size" in out
    assert "best F1" in out and "IoU 0.4" in out  # P / R matched at --iou-thres
    # the exported Darknet weights load into the cfg and evaluate the same way
    assert (
        main(["test", "-m", str(cfg), "-w", str(weights / "best.weights"), "-d", str(data), "--n_cpu", "0"])
        == 0
    )


def test_evaluation_leaves_its_pictures_and_per_class_rows_at_iou_thres(tmp_path, capsys):
    # Needs the fit wiring: iou_thres reaches evaluate(); RunLogger.label_statistics, first_batches and
    # evaluation are called by the loop.
    data = make_dataset(tmp_path / "data", 2, 2, num_classes=2)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2, batch=2)
    run = fit(_config(cfg, data, tmp_path / "runs", epochs=1, evaluation_interval=1, iou_thres=0.3)).run_dir
    out = capsys.readouterr().out
    assert "IoU 0.3" in out  # the P / R / best-F1 line says where it matched
    assert re.search(r"speed: [\d.]+ ms inference, [\d.]+ ms decode\+NMS, .* metrics [\d.]+ s", out)
    rows = read_results(run / "per_class.csv")
    assert [(r["epoch"], r["class"]) for r in rows] == [("1", "c0"), ("1", "c1")]
    assert {"labels.jpg", "train_batch0.jpg", "PR_curve.png", "F1_curve.png", "P_curve.png", "R_curve.png",
            "confusion_matrix.png", "val_batch0_labels.jpg", "val_batch0_pred.jpg"} <= {
        p.name for p in run.iterdir()
    }
    assert not (run / "train_batch1.jpg").exists()  # one batch per epoch
