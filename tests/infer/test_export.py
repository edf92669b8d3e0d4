"""ONNX export checked with onnxruntime on the CPU against PyTorch (tiny yolov3-tiny, 64 px, random weights).

Measured max abs differences (onnxruntime 1.32 vs torch 2.14, CPU, both exporters): raw heads 6.7e-08,
decoded 3.1e-05 (pixels, one float32 step at ~300 px); NMS detections identical to torchvision's. The
asserted bounds leave room for other builds. With the official yolov3-tiny weights at 416 px:
raw 2.8e-05, decoded 6.7e-04 px (`turboyolo export` prints it).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from turboyolo.cli import main  # noqa: E402
from turboyolo.infer.export import ExportOptions, compare_with_torch, export_onnx, run_onnxruntime  # noqa: E402
from turboyolo.model.darknet import Darknet  # noqa: E402
from turboyolo.model.zoo import make_spec  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model():
    import torch

    torch.manual_seed(0)
    model = Darknet(make_spec("yolov3-tiny", 2, 64, 64, batch=1, subdivisions=1)).eval()
    with torch.no_grad():  # batch-norm statistics away from the identity, so fusing mistakes would show
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
    return model


def _images(batch: int) -> np.ndarray:
    return np.random.default_rng(batch).random((batch, 3, 64, 64), dtype=np.float32)


@pytest.mark.parametrize("decoded", [False, True])
def test_raw_and_decoded_match_torch_with_dynamic_batch(tiny_model, tmp_path, decoded):
    options = ExportOptions((64, 64), decoded=decoded, dynamic_batch=True, exporter="torchscript")
    path = export_onnx(tiny_model, tmp_path / "m.onnx", options)
    for batch in (1, 3):
        diff = compare_with_torch(tiny_model, path, options, _images(batch))
        assert diff < (1e-3 if decoded else 1e-5), diff  # decoded boxes are in pixels (up to ~350)
    shapes = [o.shape for o in run_onnxruntime(path, _images(3))]
    assert shapes == ([(3, 3 * (2 * 2 + 4 * 4), 7)] if decoded else [(3, 3, 2, 2, 7), (3, 3, 4, 4, 7)])


def test_nms_graph_keeps_what_torchvision_keeps(tiny_model, tmp_path):
    options = ExportOptions(
        (64, 64),
        decoded=True,
        nms=True,
        dynamic_batch=True,
        conf_thres=0.2,
        nms_thres=0.45,
        max_det=5,
        exporter="torchscript",
    )
    path = export_onnx(tiny_model, tmp_path / "nms.onnx", options)
    [detections] = run_onnxruntime(path, _images(2))
    assert detections.shape[1] == 7 and len(detections) > 0  # random weights: objectness ~0.5
    assert set(detections[:, 0].astype(int)) <= {0, 1} and set(detections[:, 6].astype(int)) <= {0, 1}
    assert compare_with_torch(tiny_model, path, options, _images(2)) < 1e-3


def test_metadata_names_the_layout(tiny_model, tmp_path):
    import onnx

    path = export_onnx(tiny_model, tmp_path / "m.onnx", ExportOptions((64, 64), exporter="torchscript"))
    meta = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert meta["mode"] == "raw" and meta["strides"] == "[32, 16]" and meta["num_classes"] == "2"


@pytest.mark.slow
def test_dynamo_exporter_and_command(tiny_cfg, tmp_path, capsys):
    from turboyolo.model.loading import build_model, save_darknet_weights

    weights = save_darknet_weights(build_model(tiny_cfg), tmp_path / "tiny.weights")
    out = tmp_path / "tiny.onnx"
    args = ["--cfg", str(tiny_cfg), "--weights", str(weights), "--decoded", "--dynamic-batch", "-o", str(out)]
    assert main(["export", *args]) == 0
    text = capsys.readouterr().out
    diff = float(text.rsplit("max abs difference", 1)[1])
    assert out.is_file() and diff < 1e-3


def test_run_export_is_the_job_without_the_cli(tiny_cfg, tmp_path, monkeypatch):
    import sys

    from turboyolo.infer.export import ExportOutputArgs, ExportRequest, run_export
    from turboyolo.model.loading import build_model, save_darknet_weights
    from turboyolo.options import RunDirArgs

    weights = save_darknet_weights(build_model(tiny_cfg), tmp_path / "tiny.weights")
    options = ExportOptions(None, exporter="torchscript")
    report = run_export(ExportRequest(weights, tiny_cfg, options, run_dir=RunDirArgs(str(tmp_path / "runs"))))
    assert report.path == tmp_path / "runs" / "exp" / "tiny.onnx" and report.options.img_size == (64, 64)
    assert report.check_images == 1 and report.max_abs_diff < 1e-3
    assert "raw outputs, input images [B, 3, 64, 64]" in report.summary()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    elsewhere = ExportOutputArgs(output=str(tmp_path / "b.onnx"))
    report = run_export(ExportRequest(weights, tiny_cfg, options, elsewhere))
    assert report.max_abs_diff is None and "comparison skipped" in report.summary().splitlines()[-1]
