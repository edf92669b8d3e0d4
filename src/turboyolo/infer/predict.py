"""Inference: a model plus Darknet's letterbox and post-processing, and the options every detector
command shares (:class:`PredictArgs`: ``turboyolo detect``, ``turboyolo label``, :func:`turboyolo.detect`).

>>> from turboyolo.infer.predict import Predictor                        # doctest: +SKIP
>>> predictor = Predictor.load("yolov3-tiny.weights", "yolov3-tiny.cfg")  # doctest: +SKIP
>>> [result] = predictor.predict(["dog.jpg"])                            # doctest: +SKIP
>>> result.boxes, result.scores, result.classes                          # doctest: +SKIP
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from turboyolo.boxes import Letterbox
from turboyolo.data.decode import load_image
from turboyolo.devices import resolve_device
from turboyolo.errors import ConfigError, FlagError
from turboyolo.infer.backends import BACKENDS, make_runner
from turboyolo.infer.tiling import TileOptions, detect_tiled
from turboyolo.model.darknet import Darknet
from turboyolo.model.loading import build_model, resolve_model
from turboyolo.model.postprocess import CapCounts, decode, nms_options, postprocess
from turboyolo.options import (
    CONF_THRES,
    MAX_CANDIDATES,
    MAX_DET,
    NMS_THRES,
    device_option,
    img_size_option,
    img_size_pair,
    max_candidates_option,
    max_det_option,
    option,
    require,
)


@dataclass
class PredictArgs:
    """How the model detects: input size, thresholds, which classes, where it runs and in what batches."""

    conf_thres: float = option(CONF_THRES, "objectness and class-score threshold", type=float)
    nms_thres: float = option(NMS_THRES, "IoU of per-class NMS", type=float)
    img_size: tuple[int, int] | None = img_size_option("the cfg's", rectangle=True)
    class_filter: list[str] | None = option(None, "keep only these classes (names or indices)", nargs="+")
    single_label: bool = option(False, "one class per box (the best), not Darknet's multi-label",
                                action="store_true")
    max_det: int | None = max_det_option()
    max_candidates: int | None = max_candidates_option()
    device: str = device_option()
    half: bool = option(False, "fp16 on CUDA (bf16 on CPU)", action="store_true")
    batch_size: int = option(8, "images per forward pass", "-b", "--batch-size", type=int)
    backend: str = option("auto", "what runs the network: torch (PyTorch's public modules: the same digits "
                          "every run), tuned (CPU, float32: each layer on its fastest kernel there, through "
                          "PyTorch internals; docs/DETECT.md), onnxruntime (CPU, float32) or auto (torch)",
                          choices=BACKENDS)

    def __post_init__(self) -> None:
        self.img_size = img_size_pair(self.img_size)
        for flag, value in (("--conf-thres", self.conf_thres), ("--nms-thres", self.nms_thres)):
            require(0 <= value <= 1, f"{flag} must lie in [0, 1], got {value}")
        require(self.batch_size >= 1, f"--batch-size must be >= 1, got {self.batch_size}")
        require(self.max_det is None or self.max_det >= 1, f"--max-det must be >= 1, got {self.max_det}")
        require(self.max_candidates is None or self.max_candidates >= 1,
                f"--max-candidates must be >= 1, got {self.max_candidates}")
        if self.class_filter is not None:
            self.class_filter = [str(item) for item in self.class_filter]


def class_indices(filters: Sequence[str] | None, names: Sequence[str]) -> list[int] | None:
    """``--class-filter`` (names or indices) -> class indices; ``None`` keeps every class."""
    if not filters:
        return None
    out = []
    for item in filters:
        if item.isdigit() and int(item) < len(names):
            out.append(int(item))
        elif item in names:
            out.append(list(names).index(item))
        else:
            raise FlagError(f"--class-filter {item!r} is neither a class index nor one of the names")
    return out


def letterbox_size(width: int, height: int, net_w: int, net_h: int) -> tuple[int, int]:
    """Darknet's resized size inside the network input (float32 comparison, integer truncation)."""
    if np.float32(net_w) / np.float32(width) < np.float32(net_h) / np.float32(height):
        return net_w, (height * net_w) // width
    return (width * net_h) // height, net_h


def _axis_weights(size_in: int, size_out: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Source index, its neighbour and the neighbour's weight per output position, in float32 as
    Darknet computes them (``scale = (in - 1) / (out - 1)``, ``ix = (int)(pos * scale)``)."""
    scale = torch.tensor(float(size_in - 1), dtype=torch.float32) / torch.tensor(float(max(size_out - 1, 1)))
    position = torch.arange(size_out, dtype=torch.float32) * scale
    index = position.long().clamp_(max=size_in - 1)
    weight = position - index.float()
    return index.to(device), (index + 1).clamp_(max=size_in - 1).to(device), weight.to(device)


def darknet_resize(image: torch.Tensor, new_w: int, new_h: int) -> torch.Tensor:
    """Darknet's ``resize_image`` of a uint8 ``[H, W, C]`` image: separable bilinear with aligned corners,
    columns then rows, in float32 on ``pixel / 255``; returns float ``[new_h, new_w, C]``.

    Two quirks are kept because they move scores: the last column copies the last source column,
    and the last row gets only the ``(1 - dy)`` term (nearly black when float32 puts it just below
    the last source row). Only the source pixels that some output reads are gathered and converted
    (rows, then columns), so the cost does not grow with the photo's size; every output is
    the same float32 expression as Darknet's.
    """
    height, width, channels = image.shape
    ix, ix1, dx = _axis_weights(width, new_w, image.device)
    iy, iy1, dy = _axis_weights(height, new_h, image.device)
    # rows of [new_w * channels] values: the source rows, then a gather along each row, and every product
    # along contiguous rows (a broadcast over a last axis 3 long runs several times slower)
    lanes = torch.arange(channels, device=image.device)
    offsets, offsets1 = ((index.view(-1, 1) * channels + lanes).view(-1) for index in (ix, ix1))
    wx = dx.repeat_interleave(channels)
    rows_2d = image.reshape(height, width * channels)

    def columns(rows: torch.Tensor) -> torch.Tensor:
        source = rows_2d.index_select(0, rows)

        def pick(offsets: torch.Tensor) -> torch.Tensor:
            return torch.gather(source, 1, offsets.view(1, -1).expand(len(rows), -1)).float().div_(255.0)

        left = pick(offsets)
        if width == 1:
            return left
        part = left.mul_(1 - wx).add_(pick(offsets1).mul_(wx))
        part[:, -channels:] = source[:, -channels:].float().div_(255.0)
        return part

    dy = dy.view(-1, 1)
    out = columns(iy).mul_(1 - dy)
    if height > 1:
        out[:-1] += columns(iy1[:-1]).mul_(dy[:-1])
    return out.view(new_h, new_w, channels)


def darknet_letterbox(
    image: np.ndarray | torch.Tensor, net_w: int, net_h: int
) -> tuple[torch.Tensor, Letterbox]:
    """Letterbox exactly as Darknet does: float bilinear resize with aligned corners, 0.5 grey fill.

    Args:
        image: uint8 ``[H, W, 3]`` RGB (numpy or tensor; a tensor may live on the GPU).
    Returns:
        float ``[3, net_h, net_w]`` in [0, 1], a view of ``[net_h, net_w, 3]`` memory (channels_last, the
        CPU network's layout: :func:`stack_letterboxed`), and the :class:`Letterbox` that maps boxes back.
    """
    tensor = torch.as_tensor(image)
    height, width = tensor.shape[:2]
    new_w, new_h = letterbox_size(width, height, net_w, net_h)
    resized = darknet_resize(tensor, new_w, new_h)
    boxed = resized.new_full((net_h, net_w, resized.shape[2]), 0.5)
    left, top = (net_w - new_w) // 2, (net_h - new_h) // 2
    boxed[top : top + new_h, left : left + new_w] = resized
    # Darknet un-letterboxes with a float half pad although it embedded at the integer one.
    letterbox = Letterbox(
        new_w / width, new_h / height, (net_w - new_w) / 2, (net_h - new_h) / 2, width, height
    )
    return boxed.permute(2, 0, 1), letterbox


def stack_letterboxed(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """``[3, H, W]`` letterboxed images -> one ``[N, 3, H, W]`` batch in channels_last memory, the layout
    they come in (no transposing copy)."""
    return torch.stack([image.permute(1, 2, 0) for image in images]).permute(0, 3, 1, 2)


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def _as_tensor(image: np.ndarray | torch.Tensor) -> torch.Tensor:
    if isinstance(image, np.ndarray) and not image.flags.writeable:
        image = image.copy()  # torch refuses to wrap read-only memory (e.g. a memory-mapped cache)
    return torch.as_tensor(image)


@dataclass
class Prediction:
    """Detections on one image, in original pixels: ``boxes`` ``[n, 4]`` xyxy, ``scores``, ``classes``."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    width: int
    height: int


class Predictor:
    """Run a :class:`Darknet` model on images with Darknet's pre- and post-processing.

    Args:
        model: the network (weights loaded); moved to ``device`` and put in eval mode.
        img_size: network input (width, height); defaults to the cfg's.
        half: fp16 on CUDA (bf16 on CPU).
        backend: what runs the network (:mod:`turboyolo.infer.backends`): ``auto``, ``torch``, ``tuned`` or
            ``onnxruntime``; each runs an inference copy with batch norm folded, ``model`` stays as it is.
    """

    def __init__(
        self,
        model: Darknet,
        device: str | torch.device = "cpu",
        img_size: tuple[int, int] | None = None,
        half: bool = False,
        backend: str = "auto",
        say=_say,
    ):
        self.device = torch.device(device)
        self.dtype = (
            (torch.float16 if self.device.type == "cuda" else torch.bfloat16) if half else torch.float32
        )
        self.model = model.to(self.device, self.dtype).eval()
        self.weights_path: Path | None = None  # the file the weights came from (set by load)
        net = model.spec.net
        self.img_size = img_size or (net.width, net.height)
        if self.img_size[0] % model.max_stride or self.img_size[1] % model.max_stride:
            raise ConfigError(
                f"--img-size {self.img_size[0]}x{self.img_size[1]} must be a multiple of "
                f"{model.max_stride} for this network"
            )
        self.runner = make_runner(backend, self.model, self.device, self.dtype, self.img_size, say)
        self.caps = CapCounts()  # where --max-det and --max-candidates changed the output, over every call

    @classmethod
    def load(cls, weights: str | Path, cfg: str | Path | None = None, *, device: str | None = "auto",
             img_size: int | Sequence[int] | None = None, half: bool = False, backend: str = "auto",
             say=_say) -> Predictor:
        """The model that ``--weights`` (and ``--cfg``) name, ready on ``device``: a ``.weights`` file with
        its cfg, a checkpoint that carries its cfg, or a pinned asset name (``yolov3-tiny``)."""
        spec, path = resolve_model(str(cfg) if cfg is not None else None,
                                   str(weights) if weights is not None else None)
        predictor = cls(build_model(spec, path), device=resolve_device(device),
                        img_size=img_size_pair(img_size), half=half, backend=backend, say=say)
        predictor.weights_path = Path(str(path))
        return predictor

    @torch.inference_mode()
    def predict_arrays(
        self,
        images: Sequence[np.ndarray],
        conf_thres: float = CONF_THRES,
        nms_thres: float = NMS_THRES,
        multi_label: bool = True,
        classes: Sequence[int] | None = None,
        max_det: int | None = MAX_DET,
        max_candidates: int | None = MAX_CANDIDATES,
    ) -> list[Prediction]:
        """Detect on uint8 RGB ``[H, W, 3]`` arrays, one batch (``None`` caps: none)."""
        if not images:
            return []
        net_w, net_h = self.img_size
        boxed, letterboxes = zip(
            *(darknet_letterbox(_as_tensor(im).to(self.device), net_w, net_h) for im in images)
        )
        batch = stack_letterboxed(boxed).to(self.dtype)
        decoded = decode(self.runner(batch), self.model.heads)
        detections = postprocess(
            decoded,
            conf_thres,
            nms_thres,
            multi_label=multi_label,
            classes=classes,
            max_det=max_det,
            max_candidates=max_candidates,
            letterboxes=letterboxes,
            caps=self.caps,
            **nms_options(self.model.heads),
        )
        return [
            Prediction(
                det[:, :4].cpu().numpy(),
                det[:, 4].cpu().numpy(),
                det[:, 5].long().cpu().numpy(),
                lb.orig_w,
                lb.orig_h,
            )
            for det, lb in zip(detections, letterboxes)
        ]

    def predict_tiled(self, image: np.ndarray, tiles: TileOptions, conf_thres: float = CONF_THRES,
                      nms_thres: float = NMS_THRES, multi_label: bool = True,
                      classes: Sequence[int] | None = None, max_det: int | None = MAX_DET,
                      batch_size: int = 8, max_candidates: int | None = MAX_CANDIDATES) -> Prediction:
        """Detect on one large uint8 RGB image by overlapping full-resolution tiles, merged (``max_det``
        caps the merged detections, not each tile's)."""

        def predict(crops: list[np.ndarray]) -> list[Prediction]:
            return self.predict_arrays(crops, conf_thres, nms_thres, multi_label=multi_label, classes=classes,
                                       max_det=None, max_candidates=max_candidates)

        image_caps, self.caps = self.caps, CapCounts()  # the tiles' counts, folded into one image's below
        try:
            merged = detect_tiled(predict, image, tiles, batch_size=batch_size, nms_thres=nms_thres)
        finally:
            tile_caps, self.caps = self.caps, image_caps
        reached = max_det is not None and len(merged.scores) > max_det
        keep = slice(max_det if reached else None)  # merged detections come best first
        self.caps.max_det_cap, self.caps.max_candidates_cap = max_det, max_candidates
        self.caps.count(tile_caps.most_candidates, reached, tile_caps.candidates > 0)
        return Prediction(merged.boxes[keep], merged.scores[keep], merged.classes[keep], image.shape[1],
                          image.shape[0])

    def predict(self, paths: Sequence[str | Path], **kwargs) -> list[Prediction]:
        """Detect on image files (decoded at full resolution, EXIF orientation applied)."""
        return self.predict_arrays([load_image(p) for p in paths], **kwargs)

    def run(self, arrays: Sequence[np.ndarray], args: PredictArgs, classes: Sequence[int] | None = None,
            tiles: TileOptions | None = None) -> list[Prediction]:
        """Detect on uint8 RGB arrays as ``args`` says (thresholds, labels, cap; ``classes``: the indices of
        its ``class_filter``), in batches of ``args.batch_size``, or tiled when ``tiles`` is given."""
        kwargs = dict(multi_label=not args.single_label, classes=classes, max_det=args.max_det,
                      max_candidates=args.max_candidates)
        if tiles is not None:
            return [self.predict_tiled(array, tiles, args.conf_thres, args.nms_thres,
                                       batch_size=args.batch_size, **kwargs) for array in arrays]
        results = []
        for start in range(0, len(arrays), args.batch_size):
            chunk = arrays[start : start + args.batch_size]
            results += self.predict_arrays(chunk, args.conf_thres, args.nms_thres, **kwargs)
        return results
