"""The inference path: Darknet's letterbox from gathered pixels, batch norm folded into the convolutions,
and the torch / onnxruntime backends that ``--backend`` chooses between."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch

from synth import random_batch_norm
from turboyolo.cli import main
from turboyolo.errors import FlagError
from turboyolo.infer import backends
from turboyolo.infer.predict import Predictor, darknet_letterbox
from turboyolo.model.darknet import Darknet
from turboyolo.model.layers import DarknetBatchNorm2d
from turboyolo.model.loading import save_darknet_weights
from turboyolo.model.zoo import make_spec

HAS_ORT = importlib.util.find_spec("onnxruntime") is not None and importlib.util.find_spec("onnx") is not None


def _axis(size_in: int, size_out: int):
    scale = torch.tensor(float(size_in - 1), dtype=torch.float32) / torch.tensor(float(max(size_out - 1, 1)))
    position = torch.arange(size_out, dtype=torch.float32) * scale
    index = position.long().clamp_(max=size_in - 1)
    return index, (index + 1).clamp_(max=size_in - 1), position - index.float()


def reference_resize(chw: torch.Tensor, new_w: int, new_h: int) -> torch.Tensor:
    """Darknet's resize_image written as it reads (whole image to float, columns then rows)."""
    _, height, width = chw.shape
    ix, ix1, dx = _axis(width, new_w)
    part = chw[:, :, ix] * (1 - dx) + chw[:, :, ix1] * dx
    if width > 1:
        part[:, :, -1] = chw[:, :, -1]
    else:
        part = chw[:, :, :1].expand(-1, -1, new_w).clone()
    iy, iy1, dy = _axis(height, new_h)
    out = part[:, iy, :] * (1 - dy)[:, None]
    if height > 1:
        out[:, :-1, :] += part[:, iy1[:-1], :] * dy[:-1, None]
    return out


@pytest.mark.parametrize("height,width", [(576, 768), (300, 1000), (1001, 333), (50, 40), (1, 90), (70, 1),
                                          (416, 416), (3, 2)])
def test_letterbox_equals_darknets_resize_bit_for_bit(height, width):
    image = np.random.default_rng(height * 7 + width).integers(0, 256, (height, width, 3), dtype=np.uint8)
    boxed, letterbox = darknet_letterbox(image, 416, 320)
    new_w, new_h = round(letterbox.ratio_x * width), round(letterbox.ratio_y * height)
    expected = torch.full((3, 320, 416), 0.5)
    left, top = (416 - new_w) // 2, (320 - new_h) // 2
    chw = torch.from_numpy(image).permute(2, 0, 1).float().div_(255.0)
    expected[:, top : top + new_h, left : left + new_w] = reference_resize(chw, new_w, new_h)
    assert torch.equal(boxed, expected)


@pytest.mark.parametrize("arch", ["yolov3-tiny", "yolov4-tiny"])
def test_folded_copy_computes_what_the_model_does_and_leaves_it_alone(arch):
    model = Darknet(make_spec(arch, num_classes=5, width=128, height=96))
    random_batch_norm(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    images = torch.rand(2, 3, 96, 128)
    with torch.no_grad():
        expected = model.eval()(images)
    for channels_last in (False, True):
        folded = model.inference_copy(channels_last=channels_last)
        assert not any(isinstance(m, DarknetBatchNorm2d) for m in folded.modules())
        with torch.inference_mode():
            got = folded(images)
        for a, b in zip(got, expected):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-4), (a - b).abs().max()
    state = model.state_dict()
    assert state.keys() == before.keys() and all(torch.equal(state[k], before[k]) for k in before)


def test_backend_choice_per_device_and_precision(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert backends.choose_backend("torch", cpu, torch.float32) == "torch"
    assert backends.choose_backend("auto", cuda, torch.float16) == "torch"
    assert backends.choose_backend("auto", cpu, torch.bfloat16) == "torch"
    with pytest.raises(FlagError, match="--backend onnxruntime runs float32 on the CPU"):
        backends.choose_backend("onnxruntime", cpu, torch.bfloat16)
    with pytest.raises(FlagError, match="--backend 'tensorrt'"):
        backends.choose_backend("tensorrt", cpu, torch.float32)
    monkeypatch.setattr(backends, "onnxruntime_missing", lambda: None)
    assert backends.choose_backend("auto", cpu, torch.float32) == "torch"  # the tuned kernels: faster
    assert backends.choose_backend("onnxruntime", cpu, torch.float32) == "onnxruntime"
    monkeypatch.setattr(backends, "onnxruntime_missing", lambda: "onnxruntime is not installed (pip ...)")
    with pytest.raises(FlagError, match="onnxruntime is not installed"):
        backends.choose_backend("onnxruntime", cpu, torch.float32)


@pytest.mark.skipif(not HAS_ORT, reason="onnxruntime / onnx not installed (pip install 'turboyolo[onnx]')")
def test_backends_agree_and_the_export_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOYOLO_CACHE", str(tmp_path / "cache"))
    model = Darknet(make_spec("yolov3-tiny", num_classes=3, width=96, height=96))
    random_batch_norm(model, seed=1)
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (70 + 9 * k, 120, 3), dtype=np.uint8) for k in range(3)]
    runners, counts = {}, {}
    for name in ("torch", "onnxruntime", "auto"):
        predictor = Predictor(model, backend=name)
        assert predictor.runner.name == ("onnxruntime" if name == "onnxruntime" else "torch")
        runners[name] = predictor.runner
        counts[name] = [len(p.scores) for p in predictor.predict_arrays(images, conf_thres=0.01)]
    assert len(list((tmp_path / "cache" / "onnx").glob("*.onnx"))) == 1
    assert counts["torch"] == counts["onnxruntime"] == counts["auto"] and min(counts["torch"]) > 0
    monkeypatch.setattr(backends, "export_onnx", lambda *a, **k: pytest.fail("exported twice"))
    assert Predictor(model, backend="onnxruntime").runner.path == runners["onnxruntime"].path
    batch = torch.stack([darknet_letterbox(image, 96, 96)[0] for image in images])
    for ours, theirs in zip(runners["torch"](batch), runners["onnxruntime"](batch)):
        assert ours.shape == theirs.shape
        assert torch.allclose(ours.float(), theirs, atol=1e-4), (ours - theirs).abs().max()


@pytest.mark.parametrize("backend", ["torch", pytest.param("onnxruntime", marks=pytest.mark.skipif(
    not HAS_ORT, reason="onnxruntime / onnx not installed"))])
def test_detect_command_takes_backend(backend, tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOYOLO_CACHE", str(tmp_path / "cache"))
    spec = make_spec("yolov3-tiny", num_classes=2, width=64, height=64)
    model = Darknet(spec)
    random_batch_norm(model, seed=2)
    from turboyolo.formats.darknet_cfg import write_cfg

    cfg = write_cfg(spec, tmp_path / "m.cfg")
    weights = save_darknet_weights(model, tmp_path / "m.weights")
    from PIL import Image

    Image.fromarray(np.random.default_rng(0).integers(0, 256, (50, 80, 3), dtype=np.uint8)).save(
        tmp_path / "a.jpg")
    argv = ["detect", str(tmp_path / "a.jpg"), "--weights", str(weights), "--cfg", str(cfg), "--backend",
            backend, "--conf-thres", "0.01", "--no-draw", "--project", str(tmp_path), "--name", "run"]
    assert main(argv) == 0
    predictions = json.loads((tmp_path / "run" / "predictions.json").read_text())
    assert predictions and {p["file_name"] for p in predictions} == {"a.jpg"}
