"""The YOLOv3 loss: assignment, empty targets, class counts, and subdivision invariance of the update."""

from __future__ import annotations

import math

import pytest
import torch

from synth import micro_cfg
from turboyolo.formats.darknet_cfg import parse_cfg, parse_cfg_text
from turboyolo.model.darknet import Darknet
from turboyolo.train.engine import StepOptions, TrainState, train_one_epoch
from turboyolo.train.loss import YoloLoss
from turboyolo.train.optim import Schedule, build_optimizer


def _model(tmp_path, num_classes=1, batch_normalize=True, **kw):
    path = micro_cfg(tmp_path / "m.cfg", num_classes=num_classes, **kw)
    spec = (
        parse_cfg(path)
        if batch_normalize
        else parse_cfg_text(path.read_text().replace("batch_normalize=1\n", ""), str(path))
    )
    torch.manual_seed(0)
    return Darknet(spec)


@pytest.mark.parametrize("num_classes", [1, 3])
def test_zero_targets_give_only_objectness(tmp_path, num_classes):
    model = _model(tmp_path, num_classes)
    outputs = model(torch.rand(2, 3, 64, 64))
    total, terms = YoloLoss(model.heads)(outputs, torch.zeros(0, 6), (64, 64))
    assert terms[0] == 0 and terms[2] == 0 and terms[1] > 0
    total.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_best_anchor_assignment_picks_one_head(tmp_path):
    model = _model(tmp_path, 2)
    outputs = [torch.zeros_like(o, requires_grad=True) for o in model(torch.rand(1, 3, 64, 64))]
    # a 30x30 box at the centre: its best anchor is 30x30 (index 5, the stride-32 head, mask 3,4,5)
    targets = torch.tensor([[0, 1, 0.5, 0.5, 30 / 64, 30 / 64]])
    total, terms = YoloLoss(model.heads)(outputs, targets, (64, 64))
    total.backward()
    coarse, fine = outputs
    cls_grad = coarse.grad[..., 5:].abs().sum(-1)  # [1, A, H, W]
    assert cls_grad[0, 2, 1, 1] > 0 and cls_grad.count_nonzero() == 1  # anchor 5 = local index 2, cell (1,1)
    assert fine.grad[..., 5:].abs().sum() == 0
    # with AlexeyAB's iou_thresh, anchors of similar shape in the other head train too
    outputs = [torch.zeros_like(o, requires_grad=True) for o in outputs]
    YoloLoss(model.heads, iou_thresh=0.213)(outputs, targets, (64, 64))[0].backward()
    assert outputs[1].grad[..., 5:].abs().sum() > 0


def test_loss_is_a_sum_over_images(tmp_path):
    model = _model(tmp_path, 2).eval()
    images = torch.rand(2, 3, 64, 64)
    targets = torch.tensor([[0, 0, 0.3, 0.3, 0.2, 0.3], [1, 1, 0.6, 0.5, 0.4, 0.4]])
    loss = YoloLoss(model.heads)
    both, _ = loss(model(images), targets, (64, 64))
    first, _ = loss(model(images[:1]), targets[:1], (64, 64))
    second_targets = targets[1:].clone()
    second_targets[:, 0] = 0
    second, _ = loss(model(images[1:]), second_targets, (64, 64))
    assert both.item() == pytest.approx(first.item() + second.item(), rel=1e-5)


def _one_iteration(model, subdivisions, images, targets):
    spec = model.spec.with_net(batch=4, subdivisions=subdivisions)
    optimizer = build_optimizer(model, spec.net)
    state = TrainState(
        model=model,
        optimizer=optimizer,
        schedule=Schedule(learning_rate=0.01),
        loss_fn=YoloLoss(model.heads),
        images_per_iteration=4,
        subdivisions=subdivisions,
    )
    mini = 4 // subdivisions
    batches = []
    for start in range(0, 4, mini):
        rows = targets[(targets[:, 0] >= start) & (targets[:, 0] < start + mini)].clone()
        rows[:, 0] -= start
        batches.append((images[start : start + mini], rows, None))
    for _ in train_one_epoch(state, batches, len(batches), StepOptions(clip_norm=0.0)):
        pass
    assert state.iteration == 1
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_subdivisions_do_not_change_the_update(tmp_path):
    # No BatchNorm: its batch statistics legitimately depend on the mini-batch.
    images = torch.randint(0, 256, (4, 3, 64, 64), dtype=torch.uint8)
    targets = torch.tensor(
        [[0, 0, 0.3, 0.3, 0.2, 0.3], [1, 0, 0.6, 0.5, 0.4, 0.4], [3, 0, 0.5, 0.5, 0.3, 0.3]]
    )
    one = _one_iteration(_model(tmp_path, batch_normalize=False), 1, images, targets)
    four = _one_iteration(_model(tmp_path, batch_normalize=False), 4, images, targets)
    for key in one:
        torch.testing.assert_close(one[key], four[key], rtol=1e-4, atol=1e-6)


def test_non_finite_loss_names_iteration_and_checkpoint(tmp_path):
    from turboyolo.train.engine import NonFiniteLoss

    model = _model(tmp_path)
    state = TrainState(
        model=model,
        optimizer=build_optimizer(model, model.spec.net),
        schedule=Schedule(learning_rate=0.01),
        loss_fn=YoloLoss(model.heads),
        images_per_iteration=2,
        subdivisions=1,
        last_checkpoint="runs/x/weights/last.pt",
    )
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    bad = torch.tensor([[0, 0, 0.5, 0.5, float("nan"), 0.2]])
    state.last_checkpoint_iteration = 0
    with pytest.raises(NonFiniteLoss, match=r"iteration 3 .*box is nan.*weights/last.pt \(iteration 0\)"):
        list(train_one_epoch(state, [(images, bad, None)] * 3, 3, StepOptions(log_interval=1)))


def test_ratio_assignment_and_iou_objectness(tmp_path):
    model = _model(tmp_path, 1)
    targets = torch.tensor([[0, 0, 0.5, 0.5, 20 / 64, 20 / 64]])  # a 20x20 box; anchors 6, 10, ..., 30

    def trained(**kw):
        outputs = [torch.zeros_like(o, requires_grad=True) for o in model(torch.rand(1, 3, 64, 64))]
        YoloLoss(model.heads, **kw)(outputs, targets, (64, 64))[0].backward()
        return outputs, sum(int(o.grad[..., 5].count_nonzero()) for o in outputs)

    assert trained(anchor_ratio=4.0)[1] == 6  # every anchor is within 4x (20 / 6 = 3.3)
    assert trained(anchor_ratio=2.0)[1] == 4  # 14, 18, 24, 30 (10 and 6 are 2x or more smaller)
    assert trained()[1] == 1  # Darknet: the best anchor only (18x18)
    # IoU-valued objectness: the assigned cell is pulled towards its IoU (< 1), so less hard than 1
    hard, _ = trained()
    soft, _ = trained(obj_iou=True)
    assert (
        soft[0].grad[..., 4].sum() + soft[1].grad[..., 4].sum()
        > hard[0].grad[..., 4].sum() + hard[1].grad[..., 4].sum()
    )


@pytest.mark.parametrize("obj_iou, target", [(False, 1.0), (True, 0.50030)])
def test_iou_objectness_target_is_the_giou_of_the_predicted_box(tmp_path, obj_iou, target):
    # A 30x30 box centred at (48, 48) of a 64x64 input: anchor 30x30 (local 2 of the stride-32 head), cell
    # (1, 1). The prediction there is a 24x24 box centred at (54, 48): intersection 21 x 24 = 504, union
    # 576 + 900 - 504 = 972, enclosing box 33 x 30 = 990, so GIoU = 504/972 - 18/990 = 0.50030.
    model = _model(tmp_path, 1)
    outputs = [torch.full_like(o, -30.0) for o in model(torch.rand(1, 3, 64, 64))]
    cell = outputs[0][0, 2, 1, 1]
    cell[0] = torch.logit(torch.tensor(0.6875))  # x = (0.6875 + 1) * 32 = 54
    cell[1] = 0.0  # y = (0.5 + 1) * 32 = 48
    cell[2] = cell[3] = torch.log(torch.tensor(24 / 30))
    cell[4] = 2.0  # objectness logit; every other cell's is -30 (no loss to speak of)
    targets = torch.tensor([[0, 0, 48 / 64, 48 / 64, 30 / 64, 30 / 64]])
    _, terms = YoloLoss(model.heads, obj_iou=obj_iou)(outputs, targets, (64, 64))
    expected = torch.nn.functional.softplus(torch.tensor(2.0)).item() - 2.0 * target  # BCE(2, target)
    assert terms[1].item() == pytest.approx(expected, abs=1e-4)


def test_iou_objectness_is_the_default_and_saved_runs_keep_theirs():
    from turboyolo.train.config import TrainConfig

    assert TrainConfig.build("m.cfg", "d.data").loss.obj_iou is True
    assert TrainConfig.build("m.cfg", "d.data", obj_iou=False).loss.obj_iou is False
    saved = TrainConfig.build("m.cfg", "d.data").as_dict()
    del saved["loss"]["obj_iou"]  # a checkpoint written before the default changed trained with target 1
    assert TrainConfig.from_dict(saved).loss.obj_iou is False


def _one_box_outputs(model):
    """Raw outputs with one prediction set for a 30x30 box centred at (48, 48) of a 64x64 input (anchor 30x30,
    local 2 of the stride-32 head, cell (1, 1)): x logit(0.6875), y 0, w = h = 24 px, objectness logit 2,
    class logit 0.5; every other logit -30."""
    outputs = [torch.full_like(o, -30.0) for o in model(torch.rand(1, 3, 64, 64))]
    cell = outputs[0][0, 2, 1, 1]
    cell[0] = torch.logit(torch.tensor(0.6875))
    cell[1] = 0.0
    cell[2] = cell[3] = torch.log(torch.tensor(24 / 30))
    cell[4], cell[5] = 2.0, 0.5
    targets = torch.tensor([[0, 0, 48 / 64, 48 / 64, 30 / 64, 30 / 64]])
    return [o.detach().requires_grad_(True) for o in outputs], targets


def test_darknet_box_loss_passes_darknets_deltas_back(tmp_path):
    """``box_loss=darknet``: the gradient of each raw box output is Darknet's delta, negated: scale * (output
    - target) with x, y after the logistic and *without* its derivative (delta_yolo_box, then
    backward_yolo_layer copies l.delta), scale = 2 - w * h; the value is mse's squared error."""
    model = _model(tmp_path, 1)
    scale = 2.0 - (30 * 30) / (64 * 64)
    target = torch.tensor([0.5, 0.5, 0.0, 0.0])  # (48 / 32 - 1) and log(30 / 30)
    values = {}
    for kind in ("darknet", "mse"):
        outputs, targets = _one_box_outputs(model)
        box_term, _ = YoloLoss(model.heads, box_loss=kind, gains=(1.0, 0.0, 0.0))(outputs, targets, (64, 64))
        box_term.backward()
        raw = outputs[0][0, 2, 1, 1, :4].detach()
        output = torch.cat([torch.sigmoid(raw[:2]), raw[2:]])
        values[kind] = (box_term.item(), outputs[0].grad[0, 2, 1, 1, :4], output)
    box_value, grad, output = values["darknet"]
    assert grad.tolist() == pytest.approx((scale * (output - target)).tolist(), rel=1e-6)
    assert box_value == pytest.approx(values["mse"][0], rel=1e-6)
    mse_grad = values["mse"][1]
    logistic_slope = output[:2] * (1 - output[:2])  # mse's exact gradient has it, Darknet's delta not
    assert mse_grad[:2].tolist() == pytest.approx((grad[:2] * logistic_slope).tolist(), rel=1e-5)
    assert mse_grad[2:].tolist() == pytest.approx(grad[2:].tolist(), rel=1e-6)


def test_darknet_statistics_are_what_darknet_prints(tmp_path):
    """Avg IOU, Class, Obj, No Obj, .5R, .75R, count per head, and l.cost = the sum of the squared deltas."""
    model = _model(tmp_path, 1)
    outputs, targets = _one_box_outputs(model)
    loss = YoloLoss(model.heads, box_loss="darknet", iou_thresh=1.0)
    coarse, fine = loss.darknet_statistics(outputs, targets, (64, 64))
    iou = 504 / 972  # the 24x24 box at (54, 48) against the 30x30 truth at (48, 48)
    sigmoid = torch.sigmoid
    assert coarse["count"] == 1 and fine["count"] == 0
    assert coarse["avg_iou"] == pytest.approx(iou, rel=1e-5)
    assert (coarse["recall50"], coarse["recall75"]) == (1.0, 0.0)
    assert coarse["obj"] == pytest.approx(sigmoid(torch.tensor(2.0)).item(), rel=1e-6)
    assert coarse["class"] == pytest.approx(sigmoid(torch.tensor(0.5)).item(), rel=1e-6)
    cells = outputs[0][..., 4].numel()
    assert coarse["no_obj"] == pytest.approx((sigmoid(torch.tensor(2.0)).item()
                                              + (cells - 1) * sigmoid(torch.tensor(-30.0)).item()) / cells)
    assert math.isnan(fine["avg_iou"]) and fine["no_obj"] == pytest.approx(0.0, abs=1e-12)
    scale = 2.0 - (30 * 30) / (64 * 64)
    raw = outputs[0][0, 2, 1, 1].detach()
    box = scale * (torch.cat([sigmoid(raw[:2]), raw[2:4]]) - torch.tensor([0.5, 0.5, 0.0, 0.0]))
    deltas = box.square().sum() + (1 - sigmoid(raw[4])) ** 2 + (1 - sigmoid(raw[5])) ** 2
    assert coarse["cost"] == pytest.approx(deltas.item(), rel=1e-5)  # the other cells' deltas are ~1e-13
