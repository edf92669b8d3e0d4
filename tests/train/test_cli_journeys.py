"""Where features meet, tried through the CLI as a user would: prepare -> train, files that break after
the scan, --resume with and without --epochs, mosaic from the cfg, the Python API's train, and the
checkpoints of turboyolo 0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from synth import make_dataset, micro_cfg
from turboyolo.cli import build_parser, main
from turboyolo.train.config import TrainConfig

FIXTURE = Path(__file__).parents[1] / "fixtures" / "checkpoints" / "v01-micro.pt"


def _train(cfg: Path, data: Path, project: Path, *extra: str) -> int:
    return main(["train", "--cfg", str(cfg), "--data", str(data), "--workers", "0", "--project", str(project),
                 "--evaluation-interval", "0", "--checkpoint-interval", "0", *extra])


def test_prepare_then_train_reads_the_prepared_cache(tmp_path, isolated_cache, capsys):
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)  # 64 px
    assert main(["prepare", "--data", str(data), "--img-size", "64", "--workers", "1"]) == 0
    prepared = capsys.readouterr().out
    assert "train: 4 images ->" in prepared and "val: 2 images ->" in prepared
    assert _train(cfg, data, tmp_path / "runs", "--epochs", "1", "--cache", "disk") == 0
    out = capsys.readouterr().out
    # both splits open the caches prepare wrote: nothing is decoded again
    assert out.count("images, ") >= 2 and out.count(", valid") == 2, out
    assert "need" not in out  # the line printed before a (re)build


def test_files_broken_before_and_after_the_scan_are_named_in_the_output_and_the_report(tmp_path, monkeypatch,
                                                                                      capsys):
    from turboyolo.train import loaders

    data = make_dataset(tmp_path / "data", 4, 3)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    images = tmp_path / "data" / "images"
    (images / "train" / "train3.png").write_bytes(b"not an image")  # excluded by the scan
    broken_train, broken_val = images / "train" / "train1.png", images / "val" / "val0.png"
    real_scan = loaders.scan_dataset

    def scan_then_break(path, split, *args, **kwargs):
        result = real_scan(path, split, *args, **kwargs)
        broken = broken_train if split == "train" else broken_val
        broken.write_bytes(broken.read_bytes()[:40])  # truncated after the scan accepted it
        return result

    monkeypatch.setattr(loaders, "scan_dataset", scan_then_break)
    assert _train(cfg, data, tmp_path / "runs", "--epochs", "1", "--evaluation-interval", "1") == 0
    out = capsys.readouterr().out
    assert "1 excluded" in out and "train3.png" in out  # the scan's summary and the excluded file
    assert "failed to load and were replaced this epoch" in out and str(broken_train) in out, out
    assert "left out of this evaluation" in out and str(broken_val) in out  # never replaced in evaluation
    report = (tmp_path / "runs" / "exp" / "scan_report.txt").read_text()
    assert all(name in report for name in ("train3.png", "train1.png", "val0.png")), report


def test_resume_takes_an_explicit_epochs_and_nothing_else(tmp_path, capsys, trained_run_copy):
    last = tmp_path / "runs" / "exp" / "weights" / "last.pt"
    assert torch.load(last, weights_only=True)["epoch"] == 1
    capsys.readouterr()
    assert main(["train", "--resume", str(last), "--epochs", "2", "--batch", "4", "--workers", "0"]) == 0
    out = capsys.readouterr().out
    assert "ignored: batch" in out  # a setting that shapes the numbers stays the run's own
    saved = torch.load(last, weights_only=True)
    assert saved["epoch"] == 2 and saved["iteration"] == 4  # 2 more iterations of the run's batch 2
    assert TrainConfig.from_dict(saved["config"]).schedule.epochs == 2


def test_resume_epochs_equal_to_the_default_is_still_taken():
    # 0.1 compared --epochs with the literal default 300 and so ignored an explicit --epochs 300
    saved = TrainConfig.build("a.cfg", "d.data", epochs=5)
    flags = ["train", "--resume", "w.pt", "--epochs", "300"]
    passed = TrainConfig.from_flags(build_parser().parse_args(flags))
    assert saved.resumed(passed).schedule.epochs == 300
    not_passed = TrainConfig.from_flags(build_parser().parse_args(["train", "--resume", "w.pt"]))
    assert saved.resumed(not_passed).schedule.epochs == 5


def test_mosaic_from_the_cfg_or_the_flag(tmp_path, capsys):
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.train.resolve import resolve_options

    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2, extra="mosaic=1")
    spec = parse_cfg(cfg)
    assert resolve_options(TrainConfig.build(str(cfg), str(data)), spec).augment.mosaic == 1.0
    assert resolve_options(TrainConfig.build(str(cfg), str(data), mosaic=0.0), spec).augment.mosaic == 0.0
    assert _train(cfg, data, tmp_path / "runs", "--epochs", "1") == 0  # trains on mosaics
    capsys.readouterr()
    code = _train(cfg, data, tmp_path / "runs", "--epochs", "1", "--augment-on", "device", "--cache", "ram")
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err  # the device path builds the same mosaics


def test_train_from_python_returns_the_run_and_its_metrics(tmp_path):
    import turboyolo

    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    result = turboyolo.train(cfg=cfg, data=data, epochs=1, workers=0, project=str(tmp_path / "runs"),
                             checkpoint_interval=0, quiet=True)
    assert result.run_dir == tmp_path / "runs" / "exp" and (result.run_dir / "weights" / "last.pt").exists()
    assert set(result.metrics) >= {"mAP50", "mAP50-95", "precision", "recall"}
    assert (result.iterations, result.epochs, result.stop_reason) == (2, 1, "epochs")
    with pytest.raises(turboyolo.errors.FlagError, match="unknown training option 'epoch'"):
        turboyolo.train(cfg=cfg, data=data, epoch=1)


def test_a_checkpoint_of_turboyolo_0_1_still_loads(tmp_path, capsys):
    saved = torch.load(FIXTURE, weights_only=True)
    config = TrainConfig.from_dict(saved["config"])  # the flat config of 0.1
    assert config.augment.aug_scale == (1.0, 1.5) and config.loss.box_loss == "giou"
    assert config.loss.obj_iou is False  # 0.1 trained objectness towards 1; resuming keeps that
    assert (config.eval.val_img_size, config.eval.conf_thres, config.runtime.seed) == (96, 0.3, 3)
    data = make_dataset(tmp_path / "data", 2, 2)
    assert main(["test", "--weights", str(FIXTURE), "--data", str(data), "--workers", "0"]) == 0
    assert "input 96 x 96: the run's --val-img-size" in capsys.readouterr().out
