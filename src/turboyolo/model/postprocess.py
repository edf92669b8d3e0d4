"""Raw head outputs -> detections: decode, confidence filter, per-class NMS, rescale, clip.

Darknet semantics by default: a (box, class) pair is a detection when the objectness and
objectness x class probability both exceed ``conf_thres`` (multi-label); NMS runs per class on the
unclipped boxes in original-image pixels; boxes are clipped to the image last.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torchvision.ops import batched_nms

from turboyolo.boxes import Letterbox, clip_xyxy, cxcywh_to_xyxy


def decode(raw_outputs: Sequence[torch.Tensor], heads) -> torch.Tensor:
    """Decode raw heads to ``[B, N, 5 + C]``: (cx, cy, w, h) in input pixels, objectness, class probs.

    Args:
        raw_outputs: per head ``[B, A, H, W, 5 + C]`` as returned by ``Darknet.forward``.
        heads: the model's ``HeadInfo``s (stride and anchors).
    """
    decoded = []
    for raw, head in zip(raw_outputs, heads):
        batch, num_anchors, height, width, _ = raw.shape
        raw = raw.float()
        ys, xs = torch.meshgrid(
            torch.arange(height, device=raw.device), torch.arange(width, device=raw.device), indexing="ij"
        )
        grid = torch.stack((xs, ys), -1).view(1, 1, height, width, 2).float()
        anchors = head.anchor_tensor(raw.device).view(1, num_anchors, 1, 1, 2)
        xy = (raw[..., :2].sigmoid() + grid) * head.stride
        wh = raw[..., 2:4].exp() * anchors
        probs = raw[..., 4:].sigmoid()
        decoded.append(torch.cat((xy, wh, probs), -1).view(batch, -1, raw.shape[-1]))
    return torch.cat(decoded, 1)


def postprocess(
    decoded: torch.Tensor,
    conf_thres: float = 0.25,
    nms_thres: float = 0.45,
    *,
    multi_label: bool = True,
    max_det: int | None = None,
    classes: Sequence[int] | None = None,
    letterboxes: Sequence[Letterbox] | None = None,
) -> list[torch.Tensor]:
    """Per image ``[n, 6]`` = (x1, y1, x2, y2, score, class), sorted by score.

    Boxes are in input pixels, or in original pixels (clipped) when ``letterboxes`` are given.
    ``multi_label=False`` keeps only the best class of each box (what auto-labelling wants).
    """
    results = []
    for index, image in enumerate(decoded):
        objectness = image[:, 4]
        image = image[objectness > conf_thres]
        boxes = cxcywh_to_xyxy(image[:, :4])
        if multi_label:
            scores = image[:, 4:5] * image[:, 5:]
            box_index, class_index = (scores > conf_thres).nonzero(as_tuple=True)
            score = scores[box_index, class_index]
        else:
            score, class_index = (image[:, 4:5] * image[:, 5:]).max(1)
            box_index = (score > conf_thres).nonzero(as_tuple=True)[0]
            score, class_index = score[box_index], class_index[box_index]
        boxes = boxes[box_index]
        if classes is not None:
            wanted = torch.isin(class_index, torch.as_tensor(list(classes), device=class_index.device))
            boxes, score, class_index = boxes[wanted], score[wanted], class_index[wanted]
        letterbox = letterboxes[index] if letterboxes is not None else None
        if letterbox is not None:
            boxes = letterbox.to_original(boxes)
        keep = batched_nms(boxes, score, class_index, nms_thres)
        if max_det is not None:
            keep = keep[:max_det]
        boxes, score, class_index = boxes[keep], score[keep], class_index[keep]
        if letterbox is not None:
            boxes = clip_xyxy(boxes, letterbox.orig_w, letterbox.orig_h)
        results.append(torch.cat((boxes, score[:, None], class_index[:, None].float()), 1))
    return results
