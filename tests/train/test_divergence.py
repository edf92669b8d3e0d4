"""A NaN or inf loss or gradient never reaches the weights: the iteration is skipped (weights, optimizer,
EMA and BatchNorm statistics as before it), counted and named; after a few in a row the run stops naming
the iteration, the loss term and the last good checkpoint, which stays as it was."""

from __future__ import annotations

import pytest
import torch

from synth import micro_cfg
from turboyolo.formats.darknet_cfg import parse_cfg
from turboyolo.model.darknet import Darknet
from turboyolo.train import engine
from turboyolo.train.engine import (
    MAX_SKIPPED_IN_A_ROW,
    NonFiniteLoss,
    StepOptions,
    TrainState,
    train_one_epoch,
)
from turboyolo.train.loss import YoloLoss
from turboyolo.train.optim import ModelEMA, Schedule, build_optimizer


def _state(tmp_path) -> TrainState:
    torch.manual_seed(0)
    model = Darknet(parse_cfg(micro_cfg(tmp_path / "m.cfg")))
    return TrainState(model=model, optimizer=build_optimizer(model, model.spec.net),
                      schedule=Schedule(learning_rate=0.01), loss_fn=YoloLoss(model.heads),
                      images_per_iteration=2, subdivisions=1, ema=ModelEMA(model, 0.9, 1))


def _batches(count: int):
    torch.manual_seed(1)
    targets = torch.tensor([[0, 0, 0.5, 0.5, 0.3, 0.3], [1, 0, 0.3, 0.6, 0.2, 0.4]])
    return [(torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8), targets, None) for _ in range(count)]


def _snapshot(state: TrainState) -> dict[str, torch.Tensor]:
    return {**{f"model.{k}": v.clone() for k, v in state.model.state_dict().items()},
            **{f"ema.{k}": v.clone() for k, v in state.ema.module.state_dict().items()}}


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def _run(state, batches, said: list[str], snapshots: list | None = None) -> list[dict]:
    """Train over ``batches`` as one epoch; ``snapshots`` gets the state before and after each iteration."""
    steps = []
    if snapshots is not None:
        snapshots.append(_snapshot(state))
    for values in train_one_epoch(state, batches, len(batches), StepOptions(log_interval=1, say=said.append)):
        steps.append(values)
        if snapshots is not None:
            snapshots.append(_snapshot(state))
    return steps


def _poison_loss(monkeypatch, iterations: set[int], value: float = float("nan")) -> None:
    """The objectness term (and so the loss) becomes ``value`` on these 1-based calls of the loss."""
    original, calls = YoloLoss.__call__, [0]

    def call(self, outputs, targets, size, **kwargs):
        calls[0] += 1
        total, terms = original(self, outputs, targets, size, **kwargs)
        if calls[0] in iterations:
            terms = terms.clone()
            terms[1] = value
            total = total * value
        return total, terms

    monkeypatch.setattr(YoloLoss, "__call__", call)


def _poison_image(monkeypatch, iterations: set[int]) -> None:
    """One pixel of the first image of the batch becomes NaN on these 1-based calls (after the uint8 ->
    float conversion, where a broken augmentation or a bad cached pixel would show)."""
    original, calls = engine.move_to_device, [0]

    def move(images, device, **kw):
        calls[0] += 1
        x = original(images, device, **kw)
        if calls[0] in iterations:
            x = x.clone()
            x[0, :, 5, 7] = float("nan")
        return x

    monkeypatch.setattr(engine, "move_to_device", move)


@pytest.mark.parametrize("poison", ["loss", "image"])
def test_a_nan_iteration_is_skipped_and_never_reaches_the_weights(tmp_path, monkeypatch, poison):
    reference = _state(tmp_path)  # the same run without the poisoned iteration's batch
    _run(reference, _batches(3)[:1] + _batches(3)[2:], [])
    state = _state(tmp_path)
    (_poison_loss if poison == "loss" else _poison_image)(monkeypatch, {2})
    said: list[str] = []
    snapshots: list = []
    steps = _run(state, _batches(3), said, snapshots)
    assert not _same(snapshots[0], snapshots[1])  # iteration 1 trained
    assert _same(snapshots[1], snapshots[2])  # iteration 2: weights, EMA and BatchNorm statistics as before
    assert state.skipped == 1 and state.iteration == 3 and state.skipped_in_a_row == 0 and len(said) == 1
    assert said[0].startswith("warning: iteration 2 (epoch 1): ") and "skipped" in said[0]
    assert "loss term obj is nan" in said[0] or poison == "image"
    assert all(torch.isfinite(v).all() for v in snapshots[-1].values())
    assert all(value == value for step in steps for value in step.values())  # logged losses leave it out
    for key, value in _snapshot(reference).items():  # training went on as if it had never been there
        torch.testing.assert_close(snapshots[-1][key], value, msg=key)


def test_an_inf_loss_is_skipped_too(tmp_path, monkeypatch):
    state = _state(tmp_path)
    _poison_loss(monkeypatch, {1}, float("inf"))
    said: list[str] = []
    snapshots: list = []
    _run(state, _batches(1), said, snapshots)
    assert _same(snapshots[0], snapshots[1]) and "obj is inf" in said[0]


def test_nans_in_a_row_stop_the_run_naming_iteration_term_and_checkpoint(tmp_path, monkeypatch):
    state = _state(tmp_path)
    state.last_checkpoint, state.last_checkpoint_iteration = "runs/x/weights/last.pt", 1
    _poison_loss(monkeypatch, set(range(3, 3 + MAX_SKIPPED_IN_A_ROW)))
    said: list[str] = []
    with pytest.raises(NonFiniteLoss) as stop:
        _run(state, _batches(10), said)
    message = str(stop.value)
    assert f"iteration {2 + MAX_SKIPPED_IN_A_ROW}" in message and "obj is nan" in message
    assert "runs/x/weights/last.pt (iteration 1), is left as it was" in message and "--resume" in message
    assert len(said) == MAX_SKIPPED_IN_A_ROW - 1
    assert all(torch.isfinite(v).all() for v in _snapshot(state).values())
