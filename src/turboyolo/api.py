"""The small public Python API: load a model, detect on arrays or image files, train (``turboyolo.load``,
``turboyolo.detect`` and ``turboyolo.train`` are these functions).

>>> import turboyolo
>>> model = turboyolo.load("yolov3-tiny")                   # doctest: +SKIP
>>> [result] = turboyolo.detect(model, "dog.jpg")           # doctest: +SKIP
>>> result.boxes, result.scores, result.classes             # doctest: +SKIP

``load`` takes what ``--weights`` takes on the command line (a Darknet ``.weights`` with its ``--cfg``,
a turboyolo checkpoint that carries its cfg, or the name of a pinned asset such as ``yolov3-tiny``);
``detect`` takes one image or a list, each a path or a uint8 RGB ``[H, W, 3]`` array, and returns one
:class:`~turboyolo.infer.predict.Prediction` per image: ``boxes`` ``[n, 4]`` xyxy in the image's pixels,
``scores`` ``[n]``, ``classes`` ``[n]``. The CLI's ``detect``, ``label`` and ``export`` use the same pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from turboyolo.data.decode import load_image
from turboyolo.infer.predict import PredictArgs, Prediction, Predictor
from turboyolo.infer.tiling import TileOptions
from turboyolo.options import CONF_THRES, MAX_CANDIDATES, MAX_DET, NMS_THRES
from turboyolo.train.config import TrainConfig
from turboyolo.train.fit import FitResult, fit

ImageLike = str | Path | np.ndarray


def load(
    weights: str | Path,
    cfg: str | Path | None = None,
    *,
    device: str | None = None,
    img_size: int | tuple[int, int] | None = None,
    half: bool = False,
    backend: str = "auto",
) -> Predictor:
    """A ready :class:`~turboyolo.infer.predict.Predictor` (eval mode, on ``device``; default: CUDA if any).

    Args:
        weights: ``.weights`` file, checkpoint (``.pt``), or a pinned asset name (``"yolov3-tiny"``).
        cfg: the Darknet ``.cfg``; needed for ``.weights`` files other than pinned assets.
        img_size: network input side (or ``(width, height)``); default: the cfg's.
        backend: what runs the network: ``"auto"`` (= ``"torch"``: PyTorch's public modules, the same
            digits every run), ``"tuned"`` (CPU, float32: each layer on the fastest of its kernels there,
            through PyTorch internals) or ``"onnxruntime"`` (:mod:`turboyolo.infer.backends`).
    """
    return Predictor.load(weights, cfg, device=device, img_size=img_size, half=half, backend=backend)


def detect(
    model: Predictor,
    images: ImageLike | Sequence[ImageLike],
    *,
    conf_thres: float = CONF_THRES,
    nms_thres: float = NMS_THRES,
    single_label: bool = False,
    classes: Sequence[int] | None = None,
    max_det: int | None = MAX_DET,
    max_candidates: int | None = MAX_CANDIDATES,
    tile: int | None = None,
    overlap: float = 0.2,
    batch_size: int = 8,
) -> list[Prediction]:
    """Detections for one image or a list of images (paths or uint8 RGB arrays), in input order.

    ``classes``: the class indices to keep. ``max_det``: detections kept per image (the best-scoring);
    ``max_candidates``: boxes x classes per image that NMS examines, the best-scoring first (``None``:
    no cap). ``tile`` (pixels) detects each image on overlapping
    full-resolution tiles and merges the boxes (:mod:`turboyolo.infer.tiling`), for images much larger
    than the network input.
    """
    single = isinstance(images, (str, Path, np.ndarray))
    items = [images] if single else list(images)
    arrays = [load_image(item) if isinstance(item, (str, Path)) else np.asarray(item) for item in items]
    args = PredictArgs(conf_thres=conf_thres, nms_thres=nms_thres, single_label=single_label, max_det=max_det,
                       max_candidates=max_candidates, batch_size=batch_size)
    return model.run(arrays, args, classes, TileOptions(tile, overlap) if tile is not None else None)


def train(cfg: str | Path | None = None, data: str | Path | None = None, weights: str | Path | None = None, *,
          resume: str | Path | None = None, quiet: bool = False, **options) -> FitResult:
    """Train from Python: ``turboyolo.train(cfg="my.cfg", data="my.data", weights="yolov3-tiny.weights",
    epochs=50, cache="ram")``.

    ``options`` are the flags of ``turboyolo train`` by their Python names (``img_size``, ``cache``,
    ``max_batches``, ``evaluation_interval``, ...; see :mod:`turboyolo.train.config`). Returns the
    :class:`~turboyolo.train.fit.FitResult`: the run directory, the last evaluation's metrics, the best
    fitness, iterations, epochs, training minutes and why the run stopped.
    """
    config = TrainConfig.build(str(cfg or ""), str(data or ""), str(weights) if weights else None,
                               str(resume) if resume else None, **options)
    return fit(config, quiet=quiet)
