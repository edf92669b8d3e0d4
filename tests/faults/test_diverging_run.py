"""A run whose loss turns NaN: each bad iteration is skipped and named, then the run stops with one line
naming the iteration, the loss term and the last good checkpoint, which is left whole and finite (before:
the NaN reached the weights and the run stopped at the next log line, after writing them)."""

from __future__ import annotations

import torch

from synth import make_dataset, micro_cfg


def test_a_diverging_run_stops_and_keeps_the_last_good_checkpoint(tmp_path, cli, monkeypatch):
    from turboyolo.train.loss import YoloLoss

    original, calls = YoloLoss.__call__, [0]

    def diverging(self, outputs, targets, size, **kwargs):  # from the 5th mini-batch on (epoch 3), obj is NaN
        calls[0] += 1
        total, terms = original(self, outputs, targets, size, **kwargs)
        if calls[0] >= 5:
            terms = terms.clone()
            terms[1] = float("nan")
            total = total * float("nan")
        return total, terms

    monkeypatch.setattr(YoloLoss, "__call__", diverging)
    data = make_dataset(tmp_path / "d", 4, 2)
    run = cli("train", "--cfg", micro_cfg(tmp_path / "m.cfg", batch=2), "--data", data, "--workers", 0,
              "--project", tmp_path / "runs", "--epochs", 10, "--evaluation-interval", 0)
    run.assert_clean(1)
    last = tmp_path / "runs" / "exp" / "weights" / "last.pt"
    for iteration in (5, 6):
        assert f"warning: iteration {iteration} (epoch 3): loss term obj is nan; skipped" in run.output
    assert "diverged at iteration 7 (epoch 4): loss term obj is nan, 3 iterations in a row" in run.output
    # epoch 3's checkpoint holds the weights of iteration 4: its two iterations were skipped
    assert f"the last good checkpoint, {last} (iteration 6), is left as it was" in run.output
    saved = torch.load(last, map_location="cpu", weights_only=True)
    assert saved["iteration"] == 6 and saved["epoch"] == 3
    assert all(torch.isfinite(v).all() for v in saved["model"].values() if v.is_floating_point())
