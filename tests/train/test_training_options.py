"""The training recipe's options: label smoothing, --patience, the anchor check and --autoanchor, --hyp,
the cfg's values in config.yaml, --single-cls, --image-weights, --close-mosaic and the time-limit warning."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import yaml

from synth import make_dataset, make_image_folder, micro_cfg
from turboyolo.errors import FlagError
from turboyolo.formats.darknet_cfg import parse_cfg
from turboyolo.model.darknet import Darknet
from turboyolo.train.anchors import check_anchors
from turboyolo.train.config import HYP_OPTIONS, TrainConfig
from turboyolo.train.defaults import resolve
from turboyolo.train.engine import TrainState
from turboyolo.train.fit import StopRule, fit, mixing
from turboyolo.train.loaders import image_weights
from turboyolo.train.loss import YoloLoss
from turboyolo.train.resolve import resolve_options


def _config(cfg, data, project, **changes) -> TrainConfig:
    values = dict(cfg=str(cfg), data=str(data), epochs=1, workers=0, project=str(project),
                  evaluation_interval=0, checkpoint_interval=0)
    values.update(changes)
    return TrainConfig.build(**values)


def test_label_smoothing_moves_class_targets_by_half_eps(tmp_path):
    # At logit 0 the gradient of BCE is sigmoid(0) - target = 0.5 - target, so the change of the
    # gradient on the assigned cell's class logits is exactly the change of the targets.
    torch.manual_seed(0)
    model = Darknet(parse_cfg(micro_cfg(tmp_path / "m.cfg", num_classes=3)))
    targets = torch.tensor([[0, 1, 0.5, 0.5, 20 / 64, 20 / 64]])  # class 1

    def class_grads(eps):
        outputs = [torch.zeros_like(o, requires_grad=True) for o in model(torch.rand(1, 3, 64, 64))]
        YoloLoss(model.heads, label_smoothing=eps)(outputs, targets, (64, 64))[0].backward()
        grads = torch.cat([o.grad[..., 5:].reshape(-1, 3) for o in outputs])
        return grads[grads.abs().sum(1) > 0]  # the assigned cell

    plain, smooth = class_grads(0.0), class_grads(0.1)
    torch.testing.assert_close(plain, torch.tensor([[0.5, -0.5, 0.5]]))
    torch.testing.assert_close(smooth - plain, torch.tensor([[-0.05, 0.05, -0.05]]))  # targets 0.05 / 0.95


def _state(epoch, best_epoch):
    return SimpleNamespace(epoch=epoch, best_epoch=best_epoch, iteration=epoch * 4)


def test_patience_rule():
    rule = StopRule(epochs=100, max_iterations=0, limit_s=0, patience=3)
    assert rule.after_evaluation(_state(4, None)) is None
    assert rule.after_evaluation(_state(7, 5)) is None
    assert rule.after_evaluation(_state(8, 5)) == "patience"
    assert "no better fitness in the 3 epochs since epoch 5" in rule.message("patience", _state(8, 5))
    assert StopRule(epochs=100, max_iterations=0, limit_s=0).after_evaluation(_state(50, 1)) is None


def test_time_limit_warns_when_it_cuts_the_schedule_short():
    rule = StopRule(epochs=100, max_iterations=250, limit_s=60, planned_iterations=250)
    assert "iteration 120 of the 250" in rule.message("time_limit", SimpleNamespace(iteration=120))
    assert rule.message("time_limit", SimpleNamespace(iteration=250)) is None
    assert rule.message("max_batches", SimpleNamespace(iteration=250)) is None


def test_patience_stops_at_the_right_epoch(tmp_path, monkeypatch, capsys):
    from turboyolo.train import fit as fit_module

    # fitness by evaluation (every epoch): best at epoch 2; with --patience 3 the run stops after epoch 5
    map50_95 = iter([0.1, 0.3, 0.2, 0.25, 0.29, 0.5, 0.5])
    seen, real = [], fit_module.validate

    def scripted(state, *args, **kwargs):
        seen.append(state.epoch)
        result, shown = real(state, *args, **kwargs)
        result.map50, result.map50_95 = 0.5, next(map50_95)
        return result, shown

    monkeypatch.setattr(fit_module, "validate", scripted)
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4)
    result = fit(_config(cfg, data, tmp_path / "runs", epochs=20, evaluation_interval=1, patience=3))
    assert seen == [1, 2, 3, 4, 5] and result.epochs == 5 and result.stop_reason == "patience"
    out = capsys.readouterr().out
    assert "stopped early at epoch 5: no better fitness in the 3 epochs since epoch 2" in out
    saved = torch.load(result.run_dir / "weights" / "best.pt", weights_only=True)
    assert saved["epoch"] == 2 and saved["best_epoch"] == 2


def test_anchor_check_reports_the_figures_of_turboyolo_anchors(tmp_path, capsys):
    from turboyolo.cli import main as cli
    from turboyolo.data.scan import scan_dataset

    make_image_folder(tmp_path / "set", count=8, size=(96, 128), ext=".png", num_classes=1)
    folder = tmp_path / "set" / "images"
    cfg = micro_cfg(tmp_path / "m.cfg", size=64)
    cli(["anchors", "--data", str(folder), "--cfg", str(cfg)])
    printed = capsys.readouterr().out
    row = re.search(r"current \(m\.cfg\)\s+([\d.]+)\s+([\d.]+)%\s+(\d+)/6", printed)
    lines = []
    spec = check_anchors(parse_cfg(cfg), scan_dataset(str(folder), "train").samples, autoanchor=False,
                         data=str(folder), cfg=str(cfg), say=lines.append)
    assert spec == parse_cfg(cfg)
    assert lines[0].startswith(f"anchors: best-possible recall {row.group(2)}% (IoU >= 0.5), mean IoU "
                               f"{row.group(1)}, {row.group(3)}/6 anchors used on ")
    assert len(lines) == 2 and "turboyolo anchors --data" in lines[1] and "--autoanchor" in lines[1]


def test_autoanchor_trains_with_fitted_anchors_written_to_model_cfg(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", 8, 2, size=64)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=8)
    text = cfg.read_text()
    bad = re.sub(r"anchors\s*=.*", "anchors = 1,1, 2,2, 3,3, 200,200, 300,300, 400,400", text)
    cfg.write_text(bad)
    run = fit(_config(cfg, data, tmp_path / "runs", autoanchor=True)).run_dir
    out = capsys.readouterr().out
    assert "autoanchor: training with anchors fitted to the boxes" in out
    used = parse_cfg(run / "model.cfg").yolo_layers[0][1].anchors
    assert used != parse_cfg(cfg).yolo_layers[0][1].anchors
    saved = torch.load(run / "weights" / "last.pt", weights_only=True)
    assert "200,200" not in saved["cfg_text"]


def test_hyp_file_sets_options_flags_win_and_config_yaml_has_every_value(tmp_path, capsys):
    hyp = tmp_path / "hyp.yaml"
    hyp.write_text("mosaic: 0.5\nflipud: 0.25\nloss:\n  label_smoothing: 0.1\n  obj_gain: 2.0\n")
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4, extra="hue=.05\nsaturation=1.4")
    config = _config(cfg, data, tmp_path / "runs", hyp=str(hyp), obj_gain=3.0)
    assert (config.augment.mosaic, config.augment.flipud, config.loss.label_smoothing) == (0.5, 0.25, 0.1)
    assert config.loss.obj_gain == 3.0  # the flag wins over the file
    run = fit(config).run_dir
    out = capsys.readouterr().out
    assert "augment: " in out and "mosaic=0.5" in out and "loss: " in out and "label_smoothing=0.1" in out
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["hyp"] == str(hyp)
    assert saved["augment"]["hue"] == 0.05 and saved["augment"]["saturation"] == 1.4  # the cfg's, resolved
    assert saved["augment"]["fliplr"] == 0.5 and saved["augment"]["mosaic"] == 0.5
    assert set(HYP_OPTIONS) <= set(saved["augment"]) | set(saved["loss"])
    again = TrainConfig.build(cfg=str(cfg), data=str(data), hyp=str(run / "config.yaml"))  # reusable as --hyp
    assert again.augment.hue == 0.05 and again.loss.obj_gain == 3.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("mosiac: 1\n")
    with pytest.raises(FlagError, match="unknown key.*mosiac"):
        TrainConfig.build(cfg=str(cfg), data=str(data), hyp=str(bad))


def test_resolve_reads_the_cfg(tmp_path):
    cfg = micro_cfg(tmp_path / "m.cfg", extra="angle=7\nflip=0\nmosaic=1")
    spec = parse_cfg(cfg)
    config = resolve(TrainConfig.build(cfg=str(cfg), data="d.data"), spec)
    assert (config.augment.degrees, config.augment.fliplr, config.augment.mosaic) == (7.0, 0.0, 1.0)
    assert config.loss.label_smoothing == 0.0
    given = resolve(TrainConfig.build(cfg=str(cfg), data="d.data", degrees=2.0, mosaic=0.0), spec)
    assert (given.augment.degrees, given.augment.mosaic) == (2.0, 0.0)


def test_image_weights_favour_images_of_rare_classes():
    from turboyolo.data.scan import Sample

    rows = lambda *classes: np.array([[c, 0.5, 0.5, 0.1, 0.1] for c in classes], np.float32).reshape(-1, 5)  # noqa: E731
    samples = [Sample("a", rows(0, 0, 0)), Sample("b", rows(0)), Sample("c", rows(1)), Sample("d", rows())]
    weights = image_weights(samples, 2)
    # class 0 has 4 boxes (weight 1/4 each), class 1 one box (weight 1); background: the smallest
    np.testing.assert_allclose(weights, [0.75, 0.25, 1.0, 0.25])


def test_single_cls_trains_one_class_on_a_multi_class_set(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", 4, 2, num_classes=2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=4, num_classes=2)
    run = fit(_config(cfg, data, tmp_path / "runs", single_cls=True, evaluation_interval=1)).run_dir
    assert "--single-cls: every box is class 0 ('item')" in capsys.readouterr().out
    yolo = parse_cfg(run / "model.cfg").yolo_layers[0]
    assert yolo[1].classes == 1 and parse_cfg(run / "model.cfg").layers[yolo[0] - 1].filters == 3 * 6


def test_close_mosaic_counts_the_last_epochs():
    config = TrainConfig.build(cfg="a.cfg", data="d.data", epochs=10, close_mosaic=3, mosaic=1.0)
    run = SimpleNamespace(config=config, planned_epochs=lambda: 10)
    said = []
    assert [mixing(e, run, 3, said.append) for e in range(10)] == [True] * 7 + [False] * 3
    assert said == ["epoch 8: mosaic and mixup off for the last 3 epochs (--close-mosaic)"]
    assert all(mixing(e, run, 0, said.append) for e in range(10)) and len(said) == 1


def test_planned_epochs_follow_max_batches(tmp_path):
    from turboyolo.train.setup import Run

    config = TrainConfig.build(cfg="a.cfg", data="d.data", epochs=300, max_batches=250)
    resolved = resolve_options(config, parse_cfg(micro_cfg(tmp_path / "m.cfg", batch=8)), lambda *_: None)
    run = Run(resolved, SimpleNamespace(world_size=1), torch.device("cpu"), tmp_path, True, print,
              batches_per_epoch=5)
    assert resolved.spec.net.max_batches == 250 and resolved.config.schedule.max_batches == 250
    assert run.planned_epochs() == 50 and run.planned_iterations() == 250


def test_train_state_keeps_best_epoch():
    assert TrainState.__dataclass_fields__["best_epoch"].default is None
