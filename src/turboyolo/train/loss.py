"""The YOLOv3 loss as Darknet's ``[yolo]`` layer computes it.

Target assignment: each ground-truth box goes to the anchor (among *all* anchors of the network) whose
shape fits it best (IoU of boxes sharing a centre); the head whose ``mask`` holds that anchor predicts it,
in the grid cell containing the box centre. Predictions whose box overlaps any ground truth of the same
image by more than ``ignore_thresh`` get no "no object" penalty.

Terms, each summed over the mini-batch (the caller divides by the images per iteration, so the update
does not depend on ``subdivisions``):

* ``box``: Darknet's, ``0.5 * (2 - w * h) * squared error`` on ``sigmoid(tx), sigmoid(ty), tw, th``, or
  ``(2 - w * h) * (1 - GIoU)`` with ``box_loss="giou"``;
* ``obj``: binary cross-entropy on the objectness logit (1 for assigned cells, 0 for the others that are
  not ignored);
* ``cls``: binary cross-entropy on the class logits of assigned cells (one-hot, or with
  ``label_smoothing`` eps the targets 1 - eps/2 and eps/2 as AlexeyAB's ``label_smooth_eps``), also for
  one class.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torchvision.ops import generalized_box_iou

from turboyolo.model.darknet import HeadInfo

LOSS_NAMES = ("box", "obj", "cls")


def wh_iou(wh1: torch.Tensor, wh2: torch.Tensor) -> torch.Tensor:
    """IoU of boxes sharing a centre: ``[N, 2] x [K, 2] -> [N, K]`` (widths and heights)."""
    inter = torch.min(wh1[:, None], wh2[None]).prod(-1)
    return inter / (wh1.prod(-1)[:, None] + wh2.prod(-1)[None] - inter)


def box_iou_cxcywh(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU, boxes as (cx, cy, w, h): ``[..., P, 4] x [..., M, 4] -> [..., P, M]``."""
    a1, a2 = a[..., :2] - a[..., 2:] / 2, a[..., :2] + a[..., 2:] / 2
    b1, b2 = b[..., :2] - b[..., 2:] / 2, b[..., :2] + b[..., 2:] / 2
    lt = torch.max(a1.unsqueeze(-2), b1.unsqueeze(-3))
    rb = torch.min(a2.unsqueeze(-2), b2.unsqueeze(-3))
    inter = (rb - lt).clamp(min=0).prod(-1)
    area_a = a[..., 2:].prod(-1).unsqueeze(-1)
    area_b = b[..., 2:].prod(-1).unsqueeze(-2)
    return inter / (area_a + area_b - inter).clamp(min=1e-9)


def _cxcywh_to_xyxy(b: torch.Tensor) -> torch.Tensor:
    return torch.cat([b[..., :2] - b[..., 2:] / 2, b[..., :2] + b[..., 2:] / 2], -1)


class YoloLoss:
    """Callable ``(outputs, targets, input_hw) -> (total, terms)``.

    Args:
        heads: ``model.heads`` (anchors, masks, strides, ignore_thresh from the cfg).
        box_loss: ``"darknet"`` or ``"giou"``.
        gains: multipliers of the box, obj and cls terms.
        iou_thresh: also assign a box to every other anchor whose shape IoU with it exceeds this (the
            ``iou_thresh`` of AlexeyAB's Darknet, e.g. 0.213); 1.0 = best anchor only (pjreddie).
        anchor_ratio: when > 0, assign a box to every anchor (any head) whose width and height are both
            within this factor of the box's (PyTorch-YOLOv3 / YOLOv5 use 4) instead of the best anchor.
        obj_iou: objectness target of assigned cells = IoU of the predicted box with its ground truth
            (detached) instead of 1.
        label_smoothing: eps of the class targets (``1 - eps/2`` for the box's class, ``eps/2`` else).
    """

    def __init__(
        self,
        heads: Sequence[HeadInfo],
        box_loss: str = "darknet",
        gains: tuple[float, float, float] = (1.0, 1.0, 1.0),
        iou_thresh: float = 1.0,
        anchor_ratio: float = 0.0,
        obj_iou: bool = False,
        label_smoothing: float = 0.0,
    ):
        if box_loss not in ("darknet", "giou"):
            raise ValueError(f"box_loss must be 'darknet' or 'giou', got {box_loss!r}")
        self.heads = tuple(heads)
        self.box_loss = box_loss
        self.gains = gains
        self.iou_thresh = iou_thresh
        self.anchor_ratio = anchor_ratio
        self.obj_iou = obj_iou
        self.label_smoothing = label_smoothing
        self.all_anchors = torch.tensor(self.heads[0].all_anchors, dtype=torch.float32)

    def __call__(
        self, outputs: Sequence[torch.Tensor], targets: torch.Tensor, input_hw: tuple[int, int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss of one mini-batch.

        Args:
            outputs: raw head outputs, ``[B, A, H/stride, W/stride, 5 + C]`` each.
            targets: ``[N, 6]`` (batch index, class, cx, cy, w, h relative to the input).
            input_hw: the network input's (height, width) in pixels.

        Returns:
            ``total``: scalar, the weighted sum of the terms, summed over the mini-batch's images;
            ``terms``: ``[3]`` detached (box, obj, cls), also sums.
        """
        # Assignment is index bookkeeping on the (small) targets: it runs where the targets are (the
        # loader's CPU tensor) so the accelerator never waits on nonzero()/max(); results move once.
        device = outputs[0].device
        height, width = input_hw
        batch_size = outputs[0].shape[0]
        targets = targets.float()
        host = targets.device
        scale_px = torch.tensor([width, height, width, height], dtype=torch.float32, device=host)
        gt_px = targets[:, 2:6] * scale_px  # [N, 4] cx, cy, w, h in input pixels
        gt_image = targets[:, 0].long()
        gt_class = targets[:, 1].long()
        shape_iou = wh_iou(gt_px[:, 2:], self.all_anchors.to(host))  # [N, all anchors]
        best_anchor = shape_iou.argmax(1) if len(targets) else torch.zeros(0, dtype=torch.long, device=host)
        gt_padded, gt_valid = _pad_per_image(gt_px, gt_image, batch_size)
        gt_padded = gt_padded.to(device, non_blocking=True)
        gt_valid = gt_valid.to(device, non_blocking=True)

        zero = outputs[0].new_zeros((), dtype=torch.float32)
        box, obj, cls = zero.clone(), zero.clone(), zero.clone()
        for head, raw in zip(self.heads, outputs, strict=False):
            p = raw.float()
            _, num_anchors, grid_h, grid_w, _ = p.shape
            stride_x, stride_y = width / grid_w, height / grid_h
            anchors = head.anchor_tensor(device)

            # Which anchors/cells are assigned to a ground truth.
            mask_ids = torch.tensor(head.mask, device=host)
            hit = best_anchor[:, None] == mask_ids[None]  # [N, A]
            if self.anchor_ratio > 0:
                ratio = gt_px[:, None, 2:] / self.all_anchors.to(host)[mask_ids][None]  # [N, A, 2]
                hit = torch.max(ratio, 1.0 / ratio).amax(-1) < self.anchor_ratio
            if self.iou_thresh < 1.0:
                hit |= shape_iou[:, mask_ids] > self.iou_thresh
            sel, local_anchor = hit.nonzero(as_tuple=True)
            g = gt_px[sel]
            gi = (g[:, 0] / stride_x).long().clamp(0, grid_w - 1)
            gj = (g[:, 1] / stride_y).long().clamp(0, grid_h - 1)
            b, c = gt_image[sel], gt_class[sel]
            b, c, g, gi, gj, local_anchor = (
                t.to(device, non_blocking=True) for t in (b, c, g, gi, gj, local_anchor)
            )

            # Ignore mask: predictions that already overlap some ground truth well.
            with torch.no_grad():
                pred_boxes = _decode(p[..., :4].detach(), anchors, stride_x, stride_y)
                ignore = torch.zeros(p.shape[:4], dtype=torch.bool, device=device)
                if gt_padded.shape[1]:
                    iou = box_iou_cxcywh(pred_boxes.view(batch_size, -1, 4), gt_padded)  # [B, P, M]
                    iou = iou.masked_fill(~gt_valid[:, None, :], 0.0)
                    ignore = (iou.amax(-1) > head.ignore_thresh).view(p.shape[:4])

            obj_target = torch.zeros(p.shape[:4], device=device)
            obj_weight = (~ignore).float()
            obj_weight[b, local_anchor, gj, gi] = 1.0
            if len(sel):
                ps = p[b, local_anchor, gj, gi]  # [n, 5 + C]
                weight = 2.0 - (g[:, 2] * g[:, 3]) / (width * height)
                anchor_wh = anchors[local_anchor]
                pred = _decode(
                    ps[:, :4], anchor_wh, stride_x, stride_y, grid=torch.stack([gi, gj], 1).float()
                )
                giou = torch.diagonal(generalized_box_iou(_cxcywh_to_xyxy(pred), _cxcywh_to_xyxy(g)))
                if self.box_loss == "darknet":
                    txy = g[:, :2] / torch.tensor([stride_x, stride_y], device=device) - torch.stack(
                        [gi, gj], 1
                    )
                    twh = torch.log(g[:, 2:] / anchor_wh)
                    err = (torch.sigmoid(ps[:, :2]) - txy).pow(2).sum(1) + (ps[:, 2:4] - twh).pow(2).sum(1)
                    box = box + (0.5 * weight * err).sum()
                else:
                    box = box + (weight * (1.0 - giou)).sum()
                target = giou.detach().clamp(min=0.0) if self.obj_iou else 1.0
                obj_target[b, local_anchor, gj, gi] = target
            bce = F.binary_cross_entropy_with_logits(p[..., 4], obj_target, reduction="none")
            obj = obj + (bce * obj_weight).sum()
            if not len(sel):
                continue
            cls_target = F.one_hot(c, head.num_classes).float()
            if self.label_smoothing:
                cls_target = cls_target * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
            cls = cls + F.binary_cross_entropy_with_logits(ps[:, 5:], cls_target, reduction="sum")

        terms = torch.stack([box * self.gains[0], obj * self.gains[1], cls * self.gains[2]])
        return terms.sum(), terms.detach()


def _decode(
    txywh: torch.Tensor,
    anchors: torch.Tensor,
    stride_x: float,
    stride_y: float,
    grid: torch.Tensor | None = None,
) -> torch.Tensor:
    """Raw (tx, ty, tw, th) -> (cx, cy, w, h) in input pixels.

    Without ``grid``: ``txywh`` is ``[B, A, H, W, 4]`` and ``anchors`` ``[A, 2]``; with ``grid``
    (``[n, 2]`` cell x, y): ``txywh`` is ``[n, 4]`` and ``anchors`` ``[n, 2]``.
    """
    if grid is None:
        _, _, grid_h, grid_w, _ = txywh.shape
        ys, xs = torch.meshgrid(
            torch.arange(grid_h, device=txywh.device),
            torch.arange(grid_w, device=txywh.device),
            indexing="ij",
        )
        grid = torch.stack([xs, ys], -1).float()[None, None]  # [1, 1, H, W, 2]
        anchors = anchors[None, :, None, None, :]
    stride = torch.tensor([stride_x, stride_y], device=txywh.device)
    xy = (torch.sigmoid(txywh[..., :2]) + grid) * stride
    wh = torch.exp(txywh[..., 2:4].clamp(max=10.0)) * anchors
    return torch.cat([xy, wh], -1)


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
