"""The run's plan: a schedule fitted to the planned iterations (warm-up, decay ending exactly at the last
one), Darknet's own schedule on request, the fitted EMA and close-mosaic, and resume keeping the plan."""

from __future__ import annotations

import pytest
import torch
import yaml

from synth import make_dataset, micro_cfg
from turboyolo.cli import main as cli
from turboyolo.model.darknet import Darknet
from turboyolo.model.zoo import make_spec
from turboyolo.train.config import TrainConfig
from turboyolo.train.fit import fit
from turboyolo.train.optim import Schedule, build_optimizer, lr_at
from turboyolo.train.plan import Plan, fitted_close_mosaic, fitted_ema, make_plan, warmup_iterations

STOCK_NET = make_spec("yolov3-tiny", num_classes=1).net  # burn_in=1000, steps 400000,450000, max 500200


def _plan(planned: int, epochs: int, per_epoch: int, **options) -> Plan:
    config = TrainConfig.build(cfg="a.cfg", data="d.data", **options)
    return make_plan(config, STOCK_NET, planned, epochs, per_epoch)


def test_fitted_schedule_warms_up_then_ends_exactly_at_the_last_planned_iteration():
    plan = _plan(250, 50, 5)  # trees: 50 epochs of 5 iterations
    s = plan.schedule
    assert (plan.optimizer.name, plan.optimizer.lr, s.burn_in, s.max_batches) == ("adam", 0.002, 15, 250)
    assert lr_at(s, 1) == pytest.approx(0.002 * (1 / 15) ** 2)  # quadratic warm-up over 3 epochs
    assert lr_at(s, 15) == pytest.approx(0.002)  # the peak right after it
    assert lr_at(s, 15 + (250 - 15) // 2) == pytest.approx(0.001, rel=0.01)  # cosine: half way, half rate
    assert lr_at(s, 249) > 0 and lr_at(s, 250) == 0.0  # the last planned iteration, not the cfg's 500,200
    assert lr_at(s, 300) == 0.0
    rates = [lr_at(s, i) for i in range(15, 251)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))  # never rises again after the warm-up


def test_warmup_is_capped_by_the_run_and_by_darknets_burn_in():
    assert warmup_iterations(3, 26, 260) == 26  # BCCD: 3 epochs = 78 iterations, 10% of 260
    assert warmup_iterations(3, 5, 250) == 15
    assert warmup_iterations(3, 14658, 4_397_400) == 1000  # COCO-sized epochs: Darknet's burn_in
    assert warmup_iterations(0, 26, 260) == 0
    assert _plan(260, 10, 26, warmup_epochs=0).schedule.burn_in == 0


def test_fitted_options_reach_the_schedule_and_optimizer():
    plan = _plan(100, 10, 10, optimizer="sgd", lr_final=0.1, lr_decay="linear", warmup_epochs=1,
                 momentum=0.8, weight_decay=0.01)
    s = plan.schedule
    assert (plan.optimizer.name, plan.optimizer.lr, plan.optimizer.momentum) == ("sgd", 0.01, 0.8)
    assert s.burn_in == 10 and lr_at(s, 100) == pytest.approx(0.001)  # lr_final: a fraction of --lr
    assert lr_at(s, 55) == pytest.approx(0.001 + 0.009 * 0.5)  # linear
    optimizer = build_optimizer(Darknet(make_spec("yolov3-tiny", 1, 64, 64)), plan.optimizer)
    assert isinstance(optimizer, torch.optim.SGD)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.01, 0.0]
    assert optimizer.param_groups[0]["momentum"] == 0.8
    adamw = _plan(100, 10, 10, optimizer="adamw", lr=0.0005)
    built = build_optimizer(Darknet(make_spec("yolov3-tiny", 1, 64, 64)), adamw.optimizer)
    assert isinstance(built, torch.optim.AdamW) and built.param_groups[0]["lr"] == 0.0005


def test_darknet_schedule_is_the_cfgs_own():
    plan = _plan(250, 50, 5, lr_schedule="darknet")
    assert plan.schedule == Schedule.from_net(STOCK_NET)
    assert (plan.optimizer.name, plan.optimizer.lr) == ("sgd", 0.001)
    assert lr_at(plan.schedule, 250) == pytest.approx(0.001 * (250 / 1000) ** 4)  # still warming up
    assert "warning: the burn-in (1000) is as long as the whole run" in plan.description
    faster = _plan(250, 50, 5, lr_schedule="darknet", lr=0.01, optimizer="adam")
    assert (faster.optimizer.name, faster.schedule.learning_rate) == ("adam", 0.01)


def test_fitted_ema_and_close_mosaic():
    assert fitted_ema(250) == pytest.approx((0.98, 20.0))
    assert fitted_ema(500_200) == pytest.approx((0.9999, 2000.0))
    assert fitted_ema(10)[0] == 0.9
    assert (fitted_close_mosaic(50), fitted_close_mosaic(10), fitted_close_mosaic(300)) == (10, 2, 10)
    plan = _plan(250, 50, 5, ema_decay=0.99, close_mosaic=3)
    assert (plan.ema_decay, plan.ema_ramp, plan.close_mosaic) == (0.99, 20.0, 3)


def test_plan_round_trips_as_plain_numbers():
    plan = _plan(250, 50, 5)
    again = Plan.from_dict(yaml.safe_load(yaml.safe_dump(plan.as_dict())))
    assert again == plan


def test_train_prints_the_plan_and_ends_the_rate_at_the_planned_end(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", 8, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2, burn_in=1000, max_batches=500200)  # a stock [net] plan
    assert cli(["train", "--cfg", str(cfg), "--data", str(data), "--epochs", "3", "--workers", "0",
                "--project", str(tmp_path / "runs"), "--evaluation-interval", "0", "--checkpoint-interval",
                "0", "--optimizer", "adamw", "--lr", "0.001", "--warmup-epochs", "1", "--linear-lr"]) == 0
    out = capsys.readouterr().out
    assert ("schedule: fitted to this run's 12 planned iterations (3 epochs of 4): AdamW lr 0.001 "
            "(momentum 0.9, weight decay 0.0005), warm-up 1 iterations (0.25 epochs), linear decay to 0 at "
            "iteration 12") in out
    assert "--schedule darknet runs it" in out
    run = tmp_path / "runs" / "exp"
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["optim"]["optimizer"] == "adamw" and saved["optim"]["lr_decay"] == "linear"
    assert saved["plan"]["schedule"]["max_batches"] == 12 and saved["plan"]["iterations"] == 12
    last = torch.load(run / "weights" / "last.pt", weights_only=True)
    assert last["iteration"] == 12 and last["optimizer"]["param_groups"][0]["lr"] == 0.0
    assert Plan.from_dict(last["plan"]).schedule.burn_in == 1


@pytest.mark.slow
def test_resume_keeps_the_plan_and_a_new_length_refits_its_end(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", 8, 2)
    cfg = micro_cfg(tmp_path / "m.cfg", batch=2)
    common = dict(cfg=str(cfg), data=str(data), epochs=3, workers=0, evaluation_interval=0,
                  checkpoint_interval=0)
    straight = fit(TrainConfig.build(project=str(tmp_path / "a"), **common), quiet=True).run_dir
    first = fit(TrainConfig.build(project=str(tmp_path / "b"), **common), stop_at_iteration=5,
                quiet=True).run_dir
    saved = torch.load(first / "weights" / "last.pt", weights_only=True)
    resumed = fit(TrainConfig.build(resume=str(first / "weights" / "last.pt")), quiet=True).run_dir
    a = torch.load(straight / "weights" / "last.pt", weights_only=True)
    b = torch.load(resumed / "weights" / "last.pt", weights_only=True)
    assert a["plan"] == b["plan"] == saved["plan"] and b["iteration"] == 12
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    # resumed for a longer run: the decay is stretched to its new end instead of staying at 0
    longer = fit(TrainConfig.build(resume=str(resumed / "weights" / "last.pt"), epochs=5)).run_dir
    assert ("the run now plans 20 iterations (it was started for 12); the fitted decay now ends at "
            "iteration 20, so the rate of iteration 13 is") in capsys.readouterr().out
    plan = Plan.from_dict(torch.load(longer / "weights" / "last.pt", weights_only=True)["plan"])
    assert plan.schedule.max_batches == 20
    assert plan.schedule.burn_in == Plan.from_dict(a["plan"]).schedule.burn_in


def test_checkpoints_from_before_plans_resume_on_the_cfgs_schedule(tmp_path):
    """A config saved before the optim group existed means the cfg's schedule and Darknet's BN momentum."""
    legacy = TrainConfig.build(cfg="a.cfg", data="d.data").as_dict()
    del legacy["optim"]
    legacy["runtime"]["bn_momentum"] = None
    legacy["augment"]["close_mosaic"] = 0
    config = TrainConfig.from_dict(legacy)
    assert config.optim.lr_schedule == "darknet" and config.runtime.bn_momentum == 0.01
    assert config.augment.close_mosaic == 0
    assert TrainConfig.from_dict(TrainConfig.build(cfg="a.cfg", data="d.data").as_dict()).optim.lr_schedule \
        == "fitted"

