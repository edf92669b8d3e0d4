"""Target assignment: which prediction of each ``[yolo]`` head learns which ground-truth box (the loss's
matcher, as DETR's ``HungarianMatcher`` is its criterion's).

Each ground-truth box goes to the anchor (among *all* anchors of the network) whose shape fits it best
(IoU of boxes sharing a centre); every head whose ``mask`` holds that anchor predicts it, in the grid cell
containing the box centre. With ``iou_thresh`` < 1 (the head's cfg key, or the ``iou_thresh`` argument for
all heads) every other anchor of the head whose shape IoU with the box exceeds it is assigned too. With
``anchor_ratio`` > 0 the rule is YOLOv5's instead: every anchor whose width and height are both within
that factor of the box's.

Assignment depends on the boxes and the grid sizes only, never on the predictions; it is index
bookkeeping on the (small) targets, so it runs where the targets are (the loader's CPU tensor) and the
accelerator never waits on ``nonzero()``; each head's result moves to the outputs' device once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from turboyolo.boxes import wh_iou
from turboyolo.model.darknet import HeadInfo


@dataclass
class HeadAssignment:
    """The ``n`` assignments of one head, each a ground truth and the prediction that learns it.

    The prediction of assignment ``k`` is ``output[image[k], anchor[k], gj[k], gi[k]]`` of the head's raw
    output ``[B, A, H, W, 5 + C]``.
    """

    image: torch.Tensor  # [n] batch index
    anchor: torch.Tensor  # [n] the head's local anchor index
    gj: torch.Tensor  # [n] cell row
    gi: torch.Tensor  # [n] cell column
    truth: torch.Tensor  # [n, 4] cx, cy, w, h in input pixels
    cls: torch.Tensor  # [n]
    cells: torch.Tensor  # [n, 2] (gi, gj) as floats
    anchor_wh: torch.Tensor  # [n, 2] the assigned anchor's (w, h) in input pixels
    stride: torch.Tensor  # [2] input pixels per cell (x, y)

    def __len__(self) -> int:
        return len(self.image)


def targets_in_pixels(targets: torch.Tensor, input_hw: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``targets`` ``[N, 6]`` (batch index, class, cx, cy, w, h relative to the input) -> the boxes
    ``[N, 4]`` cx, cy, w, h in input pixels and their batch indices ``[N]``, on the targets' device."""
    height, width = input_hw
    targets = targets.float()
    scale_px = torch.tensor([width, height, width, height], dtype=torch.float32, device=targets.device)
    return targets[:, 2:6] * scale_px, targets[:, 0].long()


def assign(
    targets: torch.Tensor,
    heads: Sequence[HeadInfo],
    input_hw: tuple[int, int],
    grid_sizes: Sequence[tuple[int, int]],
    *,
    iou_thresh: float | None = None,
    anchor_ratio: float = 0.0,
    device: torch.device | str | None = None,
) -> list[HeadAssignment]:
    """The assignments of every head, in the heads' order.

    Args:
        targets: ``[N, 6]`` (batch index, class, cx, cy, w, h relative to the input).
        heads: ``model.heads``.
        input_hw: the network input's (height, width) in pixels.
        grid_sizes: each head's (H, W), its output's ``shape[2:4]``.
        iou_thresh: ``None``: each head's own ``iou_thresh`` (1 = best anchor only); a number: for all heads.
        anchor_ratio: > 0: YOLOv5's rule (anchors within this w/h factor of the box), not the best anchor.
        device: where the results go (default: the targets' device).
    """
    height, width = input_hw
    targets = targets.float()
    host = targets.device
    device = torch.device(device) if device is not None else host
    truth_px, image = targets_in_pixels(targets, input_hw)
    classes = targets[:, 1].long()
    all_anchors = torch.tensor(heads[0].all_anchors, dtype=torch.float32).to(host)
    shape_iou = wh_iou(truth_px[:, 2:], all_anchors)  # [N, all anchors]
    best_anchor = shape_iou.argmax(1) if len(targets) else torch.zeros(0, dtype=torch.long, device=host)
    result = []
    for head, (grid_h, grid_w) in zip(heads, grid_sizes, strict=False):
        mask_ids = torch.tensor(head.mask, device=host)
        hit = best_anchor[:, None] == mask_ids[None]  # [N, A]
        if anchor_ratio > 0:
            ratio = truth_px[:, None, 2:] / all_anchors[mask_ids][None]  # [N, A, 2]
            hit = torch.max(ratio, 1.0 / ratio).amax(-1) < anchor_ratio
        thresh = head.iou_thresh if iou_thresh is None else iou_thresh
        if thresh < 1.0:
            hit |= shape_iou[:, mask_ids] > thresh
        sel, local_anchor = hit.nonzero(as_tuple=True)
        g = truth_px[sel]
        gi = (g[:, 0] / (width / grid_w)).long().clamp(0, grid_w - 1)
        gj = (g[:, 1] / (height / grid_h)).long().clamp(0, grid_h - 1)
        b, c, g, gi, gj, local_anchor = (
            t.to(device, non_blocking=True) for t in (image[sel], classes[sel], g, gi, gj, local_anchor)
        )
        stride = torch.tensor([width / grid_w, height / grid_h], device=device)
        anchors = head.anchor_tensor(device)
        cells = torch.stack([gi, gj], 1).float()
        result.append(HeadAssignment(b, local_anchor, gj, gi, g, c, cells, anchors[local_anchor], stride))
    return result
