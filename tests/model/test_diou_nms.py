"""DIoU-NMS (the cfgs' nms_kind=greedynms / diounms) against a slow transcription of Darknet's
diounms_sort, and postprocess choosing it from the heads."""

from __future__ import annotations

import math

import torch

from turboyolo.model.postprocess import diou_nms, postprocess


def _darknet_diounms(boxes, scores, classes, thresh, beta):
    """box.c diounms_sort, per class: best first, drop j when IoU - (d^2 / c^2)^beta > thresh."""
    kept = []
    for cls in sorted(set(classes)):
        order = sorted((i for i in range(len(boxes)) if classes[i] == cls), key=lambda i: -scores[i])
        alive = {i: True for i in order}
        for position, i in enumerate(order):
            if not alive[i]:
                continue
            kept.append(i)
            for j in order[position + 1 :]:
                a, b = boxes[i], boxes[j]
                inter = max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))
                union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
                iou = inter / union if inter and union else 0.0
                cw = max(a[2], b[2]) - min(a[0], b[0])
                ch = max(a[3], b[3]) - min(a[1], b[1])
                c = cw * cw + ch * ch
                d = ((a[0] + a[2]) / 2 - (b[0] + b[2]) / 2) ** 2 + (
                    (a[1] + a[3]) / 2 - (b[1] + b[3]) / 2
                ) ** 2
                if (iou - math.pow(d / c, beta) if c else iou) > thresh:
                    alive[j] = False
    return sorted(kept)


def test_diou_nms_equals_darknets_diounms_sort():
    generator = torch.Generator().manual_seed(0)
    for beta in (0.6, 1.0):
        xy = torch.rand(60, 2, generator=generator) * 80
        wh = torch.rand(60, 2, generator=generator) * 40 + 5
        boxes = torch.cat([xy, xy + wh], 1)
        scores = torch.rand(60, generator=generator)
        classes = torch.randint(0, 3, (60,), generator=generator)
        ours = diou_nms(boxes, scores, classes, 0.3, beta)
        assert torch.all(scores[ours][:-1] >= scores[ours][1:])  # best score first
        reference = _darknet_diounms(boxes.tolist(), scores.tolist(), classes.tolist(), 0.3, beta)
        assert sorted(ours.tolist()) == reference


def test_postprocess_uses_the_distance_term():
    # two 12 x 12 boxes 4 px apart, IoU 0.5: plain NMS at 0.45 keeps one; DIoU-NMS keeps both, their
    # centres being apart: IoU - (d^2 / c^2)^0.6 = 0.5 - (16 / 400)^0.6 = 0.355 < 0.45
    decoded = torch.tensor([[[10.0, 10.0, 12.0, 12.0, 0.9, 0.9], [14.0, 10.0, 12.0, 12.0, 0.8, 0.9]]])
    plain = postprocess(decoded, 0.25, 0.45)[0]
    diou = postprocess(decoded, 0.25, 0.45, nms_kind="greedynms")[0]
    assert len(plain) == 1 and len(diou) == 2
