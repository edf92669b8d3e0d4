"""The LR schedule against Darknet's own printout, and the optimizer's parameter groups."""

from pathlib import Path

import pytest
import torch

from turboyolo.errors import ConfigError
from turboyolo.formats.darknet_cfg import parse_cfg
from turboyolo.model.darknet import Darknet
from turboyolo.model.zoo import make_spec
from turboyolo.train.optim import ModelEMA, Schedule, build_optimizer, lr_at, param_groups

FIXTURES = Path(__file__).parents[1] / "fixtures" / "darknet_lr"


@pytest.mark.parametrize("name", ["lr_steps", "lr_power2"])
def test_lr_at_matches_darknet_binary(name):
    net = parse_cfg(FIXTURES / f"{name}.cfg").net
    rows = [line.split() for line in (FIXTURES / f"{name}.txt").read_text().splitlines() if line.strip()]
    assert len(rows) == 10
    for iteration, rate in rows:
        # Darknet prints the rate with 6 decimals.
        assert lr_at(net, int(iteration)) == pytest.approx(float(rate), abs=6e-7), iteration


def test_lr_policies():
    cos = Schedule(learning_rate=1.0, burn_in=10, power=1, policy="cosine", max_batches=110)
    assert lr_at(cos, 5) == pytest.approx(0.5)
    assert lr_at(cos, 10) == pytest.approx(1.0)
    assert lr_at(cos, 60) == pytest.approx(0.5)
    assert lr_at(cos, 110) == pytest.approx(0.0, abs=1e-12)
    poly = Schedule(learning_rate=1.0, power=2, policy="poly", max_batches=100)
    assert lr_at(poly, 50) == pytest.approx(0.25)
    with pytest.raises(ConfigError, match="policy"):
        Schedule(learning_rate=1.0, policy="sig")


def test_no_decay_on_bn_and_bias():
    model = Darknet(make_spec("yolov3-tiny", num_classes=2, width=64, height=64))
    decay, no_decay = param_groups(model, 0.0005)
    conv_weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert {id(p) for p in decay["params"]} == {id(p) for p in conv_weights}
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.0005
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    # the heads' biases and every BN affine parameter are in the no-decay group
    assert all(p.dim() == 1 for p in no_decay["params"])


def test_optimizer_from_cfg():
    spec = make_spec("yolov3-tiny", num_classes=1, width=64, height=64)
    model = Darknet(spec)
    assert isinstance(build_optimizer(model, spec.net), torch.optim.SGD)
    adam = build_optimizer(model, spec.with_net(optimizer="adam").net)
    assert isinstance(adam, torch.optim.Adam)


def test_ema_tracks_model():
    model = torch.nn.Linear(2, 1)
    ema = ModelEMA(model, decay=0.5, ramp=1e-9)
    with torch.no_grad():
        model.weight.add_(1.0)
    ema.update(model)
    assert torch.allclose(ema.module.weight, model.weight - 0.5)
