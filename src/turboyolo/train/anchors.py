"""Anchors against a data set's boxes: the ``turboyolo anchors`` job (anchors fitted to the boxes, compared
with the ones a cfg trains) and the check at the start of a run (:func:`check_anchors`, ``--autoanchor``).

The fitting itself (letterbox box sizes, k-means with 1 - IoU, mean IoU / recall / used) is
:mod:`turboyolo.data.anchors`; this module adds what needs the model side too: the cfg's current
anchors (or the zoo's COCO ones when no cfg is given) and the cfg rewritten with the fitted anchors.
It lives in the training wing because it stands above both ``data`` and ``model``, which never
import each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from turboyolo.data.anchors import (
    FIT_BOXES,
    AnchorFit,
    anchor_fit,
    cached_kmeans_anchors,
    letterbox_box_sizes,
    sample_boxes,
)
from turboyolo.data.scan import Sample, scan_dataset
from turboyolo.errors import ConfigError, DataError
from turboyolo.formats.darknet_cfg import ModelSpec, parse_cfg, write_cfg
from turboyolo.model.zoo import COCO_ANCHORS, TINY_ANCHORS, with_anchors
from turboyolo.options import (
    img_size_option,
    img_size_pair,
    option,
    output_file_option,
    overwrite_option,
    require,
)
from turboyolo.rundir import check_outputs
from turboyolo.train.defaults import first_yolo

ANCHOR_IOU = 0.5  # a box is coverable when its best anchor reaches this shape IoU (`turboyolo anchors`)
MIN_BPR = 0.98  # below this best-possible recall the check warns (Ultralytics' threshold)


@dataclass
class AnchorReport:
    """Fitted anchors and, when there is a reference, the current ones on the same boxes."""

    boxes_wh: np.ndarray  # float64 [M, 2]: every box's (w, h) in letterbox pixels
    img_size: tuple[int, int]  # (width, height) of the letterbox
    fitted: AnchorFit
    current: AnchorFit | None = None
    current_name: str = ""  # the cfg's file name, or "yolov3 COCO" / "yolov3-tiny COCO"
    written: Path | None = None  # the rewritten cfg (``output``)
    fit_boxes: int | None = None  # the fit saw at most this many of the boxes, sampled (None: all)

    def summary(self) -> str:
        """The box sizes, a table (mean IoU, recall, used) and the anchors in Darknet's format."""
        w, h = self.boxes_wh[:, 0], self.boxes_wh[:, 1]
        thresh = self.fitted.thresh
        lines = [
            f"{len(self.boxes_wh)} boxes at {self.img_size[0]}x{self.img_size[1]} letterbox: width "
            f"{w.min():.0f}-{w.max():.0f} px (median {np.median(w):.0f}), "
            f"height {h.min():.0f}-{h.max():.0f} px (median {np.median(h):.0f})"
        ]
        if self.fit_boxes and len(self.boxes_wh) > self.fit_boxes:
            lines.append(f"k-means on a random {self.fit_boxes} of the {len(self.boxes_wh)} boxes "
                         "(--fit-boxes); every figure below is on all of them")
        rows = [("fitted (k-means, 1 - IoU)", self.fitted)]
        if self.current is not None:
            rows.insert(0, (f"current ({self.current_name})", self.current))
        width = max(len(name) for name, _ in rows)
        lines.append(f"{'anchors':<{width}}  mean IoU  recall@{thresh:g}  used")
        for name, fit in rows:
            used = f"{fit.used}/{len(fit.anchors)}"
            lines.append(f"{name:<{width}}  {fit.mean_iou:8.3f}  {fit.recall:10.1%}  {used}")
        lines += [f"{name.split(' ')[0]}: {fit.text()}" for name, fit in rows]
        if self.written is not None:
            lines.append(f"wrote {self.written}")
        else:
            lines.append(f'use them: turboyolo cfg ARCH --num-classes N --anchors "{self.fitted.text()}"')
        return "\n".join(lines)


@dataclass
class AnchorsArgs:
    """How many anchors, fitted at which size, and the fit's search."""

    split: str = option("train", "boxes of this split", choices=("train", "val"))
    num: int | None = option(None, "anchors to fit (default: the cfg's count, else 9; with 6 or 9 and no "
                             "cfg, the yolov3-tiny / yolov3 COCO anchors are the reference)", "-n", "--num",
                             type=int)
    img_size: tuple[int, int] | None = img_size_option("the cfg's, else 416", rectangle=True)
    thresh: float = option(0.5, "IoU a box needs with its best anchor to count as recalled", type=float)
    restarts: int = option(10, "k-means++ starts; the best one is kept", type=int)
    fit_boxes: int = option(FIT_BOXES, "fit on at most this many boxes, a seeded random sample (0: all)",
                            type=int)
    seed: int = option(0, "random seed of the k-means starts", type=int)
    output: str | None = output_file_option("none; -o writes --cfg with the fitted anchors")
    overwrite: bool = overwrite_option()

    def __post_init__(self) -> None:
        self.img_size = img_size_pair(self.img_size)
        require(self.num is None or self.num >= 1, f"--num must be >= 1, got {self.num}")
        require(0 < self.thresh <= 1, f"--thresh must lie in (0, 1], got {self.thresh}")
        require(self.fit_boxes >= 0, f"--fit-boxes must be >= 0 (0: all boxes), got {self.fit_boxes}")


GROUPS: dict[str, type] = {"anchors": AnchorsArgs}


@dataclass
class AnchorsRequest:
    """What ``turboyolo anchors`` is asked to do: fit anchors to the boxes of ``data`` (a .data, data.yaml
    or image folder); compare them with ``cfg``'s (its first [yolo] layer; it also gives the input size)."""

    data: str | Path
    cfg: str | Path | None = None
    anchors: AnchorsArgs = field(default_factory=AnchorsArgs)


def run_anchors(request: AnchorsRequest, log: Callable[[str], object] = lambda _: None) -> AnchorReport:
    """Fit anchors to the boxes of the split and score them next to the current anchors; ``log``
    receives the data set's scan summary.

    Raises:
        ConfigError: the cfg has no [yolo] layer; ``output`` without ``cfg``, or with a ``num``
            other than the cfg's count.
        DataError: the split has no boxes, or fewer distinct box sizes than ``num``.
    """
    data, cfg, args = request.data, request.cfg, request.anchors
    num, output, thresh, split = args.num, args.output, args.thresh, args.split
    spec = parse_cfg(cfg) if cfg else None
    current, current_name = None, ""
    if spec is not None:
        yolo = first_yolo(spec)
        if yolo is None:
            raise ConfigError(f"{cfg}: no [yolo] layer, so no anchors to compare with")
        current, current_name = yolo.anchors, Path(cfg).name
    num = num or (len(current) if current else 9)
    if current is None and num in (6, 9):
        current = TINY_ANCHORS if num == 6 else COCO_ANCHORS
        current_name = "yolov3-tiny COCO" if num == 6 else "yolov3 COCO"
    if output and spec is None:
        raise ConfigError("-o/--output rewrites a cfg: pass it with --cfg (or use `turboyolo cfg --anchors`)")
    if output and current is not None and len(current) != num:
        raise ConfigError(f"--num {num} but {cfg} has {len(current)} anchors; drop --num or -o")
    if output:  # the output rule (rundir.py): never an input, never an existing file unasked
        check_outputs({"-o/--output": output}, {"--cfg": cfg, "--data": data}, overwrite=args.overwrite)
    if args.img_size is None:
        size = (spec.net.width, spec.net.height) if spec is not None else (416, 416)
    else:
        size = args.img_size

    scan = scan_dataset(data, split)
    log(scan.console_text())
    samples = [s for s in scan.require_samples().samples if len(s.labels)]
    boxes = letterbox_box_sizes([s.labels for s in samples], [s.hw for s in samples], size)
    if len(boxes) == 0:
        raise DataError(f"{data}: the {split} split has no boxes to fit anchors to")
    try:
        fitted, _ = cached_kmeans_anchors(boxes, num, restarts=args.restarts, seed=args.seed, thresh=thresh,
                                          sample=args.fit_boxes or None)
    except ValueError as err:
        raise DataError(f"{data}: {err}; lower --num") from None
    report = AnchorReport(boxes, size, fitted, fit_boxes=args.fit_boxes or None)
    if current is not None:
        report.current, report.current_name = anchor_fit(boxes, current, thresh), current_name
    if output:
        report.written = write_cfg(with_anchors(spec, tuple(map(tuple, fitted.anchors))), output)
    return report


# ------------------------------------------------------------------------------ the check at a run's start
def check_anchors(spec: ModelSpec, samples: Sequence[Sample], *, autoanchor: bool, data: str, cfg: str,
                  say: Callable[..., None], fit_boxes: int = FIT_BOXES) -> ModelSpec:
    """Print how well the cfg's anchors cover the training boxes at the training size; below
    :data:`MIN_BPR` warn (or with ``autoanchor`` fit new anchors and return the cfg with them).

    The figures are those of ``turboyolo anchors`` (:func:`turboyolo.data.anchors.anchor_fit`, shape
    IoU >= :data:`ANCHOR_IOU`), on at most ``fit_boxes`` boxes (a seeded random sample of a larger
    set), and the fit is kept for the next start with the same boxes
    (:func:`~turboyolo.data.anchors.cached_kmeans_anchors`). New anchors keep the pretrained heads
    useful: box outputs are relative to the anchor.
    """
    yolo = first_yolo(spec)
    labelled = [s for s in samples if len(s.labels)]
    if yolo is None or not labelled or any(s.hw is None for s in labelled):
        return spec
    net = spec.net
    every = letterbox_box_sizes([s.labels for s in labelled], [s.hw for s in labelled],
                                (net.width, net.height))
    sizes = sample_boxes(every, fit_boxes)
    boxes = (f"{len(sizes)} training boxes" if len(sizes) == len(every) else
             f"a random {len(sizes)} of the {len(every)} training boxes")
    current = anchor_fit(sizes, yolo.anchors, ANCHOR_IOU)
    say(f"anchors: {_figures(current)} on {boxes} at {net.width}x{net.height}")
    if current.recall >= MIN_BPR:
        return spec
    if not autoanchor:
        say(f"warning: the anchors cover the training boxes poorly (best-possible recall "
            f"{current.recall:.1%} < {MIN_BPR:.0%}); fit new ones with `turboyolo anchors --data {data} "
            f"--cfg {cfg}` and give them to --anchors, or leave --autoanchor on (the default) and no "
            "--anchors")
        return spec
    try:
        fitted, kept = cached_kmeans_anchors(sizes, len(yolo.anchors), seed=0, thresh=ANCHOR_IOU,
                                             sample=fit_boxes)
    except ValueError as err:
        say(f"autoanchor: cannot fit {len(yolo.anchors)} anchors ({err}); keeping the cfg's")
        return spec
    kept = " (an earlier start's fit to the same boxes, from the cache)" if kept else ""
    if (fitted.recall, fitted.mean_iou) <= (current.recall, current.mean_iou):
        say(f"autoanchor: k-means anchors{kept} are no better ({_figures(fitted)}); keeping the cfg's")
        return spec
    say(f"autoanchor: training with anchors fitted to the boxes{kept} ({_figures(fitted)}): {fitted.text()} "
        "(written to the run's model.cfg)")
    return with_anchors(spec, tuple(map(tuple, fitted.anchors)))


def _figures(fit: AnchorFit) -> str:
    return (f"best-possible recall {fit.recall:.1%} (IoU >= {fit.thresh:g}), mean IoU {fit.mean_iou:.3f}, "
            f"{fit.used}/{len(fit.anchors)} anchors used")
