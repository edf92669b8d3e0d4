from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from turboyolo.formats.darknet_cfg import MaxPoolSpec, parse_cfg_text
from turboyolo.model.darknet import Darknet
from turboyolo.model.layers import DarknetMaxPool
from turboyolo.model.zoo import make_spec

EXPECTED = {  # architecture: (trainable parameters, floats in the .weights file) at 80 classes
    "yolov3": (61_949_149, 62_001_757),
    "yolov3-tiny": (8_852_366, 8_858_734),
    "yolov3-spp": (62_998_749, 63_052_381),
}


@pytest.mark.parametrize("arch", sorted(EXPECTED))
def test_parameter_counts(arch):
    model = Darknet(make_spec(arch, 80))
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == EXPECTED[arch][0]
    assert model.flat_weights().size == EXPECTED[arch][1]


@pytest.mark.parametrize("size", [320, 416, 608])
def test_forward_shapes_yolov3(size):
    model = Darknet(make_spec("yolov3", num_classes=2)).eval()
    with torch.no_grad():
        outputs = model(torch.rand(1, 3, size, size))
    assert [tuple(o.shape) for o in outputs] == [(1, 3, size // s, size // s, 7) for s in (32, 16, 8)]
    assert [h.stride for h in model.heads] == [32, 16, 8]
    assert model.heads[0].anchors == ((116.0, 90.0), (156.0, 198.0), (373.0, 326.0))


def test_forward_rectangular_and_tiny():
    model = Darknet(make_spec("yolov3-tiny", num_classes=1)).eval()
    with torch.no_grad():
        outputs = model(torch.rand(2, 3, 256, 320))
    assert [tuple(o.shape) for o in outputs] == [(2, 3, 8, 10, 6), (2, 3, 16, 20, 6)]


def test_darknet_maxpool_size2_stride1_ignores_out_of_bounds():
    x = -torch.rand(1, 1, 4, 4) - 1  # all negative: zero padding would leak zeros into the border
    out = DarknetMaxPool(MaxPoolSpec(size=2, stride=1, padding=1))(x)
    assert out.shape == x.shape
    assert torch.equal(out[0, 0, -1, -1], x[0, 0, -1, -1])
    expected = torch.stack([x[0, 0, i : i + 2, j : j + 2].max() for i in range(4) for j in range(4)]).view(
        4, 4
    )
    assert torch.equal(out[0, 0], expected)


@pytest.mark.parametrize("size,stride", [(2, 2), (3, 1), (5, 1), (3, 2)])
def test_darknet_maxpool_matches_definition(size, stride):
    x = torch.randn(1, 2, 9, 7)
    spec = MaxPoolSpec(size=size, stride=stride, padding=size - 1)
    out = DarknetMaxPool(spec)(x)
    offset = -(spec.padding // 2)
    out_h = (9 + spec.padding - size) // stride + 1
    out_w = (7 + spec.padding - size) // stride + 1
    assert out.shape[-2:] == (out_h, out_w)
    for i in range(out_h):
        for j in range(out_w):
            y0, x0 = offset + i * stride, offset + j * stride
            window = x[..., max(y0, 0) : y0 + size, max(x0, 0) : x0 + size]
            assert torch.equal(out[..., i, j], window.amax((-2, -1)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dtypes_and_channels_last(dtype):
    model = Darknet(make_spec("yolov3-tiny", num_classes=3)).eval()
    x = torch.rand(1, 3, 128, 128)
    with torch.no_grad():
        reference = model(x)
        model = model.to(dtype=dtype, memory_format=torch.channels_last)
        outputs = model(x.to(dtype).contiguous(memory_format=torch.channels_last))
    for ref, out in zip(reference, outputs):
        assert out.dtype == dtype
        assert torch.allclose(out.float(), ref, atol=0.5 if dtype == torch.bfloat16 else 1e-4)


def test_eval_batchnorm_is_darknets_formula():
    spec = parse_cfg_text(
        "[net]\nwidth=32\nheight=32\n[convolutional]\nbatch_normalize=1\nfilters=4\nsize=1\n"
        "activation=linear\n[convolutional]\nfilters=6\nsize=1\nactivation=linear\n"
        "[yolo]\nmask=0\nanchors=4,4\nclasses=1\nnum=1\n"
    )
    model = Darknet(spec).eval()
    block = model.layers[0]
    with torch.no_grad():
        block.bn.running_var.fill_(1e-4)
        block.bn.running_mean.fill_(0.1)
        x = torch.rand(1, 3, 4, 4)
        conv = F.conv2d(x, block.conv.weight)
        expected = (conv - 0.1) / (1e-4**0.5 + 1e-6) * block.bn.weight.view(1, -1, 1, 1) + block.bn.bias.view(
            1, -1, 1, 1
        )
        assert torch.allclose(block(x), expected, rtol=1e-5, atol=1e-5)


def test_training_forward_backward():
    model = Darknet(make_spec("yolov3-tiny", num_classes=2)).train()
    outputs = model(torch.rand(2, 3, 64, 64))
    sum(o.float().pow(2).mean() for o in outputs).backward()
    assert model.layers[0].conv.weight.grad is not None
