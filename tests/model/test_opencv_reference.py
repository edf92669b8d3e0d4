"""turboyolo's decoded outputs against OpenCV 4.x's Darknet importer, an independent implementation.

For yolov4-tiny, yolov7-tiny, yolov4-csp and yolov4 (80 classes, 416x416): random weights are written to
a ``.weights`` file, both implementations read it with the generated ``.cfg`` and run three of Darknet's
sample photos (letterboxed by turboyolo, the same input blob for both); every decoded value must agree to
1e-4 relative to its scale (``|ours - opencv| <= 1e-4 * max(1, |opencv|)``).

The random weights are calibrated on the photos (a forward pre-hook on every batch norm): each
convolution's output channels are scaled to unit spread, BN variances are drawn in [0.5, 1.5] and BN
scales in [0.1, 0.4], offsets in [-1, 1]. Unit-scale variances matter because OpenCV normalises with
sqrt(var + 1e-6) where Darknet (and turboyolo) use sqrt(var) + 1e-6; small BN scales keep these deep
random networks out of the chaotic regime, where float32 rounding alone (turboyolo float32 against
float64) moves outputs by 1e-3.

OpenCV comes from this interpreter when its cv2 still has ``dnn.readNetFromDarknet`` (4.x; the dev extra
pins it), else from the interpreter named by ``TURBOYOLO_OPENCV4_PYTHON`` (run in a subprocess); with
neither the test is skipped and says how to get one.
"""

from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from model.opencv_reference import has_darknet_importer, opencv_cfg_text, opencv_outputs
from turboyolo.formats.darknet_cfg import format_cfg
from turboyolo.model.darknet import Darknet
from turboyolo.model.layers import DarknetBatchNorm2d
from turboyolo.model.loading import save_darknet_weights
from turboyolo.model.postprocess import decode
from turboyolo.model.zoo import make_spec

HERE = Path(__file__).parent
PHOTOS = [Path("/usr/share/darknet/data") / f"{name}.jpg" for name in ("dog", "horses", "person")]
SIZE = 416
TOLERANCE = 1e-4


def _opencv_runner():
    """A callable (cfg, weights, blob) -> outputs, or skip saying how to get OpenCV 4.x."""
    if has_darknet_importer():
        return opencv_outputs
    python = os.environ.get("TURBOYOLO_OPENCV4_PYTHON")
    if not python:
        import cv2

        pytest.skip(
            f"OpenCV {cv2.__version__} has no cv2.dnn.readNetFromDarknet (removed in 5.x): install "
            "'opencv-python-headless<5' (the dev extra pins it) or set TURBOYOLO_OPENCV4_PYTHON to a "
            "Python with OpenCV 4.x and numpy"
        )

    def run(cfg: str, weights: str, blob: np.ndarray) -> dict[str, np.ndarray]:
        folder = Path(weights).parent
        np.save(folder / "blob.npy", blob)
        command = [python, str(HERE / "opencv_reference.py"), cfg, weights, str(folder / "blob.npy")]
        proc = subprocess.run(command + [str(folder / "out.npz")], capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{python} could not run OpenCV's Darknet importer:\n{proc.stderr[-2000:]}")
        with np.load(folder / "out.npz") as data:
            return {name: data[name] for name in data.files if name != "__version__"}

    return run


def _photos() -> torch.Tensor:
    from turboyolo.data.decode import load_image
    from turboyolo.infer.predict import darknet_letterbox

    if not all(path.is_file() for path in PHOTOS):
        pytest.skip("Darknet's sample photos are not installed (Debian package darknet)")
    return torch.stack([darknet_letterbox(load_image(path).copy(), SIZE, SIZE)[0] for path in PHOTOS])


def calibrated_random_weights(model: Darknet, images: torch.Tensor, seed: int = 0) -> None:
    """Random weights whose activations stay O(1) through any depth (see the module docstring)."""
    gen = torch.Generator().manual_seed(seed)
    convs = {id(block.bn): block.conv for block in model.layers if getattr(block, "bn", None) is not None}

    def calibrate(bn: DarknetBatchNorm2d, inputs: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
        x = inputs[0]
        channels = x.shape[1]
        spread = x.std((0, 2, 3)).clamp(min=1e-3)
        convs[id(bn)].weight.div_(spread.view(-1, 1, 1, 1))
        x = x / spread.view(1, -1, 1, 1)
        bn.running_mean.copy_(x.mean((0, 2, 3)) + 0.1 * torch.randn(channels, generator=gen))
        bn.running_var.copy_(0.5 + torch.rand(channels, generator=gen))
        bn.weight.copy_(0.1 + 0.3 * torch.rand(channels, generator=gen))
        bn.bias.copy_(2 * torch.rand(channels, generator=gen) - 1)
        return (x,)

    model.eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d):
                module.weight.copy_(
                    torch.randn(module.weight.shape, generator=gen) / module.weight[0].numel() ** 0.5
                )
                if module.bias is not None:
                    module.bias.copy_(2 * torch.rand(module.bias.shape, generator=gen) - 1)
        hooks = [
            m.register_forward_pre_hook(calibrate)
            for m in model.modules()
            if isinstance(m, DarknetBatchNorm2d)
        ]
        model(images)
        for hook in hooks:
            hook.remove()


def as_opencv_rows(raw: torch.Tensor, head) -> np.ndarray:
    """One head's raw output -> OpenCV's ``[B, H * W * A, 5 + C]`` (relative boxes, obj x class)."""
    batch, anchors, height, width, outputs = raw.shape
    rows = decode([raw], [head]).view(batch, anchors, height, width, outputs)
    rows = rows.permute(0, 2, 3, 1, 4).reshape(batch, -1, outputs).double()
    rows[..., 0:4] /= SIZE
    rows[..., 5:] *= rows[..., 4:5]
    return rows.numpy()


@pytest.mark.parametrize(
    "arch",
    [
        "yolov4-tiny",
        "yolov7-tiny",
        pytest.param("yolov4-csp", marks=pytest.mark.slow),
        pytest.param("yolov4", marks=pytest.mark.slow),
    ],
)
def test_decoded_outputs_equal_opencv(arch, tmp_path):
    run_opencv = _opencv_runner()
    images = _photos()
    spec = make_spec(arch, num_classes=80, width=SIZE, height=SIZE, batch=1, subdivisions=1)
    model = Darknet(spec)
    torch.manual_seed(0)
    calibrated_random_weights(model, images)
    weights = save_darknet_weights(model, tmp_path / f"{arch}.weights")
    cfg = tmp_path / f"{arch}-opencv.cfg"
    cfg.write_text(opencv_cfg_text(format_cfg(spec)))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = model(images)
    theirs = run_opencv(str(cfg), str(weights), images.numpy())
    assert sorted(theirs) == sorted(f"yolo_{head.layer_index}" for head in model.heads)
    worst = {}
    for head, output in zip(model.heads, raw):
        ours, reference = as_opencv_rows(output, head), theirs[f"yolo_{head.layer_index}"]
        assert ours.shape == reference.shape
        assert reference[..., 4].std() > 0.05  # not a degenerate network: objectness varies
        difference = np.abs(ours - reference)
        worst[head.stride] = (
            float(difference.max()),
            float((difference / np.maximum(1, np.abs(reference))).max()),
        )
    print(f"\n{arch} vs OpenCV, per stride (max abs, max relative): {worst}")
    assert max(relative for _, relative in worst.values()) <= TOLERANCE, worst
