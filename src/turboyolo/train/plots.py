"""What users look at in a run directory: label statistics, batches with their boxes, curves, confusion.

Figures are matplotlib (Agg backend, no display needed); images with boxes are torchvision's
``draw_bounding_boxes`` tiled by ``make_grid`` and written by PIL. Every function takes plain arrays
and a path and returns the path(s) it wrote.

==========================  ===================================================================
file                        written by
==========================  ===================================================================
labels.jpg                  :func:`plot_labels` (training labels: class counts, centres, sizes)
train_batch0..2.jpg         :func:`plot_train_batch` via :func:`plot_first_batches`
val_batchN_labels/pred.jpg  :func:`plot_val_batches`
PR/F1/P/R_curve.png         :func:`plot_curves`
confusion_matrix.png        :func:`plot_confusion_matrix`
==========================  ===================================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.utils import make_grid

from turboyolo.boxes import cxcywh_to_xyxy
from turboyolo.data.decode import load_image
from turboyolo.data.loader import move_to_device
from turboyolo.draw import draw_boxes
from turboyolo.errors import DataError

# Class colours of the box drawings (matplotlib's tab10, as RGB).
PALETTE = (
    (31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
    (140, 86, 75), (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207),
)
TRAIN_BATCH_PLOTS = 3  # train_batch0..2.jpg
VAL_BATCH_PLOTS = 3  # val_batch0..2_{labels,pred}.jpg
IMAGES_PER_MOSAIC = 16
TILE_SIDE = 320  # val images are resized to fit a tile of this side
MAX_LABELLED_CLASSES = 20  # above this, per-class curves have no legend and the matrix no numbers


def pyplot():
    """matplotlib's pyplot with the Agg backend, imported when the first figure is drawn: choosing the
    backend at import time would change it for a notebook or program that merely imports turboyolo."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _name(names: Sequence[str] | None, cls: int) -> str:
    return names[cls] if names is not None and 0 <= cls < len(names) else str(cls)


# --------------------------------------------------------------------------------------------- labels


PLOT_BOXES = 100_000  # labels.jpg's histograms of centres and sizes show at most this many boxes, sampled


def plot_labels(labels: Sequence[np.ndarray], names: Sequence[str], path: str | Path) -> Path:
    """``labels.jpg``: boxes per class (all of them), box centres (x, y) and box sizes (w, h) as 2-D
    histograms (of a seeded random :data:`PLOT_BOXES` when there are more).

    Args:
        labels: per image, ``[N, 5]`` (class, cx, cy, w, h) relative to the image.
        names: class names (the bar chart's axis).
        path: where to write (JPEG by its suffix).
    """
    rows = [np.asarray(b, dtype=np.float32).reshape(-1, 5) for b in labels]
    boxes = np.concatenate(rows) if rows else np.zeros((0, 5), np.float32)
    counts = np.bincount(boxes[:, 0].astype(np.int64), minlength=len(names))[: len(names)]
    total = len(boxes)
    if total > PLOT_BOXES:  # the histograms of a seeded sample: the same picture at any data-set size
        boxes = boxes[np.random.default_rng(0).choice(total, PLOT_BOXES, replace=False)]
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    axes[0].bar(range(len(names)), counts, color="C0")
    axes[0].set_xticks(range(len(names)))
    axes[0].set_xticklabels(list(names), rotation=90 if len(names) > 8 else 0, fontsize=7)
    axes[0].set_ylabel("boxes")
    axes[0].set_title(f"{total} boxes in {len(rows)} images")
    for ax, (a, b), title in ((axes[1], (1, 2), "centre"), (axes[2], (3, 4), "size")):
        ax.hist2d(boxes[:, a], boxes[:, b], bins=50, range=[[0, 1], [0, 1]], cmap="Blues", cmin=1)
        ax.set_xlabel("x" if title == "centre" else "width")
        ax.set_ylabel("y" if title == "centre" else "height")
        ax.set_title(f"box {title} (relative" + (f", {len(boxes)} sampled)" if len(boxes) < total else ")"))
        ax.set_aspect("equal")
    axes[1].invert_yaxis()  # image coordinates: y down
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------ batches, mosaics


def _draw(image: torch.Tensor, boxes: np.ndarray, classes: np.ndarray, captions: list[str]) -> torch.Tensor:
    """uint8 ``[3, H, W]`` with ``boxes`` (xyxy pixels) drawn in their class colours
    (:func:`turboyolo.draw.draw_boxes`, the project's one drawing function)."""
    if not len(boxes):
        return image
    colors = [PALETTE[int(c) % len(PALETTE)] for c in classes]
    drawn = draw_boxes(image.permute(1, 2, 0).numpy(), boxes, colors, captions, thickness=2)
    return torch.from_numpy(drawn).permute(2, 0, 1)


def _save_grid(tiles: list[torch.Tensor], path: str | Path) -> Path:
    grid = make_grid(tiles, nrow=math.ceil(math.sqrt(len(tiles))), padding=2, pad_value=255)
    path = Path(path)
    Image.fromarray(grid.permute(1, 2, 0).numpy()).save(path, quality=90)
    return path


def plot_train_batch(
    images, targets, path: str | Path, names: Sequence[str] | None = None, max_images: int = IMAGES_PER_MOSAIC
) -> Path:
    """``train_batchN.jpg``: the (augmented) network inputs of a batch with their target boxes.

    Args:
        images: ``[B, 3, H, W]`` uint8 (0..255) or float (0..1), tensor or array.
        targets: ``[N, 6]`` (batch index, class, cx, cy, w, h) relative to the input.
        names: class names for the box captions (class indices without).
    """
    images = torch.as_tensor(images)[:max_images].detach().cpu()
    if images.is_floating_point():
        images = (images.clamp(0, 1) * 255).round()
    images = images.to(torch.uint8)
    targets = np.asarray(torch.as_tensor(targets).detach().cpu().float(), dtype=np.float64).reshape(-1, 6)
    height, width = images.shape[2:]
    tiles = []
    for index, image in enumerate(images):
        rows = targets[targets[:, 0] == index]
        cx, cy, w, h = rows[:, 2] * width, rows[:, 3] * height, rows[:, 4] * width, rows[:, 5] * height
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        classes = rows[:, 1].astype(np.int64)
        tiles.append(_draw(image.contiguous(), boxes, classes, [_name(names, c) for c in classes]))
    return _save_grid(tiles, path)


def plot_first_batches(
    batches: Iterable,
    out_dir: str | Path,
    names: Sequence[str] | None = None,
    count: int = TRAIN_BATCH_PLOTS,
    on_written: Callable[[Path], None] | None = None,
    after_first: Callable[[], object] | None = None,
) -> Iterator:
    """Yield ``batches`` unchanged, writing ``train_batch{i}.jpg`` for the first ``count`` of them.

    ``batches`` yields ``(images, targets, metas)`` as the training loaders do. A batch is drawn once the
    consumer has taken it and asks for the next (its step comes first: the first step does not wait for
    a picture, and on an accelerator the drawing overlaps the step), or when this generator is closed
    or ends (a run that stops after it): close it when the loop ends early. ``--augment-on device``
    batches (:class:`turboyolo.data.device_loader.CanvasBatch`, whose buffer the loader reuses a few
    batches on) are drawn before they are yielded, augmented on the CPU for the picture, which draws
    exactly what the device will compute (the warp and colour numbers are in the batch). Only the first
    ``count`` batches cost anything; ``on_written`` gets each path written. ``after_first`` (other work
    of the run's start, ``labels.jpg``) runs once, after the first batch is drawn, as late as it is.
    """
    out_dir = Path(out_dir)
    later = [after_first] if after_first is not None else []

    def then() -> None:
        while later:
            later.pop()()

    def draw(index: int, images, targets) -> None:
        path = plot_train_batch(images, targets, out_dir / f"train_batch{index}.jpg", names)
        if on_written is not None:
            on_written(path)

    pending = None  # (index, images, targets) of the batch the consumer has, drawn when it comes back
    try:
        for index, batch in enumerate(batches):
            if pending is not None:
                draw(*pending)
                pending = None
            if index > 0:
                then()
            if index < count:
                images, targets = batch[0], batch[1]
                if hasattr(images, "to_device"):
                    draw(index, move_to_device(images, "cpu"), targets)  # float [0, 1]
                else:
                    pending = (index, images, targets)
            yield batch
    finally:
        if pending is not None:
            draw(*pending)
        then()


def _tile(image: np.ndarray, side: int) -> tuple[torch.Tensor, float]:
    """HWC uint8 -> ``[3, side, side]`` uint8 (resized to fit, top-left, white around) and the scale."""
    height, width = image.shape[:2]
    scale = min(side / height, side / width)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    small = np.asarray(Image.fromarray(image).resize(size, Image.BILINEAR)) if scale != 1 else image
    canvas = np.full((side, side, 3), 255, np.uint8)
    canvas[: small.shape[0], : small.shape[1]] = small
    return torch.from_numpy(canvas).permute(2, 0, 1).contiguous(), scale


def plot_val_batches(
    shown: Sequence[tuple],
    labels: Mapping[str, np.ndarray],
    out_dir: str | Path,
    names: Sequence[str] | None = None,
    conf_thres: float = 0.25,
    per_mosaic: int = IMAGES_PER_MOSAIC,
    count: int = VAL_BATCH_PLOTS,
    tile_side: int = TILE_SIDE,
) -> list[Path]:
    """``val_batch{i}_labels.jpg`` (ground truth) and ``val_batch{i}_pred.jpg`` (detections >= conf).

    Args:
        shown: ``(image path, detections [n, 6])`` per image, detections (x1, y1, x2, y2, score, class)
            in original pixels: what :func:`turboyolo.train.engine.evaluate` returns for ``keep_predictions``.
        labels: image path (as ``str``) -> ``[m, 5]`` (class, cx, cy, w, h) relative; a missing path
            means no boxes.
        out_dir: the run directory.
        conf_thres: detections below it are not drawn.
        per_mosaic, count: images per mosaic and mosaics (pairs) at most.

    Returns the paths written (labels and pred alternating). Unreadable images are skipped.
    """
    out_dir = Path(out_dir)
    written = []
    for batch in range(min(count, math.ceil(len(shown) / per_mosaic))):
        truth_tiles, pred_tiles = [], []
        for path, dets in shown[batch * per_mosaic : (batch + 1) * per_mosaic]:
            try:  # the guarded decode, EXIF orientation applied: the picture the boxes refer to
                image = load_image(path)
            except DataError:  # broke since the evaluation read it: nothing to draw
                continue
            tile, scale = _tile(image, tile_side)
            height, width = image.shape[:2]
            gt = np.asarray(labels.get(str(path), np.zeros((0, 5))), dtype=np.float64).reshape(-1, 5)
            gt_boxes = cxcywh_to_xyxy(gt[:, 1:] * np.array([width, height, width, height])) * scale
            gt_classes = gt[:, 0].astype(np.int64)
            truth_tiles.append(_draw(tile, gt_boxes, gt_classes, [_name(names, c) for c in gt_classes]))
            dets = np.asarray(dets, dtype=np.float64).reshape(-1, 6)
            dets = dets[dets[:, 4] >= conf_thres]
            det_classes = dets[:, 5].astype(np.int64)
            captions = [f"{_name(names, c)} {s:.2f}" for c, s in zip(det_classes, dets[:, 4])]
            pred_tiles.append(_draw(tile, dets[:, :4] * scale, det_classes, captions))
        if truth_tiles:
            written.append(_save_grid(truth_tiles, out_dir / f"val_batch{batch}_labels.jpg"))
            written.append(_save_grid(pred_tiles, out_dir / f"val_batch{batch}_pred.jpg"))
    return written


# ------------------------------------------------------------------------------- curves and confusion


def plot_curves(result, names: Sequence[str], out_dir: str | Path) -> dict[str, Path]:
    """``PR_curve.png``, ``F1_curve.png``, ``P_curve.png``, ``R_curve.png`` of an evaluation.

    ``result``: a :class:`turboyolo.train.metrics.EvalResult` with ``curves`` (from ``evaluate_detections``).
    Classes with ground truth get a thin line each (a legend up to 20 classes); the thick line is all
    classes: the mean PR curve (its AP in the legend), and P / R / F1 pooled over classes with the best
    F1's confidence marked. Returns ``{"PR_curve": path, ...}``.
    """
    curves = result.curves
    if curves is None:
        raise ValueError("plot_curves needs an EvalResult from evaluate_detections (result.curves is None)")
    out_dir = Path(out_dir)
    present = [c for c in range(len(result.gt_per_class)) if result.gt_per_class[c]]
    legend = len(present) <= MAX_LABELLED_CLASSES
    iou = f"IoU {result.iou_thres:g}"
    ap = curves.ap()
    plt = pyplot()
    written = {}

    fig, ax = plt.subplots(figsize=(6, 5))
    for cls in present:
        ax.plot(curves.recall_points, curves.pr[cls], linewidth=1,
                label=f"{_name(names, cls)} {ap[cls]:.3f}" if legend else None)
    if present:
        ax.plot(curves.recall_points, curves.pr[present].mean(axis=0), linewidth=3, color="blue",
                label=f"all classes {ap[present].mean():.3f} AP@{result.iou_thres:g}")
    _finish(ax, "recall", "precision", f"precision-recall ({iou})")
    written["PR_curve"] = _save(fig, out_dir / "PR_curve.png", plt)

    best = curves.best_conf
    for key, title, per_class, pooled in (
        ("F1_curve", "F1", curves.f1, curves.f1_all),
        ("P_curve", "precision", curves.precision, curves.precision_all),
        ("R_curve", "recall", curves.recall, curves.recall_all),
    ):
        fig, ax = plt.subplots(figsize=(6, 5))
        for cls in present:
            ax.plot(curves.confidence, per_class[cls], linewidth=1,
                    label=_name(names, cls) if legend else None)
        at_best = float(np.interp(best, curves.confidence, pooled))
        ax.plot(curves.confidence, pooled, linewidth=3, color="blue",
                label=f"all classes {at_best:.3f} at {best:.3f}")
        ax.axvline(best, color="grey", linestyle="--", linewidth=1)
        _finish(ax, "confidence", title,
                f"{title} ({iou}); best F1 {curves.best_f1:.3f} at conf {best:.3f}: "
                f"P {curves.best_precision:.3f} R {curves.best_recall:.3f}")
        written[key] = _save(fig, out_dir / f"{key}.png", plt)
    return written


def _finish(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="lower left")


def _save(fig, path: Path, plt) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_confusion_matrix(
    matrix: np.ndarray, names: Sequence[str], path: str | Path, title: str = ""
) -> Path:
    """``confusion_matrix.png``: counts ``[C + 1, C + 1]`` (row predicted, column true, last = background).

    Cells are coloured by the share of their column (what became of the true class's boxes; the
    background column: of the unmatched detections) and show the counts (up to 20 classes).
    """
    matrix = np.asarray(matrix)
    labels = [*(_name(names, c) for c in range(len(matrix) - 1)), "background"]
    totals = matrix.sum(axis=0, keepdims=True)
    share = np.divide(matrix, totals, out=np.zeros(matrix.shape), where=totals > 0)
    plt = pyplot()
    side = min(4 + 0.45 * len(matrix), 24)
    fig, ax = plt.subplots(figsize=(side, side * 0.85))
    image = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the column")
    ticks = range(len(labels))
    ax.set_xticks(ticks)
    ax.set_yticks(ticks)
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("true")
    ax.set_ylabel("predicted")
    if len(matrix) <= MAX_LABELLED_CLASSES + 1:
        for (row, col), value in np.ndenumerate(matrix):
            if value:
                ax.text(col, row, str(int(value)), ha="center", va="center", fontsize=8,
                        color="white" if share[row, col] > 0.5 else "black")
    ax.set_title(title or "confusion matrix", fontsize=8)
    return _save(fig, Path(path), plt)


def save_evaluation_plots(result, names: Sequence[str], out_dir: str | Path) -> dict[str, Path]:
    """All curve and confusion figures of an evaluation into ``out_dir``; ``{"PR_curve": path, ...}``."""
    written = plot_curves(result, names, out_dir)
    if result.confusion is not None:
        written["confusion_matrix"] = plot_confusion_matrix(
            result.confusion, names, Path(out_dir) / "confusion_matrix.png",
            title=f"confusion matrix (conf >= {result.conf_thres:g}, IoU {result.iou_thres:g})",
        )
    return written
