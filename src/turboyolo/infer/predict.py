"""Inference API: a model plus Darknet's letterbox and post-processing.

>>> from turboyolo.infer.predict import Predictor                                  # doctest: +SKIP
>>> predictor = Predictor.from_files("yolov3-tiny.cfg", "yolov3-tiny.weights")  # doctest: +SKIP
>>> [result] = predictor.predict(["dog.jpg"])                                # doctest: +SKIP
>>> result.boxes, result.scores, result.classes                              # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from turboyolo.boxes import Letterbox
from turboyolo.model.darknet import Darknet
from turboyolo.model.loading import build_model
from turboyolo.model.postprocess import decode, nms_options, postprocess


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


def darknet_resize(chw: torch.Tensor, new_w: int, new_h: int) -> torch.Tensor:
    """Darknet's ``resize_image``: separable bilinear with aligned corners, columns then rows.

    Two quirks are kept because they move scores: the last column copies the last source column,
    and the last row gets only the ``(1 - dy)`` term (nearly black when float32 puts it just below
    the last source row).
    """
    _, height, width = chw.shape
    ix, ix1, dx = _axis_weights(width, new_w, chw.device)
    part = chw[:, :, ix] * (1 - dx) + chw[:, :, ix1] * dx
    if width > 1:
        part[:, :, -1] = chw[:, :, -1]
    else:
        part = chw[:, :, :1].expand(-1, -1, new_w).clone()
    iy, iy1, dy = _axis_weights(height, new_h, chw.device)
    out = part[:, iy, :] * (1 - dy)[:, None]
    if height > 1:
        out[:, :-1, :] += part[:, iy1[:-1], :] * dy[:-1, None]
    return out


def darknet_letterbox(
    image: np.ndarray | torch.Tensor, net_w: int, net_h: int
) -> tuple[torch.Tensor, Letterbox]:
    """Letterbox exactly as Darknet does: float bilinear resize with aligned corners, 0.5 grey fill.

    Args:
        image: uint8 ``[H, W, 3]`` RGB (numpy or tensor; a tensor may live on the GPU).
    Returns:
        float ``[3, net_h, net_w]`` in [0, 1] and the :class:`Letterbox` that maps boxes back.
    """
    tensor = torch.as_tensor(image)
    height, width = tensor.shape[:2]
    new_w, new_h = letterbox_size(width, height, net_w, net_h)
    chw = tensor.permute(2, 0, 1).float().div_(255.0)
    chw = darknet_resize(chw, new_w, new_h)
    boxed = chw.new_full((chw.shape[0], net_h, net_w), 0.5)
    left, top = (net_w - new_w) // 2, (net_h - new_h) // 2
    boxed[:, top : top + new_h, left : left + new_w] = chw
    # Darknet un-letterboxes with a float half pad although it embedded at the integer one.
    letterbox = Letterbox(
        new_w / width, new_h / height, (net_w - new_w) / 2, (net_h - new_h) / 2, width, height
    )
    return boxed, letterbox


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
    """

    def __init__(
        self,
        model: Darknet,
        device: str | torch.device = "cpu",
        img_size: tuple[int, int] | None = None,
        half: bool = False,
    ):
        self.device = torch.device(device)
        self.dtype = (
            (torch.float16 if self.device.type == "cuda" else torch.bfloat16) if half else torch.float32
        )
        self.model = model.to(self.device, self.dtype).eval()
        net = model.spec.net
        self.img_size = img_size or (net.width, net.height)
        if self.img_size[0] % model.max_stride or self.img_size[1] % model.max_stride:
            from turboyolo.errors import ConfigError

            raise ConfigError(
                f"--img-size {self.img_size[0]}x{self.img_size[1]} must be a multiple of "
                f"{model.max_stride} for this network"
            )

    @classmethod
    def from_files(cls, cfg: str | Path, weights: str | Path | None, **kwargs) -> Predictor:
        return cls(build_model(cfg, weights), **kwargs)

    @torch.inference_mode()
    def predict_arrays(
        self,
        images: Sequence[np.ndarray],
        conf_thres: float = 0.25,
        nms_thres: float = 0.45,
        multi_label: bool = True,
        classes: Sequence[int] | None = None,
        max_det: int | None = None,
    ) -> list[Prediction]:
        """Detect on uint8 RGB ``[H, W, 3]`` arrays, one batch."""
        if not images:
            return []
        net_w, net_h = self.img_size
        boxed, letterboxes = zip(
            *(darknet_letterbox(_as_tensor(im).to(self.device), net_w, net_h) for im in images)
        )
        batch = torch.stack(boxed).to(self.dtype)
        decoded = decode(self.model(batch), self.model.heads)
        detections = postprocess(
            decoded,
            conf_thres,
            nms_thres,
            multi_label=multi_label,
            classes=classes,
            max_det=max_det,
            letterboxes=letterboxes,
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

    def predict_tiled(self, image: np.ndarray, tiles, conf_thres: float = 0.25, nms_thres: float = 0.45,
                      multi_label: bool = True, classes: Sequence[int] | None = None,
                      max_det: int | None = None, batch_size: int = 8) -> Prediction:
        """Detect on one large uint8 RGB image by overlapping full-resolution tiles, merged
        (``tiles``: a :class:`turboyolo.infer.tiling.TileOptions`)."""
        from turboyolo.infer.tiling import detect_tiled

        def predict(crops: list[np.ndarray]) -> list[Prediction]:
            return self.predict_arrays(crops, conf_thres, nms_thres, multi_label=multi_label, classes=classes)

        merged = detect_tiled(predict, image, tiles, batch_size=batch_size, nms_thres=nms_thres,
                              max_det=max_det)
        return Prediction(merged.boxes, merged.scores, merged.classes, image.shape[1], image.shape[0])

    def predict(self, paths: Sequence[str | Path], **kwargs) -> list[Prediction]:
        """Detect on image files (decoded at full resolution, EXIF orientation applied)."""
        from turboyolo.data.decode import load_image

        return self.predict_arrays([load_image(p) for p in paths], **kwargs)
