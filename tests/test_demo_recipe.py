"""The trees recipe (what ``make demo`` trains) is a ``--config`` file of data-specific values over the
defaults, and a run's ``config.yaml`` given back to ``--config`` reproduces the run."""

from __future__ import annotations

import csv

import pytest
import yaml

from synth import make_dataset, micro_cfg
from turboyolo.cli import main as cli
from turboyolo.errors import FlagError
from turboyolo.model.zoo import make_spec
from turboyolo.train.config import RECIPES, TrainConfig, read_config
from turboyolo.train.optim import Schedule, lr_at
from turboyolo.train.plan import make_plan
from turboyolo.train.resolve import resolve_options


def test_the_trees_recipe_is_the_defaults_plus_what_is_specific_to_the_trees():
    values = read_config("trees")
    assert RECIPES["trees"].name == "trees.yaml"
    assert (values["cfg"], values["weights"], values["epochs"], values["batch"]) == ("yolov3-tiny",
                                                                                      "yolov3-tiny", 50, 8)
    # nothing in it that the defaults already give (schedule, optimizer, EMA, loss, mosaic)
    assert not set(values) & {"lr", "optimizer", "lr_schedule", "ema_decay", "bn_momentum", "box_loss",
                              "assign_iou_thres", "mosaic", "close_mosaic", "obj_iou"}
    config = TrainConfig.build(data="trees.data", base=values)
    assert (config.cfg, config.weights) == ("yolov3-tiny", "yolov3-tiny")
    resolved = resolve_options(config, make_spec("yolov3-tiny", num_classes=1), say=lambda *_: None)
    config, spec = resolved.config, resolved.spec
    assert spec.yolo_layers[0][1].anchors[0] == (16.0, 17.0) and spec.net.batch == 8
    assert spec.net.subdivisions == 1 and config.augment.aug_scale == (0.8, 1.5)
    loss = config.loss
    assert (loss.box_loss, loss.assign_iou_thres, config.augment.mosaic) == ("giou", 0.213, 1.0)
    # 37 tiles in batches of 8: 5 iterations per epoch, 50 epochs
    plan = make_plan(config, spec.net, 250, 50, 5)
    assert (plan.ema_decay, plan.ema_ramp, plan.close_mosaic) == (0.98, 20.0, 10)
    # the schedule the demo trained with before it was a recipe: Adam 2e-3, burn-in 15 with power 2,
    # cosine to 0 over exactly 250 iterations
    before = Schedule(learning_rate=0.002, burn_in=15, power=2.0, policy="cosine", max_batches=250)
    assert [lr_at(plan.schedule, i) for i in range(1, 260)] == [lr_at(before, i) for i in range(1, 260)]
    assert (plan.optimizer.name, plan.optimizer.weight_decay, plan.optimizer.eps) == ("adam", 0.0005, 1e-7)


def test_config_round_trip_reproduces_the_run(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", 6, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2)
    first = ["train", "--cfg", str(cfg), "--data", str(data), "--epochs", "2", "--workers", "0",
             "--project", str(tmp_path / "runs"), "--name", "a", "--evaluation-interval", "1",
             "--checkpoint-interval", "0", "--mosaic", "0.5", "--lr", "0.003", "--hue", "0.02",
             "--box-loss", "ciou", "--seed", "3"]
    assert cli(first) == 0
    saved = tmp_path / "runs" / "a" / "config.yaml"
    assert cli(["train", "--config", str(saved), "--name", "b"]) == 0
    capsys.readouterr()
    a, b = (yaml.safe_load((tmp_path / "runs" / name / "config.yaml").read_text()) for name in "ab")
    for values in (a, b):
        values["output"].pop("name"), values.pop("given"), values.pop("from_file")
        values.pop("sources")  # a: flags and auto; b: the recipe (a's config.yaml)
        values["pipeline"] = {key: values["pipeline"][key] for key in ("cache", "augment_on", "workers")}
    assert a == b  # every group: schedule, optimizer, augmentation, loss, evaluation, the input pipeline
    # (auto's choice in a, frozen into its config.yaml: the same in b) and the plan

    def rows(name):
        with open(tmp_path / "runs" / name / "results.csv", newline="") as handle:
            return [{k: v for k, v in row.items() if k not in ("minutes", "images_per_s", "data_wait")}
                    for row in csv.DictReader(handle)]

    assert rows("a") == rows("b")  # the same losses and mAP, iteration for iteration
    # flags given with --config win over the file's values
    assert cli(["train", "--config", str(saved), "--name", "c", "--epochs", "1", "--lr", "0.001"]) == 0
    c = yaml.safe_load((tmp_path / "runs" / "c" / "config.yaml").read_text())
    assert (c["schedule"]["epochs"], c["optim"]["lr"], c["augment"]["hue"]) == (1, 0.001, 0.02)


def test_config_file_errors_name_the_file_and_the_key(tmp_path):
    bad = tmp_path / "recipe.yaml"
    bad.write_text("schedule:\n  epochs: 3\nlearning_rat: 0.1\n")
    with pytest.raises(FlagError, match=r"recipe.yaml: unknown key\(s\) learning_rat"):
        read_config(bad)
    bad.write_text("- a list\n")
    with pytest.raises(FlagError, match="expected a mapping"):
        read_config(bad)
    with pytest.raises(FlagError, match="no such file, and not a packaged recipe"):
        read_config(tmp_path / "missing.yaml")
    bad.write_text("augment: {mosaic: 3}\n")
    with pytest.raises(FlagError, match="--mosaic is a probability"):
        TrainConfig.build(cfg="a.cfg", data="d.data", base=read_config(bad))
