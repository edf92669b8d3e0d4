"""COCO weights into a network for another class count (transfer learning)."""

from __future__ import annotations

import torch

from turboyolo.model.darknet import Darknet
from turboyolo.model.loading import load_darknet_weights, load_pretrained
from turboyolo.model.zoo import make_spec

TREE_ANCHORS = ((16, 17), (25, 29), (37, 35), (44, 49), (59, 59), (85, 86))


def test_coco_weights_into_one_class_tiny(tiny_weights):
    coco = Darknet(make_spec("yolov3-tiny"))
    load_darknet_weights(coco, tiny_weights)
    model = Darknet(make_spec("yolov3-tiny", num_classes=1, anchors=TREE_ANCHORS))
    before = {name: t.clone() for name, t in model.state_dict().items()}

    lines, fresh = load_pretrained(model, tiny_weights)

    message = " ".join(lines)
    assert "heads [15, 22]" in message and "class outputs new" in message
    assert fresh == []  # both heads were seeded, nothing is left at its random initialisation
    heads = {head.layer_index - 1 for head in model.heads}
    for index, (own, src) in enumerate(zip(model.layers, coco.layers, strict=True)):
        own_state, src_state = own.state_dict(), src.state_dict()
        if index in heads:
            continue
        for name, tensor in own_state.items():
            assert torch.equal(tensor, src_state[name]), f"layer {index} {name} not loaded from COCO"
    for index in heads:
        own_conv, src_conv = model.layers[index].conv, coco.layers[index].conv
        own_w, src_w = own_conv.weight.view(3, 6, -1), src_conv.weight.view(3, 85, -1)
        own_b, src_b = own_conv.bias.view(3, 6), src_conv.bias.view(3, 85)
        assert torch.equal(own_w[:, :5], src_w[:, :5]) and torch.equal(own_b[:, :5], src_b[:, :5])
        # the class row is new: still the initialisation, not any COCO class row
        initial = before[f"layers.{index}.conv.weight"].view(3, 6, -1)
        assert torch.equal(own_w[:, 5], initial[:, 5])


def test_same_class_count_loads_everything(tiny_weights):
    model = Darknet(make_spec("yolov3-tiny"))
    lines, fresh = load_pretrained(model, tiny_weights)
    assert fresh == [] and "all layers" in lines[0]
