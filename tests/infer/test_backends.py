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
    assert backends.choose_backend("auto", cpu, torch.float32) == "torch"  # never timed: the same digits
    assert backends.choose_backend("tuned", cpu, torch.float32) == "tuned"
    with pytest.raises(FlagError, match="--backend tuned runs float32 on the CPU"):
        backends.choose_backend("tuned", cuda, torch.float32)
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
    for name in ("torch", "tuned", "onnxruntime", "auto"):
        predictor = Predictor(model, backend=name)
        assert predictor.runner.name == ("torch" if name == "auto" else name)
        runners[name] = predictor.runner
        counts[name] = [len(p.scores) for p in predictor.predict_arrays(images, conf_thres=0.01)]
    assert len(list((tmp_path / "cache" / "onnx").glob("*.onnx"))) == 1
    assert counts["torch"] == counts["tuned"] == counts["onnxruntime"] == counts["auto"]
    assert min(counts["torch"]) > 0
    monkeypatch.setattr(backends, "export_onnx", lambda *a, **k: pytest.fail("exported twice"))
    assert Predictor(model, backend="onnxruntime").runner.path == runners["onnxruntime"].path
    batch = torch.stack([darknet_letterbox(image, 96, 96)[0] for image in images])
    for name in ("tuned", "onnxruntime"):
        for ours, theirs in zip(runners["torch"](batch), runners[name](batch)):
            assert ours.shape == theirs.shape
            assert torch.allclose(ours.float(), theirs, atol=1e-4), (name, (ours - theirs).abs().max())


@pytest.mark.parametrize("backend", ["torch", "tuned", pytest.param("onnxruntime", marks=pytest.mark.skipif(
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


def _detect_files(tmp_path, name: str, *flags: str) -> list:
    """``turboyolo detect`` of a random yolov3-tiny on two generated images; its predictions."""
    spec = make_spec("yolov3-tiny", num_classes=2, width=96, height=96)
    torch.manual_seed(5)
    model = Darknet(spec)
    random_batch_norm(model, seed=5)
    from PIL import Image

    from turboyolo.formats.darknet_cfg import write_cfg

    cfg, weights = write_cfg(spec, tmp_path / "m.cfg"), save_darknet_weights(model, tmp_path / "m.weights")
    rng = np.random.default_rng(5)
    for index, shape in enumerate(((70, 120, 3), (96, 64, 3))):
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8)).save(tmp_path / f"{index}.png")
    argv = ["detect", str(tmp_path / "0.png"), str(tmp_path / "1.png"), "--weights", str(weights), "--cfg",
            str(cfg), "--conf-thres", "0.01", "--no-draw", "--device", "cpu", "--project", str(tmp_path),
            "--name", name, *flags]
    assert main(argv) == 0
    return json.loads((tmp_path / name / "predictions.json").read_text())


def test_a_tuned_kernel_with_wrong_numbers_falls_back_to_pytorchs_convolution(tmp_path, monkeypatch, capsys):
    """--backend tuned checks each chosen way against PyTorch's convolution on the input it was timed on:
    a way made to compute wrong numbers is dropped, with one line per layer shape, and the predictions
    are the default backend's."""
    from turboyolo.model import cpu_kernels

    plain = _detect_files(tmp_path, "plain")
    capsys.readouterr()
    real = cpu_kernels.TunedConv._onednn
    monkeypatch.setattr(cpu_kernels.TunedConv, "_onednn", lambda self, x: real(self, x) * 1.01)
    monkeypatch.setattr(cpu_kernels, "WAYS", ("onednn",))  # the only way there is: always chosen
    tuned = _detect_files(tmp_path, "tuned", "--backend", "tuned")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("--backend tuned:")]
    shapes = {line.split(" convolution on ")[0] for line in lines}
    assert lines and len(shapes) == len(lines)  # one line per layer shape (layers of one shape share)
    assert all("the onednn kernel" in line and "more than rounding" in line for line in lines)
    assert tuned == plain  # every layer fell back: PyTorch's own convolution, the same digits


def test_tuned_keeps_pytorchs_public_path_on_a_pytorch_the_suite_has_not_run(tmp_path, monkeypatch, capsys):
    from turboyolo.model import cpu_kernels

    plain = _detect_files(tmp_path, "plain")
    capsys.readouterr()
    monkeypatch.setattr(torch, "__version__", "2.99.0+cpu")
    monkeypatch.setattr(cpu_kernels.TunedConv, "__init__", lambda *a, **k: pytest.fail("tuned on 2.99"))
    assert _detect_files(tmp_path, "tuned", "--backend", "tuned") == plain
    notes = [line for line in capsys.readouterr().err.splitlines() if "--backend tuned" in line]
    assert notes == [f"note: --backend tuned: its kernels call PyTorch internals checked on PyTorch "
                     f"{', '.join(cpu_kernels.TESTED_TORCH)} only; this is 2.99: PyTorch's public "
                     "convolution runs"]
    assert cpu_kernels.torch_release("2.14.1+cu130") == "2.14" and cpu_kernels.torch_release("3.0") == "3.0"


def test_test_takes_the_tuned_kernels_on_the_cpu_in_float32_only(tmp_path, capsys):
    _detect_files(tmp_path, "plain")  # writes m.cfg and m.weights
    argv = ["test", "--weights", str(tmp_path / "m.weights"), "--cfg", str(tmp_path / "m.cfg"), "--data",
            str(tmp_path / "missing.data"), "--device", "cpu", "--kernels", "tuned", "--amp", "bf16"]
    assert main(argv) != 0
    assert "--kernels tuned runs float32 on the CPU" in capsys.readouterr().err
