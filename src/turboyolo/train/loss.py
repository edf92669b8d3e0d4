"""The YOLO loss as Darknet's ``[yolo]`` layer defines it (pjreddie's YOLOv3 and AlexeyAB's v4/v7 keys).

Target assignment (which prediction learns which box) is :func:`turboyolo.train.assign.assign`. Predictions
whose box overlaps any ground truth of the same image by more than ``ignore_thresh`` get no "no object"
penalty (:func:`ignore_mask`).

Terms, each summed over the mini-batch (the caller divides by the images per iteration, so the update
does not depend on ``subdivisions``), per head and with the head's normalizers:

* ``box``, by the head's ``iou_loss`` (or ``box_loss`` for all heads), ``w * h`` the box's share of the
  input:

  - ``mse``: ``n * 0.5 * (2 - w * h) * squared error`` of (x, y) in cell units after sigmoid and
    ``scale_x_y``, and of (tw, th) against log(w / anchor) (with ``new_coords``: sqrt(w / (4 anchor)),
    Darknet's target); ``n`` = ``iou_normalizer``, 1 when the cfg has none (pjreddie's Darknet, turboyolo
    0.1), with autograd's exact gradient;
  - ``darknet``: the same value, but the gradient of each raw output is Darknet's delta negated,
    ``n * (2 - w * h) * (output - target)``: for x, y *without* the logistic's derivative, as
    ``delta_yolo_box`` computes it and ``backward_yolo_layer`` passes it on (``max_delta`` clips it).
    On ``new_coords`` heads, whose x, y have passed the logistic already, it is ``mse``;
  - ``iou``, ``giou``, ``diou``, ``ciou``: ``n * (1 - IoU variant)`` of the decoded box
    (:func:`turboyolo.boxes.aligned_iou`), ``n`` = ``iou_normalizer``; when the cfg has none, the
    small-box weight ``2 - w * h`` of turboyolo 0.1's ``--box-loss giou`` (AlexeyAB's default would be
    0.75). ``max_delta`` clips each coordinate's gradient of this term, per assignment, as Darknet
    clips its deltas.

* ``obj``: ``obj_normalizer`` x binary cross-entropy on the objectness logit (1 for assigned cells, 0 for
  the others that are not ignored; with ``obj_iou``, which ``turboyolo train`` turns on by default, an
  assigned cell's target is the GIoU, clipped at 0, of the box it predicts with its ground truth);
* ``cls``: binary cross-entropy on the class logits of assigned cells (one-hot, or with
  ``label_smoothing`` eps the targets 1 - eps/2 and eps/2 as AlexeyAB's ``label_smooth_eps``), also for
  one class.

``new_coords`` heads (YOLOv7) get probabilities, not logits (their convolution applies the logistic):
Darknet's deltas ``target - p`` then pass back through that logistic, i.e. its objectness and class
terms are ``0.5 * (p - target)^2``; so are turboyolo's. ``cls_normalizer`` has no effect: Darknet's yolo
layer applies it only together with ``counters_per_class`` (yolo_layer.c, ``delta_yolo_class``), which
turboyolo does not implement. Objectness and class gradients of logistic heads equal Darknet's deltas
(binary cross-entropy on the logit: ``p - target``). Box gradients other than ``darknet``'s are autograd's
exact ones: where Darknet's hand-written deltas skip the sigmoid's derivative on x, y (and scale IoU
gradients by exp(tw) without the anchor), the direction is the same but the magnitudes differ.
:meth:`YoloLoss.darknet_statistics` gives the figures Darknet prints per ``[yolo]`` layer.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from turboyolo.boxes import aligned_iou, box_iou, cxcywh_to_xyxy
from turboyolo.model.darknet import HeadInfo
from turboyolo.model.postprocess import cell_grid, decode_boxes
from turboyolo.train.assign import HeadAssignment, assign, targets_in_pixels

LOSS_NAMES = ("box", "obj", "cls")
BOX_LOSSES = ("cfg", "darknet", "mse", "iou", "giou", "diou", "ciou")
MAX_LOG_WH = 10.0  # tw, th above this would overflow exp() in the loss's decode


class YoloLoss:
    """Callable ``(outputs, targets, input_hw) -> (total, terms)``.

    Args:
        heads: ``model.heads`` (anchors, masks, strides, thresholds and normalizers from the cfg).
        box_loss: ``"cfg"`` (each head's ``iou_loss``), or one of ``darknet`` (= ``mse``), ``mse``,
            ``iou``, ``giou``, ``diou``, ``ciou`` for every head.
        gains: multipliers of the box, obj and cls terms.
        iou_thresh: ``None``: each head's ``iou_thresh`` (AlexeyAB's key; 1 when absent = best anchor
            only, pjreddie); a number overrides it for all heads (e.g. 0.213).
        anchor_ratio: when > 0, assign a box to every anchor (any head) whose width and height are both
            within this factor of the box's (PyTorch-YOLOv3 / YOLOv5 use 4) instead of the best anchor.
        obj_iou: objectness target of assigned cells = GIoU (clipped at 0) of the predicted box with its
            ground truth (detached) instead of 1.
        label_smoothing: eps of the class targets (``1 - eps/2`` for the box's class, ``eps/2`` else).
    """

    def __init__(
        self,
        heads: Sequence[HeadInfo],
        box_loss: str = "cfg",
        gains: tuple[float, float, float] = (1.0, 1.0, 1.0),
        iou_thresh: float | None = None,
        anchor_ratio: float = 0.0,
        obj_iou: bool = False,
        label_smoothing: float = 0.0,
    ):
        if box_loss not in BOX_LOSSES:
            raise ValueError(f"box_loss must be one of {', '.join(BOX_LOSSES)}, got {box_loss!r}")
        self.heads = tuple(heads)
        self.box_loss = box_loss
        self.gains = gains
        self.iou_thresh = iou_thresh
        self.anchor_ratio = anchor_ratio
        self.obj_iou = obj_iou
        self.label_smoothing = label_smoothing

    def box_kind(self, head: HeadInfo) -> str:
        """The box term of ``head``: darknet, mse, iou, giou, diou or ciou (``darknet`` is ``mse`` on a
        ``new_coords`` head, whose x, y outputs have already passed the logistic)."""
        kind = head.iou_loss if self.box_loss == "cfg" else self.box_loss
        return "mse" if kind == "darknet" and head.new_coords else kind

    def __call__(
        self, outputs: Sequence[torch.Tensor], targets: torch.Tensor, input_hw: tuple[int, int],
        no_background: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss of one mini-batch.

        Args:
            outputs: raw head outputs, ``[B, A, H/stride, W/stride, 5 + C]`` each.
            targets: ``[N, 6]`` (batch index, class, cx, cy, w, h relative to the input).
            input_hw: the network input's (height, width) in pixels.
            no_background: ``[B]`` bool, images whose unassigned predictions get no "no object" loss
                (labels a model made and nobody reviewed: ``turboyolo train --unreviewed ignore``).

        Returns:
            ``total``: scalar, the weighted sum of the terms, summed over the mini-batch's images;
            ``terms``: ``[3]`` detached (box, obj, cls), also sums.
        """
        device, batch_size = outputs[0].device, outputs[0].shape[0]
        assignments = self.assign(targets, input_hw, [o.shape[2:4] for o in outputs], device)
        truth, valid = _truth_per_image(targets, input_hw, batch_size, device)
        zero = outputs[0].new_zeros((), dtype=torch.float32)
        box, obj, cls = zero.clone(), zero.clone(), zero.clone()
        for head, raw, a in zip(self.heads, outputs, assignments, strict=False):
            p = raw.float()
            ignore = ignore_mask(head, p, truth, valid, a.stride)
            obj_target = torch.zeros(p.shape[:4], device=p.device)
            obj_weight = (~ignore).float()
            if no_background is not None:
                obj_weight[no_background] = 0.0
            obj_weight[a.image, a.anchor, a.gj, a.gi] = 1.0
            if len(a):
                ps = p[a.image, a.anchor, a.gj, a.gi]  # [n, 5 + C]
                box = box + self._box_term(head, ps[:, :4], a, input_hw)
                obj_target[a.image, a.anchor, a.gj, a.gi] = self._obj_target(head, ps, a)
            obj = (
                obj
                + head.obj_normalizer * (_probability_loss(head, p[..., 4], obj_target) * obj_weight).sum()
            )
            if len(a):
                cls = cls + _probability_loss(head, ps[:, 5:], self._cls_target(head, a)).sum()

        terms = torch.stack([box * self.gains[0], obj * self.gains[1], cls * self.gains[2]])
        return terms.sum(), terms.detach()

    def assign(self, targets: torch.Tensor, input_hw: tuple[int, int], grid_sizes: Sequence[tuple[int, int]],
               device: torch.device | str | None = None) -> list[HeadAssignment]:
        """:func:`turboyolo.train.assign.assign` with this loss's ``iou_thresh`` and ``anchor_ratio``."""
        return assign(targets, self.heads, input_hw, grid_sizes, iou_thresh=self.iou_thresh,
                      anchor_ratio=self.anchor_ratio, device=device)

    def _obj_target(self, head: HeadInfo, ps: torch.Tensor, a: HeadAssignment) -> torch.Tensor | float:
        """Objectness target of the assigned predictions ``ps`` ``[n, 5 + C]``: 1, or with ``obj_iou`` the
        GIoU (clipped at 0) of each one's box with its ground truth."""
        if not self.obj_iou:
            return 1.0
        with torch.no_grad():
            pred = decode_boxes(ps[:, :4], head, a.cells, a.anchor_wh, a.stride, MAX_LOG_WH)
            return aligned_iou(pred, a.truth, "giou").clamp(min=0.0)

    def _cls_target(self, head: HeadInfo, a: HeadAssignment) -> torch.Tensor:
        """``[n, C]`` one-hot class targets, smoothed with ``label_smoothing``."""
        cls_target = F.one_hot(a.cls, head.num_classes).float()
        if self.label_smoothing:
            cls_target = cls_target * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        return cls_target

    @torch.no_grad()
    def darknet_statistics(
        self, outputs: Sequence[torch.Tensor], targets: torch.Tensor, input_hw: tuple[int, int]
    ) -> list[dict[str, float]]:
        """What Darknet's ``[yolo]`` layer prints for a mini-batch, per head (``Region N Avg IOU: ...``).

        Keys: ``avg_iou`` (IoU of each assigned prediction's box with its ground truth, averaged),
        ``class`` (probability of the true class there), ``obj`` (objectness there), ``no_obj``
        (objectness averaged over every prediction of the head), ``recall50`` / ``recall75`` (share of
        assignments with IoU > .5 / > .75), ``count`` (assignments: with pjreddie's best-anchor rule,
        the ground truths this head predicts) and ``cost``: Darknet's ``l.cost``, the sum of the squared
        deltas, which are the negative gradient of this loss (gains 1) with respect to the raw outputs.
        Darknet prints as the iteration's loss the mean over heads of ``cost``, divided by the images of
        the mini-batch and averaged over the mini-batches of the iteration. ``nan`` where Darknet prints
        ``-nan`` (a head without assignments).
        """
        raw = [o.detach().float().requires_grad_(True) for o in outputs]
        unweighted = copy.copy(self)
        unweighted.gains = (1.0, 1.0, 1.0)
        with torch.enable_grad():
            total, _ = unweighted(raw, targets, input_hw)
            grads = torch.autograd.grad(total, raw, allow_unused=True)
        assignments = self.assign(targets, input_hw, [o.shape[2:4] for o in raw], raw[0].device)
        result = []
        for head, p, grad, a in zip(self.heads, raw, grads, assignments, strict=False):
            values = torch.sigmoid(p.detach()) if not head.new_coords else p.detach()
            ps = p.detach()[a.image, a.anchor, a.gj, a.gi]
            pred = decode_boxes(ps[:, :4], head, a.cells, a.anchor_wh, a.stride, MAX_LOG_WH)
            iou = aligned_iou(pred, a.truth, "iou")
            probs = values[a.image, a.anchor, a.gj, a.gi]
            count = len(a.image)
            result.append({
                "avg_iou": _mean(iou),
                "class": _mean(probs[torch.arange(count, device=p.device), 5 + a.cls]),
                "obj": _mean(probs[:, 4]),
                "no_obj": float(values[..., 4].mean()),
                "recall50": _mean((iou > 0.5).float()),
                "recall75": _mean((iou > 0.75).float()),
                "count": count,
                "cost": float(grad.square().sum()) if grad is not None else 0.0,
            })
        return result

    def _box_term(self, head: HeadInfo, raw: torch.Tensor, a: HeadAssignment,
                  input_hw: tuple[int, int]) -> torch.Tensor:
        """The box loss of the assigned predictions ``raw`` ``[n, 4]`` (tx, ty, tw, th); a scalar."""
        truth, cells, anchor_wh, stride = a.truth, a.cells, a.anchor_wh, a.stride
        box_weight = 2.0 - (truth[:, 2] * truth[:, 3]) / (input_hw[0] * input_hw[1])
        kind = self.box_kind(head)
        if kind in ("mse", "darknet"):
            normalizer = head.iou_normalizer if head.iou_normalizer is not None else 1.0
            scale = head.scale_x_y
            if head.new_coords:
                xy, target_wh = raw[:, :2], torch.sqrt(truth[:, 2:] / (4 * anchor_wh))
            else:
                xy, target_wh = torch.sigmoid(raw[:, :2]), torch.log(truth[:, 2:] / anchor_wh)
            if scale != 1.0:
                xy = xy * scale - 0.5 * (scale - 1.0)
            target_xy = truth[:, :2] / stride - cells
            weight = (normalizer * box_weight)[:, None]
            err = torch.cat([xy - target_xy, raw[:, 2:4] - target_wh], 1)  # [n, 4]
            value = (0.5 * weight * err.pow(2)).sum()
            if kind == "mse":
                return value
            # Darknet's deltas: weight * (target - output) per coordinate, passed back as the gradient of
            # the raw outputs: for x, y without the logistic's derivative (delta_yolo_box, then
            # backward_yolo_layer adds l.delta as it is). The value stays the squared error.
            grad = (weight * err).detach()
            if not math.isinf(head.max_delta):
                grad = grad.clamp(-head.max_delta, head.max_delta)
            return value.detach() + (raw * grad).sum() - (raw.detach() * grad).sum()
        weight = head.iou_normalizer if head.iou_normalizer is not None else box_weight

        def term(r: torch.Tensor) -> torch.Tensor:
            pred = decode_boxes(r, head, cells, anchor_wh, stride, MAX_LOG_WH)
            return (weight * (1.0 - aligned_iou(pred, truth, kind))).sum()

        if math.isinf(head.max_delta):
            return term(raw)
        return _with_clipped_gradient(raw, term, head.max_delta)


def _truth_per_image(targets: torch.Tensor, input_hw: tuple[int, int], batch_size: int,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The ground truth per image for :func:`ignore_mask`: ``[B, M, 4]`` cx, cy, w, h in input pixels
    (padded) and the ``[B, M]`` validity mask, on ``device``."""
    truth_px, image = targets_in_pixels(targets, input_hw)
    padded, valid = _pad_per_image(truth_px, image, batch_size)
    return padded.to(device, non_blocking=True), valid.to(device, non_blocking=True)


@torch.no_grad()
def ignore_mask(head: HeadInfo, p: torch.Tensor, truth: torch.Tensor, valid: torch.Tensor,
                stride: torch.Tensor) -> torch.Tensor:
    """``[B, A, H, W]`` bool: the predictions of ``head`` (raw ``p`` ``[B, A, H, W, 5 + C]``) whose box
    already overlaps some ground truth of its image (``truth`` ``[B, M, 4]`` cx, cy, w, h in pixels,
    ``valid`` ``[B, M]``) by more than ``ignore_thresh``: they get no "no object" penalty."""
    batch_size, _, grid_h, grid_w, _ = p.shape
    ignore = torch.zeros(p.shape[:4], dtype=torch.bool, device=p.device)
    if not truth.shape[1]:
        return ignore
    anchors = head.anchor_tensor(p.device)
    grid = cell_grid(grid_h, grid_w, p.device)
    pred_boxes = decode_boxes(p[..., :4], head, grid, anchors.view(1, -1, 1, 1, 2), stride, MAX_LOG_WH)
    predicted = cxcywh_to_xyxy(pred_boxes.view(batch_size, -1, 4))
    iou = box_iou(predicted, cxcywh_to_xyxy(truth))  # [B, P, M]
    iou = iou.masked_fill(~valid[:, None, :], 0.0)
    return (iou.amax(-1) > head.ignore_thresh).view(p.shape[:4])


def _mean(values: torch.Tensor) -> float:
    """Mean as a float; ``nan`` for no values (Darknet divides by a count of 0 and prints ``-nan``)."""
    return float(values.sum()) / len(values) if len(values) else float("nan")


def _probability_loss(head: HeadInfo, values: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Elementwise objectness / class loss: BCE on logits, or Darknet's 0.5 (p - t)^2 for
    ``new_coords`` heads, whose outputs are already probabilities."""
    if head.new_coords:
        return 0.5 * (values - target).pow(2)
    return F.binary_cross_entropy_with_logits(values, target, reduction="none")


def _with_clipped_gradient(
    raw: torch.Tensor, term: Callable[[torch.Tensor], torch.Tensor], max_delta: float
) -> torch.Tensor:
    """``term(raw)`` (a scalar) whose gradient w.r.t. each element of ``raw`` is clipped to
    ``[-max_delta, max_delta]`` (Darknet's ``max_delta``; each row of ``raw`` is one assignment)."""
    leaf = raw.detach().requires_grad_(True)
    with torch.enable_grad():
        value = term(leaf)
        (grad,) = torch.autograd.grad(value, leaf)
    grad = grad.clamp(-max_delta, max_delta)
    return value.detach() + (raw * grad).sum() - (raw.detach() * grad).sum()


def _pad_per_image(
    boxes: torch.Tensor, image: torch.Tensor, batch_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[N, 4]`` boxes with image indices -> ``[B, M, 4]`` padded and a ``[B, M]`` validity mask."""
    counts = (
        torch.bincount(image, minlength=batch_size)
        if len(image)
        else torch.zeros(batch_size, dtype=torch.long, device=boxes.device)
    )
    most = int(counts.max()) if batch_size else 0
    padded = boxes.new_zeros((batch_size, most, 4))
    valid = torch.zeros((batch_size, most), dtype=torch.bool, device=boxes.device)
    if most:
        order = torch.argsort(image, stable=True)
        sorted_image = image[order]
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.arange(len(image), device=boxes.device) - starts[sorted_image]
        padded[sorted_image, slot] = boxes[order]
        valid[sorted_image, slot] = True
    return padded, valid
