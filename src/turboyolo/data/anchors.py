"""Anchor boxes fitted to a data set: k-means with a 1 - IoU distance, and how well anchors cover boxes.

Box sizes are measured where the network sees them: in pixels of the ``img_size`` letterbox (the image
scaled by ``min(net_w / w, net_h / h)``). IoU between a box and an anchor compares sizes only (both
centred at the origin), as Darknet's ``calc_anchors`` and Ultralytics' autoanchor do.

Two figures describe a set of anchors:
- **mean IoU**: the average over boxes of the IoU with their best anchor (Darknet's ``avg IoU``);
- **best-possible recall (BPR)**: the fraction of boxes whose best anchor has IoU >= ``thresh``
  (0.5 by default). YOLOv3 trains each box on its best anchor, and an anchor far from the box's shape
  must be stretched by ``exp(tw)`` a long way, which is what makes a poorly fitting anchor set miss;
- **used**: how many anchors are the best anchor of some box (an unused anchor's outputs never learn).

A fit sees at most :data:`FIT_BOXES` boxes, a seeded random sample of them (:func:`sample_boxes`): a few
ten thousand boxes give the anchors of the whole set (docs/PERFORMANCE.md, "Start-up at scale"), and the
fit's cost stays bounded at any data-set size. :func:`cached_kmeans_anchors` keeps each fit in
``$TURBOYOLO_CACHE/anchors``, keyed by the exact boxes it saw and its parameters, so a second start
with the same boxes and the same network size does not fit again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from turboyolo.assets import cache_dir

MIN_FIT_SIZE = 2.0  # boxes narrower or shorter than this (letterbox px) are left out of the fit
FIT_BOXES = 50_000  # a fit (and the start's coverage check) sees at most this many boxes, sampled
FIT_CACHE_VERSION = 1


def letterbox_box_sizes(
    labels: Sequence[np.ndarray], image_hw: Sequence[tuple[int, int]], img_size: tuple[int, int]
) -> np.ndarray:
    """Box widths and heights in letterbox pixels.

    Args:
        labels: per image float ``[N, 5]`` YOLO rows (cls, cx, cy, w, h relative to the image).
        image_hw: per image its (height, width) in pixels.
        img_size: network input (width, height).
    Returns:
        float64 ``[M, 2]`` (w, h) of every box.
    """
    net_w, net_h = img_size
    counts = np.fromiter((len(rows) for rows in labels), np.int64, count=len(labels))
    if not counts.sum():
        return np.zeros((0, 2))
    rows = np.concatenate([np.asarray(r, np.float64).reshape(-1, 5) for r in labels if len(r)])
    hw = np.repeat(np.asarray([image_hw[i] for i in np.flatnonzero(counts)], np.float64).reshape(-1, 2),
                   counts[counts > 0], axis=0)
    ratio = np.minimum(net_w / hw[:, 1], net_h / hw[:, 0])
    return np.stack([rows[:, 3] * hw[:, 1] * ratio, rows[:, 4] * hw[:, 0] * ratio], 1)


def sample_boxes(boxes_wh: np.ndarray, limit: int | None = FIT_BOXES, seed: int = 0) -> np.ndarray:
    """At most ``limit`` rows of ``boxes_wh``: a seeded random sample (in their order), or all of them
    when there are no more (or ``limit`` is None)."""
    if limit is None or len(boxes_wh) <= limit:
        return boxes_wh
    pick = np.sort(np.random.default_rng(seed).choice(len(boxes_wh), limit, replace=False))
    return boxes_wh[pick]


@dataclass(frozen=True)
class AnchorFit:
    """How well ``anchors`` (``[K, 2]`` w, h sorted by area) cover a set of boxes."""

    anchors: np.ndarray
    mean_iou: float
    recall: float  # best-possible recall at ``thresh``
    thresh: float
    used: int = 0  # anchors that are the best anchor of at least one box

    def text(self) -> str:
        """Darknet's ``anchors =`` format: ``w,h, w,h, ...``."""
        return ", ".join(f"{_fmt(w)},{_fmt(h)}" for w, h in self.anchors)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def anchor_fit(boxes_wh: np.ndarray, anchors_wh, thresh: float = 0.5) -> AnchorFit:
    """Mean best IoU and best-possible recall of ``anchors_wh`` on ``boxes_wh``."""
    anchors = np.asarray(anchors_wh, np.float64).reshape(-1, 2)
    anchors = anchors[np.argsort(anchors.prod(1), kind="stable")]
    if len(boxes_wh) == 0:
        return AnchorFit(anchors, 0.0, 0.0, thresh)
    boxes_wh = np.asarray(boxes_wh, np.float64)
    index, best = _best_centres((boxes_wh[:, 0], boxes_wh[:, 1], boxes_wh[:, 0] * boxes_wh[:, 1]), anchors)
    used = len(np.unique(index))
    return AnchorFit(anchors, float(best.mean()), float((best >= thresh).mean()), thresh, used)


def _best_centres(boxes: tuple[np.ndarray, np.ndarray, np.ndarray], centres) -> tuple[np.ndarray, np.ndarray]:
    """(index of each box's best centre, that IoU): ``wh_iou(boxes, centres)``'s ``argmax(1)`` and
    ``max(1)``, the same numbers, one centre at a time over all boxes (fast for a handful of centres).
    ``boxes``: (w, h, w * h) of every box."""
    w, h, area = boxes
    best, index = np.full(len(w), -np.inf), np.zeros(len(w), np.int64)
    for k, (cw, ch) in enumerate(np.asarray(centres, np.float64)):
        inter = np.minimum(w, cw) * np.minimum(h, ch)
        iou = inter / np.clip(area + cw * ch - inter, 1e-12, None)
        better = iou > best  # strictly: the first of equal centres wins, as argmax
        index[better] = k
        np.maximum(best, iou, out=best)
    return index, best


def _kmeans_once(boxes_wh: np.ndarray, num: int, rng: np.random.Generator, iterations: int) -> np.ndarray:
    # k-means++ seeding with 1 - IoU as the distance, then Lloyd steps (mean of each cluster).
    boxes = (boxes_wh[:, 0].copy(), boxes_wh[:, 1].copy(), boxes_wh[:, 0] * boxes_wh[:, 1])
    centres = [boxes_wh[rng.integers(len(boxes_wh))]]
    for _ in range(1, num):
        distance = 1 - _best_centres(boxes, centres)[1]
        weights = distance**2
        total = weights.sum()
        pick = rng.choice(len(boxes_wh), p=weights / total) if total > 0 else rng.integers(len(boxes_wh))
        centres.append(boxes_wh[pick])
    centres = np.array(centres, np.float64)
    assignment = None
    for _ in range(iterations):
        new_assignment, best = _best_centres(boxes, centres)
        if assignment is not None and np.array_equal(new_assignment, assignment):
            break
        assignment = new_assignment
        for k in range(num):
            members = boxes_wh[assignment == k]
            if len(members):
                centres[k] = members.mean(0)
            else:  # an empty cluster takes the box its anchor covers worst
                centres[k] = boxes_wh[best.argmin()]
    return centres


def kmeans_anchors(
    boxes_wh: np.ndarray,
    num: int = 9,
    *,
    restarts: int = 10,
    iterations: int = 300,
    seed: int = 0,
    round_to_int: bool = True,
    thresh: float = 0.5,
    sample: int | None = FIT_BOXES,
) -> AnchorFit:
    """Fit ``num`` anchors to box sizes by k-means with the distance 1 - IoU.

    Args:
        boxes_wh: ``[N, 2]`` box (w, h) in letterbox pixels (see :func:`letterbox_box_sizes`).
        num: anchors to fit (9 for yolov3, 6 for yolov3-tiny).
        restarts: independent k-means++ starts; the one with the highest mean IoU wins.
        round_to_int: round to whole pixels (as Darknet cfgs write them) before scoring.
        sample: fit on at most this many of the boxes (:func:`sample_boxes`; None: all of them).
    Returns:
        The :class:`AnchorFit` of the best start on all ``boxes_wh`` (anchors sorted by area;
        deterministic for a seed).
    Raises:
        ValueError: fewer usable boxes than ``num``.
    """
    boxes_wh = np.asarray(boxes_wh, np.float64)
    scored = sample_boxes(boxes_wh, sample, seed)
    usable = scored[(scored >= MIN_FIT_SIZE).all(1)]
    if len(np.unique(usable, axis=0)) < num:
        raise ValueError(f"{len(usable)} boxes of at least {MIN_FIT_SIZE} px; need {num} distinct sizes")
    rng = np.random.default_rng(seed)
    best: AnchorFit | None = None
    for _ in range(max(1, restarts)):
        centres = _kmeans_once(usable, num, rng, iterations)
        if round_to_int:
            centres = np.maximum(np.round(centres), 1.0)
        fit = anchor_fit(scored, centres, thresh)
        if best is None or fit.mean_iou > best.mean_iou:
            best = fit
    assert best is not None
    return best if scored is boxes_wh else anchor_fit(boxes_wh, best.anchors, thresh)


def cached_kmeans_anchors(boxes_wh: np.ndarray, num: int = 9, **fit) -> tuple[AnchorFit, bool]:
    """:func:`kmeans_anchors` kept in ``$TURBOYOLO_CACHE/anchors``: (the fit, whether it came from there).

    The key is the exact boxes (their bytes) and every parameter of the fit, so other boxes, another
    network size (other letterbox sizes) or another anchor count fit again. A cache file that does not
    read as a fit of ``num`` anchors is ignored (JSON only: reading it runs no code); a read-only cache
    folder only means fitting every time. ``fit``: the keyword arguments of :func:`kmeans_anchors`.
    """
    boxes_wh = np.ascontiguousarray(boxes_wh, np.float64)
    params = {"num": num, "restarts": 10, "iterations": 300, "seed": 0, "round_to_int": True,
              "thresh": 0.5, "sample": FIT_BOXES, **fit, "min_size": MIN_FIT_SIZE,
              "version": FIT_CACHE_VERSION}
    digest = hashlib.sha1(boxes_wh.tobytes())
    digest.update(json.dumps(params, sort_keys=True).encode())
    path = cache_dir() / "anchors" / f"{digest.hexdigest()[:24]}.json"
    stored = _read_fit(path, num)
    if stored is not None:
        return stored, True
    fitted = kmeans_anchors(boxes_wh, num, **fit)
    _write_fit(path, fitted)
    return fitted, False


def _read_fit(path, num: int) -> AnchorFit | None:
    try:
        item = json.loads(path.read_text(encoding="utf-8"))
        anchors = np.array(item["anchors"], np.float64)
        figures = [float(item[k]) for k in ("mean_iou", "recall", "thresh")]
        used = item["used"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if (anchors.shape != (num, 2) or not np.isfinite(anchors).all() or (anchors <= 0).any()
            or not all(math.isfinite(f) and 0 <= f <= 1 for f in figures)
            or not isinstance(used, int) or not 0 <= used <= num):
        return None
    return AnchorFit(anchors, *figures, used)


def _write_fit(path, fit: AnchorFit) -> None:
    item = {"anchors": fit.anchors.tolist(), "mean_iou": fit.mean_iou, "recall": fit.recall,
            "thresh": fit.thresh, "used": fit.used}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(item), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # not kept: the next start fits again
