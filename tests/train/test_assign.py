"""Target assignment on its own (turboyolo.train.assign): best anchor, AlexeyAB's iou_thresh, YOLOv5's
anchor ratio, cells, empty targets, batch indices, and the loss training exactly what it assigns."""

from __future__ import annotations

import pytest
import torch

from synth import micro_cfg
from turboyolo.formats.darknet_cfg import parse_cfg
from turboyolo.model.darknet import Darknet
from turboyolo.train.assign import assign
from turboyolo.train.loss import YoloLoss

INPUT = (64, 64)
GRIDS = [(2, 2), (4, 4)]  # the micro network's heads: stride 32 (mask 3,4,5), stride 16 (mask 0,1,2)


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    return Darknet(parse_cfg(micro_cfg(tmp_path_factory.mktemp("m") / "m.cfg", num_classes=2))).heads


def _box(image, cls, cx, cy, w, h):
    return [image, cls, cx / INPUT[1], cy / INPUT[0], w / INPUT[1], h / INPUT[0]]


def test_each_box_goes_to_its_best_anchor_in_the_cell_of_its_centre(heads):
    anchors = heads[0].all_anchors
    best = max(range(len(anchors)), key=lambda k: min(anchors[k][0], 30) * min(anchors[k][1], 30))
    targets = torch.tensor([_box(0, 1, 40, 20, 30, 30)])
    coarse, fine = assign(targets, heads, INPUT, GRIDS)
    owner, other = (coarse, fine) if best in heads[0].mask else (fine, coarse)
    head = heads[0] if owner is coarse else heads[1]
    stride = INPUT[1] // (2 if owner is coarse else 4)
    assert len(owner) == 1 and len(other) == 0
    assert owner.anchor.tolist() == [head.mask.index(best)]
    assert (owner.gi.item(), owner.gj.item()) == (40 // stride, 20 // stride)
    assert owner.image.tolist() == [0] and owner.cls.tolist() == [1]
    assert torch.allclose(owner.truth, torch.tensor([[40.0, 20.0, 30.0, 30.0]]))
    assert owner.anchor_wh.tolist() == [list(anchors[best])]
    assert owner.stride.tolist() == [stride, stride]


def test_iou_thresh_adds_the_anchors_of_similar_shape_and_ratio_replaces_the_rule(heads):
    targets = torch.tensor([_box(0, 0, 32, 32, 30, 30)])
    best_only = sum(len(a) for a in assign(targets, heads, INPUT, GRIDS, iou_thresh=1.0))
    loose = sum(len(a) for a in assign(targets, heads, INPUT, GRIDS, iou_thresh=0.213))
    everything = sum(len(a) for a in assign(targets, heads, INPUT, GRIDS, anchor_ratio=1e6))
    assert best_only == 1 < loose <= everything == len(heads[0].all_anchors)


def test_no_targets_and_batch_indices(heads):
    empty = assign(torch.zeros(0, 6), heads, INPUT, GRIDS)
    assert [len(a) for a in empty] == [0, 0] and empty[0].truth.shape == (0, 4)
    targets = torch.tensor([_box(0, 0, 10, 10, 12, 12), _box(3, 1, 50, 50, 12, 12)])
    images = torch.cat([a.image for a in assign(targets, heads, INPUT, GRIDS)])
    assert sorted(images.tolist()) == [0, 3]
    edge = assign(torch.tensor([_box(0, 0, 64, 64, 12, 12)]), heads, INPUT, GRIDS)  # centre on the border
    assert all(int(a.gi.max()) < grid[1] and int(a.gj.max()) < grid[0] for a, grid in zip(edge, GRIDS)
               if len(a))


def test_the_loss_trains_exactly_the_assigned_predictions(heads):
    targets = torch.tensor([_box(0, 1, 40, 20, 30, 30), _box(1, 0, 12, 50, 10, 14)])
    outputs = [torch.zeros(2, 3, h, w, 7, requires_grad=True) for h, w in GRIDS]
    loss = YoloLoss(heads, iou_thresh=0.213)
    loss(outputs, targets, INPUT)[0].backward()
    for output, a in zip(outputs, loss.assign(targets, INPUT, GRIDS)):
        trained = output.grad[..., 5:].abs().sum(-1).nonzero().tolist()  # class terms: assigned cells only
        assigned = torch.stack([a.image, a.anchor, a.gj, a.gi], 1).unique(dim=0).tolist()
        assert len(assigned) and sorted(trained) == sorted(assigned)
