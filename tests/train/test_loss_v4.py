"""The loss with AlexeyAB's [yolo] keys: IoU variants (CIoU by hand), scale_x_y and new_coords decoding,
per-head iou_thresh, normalizers, max_delta, and the YOLOv3 loss left as it was."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from turboyolo.boxes import aligned_iou
from turboyolo.model.darknet import Darknet
from turboyolo.model.postprocess import decode
from turboyolo.model.zoo import make_spec
from turboyolo.train.loss import YoloLoss

PRED = torch.tensor([[2.0, 2.0, 2.0, 2.0]])  # cx, cy, w, h: the square [1, 3] x [1, 3]
TRUTH = torch.tensor([[3.0, 2.0, 2.0, 4.0]])  # [2, 4] x [0, 4]


def test_iou_variants_by_hand():
    # intersection [2, 3] x [1, 3] = 2; union 4 + 8 - 2 = 10; enclosing box [1, 4] x [0, 4]: area 12,
    # squared diagonal 3^2 + 4^2 = 25; squared centre distance 1
    iou = 0.2
    v = 4 / math.pi**2 * (math.atan(2 / 4) - math.atan(2 / 2)) ** 2  # 0.0419565
    alpha = v / (1 - iou + v)  # 0.0498321
    expected = {"iou": iou, "giou": iou - 2 / 12, "diou": iou - 1 / 25, "ciou": iou - 1 / 25 - alpha * v}
    assert expected["ciou"] == pytest.approx(0.1579092, abs=1e-7)
    for kind, value in expected.items():
        assert aligned_iou(PRED, TRUTH, kind).item() == pytest.approx(value, abs=1e-6), kind


def test_ciou_gradient_holds_alpha_constant():
    pred = PRED.double().requires_grad_()
    aligned_iou(pred, TRUTH.double(), "ciou").sum().backward()
    with torch.no_grad():
        iou = aligned_iou(PRED.double(), TRUTH.double(), "iou")
        v = 4 / math.pi**2 * (math.atan(0.5) - math.atan(1.0)) ** 2
        alpha = v / (1 - iou + v)

    def ciou_fixed_alpha(box: torch.Tensor) -> torch.Tensor:
        v_box = 4 / math.pi**2 * (torch.atan(TRUTH[0, 2] / TRUTH[0, 3]) - torch.atan(box[2] / box[3])) ** 2
        return aligned_iou(box[None], TRUTH.double(), "diou")[0] - alpha[0] * v_box

    numeric = torch.autograd.functional.jacobian(ciou_fixed_alpha, PRED[0].double())
    torch.testing.assert_close(pred.grad[0], numeric)


def _heads(arch: str, num_classes: int = 2, size: int = 64):
    return Darknet(make_spec(arch, num_classes, size, size)).heads


def _raw_for_truth(head, truth_px: torch.Tensor, anchor: int, size: int, num_classes: int) -> torch.Tensor:
    """A raw head output ``[1, A, H, W, 5 + C]`` whose cell at the truth's centre decodes to it exactly."""
    grid = size // head.stride
    raw = torch.zeros(1, len(head.mask), grid, grid, 5 + num_classes)
    cx, cy, w, h = truth_px.tolist()
    i, j = int(cx // head.stride), int(cy // head.stride)
    s = head.scale_x_y
    offset = torch.tensor([cx / head.stride - i, cy / head.stride - j])
    activated = (offset + 0.5 * (s - 1)) / s  # sigmoid output (plain) or raw value (new_coords)
    anchor_wh = torch.tensor(head.anchors[anchor])
    if head.new_coords:
        raw[0, anchor, j, i, :2] = activated
        raw[0, anchor, j, i, 2:4] = torch.sqrt(torch.tensor([w, h]) / anchor_wh) / 2
    else:
        raw[0, anchor, j, i, :2] = torch.logit(activated)
        raw[0, anchor, j, i, 2:4] = torch.log(torch.tensor([w, h]) / anchor_wh)
    return raw


@pytest.mark.parametrize("arch", ["yolov4-tiny", "yolov7-tiny"])
def test_decode_and_loss_agree_on_scale_x_y_and_new_coords(arch):
    size, classes = 416, 2
    head = _heads(arch, classes, size)[0]
    assert head.scale_x_y in (1.05, 2.0) and head.new_coords == (arch == "yolov7-tiny")
    # a box 1.1 x 0.95 the size of the head's second anchor, which fits it best of all anchors
    truth = torch.tensor([200.0, 150.0, *head.anchors[1]]) * torch.tensor([1, 1, 1.1, 0.95])
    raw = _raw_for_truth(head, truth, 1, size, classes)
    decoded = decode([raw], [head]).view(raw.shape)
    cell = decoded[0, 1, int(truth[1]) // head.stride, int(truth[0]) // head.stride]
    torch.testing.assert_close(cell[:4], truth, atol=1e-3, rtol=1e-5)
    # a perfect box costs nothing, whichever box loss, with the cfg's normalizers
    targets = torch.tensor([[0, 1, *(truth / size).tolist()]])
    for box_loss in ("mse", "ciou", "giou"):
        _, terms = YoloLoss([head], box_loss=box_loss, iou_thresh=1.0)([raw], targets, (size, size))
        assert terms[0].item() == pytest.approx(0.0, abs=1e-5), box_loss
    # and a shifted one does cost
    raw[..., 0] += 0.05
    _, terms = YoloLoss([head], iou_thresh=1.0)([raw], targets, (size, size))
    assert terms[0] > 1e-4


def test_normalizers_scale_their_terms_and_cls_normalizer_is_darknets_no_op():
    heads = _heads("yolov3-tiny")
    torch.manual_seed(0)
    outputs = [torch.randn(1, 3, 64 // h.stride, 64 // h.stride, 7) for h in heads]
    targets = torch.tensor([[0, 1, 0.5, 0.5, 0.3, 0.4]])
    _, base = YoloLoss(heads)(outputs, targets, (64, 64))
    scaled = [replace(h, obj_normalizer=4.0, iou_normalizer=0.5, cls_normalizer=0.5) for h in heads]
    _, terms = YoloLoss(scaled)(outputs, targets, (64, 64))
    torch.testing.assert_close(terms, base * torch.tensor([0.5, 4.0, 1.0]))


def test_iou_thresh_comes_from_each_head():
    heads = _heads("yolov3-tiny")
    outputs = [torch.zeros(1, 3, 64 // h.stride, 64 // h.stride, 7, requires_grad=True) for h in heads]
    targets = torch.tensor([[0, 1, 0.5, 0.5, 30 / 64, 30 / 64]])

    def assigned(loss_heads, **kw) -> int:
        grads = torch.autograd.grad(YoloLoss(loss_heads, **kw)(outputs, targets, (64, 64))[0], outputs)
        return sum(int(g[..., 5:].abs().sum(-1).count_nonzero()) for g in grads)

    assert assigned(heads) == 1  # no iou_thresh in the cfg: the best anchor only
    assert assigned([replace(h, iou_thresh=0.213) for h in heads]) > 1
    assert assigned([replace(h, iou_thresh=0.213) for h in heads], iou_thresh=1.0) == 1  # the flag wins


def test_max_delta_clips_box_gradients():
    heads = [replace(h, iou_loss="ciou", iou_normalizer=1.0) for h in _heads("yolov3-tiny")]
    outputs = [torch.randn(1, 3, 64 // h.stride, 64 // h.stride, 7) * 3 for h in heads]
    targets = torch.tensor([[0, 1, 0.5, 0.5, 0.3, 0.4], [0, 0, 0.2, 0.7, 0.1, 0.1]])

    def box_grads(loss_heads):
        leaves = [o.clone().requires_grad_() for o in outputs]
        loss = YoloLoss(loss_heads, gains=(1.0, 0.0, 0.0))
        total, terms = loss(leaves, targets, (64, 64))
        total.backward()
        return terms[0], torch.cat([leaf.grad[..., :4].flatten() for leaf in leaves])

    value, free = box_grads(heads)
    clipped_value, clipped = box_grads([replace(h, max_delta=1e-3) for h in heads])
    assert clipped_value == pytest.approx(value.item())  # the value is untouched
    assert free.abs().max() > 1e-3 and clipped.abs().max() <= 1e-3 + 1e-9
    assert torch.equal(clipped.sign()[free.abs() > 1e-3], free.sign()[free.abs() > 1e-3])


def test_new_coords_objectness_is_darknets_squared_error():
    head = _heads("yolov7-tiny", 1)[0]
    raw = torch.full((1, 3, 8, 8, 6), 0.3, requires_grad=True)  # probabilities (logistic convolution)
    loss = YoloLoss([head])
    _, terms = loss([raw], torch.zeros(0, 6), (64, 64))
    assert terms[1].item() == pytest.approx(head.obj_normalizer * 0.5 * 0.3**2 * 3 * 8 * 8, rel=1e-6)


@pytest.mark.parametrize("arch", ["yolov4-tiny", "yolov4-csp", "yolov7-tiny"])
def test_family_trains_a_step_with_finite_gradients(arch):
    torch.manual_seed(0)
    model = Darknet(make_spec(arch, 1, 64, 64)).train()
    targets = torch.tensor([[0, 0, 0.5, 0.5, 0.3, 0.4], [1, 0, 0.3, 0.6, 0.1, 0.2]])
    total, terms = YoloLoss(model.heads)(model(torch.rand(2, 3, 64, 64)), targets, (64, 64))
    total.backward()
    assert torch.isfinite(terms).all() and (terms > 0).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
