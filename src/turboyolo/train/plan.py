"""The run's plan, fixed once the data is known: the optimizer, the learning-rate schedule, the EMA of the
weights and the epochs without mosaic, each fitted to the planned run or taken from the cfg.

A stock Darknet cfg plans 500,200 iterations (burn_in=1000, steps at 400,000 and 450,000); a fine-tune of
a few hundred iterations run on that plan never leaves the warm-up. The ``fitted`` schedule (the default)
therefore follows the iterations this run will make (``--epochs`` / ``--max-batches``): a warm-up of
``--warmup-epochs`` (at most 10% of the run and 1000 iterations), then a cosine (or linear) decay that
reaches ``--lr-final`` exactly at the last planned iteration. ``--schedule darknet`` keeps the cfg's
``[net]`` schedule and optimizer as Darknet runs them.

The plan is printed once at the start (:attr:`Plan.description`) and stored in every checkpoint, so
``--resume`` continues the same curve even when the data set has changed size since.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from turboyolo.formats.darknet_cfg import NetSpec
from turboyolo.train.config import OptimArgs, TrainConfig
from turboyolo.train.optim import OptimizerSettings, Schedule

# The fitted schedule's defaults (measured on two data sets: docs/PERFORMANCE.md, "Training defaults").
FITTED_OPTIMIZER = "adam"
FITTED_LR = {"adam": 0.002, "adamw": 0.002, "sgd": 0.01}
FITTED_MOMENTUM = 0.9
FITTED_WEIGHT_DECAY = 0.0005
WARMUP_POWER = 2.0  # the warm-up rises as (i / warm-up)^2 (Darknet's burn-in shape with power=2)
WARMUP_MAX_SHARE = 0.1  # at most this share of the planned iterations ...
WARMUP_MAX_ITERATIONS = 1000  # ... and at most Darknet's burn_in of the stock cfgs
# The EMA averages over about the last EMA_WINDOW_SHARE of the run (decay 0.98 for 250 iterations, the
# 0.9999 of long runs from 50,000 on); its decay ramps up over EMA_RAMP_SHARE of it (20 for 250).
EMA_WINDOW_SHARE = 0.2
EMA_DECAY_RANGE = (0.9, 0.9999)
EMA_RAMP_SHARE = 0.08
EMA_RAMP_MAX = 2000.0
CLOSE_MOSAIC_SHARE = 0.2  # no mosaic in the last 20% of the epochs ...
CLOSE_MOSAIC_MAX = 10  # ... and at most the last 10 (Ultralytics' close_mosaic)
OPTIMIZER_NAMES = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW"}


@dataclass(frozen=True)
class Plan:
    """What a run trains with over its iterations (stored in checkpoints as plain numbers)."""

    iterations: int  # the last planned iteration (where a fitted schedule ends)
    epochs: int  # planned epochs
    optimizer: OptimizerSettings
    schedule: Schedule
    ema_decay: float
    ema_ramp: float
    close_mosaic: int  # epochs at the end without mosaic and mixup
    description: str = ""  # the line printed at the start

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> Plan:
        values = dict(values)
        schedule = dict(values.pop("schedule"))
        for key in ("steps", "scales"):
            schedule[key] = tuple(schedule.get(key, ()))
        return cls(optimizer=OptimizerSettings(**values.pop("optimizer")), schedule=Schedule(**schedule),
                   **values)


def warmup_iterations(warmup_epochs: float, iterations_per_epoch: int, planned: int) -> int:
    """``warmup_epochs`` in iterations, capped at 10% of the planned iterations and at 1000."""
    wanted = round(warmup_epochs * iterations_per_epoch)
    return max(0, min(wanted, int(WARMUP_MAX_SHARE * planned), WARMUP_MAX_ITERATIONS))


def fitted_ema(planned: int) -> tuple[float, float]:
    """(decay, ramp) of an EMA that averages over about the last 20% of ``planned`` iterations."""
    low, high = EMA_DECAY_RANGE
    decay = min(max(1.0 - 1.0 / max(EMA_WINDOW_SHARE * planned, 1.0), low), high)
    ramp = min(max(EMA_RAMP_SHARE * planned, 1.0), EMA_RAMP_MAX)
    return decay, ramp


def fitted_close_mosaic(epochs: int) -> int:
    return min(round(CLOSE_MOSAIC_SHARE * epochs), CLOSE_MOSAIC_MAX)


def fitted_optimizer(optim: OptimArgs, net: NetSpec) -> OptimizerSettings:
    """The optimizer of the fitted schedule: the flags given, the fitted defaults for the rest (the
    doctor times and checkpoints this one, as ``turboyolo train`` would build it)."""
    name = optim.optimizer or FITTED_OPTIMIZER
    return OptimizerSettings(
        name, optim.lr or FITTED_LR[name], FITTED_MOMENTUM if optim.momentum is None else optim.momentum,
        FITTED_WEIGHT_DECAY if optim.weight_decay is None else optim.weight_decay, net.b2, net.eps)


def make_plan(config: TrainConfig, net: NetSpec, planned: int, epochs: int,
              iterations_per_epoch: int) -> Plan:
    """The plan of a fresh run: ``planned`` iterations over ``epochs`` epochs of ``iterations_per_epoch``."""
    optim, runtime = config.optim, config.runtime
    planned = max(planned, 1)
    if optim.lr_schedule == "darknet":
        cfg_optimizer = OptimizerSettings.from_net(net)
        name = optim.optimizer or cfg_optimizer.name
        optimizer = dataclasses.replace(
            cfg_optimizer, name=name, lr=optim.lr or cfg_optimizer.lr,
            momentum=cfg_optimizer.momentum if optim.momentum is None else optim.momentum,
            weight_decay=cfg_optimizer.weight_decay if optim.weight_decay is None else optim.weight_decay)
        schedule = dataclasses.replace(Schedule.from_net(net), learning_rate=optimizer.lr)
    else:
        optimizer = fitted_optimizer(optim, net)
        warmup = warmup_iterations(optim.warmup_epochs, iterations_per_epoch, planned)
        schedule = Schedule(learning_rate=optimizer.lr, burn_in=warmup, power=WARMUP_POWER,
                            policy=optim.lr_decay, max_batches=planned, min_lr_ratio=optim.lr_final)
    ema_decay, ema_ramp = fitted_ema(planned)
    ema_decay = ema_decay if runtime.ema_decay is None else runtime.ema_decay
    ema_ramp = ema_ramp if runtime.ema_ramp is None else runtime.ema_ramp
    augment = config.augment
    close = fitted_close_mosaic(epochs) if augment.close_mosaic is None else augment.close_mosaic
    plan = Plan(planned, epochs, optimizer, schedule, ema_decay, ema_ramp, close)
    return dataclasses.replace(plan, description=describe(plan, config, net, iterations_per_epoch))


def refit(plan: Plan, planned: int, epochs: int) -> Plan:
    """A fitted plan stretched (or shortened) to end at ``planned`` iterations: ``--resume`` with a new
    ``--epochs``/``--max-batches``. The warm-up, the rates and the EMA stay as they were."""
    schedule = dataclasses.replace(plan.schedule, max_batches=max(planned, 1))
    return dataclasses.replace(plan, iterations=planned, epochs=epochs, schedule=schedule)


def legacy_plan(config: TrainConfig, net: NetSpec, planned: int, epochs: int) -> Plan:
    """The plan of a checkpoint written before plans were stored: the cfg's schedule and the config's EMA."""
    runtime = config.runtime
    plan = Plan(planned, epochs, OptimizerSettings.from_net(net), Schedule.from_net(net),
                runtime.ema_decay or 0.9999, runtime.ema_ramp or 2000.0, config.augment.close_mosaic or 0)
    return dataclasses.replace(plan, description="schedule: the cfg's, as the checkpoint was trained")


def describe(plan: Plan, config: TrainConfig, net: NetSpec, iterations_per_epoch: int) -> str:
    """One line: the schedule chosen, its numbers and why."""
    opt, s = plan.optimizer, plan.schedule
    optimizer = (f"{OPTIMIZER_NAMES.get(opt.name, opt.name)} lr {opt.lr:g} (momentum {opt.momentum:g}, "
                 f"weight decay {opt.weight_decay:g})")
    ema = (f"; EMA decay {plan.ema_decay:.4g} (ramp {plan.ema_ramp:g})" if config.runtime.ema else "")
    cfg_plan = (f"the cfg's [net] plans {net.max_batches:,} iterations (burn_in={net.burn_in}, "
                f"policy={net.policy})")
    if config.optim.lr_schedule == "darknet":
        shape = {"steps": f"steps {','.join(map(str, s.steps))} x {','.join(f'{v:g}' for v in s.scales)}",
                 "poly": f"poly power {s.power:g} to iteration {s.max_batches}",
                 "cosine": f"cosine to iteration {s.max_batches}"}.get(s.policy, f"policy {s.policy}")
        line = (f"schedule: darknet (--schedule darknet): {optimizer}, burn-in {s.burn_in} iterations "
                f"(power {s.power:g}), {shape}; this run plans {plan.iterations} iterations{ema}")
        if s.burn_in >= plan.iterations:
            line += (f". warning: the burn-in ({s.burn_in}) is as long as the whole run: the rate never "
                     "reaches its peak; the default --schedule fitted follows the run instead")
        return line
    warmup = (f"warm-up {s.burn_in} iterations" + (f" ({s.burn_in / iterations_per_epoch:.3g} epochs)"
                                                   if iterations_per_epoch else "") if s.burn_in else
              "no warm-up")
    floor = f"{s.min_lr_ratio:g} x lr" if s.min_lr_ratio else "0"
    return (f"schedule: fitted to this run's {plan.iterations} planned iterations ({plan.epochs} epochs of "
            f"{iterations_per_epoch}): {optimizer}, {warmup}, {s.policy} decay to {floor} at iteration "
            f"{plan.iterations}{ema}. Not the cfg's: {cfg_plan}, which a short run never finishes; "
            "--schedule darknet runs it")
