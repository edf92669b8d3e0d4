"""The checkpoint writer: both snapshot modes write the state as it was at save() time, atomically."""

from __future__ import annotations

import pytest
import torch

from turboyolo.train.checkpoint import CheckpointWriter, atomic_save, rng_state, set_rng_state


@pytest.mark.parametrize("mode", ["fork", "thread"])
def test_writer_snapshots_at_save_time(tmp_path, mode):
    weights = torch.arange(1000, dtype=torch.float32)
    writer = CheckpointWriter(mode=mode)
    writer.save(
        {"model": {"w": weights}, "iteration": 3, "config": {"a": [1, 2]}},
        [tmp_path / "last.pt", tmp_path / "best.pt"],
    )
    weights.add_(1.0)  # the loop goes on changing the tensors while the write runs
    writer.save({"model": {"w": weights}, "iteration": 4, "config": {"a": [1, 2]}}, [tmp_path / "epoch.pt"])
    writer.close()
    first = torch.load(tmp_path / "best.pt", weights_only=True)
    assert first["iteration"] == 3 and torch.equal(first["model"]["w"], torch.arange(1000.0))
    second = torch.load(tmp_path / "epoch.pt", weights_only=True)
    assert second["iteration"] == 4 and torch.equal(second["model"]["w"], torch.arange(1000.0) + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "epoch.pt", "last.pt"]


def test_atomic_save_leaves_old_file_when_writing_fails(tmp_path):
    target = atomic_save({"v": 1}, tmp_path / "last.pt")

    def boom(_):
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_save({"v": 2}, target, fault=boom)
    assert torch.load(target, weights_only=True) == {"v": 1}


def test_rng_state_round_trip_is_weights_only(tmp_path):
    state = rng_state()
    atomic_save(state, tmp_path / "rng.pt")
    expected = torch.rand(3)
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert torch.equal(torch.rand(3), expected)
