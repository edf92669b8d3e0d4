"""The demo recipe is defined by iterations: a cosine over exactly them, no timing probe, no time limit."""

from __future__ import annotations

from turboyolo.commands.demo import DEMO_ITERATIONS, demo_config
from turboyolo.formats.darknet_cfg import parse_cfg
from turboyolo.train.optim import Schedule, lr_at


def test_demo_trains_a_fixed_number_of_iterations(tmp_path):
    config = demo_config(tmp_path / "trees", tmp_path / "w.weights", tmp_path / "runs")
    assert DEMO_ITERATIONS == 250
    assert config.schedule.max_batches == 250 and config.schedule.time_limit_min == 0
    net = parse_cfg(config.cfg).net
    assert (net.policy, net.max_batches, net.batch, net.width, net.mosaic) == ("cosine", 250, 8, 416, 1.0)
    assert config.augment.close_mosaic == 10  # mosaic in the first 40 of the 50 epochs (by the table)
    schedule = Schedule.from_net(net)
    assert lr_at(schedule, 250) == 0.0 and lr_at(schedule, 125) > 0.4 * net.learning_rate
    longer = demo_config(tmp_path / "trees", tmp_path / "w.weights", tmp_path / "runs2", 400, seed=1,
                         mosaic=0.5)
    assert parse_cfg(longer.cfg).net.max_batches == 400 and longer.augment.mosaic == 0.5
    assert longer.runtime.seed == 1
