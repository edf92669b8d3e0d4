"""Optimizer, learning-rate schedule and EMA with Darknet semantics.

An *iteration* is one optimizer update over ``batch`` images (``subdivisions`` mini-batches), counted
from 1 as Darknet prints it. :func:`lr_at` is a pure function of that count, so resuming, logging and
tests all agree on the rate without replaying history.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from turboyolo.errors import ConfigError
from turboyolo.formats.darknet_cfg import NetSpec

POLICIES = ("constant", "steps", "step", "poly", "cosine", "linear")  # linear: turboyolo's, not Darknet's


@dataclass(frozen=True)
class Schedule:
    """The ``[net]`` fields the LR schedule reads (so it can be stored as plain numbers)."""

    learning_rate: float
    burn_in: int = 0
    power: float = 4.0
    policy: str = "constant"
    steps: tuple[int, ...] = ()
    scales: tuple[float, ...] = ()
    max_batches: int = 0
    step: int = 1  # policy=step: one scale every `step` iterations
    scale: float = 1.0
    min_lr_ratio: float = 0.0  # cosine and linear end at learning_rate * min_lr_ratio

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(
                f"[net] policy={self.policy} is not supported; use one of {', '.join(POLICIES)}"
            )
        if self.policy in ("poly", "cosine", "linear") and self.max_batches <= 0:
            raise ConfigError(f"[net] policy={self.policy} needs max_batches > 0")

    @classmethod
    def from_net(cls, net: NetSpec) -> Schedule:
        extra = dict(net.extra)
        return cls(
            learning_rate=net.learning_rate,
            burn_in=net.burn_in,
            power=net.power,
            policy=net.policy,
            steps=tuple(net.steps),
            scales=tuple(net.scales),
            max_batches=net.max_batches,
            step=int(extra.get("step", 1)),
            scale=float(extra.get("scale", 1.0)),
        )


def lr_at(schedule: Schedule | NetSpec, iteration: int) -> float:
    """Darknet's ``get_current_rate`` for 1-based ``iteration`` (the update after ``iteration * batch``
    images).

    During burn-in (``iteration < burn_in``) the rate is ``lr * (iteration / burn_in) ** power``; then the
    policy applies. For ``steps`` each scale applies once ``iteration >= step``; ``cosine`` and ``linear``
    fall from ``lr`` at the end of burn-in to ``lr * min_lr_ratio`` at ``max_batches``.
    """
    s = schedule if isinstance(schedule, Schedule) else Schedule.from_net(schedule)
    lr = s.learning_rate
    if iteration < s.burn_in:
        return lr * (iteration / s.burn_in) ** s.power
    if s.policy == "steps":
        for step, scale in zip(s.steps, s.scales, strict=False):
            if step > iteration:
                break
            lr *= scale
        return lr
    if s.policy == "step":
        return lr * s.scale ** (iteration // max(s.step, 1))
    if s.policy == "poly":
        return lr * max(0.0, 1.0 - iteration / s.max_batches) ** s.power
    if s.policy in ("cosine", "linear"):
        span = max(s.max_batches - s.burn_in, 1)
        progress = min(max(iteration - s.burn_in, 0) / span, 1.0)
        floor = lr * s.min_lr_ratio
        fall = 0.5 * (1.0 + math.cos(math.pi * progress)) if s.policy == "cosine" else 1.0 - progress
        return floor + (lr - floor) * fall
    return lr


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: convolution weights (decayed) and BN weights + all biases (never decayed)."""
    decay, no_decay = [], []
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad:
                continue
            if name == "weight" and isinstance(module, nn.Conv2d | nn.Linear):
                decay.append(param)
            else:
                no_decay.append(param)
    return [
        {"params": decay, "weight_decay": weight_decay, "name": "decay"},
        {"params": no_decay, "weight_decay": 0.0, "name": "no_decay"},
    ]


@dataclass(frozen=True)
class OptimizerSettings:
    """What :func:`build_optimizer` makes: ``name`` (sgd, adam, adamw), the peak rate, SGD momentum or
    Adam's beta1, the weight decay of the convolution weights, Adam's beta2 and eps."""

    name: str
    lr: float
    momentum: float = 0.9
    weight_decay: float = 0.0005
    b2: float = 0.999
    eps: float = 1e-7

    @classmethod
    def from_net(cls, net: NetSpec) -> OptimizerSettings:
        """The cfg's ``[net]`` optimizer (Darknet's ``adam=1`` or ``optimizer=``), rate, momentum, decay."""
        momentum = net.b1 if net.optimizer == "adam" else net.momentum
        return cls(net.optimizer, net.learning_rate, momentum, net.decay, net.b2, net.eps)


def build_optimizer(model: nn.Module, settings: OptimizerSettings | NetSpec) -> torch.optim.Optimizer:
    """SGD (momentum, nesterov off), Adam (L2 decay in the gradient, as Darknet's adam) or AdamW (decoupled
    decay). A :class:`NetSpec` stands for its own ``[net]`` settings.

    Darknet scales decay by the batch (``decay * batch`` on a summed gradient); with the loss divided by
    the images per iteration the same decay is the plain L2 coefficient ``decay``.
    """
    if isinstance(settings, NetSpec):
        settings = OptimizerSettings.from_net(settings)
    groups = param_groups(model, settings.weight_decay)
    betas = (settings.momentum, settings.b2)
    if settings.name == "adam":
        return torch.optim.Adam(groups, lr=settings.lr, betas=betas, eps=settings.eps)
    if settings.name == "adamw":
        return torch.optim.AdamW(groups, lr=settings.lr, betas=betas, eps=settings.eps)
    if settings.name == "sgd":
        return torch.optim.SGD(groups, lr=settings.lr, momentum=settings.momentum)
    raise ConfigError(f"optimizer {settings.name} is not supported; use sgd, adam or adamw")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


class ModelEMA:
    """Exponential moving average of a model's parameters and buffers, for evaluation.

    The decay ramps up as ``decay * (1 - exp(-updates / ramp))`` so early, random weights fade fast.
    """

    def __init__(self, model: nn.Module, decay: float = 0.999, ramp: float = 200.0, updates: int = 0):
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay, self.ramp, self.updates = decay, ramp, updates

    def current_decay(self) -> float:
        return self.decay * (1.0 - math.exp(-self.updates / self.ramp))

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.updates += 1
        d = self.current_decay()
        ema_state = self.module.state_dict()
        for name, value in model.state_dict().items():
            target = ema_state[name]
            if target.dtype.is_floating_point:
                target.mul_(d).add_(value.detach().to(target.dtype), alpha=1.0 - d)
            else:
                target.copy_(value)

    def state_dict(self) -> dict:
        return self.module.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state)
