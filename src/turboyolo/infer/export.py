"""ONNX export of a :class:`Darknet` network, and a check of the exported file with onnxruntime.

Input ``images``: float32 ``[B, 3, H, W]`` RGB in [0, 1], already letterboxed to the export size
(:func:`turboyolo.infer.predict.darknet_letterbox` does it as Darknet does). Outputs, by mode:

- raw (default): ``head0``, ``head1``, ... ``[B, A, H/stride, W/stride, 5 + C]``, what
  ``Darknet.forward`` returns (tx, ty, tw, th, objectness logit, class logits; for ``new_coords`` heads,
  whose convolution is logistic, all of them after the sigmoid);
- ``decoded``: ``output`` ``[B, N, 5 + C]`` = (cx, cy, w, h) in input pixels, objectness, class
  probabilities (:func:`turboyolo.model.postprocess.decode`);
- ``nms``: ``detections`` ``[K, 7]`` = (batch index, x1, y1, x2, y2, score, class) in input pixels,
  Darknet's multi-label rule (objectness and objectness x class probability above ``conf_thres``) and
  per-class NMS by ONNX ``NonMaxSuppression`` (IoU-based, also for cfgs whose ``nms_kind`` is
  DIoU-NMS); ``max_det`` caps detections per image and class.
  Boxes are not clipped and not mapped back to the original image: the caller owns its letterbox.

The file's metadata (``metadata_props``) records the mode, input size, strides, anchors and thresholds.
:func:`run_export` is the whole ``turboyolo export`` job: load, export, compare with onnxruntime.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torchvision.ops import nms as torchvision_nms

from turboyolo.boxes import cxcywh_to_xyxy
from turboyolo.errors import ConfigError, FlagError
from turboyolo.model.darknet import Darknet
from turboyolo.model.loading import build_model, resolve_model
from turboyolo.model.postprocess import decode
from turboyolo.options import (
    CONF_THRES,
    NMS_THRES,
    RunDirArgs,
    img_size_option,
    img_size_pair,
    option,
    output_file_option,
    overwrite_option,
)
from turboyolo.rundir import check_outputs, removed_if_empty

EXPORTERS = ("dynamo", "torchscript")


@dataclass(frozen=True)
class ExportOptions:
    """What the graph computes: its input size (``img_size`` (width, height), ``None``: the cfg's), its
    outputs and, with ``nms`` (which implies decoded outputs), the thresholds built into it."""

    img_size: tuple[int, int] | None = img_size_option("the cfg's", rectangle=True)
    decoded: bool = option(False, "output decoded boxes [B, N, 5 + C]", action="store_true")
    nms: bool = option(False, "include NMS: output detections [K, 7] (implies --decoded)",
                       action="store_true")
    dynamic_batch: bool = option(False, "any batch size (default: batch 1)", action="store_true")
    conf_thres: float = option(CONF_THRES, "with --nms: score threshold", type=float)
    nms_thres: float = option(NMS_THRES, "with --nms: IoU of per-class NMS", type=float)
    max_det: int = option(100, "with --nms: detections kept per image and class (ONNX NonMaxSuppression's "
                          "cap)", type=int)
    opset: int | None = option(None, "ONNX opset (default: the exporter's)", type=int)
    exporter: str = option("dynamo", "torch.onnx exporter: torch.export based (default) or the older "
                           "TorchScript one (faster)", choices=EXPORTERS)

    def __post_init__(self):
        object.__setattr__(self, "img_size", img_size_pair(self.img_size))
        object.__setattr__(self, "decoded", self.decoded or self.nms)
        if self.exporter not in EXPORTERS:
            raise FlagError(f"--exporter must be one of {', '.join(EXPORTERS)}, got {self.exporter!r}")
        for flag, value in (("--conf-thres", self.conf_thres), ("--nms-thres", self.nms_thres)):
            if not 0 <= value <= 1:
                raise FlagError(f"{flag} must lie in [0, 1], got {value}")
        if self.max_det < 1:
            raise FlagError(f"--max-det must be >= 1, got {self.max_det}")

    def for_model(self, model: Darknet) -> ExportOptions:
        """These options with ``img_size`` filled in from the model's cfg when it is ``None``."""
        if self.img_size is not None:
            return self
        return replace(self, img_size=(model.spec.net.width, model.spec.net.height))

    @property
    def mode(self) -> str:
        return "nms" if self.nms else "decoded" if self.decoded else "raw"


class ExportWrapper(nn.Module):
    """The network plus the part of post-processing that goes into the graph.

    ``forward(images [B, 3, H, W])`` returns the raw heads, the decoded ``[B, N, 5 + C]``, or (for NMS
    mode) ``boxes`` ``[B, N, 4]`` xyxy and ``scores`` ``[B, C, N]`` with the objectness gate applied,
    the two inputs ONNX ``NonMaxSuppression`` takes.
    """

    def __init__(self, model: Darknet, mode: str, conf_thres: float = CONF_THRES):
        super().__init__()
        self.model, self.mode, self.conf_thres = model, mode, conf_thres

    def forward(self, images: torch.Tensor):
        raw = self.model(images)
        if self.mode == "raw":
            return tuple(raw)
        decoded = decode(raw, self.model.heads)
        if self.mode == "decoded":
            return decoded
        boxes = cxcywh_to_xyxy(decoded[..., :4])
        objectness = decoded[..., 4:5]
        scores = objectness * decoded[..., 5:] * (objectness > self.conf_thres).to(decoded.dtype)
        return boxes, scores.transpose(1, 2)


def output_names(model: Darknet, mode: str) -> list[str]:
    if mode == "raw":
        return [f"head{i}" for i in range(len(model.heads))]
    return ["output"] if mode == "decoded" else ["boxes", "scores"]


def export_onnx(model: Darknet, path: str | Path, options: ExportOptions) -> Path:
    """Write ``model`` as ONNX to ``path`` (one file, weights inside) and return the path."""
    import onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = model.float().eval().cpu()
    options = options.for_model(model)
    check_size(model, options)
    width, height = options.img_size
    wrapper = ExportWrapper(model, options.mode, options.conf_thres).eval()
    example = torch.zeros(2 if options.dynamic_batch else 1, 3, height, width)
    names = output_names(model, options.mode)
    tmp = path.with_name(f".{path.name}.tmp")
    with torch.no_grad(), warnings.catch_warnings(), contextlib.ExitStack() as stack:
        if options.exporter == "torchscript":
            # The tracer warns about constants (anchors, grid sizes) that are constants by design.
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", message="Constant folding", category=UserWarning)
            warnings.filterwarnings("ignore", category=DeprecationWarning)  # the exporter's own notice
            axes = {name: {0: "batch"} for name in ["images"] + (names if options.mode != "nms" else [])}
            torch.onnx.export(
                wrapper,
                (example,),
                str(tmp),
                dynamo=False,
                input_names=["images"],
                output_names=names,
                opset_version=options.opset or 17,
                dynamic_axes=axes if options.dynamic_batch else None,
            )
        else:
            # the torch.export-based exporter prints its progress on stdout; keep the CLI's output ours
            stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
            shapes = ({0: torch.export.Dim("batch", min=1, max=4096)},) if options.dynamic_batch else None
            torch.onnx.export(
                wrapper,
                (example,),
                str(tmp),
                dynamo=True,
                input_names=["images"],
                output_names=names,
                opset_version=options.opset,
                dynamic_shapes=shapes,
                external_data=False,
                verbose=False,
            )
    graph_model = onnx.load(str(tmp))
    tmp.unlink()
    if options.nms:
        _append_nms(graph_model, options)
    _set_metadata(graph_model, model, options)
    onnx.checker.check_model(graph_model)
    onnx.save(graph_model, str(path))
    return path


def check_size(model: Darknet, options: ExportOptions) -> None:
    """Refuse (:class:`FlagError`) an input size that is not a multiple of the network's stride."""
    width, height = options.for_model(model).img_size
    if width % model.max_stride or height % model.max_stride:
        raise FlagError(f"--img-size {width}x{height} must be a multiple of {model.max_stride}")


def _append_nms(graph_model, options: ExportOptions) -> None:
    """boxes [B, N, 4], scores [B, C, N] -> detections [K, 7] via NonMaxSuppression and GatherND."""
    from onnx import TensorProto, helper, numpy_helper

    graph = graph_model.graph
    consts = {
        "nms_max_per_class": np.array([options.max_det], np.int64),
        "nms_iou": np.array([options.nms_thres], np.float32),
        "nms_score": np.array([options.conf_thres], np.float32),
        "col_batch": np.array([0], np.int64),
        "col_class": np.array([1], np.int64),
        "cols_batch_box": np.array([0, 2], np.int64),
        "axis_1": np.array([1], np.int64),
    }
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in consts.items())
    node = helper.make_node
    graph.node.extend(
        [
            node(
                "NonMaxSuppression",
                ["boxes", "scores", "nms_max_per_class", "nms_iou", "nms_score"],
                ["selected"],
            ),  # [K, 3] = (batch, class, box)
            node("Gather", ["selected", "cols_batch_box"], ["batch_box"], axis=1),
            node("GatherND", ["boxes", "batch_box"], ["det_boxes"]),  # [K, 4]
            node("GatherND", ["scores", "selected"], ["det_scores_flat"]),  # [K]
            node("Unsqueeze", ["det_scores_flat", "axis_1"], ["det_scores"]),
            node("Gather", ["selected", "col_batch"], ["det_batch_i"], axis=1),
            node("Gather", ["selected", "col_class"], ["det_class_i"], axis=1),
            node("Cast", ["det_batch_i"], ["det_batch"], to=TensorProto.FLOAT),
            node("Cast", ["det_class_i"], ["det_class"], to=TensorProto.FLOAT),
            node("Concat", ["det_batch", "det_boxes", "det_scores", "det_class"], ["detections"], axis=1),
        ]
    )
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["num_detections", 7]))


def _set_metadata(graph_model, model: Darknet, options: ExportOptions) -> None:
    meta = {
        "producer": "turboyolo",
        "mode": options.mode,
        "img_size": json.dumps(list(options.img_size)),
        "num_classes": str(model.num_classes),
        "strides": json.dumps([head.stride for head in model.heads]),
        "anchors": json.dumps([[list(a) for a in head.anchors] for head in model.heads]),
        "input": "images float32 [B, 3, H, W] RGB in [0, 1], letterboxed (grey 0.5 fill)",
    }
    if options.nms:
        meta.update(
            conf_thres=str(options.conf_thres),
            nms_thres=str(options.nms_thres),
            max_det_per_class=str(options.max_det),
            detections="[K, 7] batch, x1, y1, x2, y2, score, class in input pixels",
        )
    del graph_model.metadata_props[:]
    for key, value in meta.items():
        entry = graph_model.metadata_props.add()
        entry.key, entry.value = key, value


@dataclass
class ExportReport:
    """What :func:`run_export` wrote and how closely onnxruntime reproduces PyTorch."""

    path: Path
    options: ExportOptions  # with img_size resolved
    size_bytes: int
    check_images: int = 0  # random images compared (0: no comparison)
    max_abs_diff: float | None = None  # onnxruntime (CPU) vs PyTorch
    check_skipped: str = ""  # why the comparison did not run, when it was asked for
    note: str = ""  # e.g. the cfg's DIoU-NMS that the graph's NMS does not reproduce

    def summary(self) -> str:
        """The file, its size, outputs and input shape; then the comparison's result (or why none)."""
        width, height = self.options.img_size
        lines = [f"{self.path} ({self.size_bytes / 1e6:.1f} MB, {self.options.mode} outputs, "
                 f"input images [B, 3, {height}, {width}])"]
        if self.note:
            lines.append(self.note)
        if self.check_skipped:
            lines.append(self.check_skipped)
        elif self.max_abs_diff is not None:
            lines.append(f"onnxruntime (CPU) vs PyTorch on {self.check_images} random image(s): "
                         f"max abs difference {self.max_abs_diff:.2g}")
        return "\n".join(lines)


@dataclass
class ExportOutputArgs:
    """The file written and its check."""

    format: str = option("onnx", "export format", choices=("onnx",))
    output: str | None = output_file_option("<run dir>/<weights stem>.onnx")
    overwrite: bool = overwrite_option()
    check: bool = option(True, "run the file with onnxruntime on random images and report the largest "
                         "difference from PyTorch (--no-check: skip)", action=argparse.BooleanOptionalAction)


GROUPS: dict[str, type] = {"export": ExportOptions, "output": ExportOutputArgs, "run_dir": RunDirArgs}


@dataclass
class ExportRequest:
    """What ``turboyolo export`` is asked to do: ``weights`` (``.weights`` with ``cfg``, a checkpoint, or a
    pinned asset name such as ``yolov3-tiny``) exported as ``export`` says, into ``output.output`` or a
    fresh run directory from ``run_dir``."""

    weights: str | Path
    cfg: str | Path | None = None
    export: ExportOptions = field(default_factory=ExportOptions)
    output: ExportOutputArgs = field(default_factory=ExportOutputArgs)
    run_dir: RunDirArgs = field(default_factory=RunDirArgs)


def run_export(request: ExportRequest) -> ExportReport:
    """``turboyolo export --format onnx``: load a model, export it, compare the file with PyTorch (skipped,
    with the reason in the report, when onnxruntime is not installed).

    Raises:
        ConfigError: the onnx package is missing, or a bad cfg.
        FlagError: an input size that is not a multiple of the network's stride.
    """
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ConfigError("--format onnx needs the onnx extra: pip install 'turboyolo[onnx]'") from None
    spec, weights_path = resolve_model(str(request.cfg) if request.cfg is not None else None,
                                       str(request.weights) if request.weights is not None else None)
    output = request.output.output
    if output:  # the output rule (rundir.check_outputs): never an input, never an existing file unasked
        check_outputs({"-o/--output": output}, {"--weights": weights_path, "--cfg": request.cfg},
                      overwrite=request.output.overwrite)
    model = build_model(spec, weights_path)
    options = request.export.for_model(model)
    check_size(model, options)
    if output:
        path = export_onnx(model, output, options)
    else:
        with removed_if_empty(request.run_dir.make("export")) as run_dir:
            path = export_onnx(model, run_dir / f"{Path(str(weights_path)).stem}.onnx", options)
    report = ExportReport(path, options, path.stat().st_size)
    if options.nms and model.heads[-1].nms_kind != "default":
        report.note = (f"note: the cfg asks for nms_kind={model.heads[-1].nms_kind} (DIoU-NMS); the graph's "
                       "ONNX NonMaxSuppression is IoU-based: detections can differ from turboyolo detect's")
    if request.output.check:
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            report.check_skipped = ("onnxruntime not installed: comparison skipped "
                                    "(pip install 'turboyolo[onnx]')")
            return report
        width, height = options.img_size
        report.check_images = 2 if options.dynamic_batch else 1
        images = np.random.default_rng(0).random((report.check_images, 3, height, width), dtype=np.float32)
        report.max_abs_diff = compare_with_torch(model, path, options, images)
    return report


def run_onnxruntime(path: str | Path, images: np.ndarray) -> list[np.ndarray]:
    """Run an exported file on the CPU with onnxruntime; ``images`` float32 ``[B, 3, H, W]``."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"images": np.ascontiguousarray(images, np.float32)})


def compare_with_torch(model: Darknet, path: str | Path, options: ExportOptions, images: np.ndarray) -> float:
    """Max abs difference between onnxruntime and PyTorch on ``images`` (raw or decoded modes;
    for NMS mode, over the detections when both keep the same ones, else ``inf``)."""
    wrapper = ExportWrapper(model.float().eval().cpu(), options.mode, options.conf_thres).eval()
    with torch.no_grad():
        reference = wrapper(torch.from_numpy(images))
    outputs = run_onnxruntime(path, images)
    if options.mode == "nms":
        expected = torch_nms_detections(*reference, options)
        got = outputs[0][np.lexsort(outputs[0][:, ::-1].T)] if len(outputs[0]) else outputs[0]
        expected = expected[np.lexsort(expected[:, ::-1].T)] if len(expected) else expected
        if got.shape != expected.shape or not np.array_equal(got[:, [0, 6]], expected[:, [0, 6]]):
            return float("inf")
        return float(np.abs(got - expected).max()) if len(got) else 0.0
    reference = reference if isinstance(reference, tuple) else (reference,)
    return max(float(np.abs(o - r.numpy()).max()) for o, r in zip(outputs, reference))


def torch_nms_detections(boxes: torch.Tensor, scores: torch.Tensor, options: ExportOptions) -> np.ndarray:
    """What the NMS graph computes, with torchvision: ``[K, 7]`` (batch, x1, y1, x2, y2, score, class)."""
    rows = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            keep = (scores[b, c] > options.conf_thres).nonzero().flatten()
            kept = torchvision_nms(boxes[b, keep], scores[b, c, keep], options.nms_thres)
            chosen = keep[kept][: options.max_det]
            for index in chosen.tolist():
                rows.append([b, *boxes[b, index].tolist(), float(scores[b, c, index]), c])
    return np.array(rows, np.float32).reshape(-1, 7)
