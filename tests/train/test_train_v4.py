"""yolov4-tiny (1 class) on the trees sample, end to end at 128 px: train (loss finite and falling), an
interrupted run resumed to the same weights, then `turboyolo test`, `detect` and an ONNX export checked in
onnxruntime, all from the checkpoint."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from turboyolo.formats.darknet_cfg import write_cfg
from turboyolo.model.zoo import make_spec
from turboyolo.train.config import TrainConfig
from turboyolo.train.fit import fit

ITERATIONS = 6


@pytest.fixture
def trees(tmp_path) -> Path:
    """Four training and two validation tiles of the trees sample (`turboyolo fetch trees`, built in the
    user cache once): every iteration sees the same four images, so the loss falls within 6 steps."""
    from turboyolo import assets
    from turboyolo.data.trees import build_trees
    from turboyolo.errors import AssetError

    try:
        root = build_trees(assets.cache_dir() / "datasets" / "trees")
    except AssetError as err:
        pytest.skip(f"the trees sample is unavailable: {err}")
    (tmp_path / "train.txt").write_text("".join((root / "train.txt").read_text().splitlines(True)[:4]))
    (tmp_path / "valid.txt").write_text("".join((root / "valid.txt").read_text().splitlines(True)[:2]))
    data = tmp_path / "trees4.data"
    data.write_text(
        f"classes = 1\ntrain = {tmp_path / 'train.txt'}\nvalid = {tmp_path / 'valid.txt'}\n"
        f"names = {root / 'trees.names'}\n"
    )
    return data


def _config(cfg: Path, data: Path, project: Path, **changes) -> TrainConfig:
    values = dict(
        cfg=str(cfg),
        data=str(data),
        epochs=ITERATIONS,  # one iteration per epoch
        workers=0,
        project=str(project),
        evaluation_interval=0,
        checkpoint_interval=0,
        log_interval=1,
        ema_ramp=5.0,
        augment=False,
    )
    return TrainConfig.build(**{**values, **changes})


def _iteration_losses(run: Path) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    return [event.value for event in events.Scalars("train/loss")]


def _state(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {
        **{f"model.{k}": v for k, v in state["model"].items()},
        **{f"ema.{k}": v for k, v in state["ema"].items()},
    }


@pytest.mark.slow
def test_yolov4_tiny_on_trees_trains_resumes_and_exports(trees, tmp_path):
    spec = make_spec("yolov4-tiny", 1, 128, 128, batch=4, subdivisions=1, learning_rate=0.005)
    cfg = write_cfg(spec.with_net(burn_in=1, policy="constant", steps=(), scales=()), tmp_path / "y4t.cfg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # resize= in [yolo]: a training-only key, warned about
        straight = fit(_config(cfg, trees, tmp_path / "a"), quiet=True).run_dir
        losses = _iteration_losses(straight)
        assert len(losses) == ITERATIONS and all(torch.isfinite(torch.tensor(losses)))
        assert sum(losses[-2:]) < sum(losses[:2]), losses
        print(
            f"\nyolov4-tiny on 4 trees tiles at 128 px, loss per iteration: {[round(v, 2) for v in losses]}"
        )

        first = fit(_config(cfg, trees, tmp_path / "b"), stop_at_iteration=3, quiet=True).run_dir
        resumed = fit(TrainConfig.build(resume=str(first / "weights" / "last.pt")), quiet=True).run_dir
    assert resumed == first
    a, b = _state(straight / "weights" / "last.pt"), _state(resumed / "weights" / "last.pt")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=key)

    from turboyolo.cli import main

    checkpoint = str(resumed / "weights" / "last.pt")
    common = ["--weights", checkpoint, "--img-size", "128", "--device", "cpu"]
    assert main(["test", "--data", str(trees), *common]) == 0
    tile = (trees.parent / "valid.txt").read_text().split()[0]
    assert main(["detect", tile, "--project", str(tmp_path / "detect"), "--save-txt", *common]) == 0

    pytest.importorskip("onnxruntime")
    from turboyolo.infer.export import ExportOptions, compare_with_torch, export_onnx
    from turboyolo.model.loading import build_model

    model = build_model(spec, checkpoint).eval()
    options = ExportOptions((128, 128), decoded=True, exporter="torchscript")
    path = export_onnx(model, tmp_path / "y4t.onnx", options)
    images = torch.rand(2, 3, 128, 128).numpy()
    difference = compare_with_torch(model, path, options, images[:1])
    print(f"ONNX (onnxruntime) vs PyTorch, decoded: max abs difference {difference:.2g} px")
    assert difference < 1e-3  # pixels, values up to ~130
