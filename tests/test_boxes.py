"""boxes.py, the one home of box math: torch and numpy agree, and both agree with torchvision's ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.ops import box_convert
from torchvision.ops import box_iou as tv_box_iou

from turboyolo.boxes import box_iou, box_iou_pairs, cxcywh_to_xyxy, wh_iou, xyxy_to_cxcywh, xyxy_to_xywh


def _random_xyxy(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * 100
    wh = torch.rand(n, 2, generator=g, dtype=torch.float64) * 50
    wh[0] = 0  # an empty box
    return torch.cat([xy, xy + wh], 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_conversions_match_torchvision_for_tensors_and_arrays(seed):
    boxes = _random_xyxy(20, seed)
    assert torch.allclose(xyxy_to_cxcywh(boxes), box_convert(boxes, "xyxy", "cxcywh"))
    assert torch.allclose(xyxy_to_xywh(boxes), box_convert(boxes, "xyxy", "xywh"))
    assert torch.allclose(cxcywh_to_xyxy(xyxy_to_cxcywh(boxes)), boxes)
    array = boxes.numpy()
    assert isinstance(xyxy_to_cxcywh(array), np.ndarray)
    np.testing.assert_allclose(xyxy_to_cxcywh(array), box_convert(boxes, "xyxy", "cxcywh").numpy())
    np.testing.assert_allclose(cxcywh_to_xyxy(xyxy_to_cxcywh(array)), array)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_iou_matches_torchvision(seed):
    a, b = _random_xyxy(15, seed), _random_xyxy(9, seed + 10)
    reference = tv_box_iou(a, b).nan_to_num(0.0)  # torchvision: 0/0 for two empty boxes
    assert torch.allclose(box_iou(a, b), reference)
    np.testing.assert_allclose(box_iou(a.numpy(), b.numpy()), reference.numpy())
    # batched (leading dims broadcast) and element-wise forms agree with the plain one
    batched = box_iou(torch.stack([a, a]), torch.stack([b, b]))
    assert batched.shape == (2, 15, 9) and torch.allclose(batched[1], reference)
    pairs = box_iou_pairs(a[:9], b)
    assert torch.allclose(pairs, torch.diagonal(reference[:9]))
    np.testing.assert_allclose(box_iou_pairs(a[:9].numpy(), b.numpy()), pairs.numpy())


def test_wh_iou_is_iou_of_centred_boxes():
    wh1 = torch.tensor([[10.0, 20.0], [30.0, 30.0]], dtype=torch.float64)
    wh2 = torch.tensor([[10.0, 10.0], [40.0, 20.0], [30.0, 30.0]], dtype=torch.float64)
    centred = lambda wh: torch.cat([-wh / 2, wh / 2], 1)  # noqa: E731
    expected = tv_box_iou(centred(wh1), centred(wh2))
    assert torch.allclose(wh_iou(wh1, wh2), expected)
    np.testing.assert_allclose(wh_iou(wh1.numpy(), wh2.numpy()), expected.numpy())
    assert wh_iou(wh1, wh2)[1, 2] == 1.0  # same shape
