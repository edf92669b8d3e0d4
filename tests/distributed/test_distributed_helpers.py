from __future__ import annotations

import threading
import time

import pytest
import torch

from turboyolo.errors import ConfigError
from turboyolo.train.distributed import (
    DistEnv,
    all_reduce_sum,
    convert_sync_batchnorm,
    once_per_node,
    read_env,
)


def test_single_process_defaults(monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    env = read_env()
    assert env == DistEnv() and env.is_main and not env.enabled
    assert torch.equal(all_reduce_sum(torch.ones(2)), torch.ones(2))


def test_torchrun_variables(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    env = read_env()
    assert (env.rank, env.world_size, env.local_rank, env.local_world_size) == (3, 4, 1, 2)
    assert env.enabled and not env.is_main and not env.is_local_main


def test_once_per_node_other_ranks_wait_for_marker(tmp_path):
    marker = tmp_path / "scan.done"
    calls = []

    def work():
        time.sleep(0.3)
        calls.append("built")
        return "result"

    waited = []
    follower = threading.Thread(target=lambda: waited.append(
        once_per_node(DistEnv(1, 2, 1, 2), marker, work, poll_s=0.05)))
    follower.start()
    assert once_per_node(DistEnv(0, 2, 0, 2), marker, work) == "result"
    follower.join(5)
    assert calls == ["built"] and waited == [None] and marker.exists()


def test_once_per_node_failure_reaches_waiting_ranks(tmp_path):
    marker = tmp_path / "cache.done"

    def broken():
        raise ValueError("disk full")

    with pytest.raises(ValueError):
        once_per_node(DistEnv(0, 2, 0, 2), marker, broken)
    with pytest.raises(ConfigError, match="disk full"):
        once_per_node(DistEnv(1, 2, 1, 2), marker, broken, poll_s=0.01, timeout_s=2)


def test_sync_batchnorm_on_cpu_is_clear_error():
    with pytest.raises(ConfigError, match="needs CUDA"):
        convert_sync_batchnorm(torch.nn.BatchNorm2d(3), torch.device("cpu"))


def test_sync_batchnorm_converts_darknet_bn():
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.zoo import make_spec

    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(Darknet(make_spec("yolov3-tiny", 1)))
    assert isinstance(model.layers[0].bn, torch.nn.SyncBatchNorm)
