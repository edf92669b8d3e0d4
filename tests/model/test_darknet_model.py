from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from turboyolo.formats.darknet_cfg import MaxPoolSpec, parse_cfg_text
from turboyolo.model.darknet import Darknet
from turboyolo.model.layers import DarknetBatchNorm2d, DarknetMaxPool
from turboyolo.model.zoo import make_spec

# the test of `make test` that covers the promise of a `full` one here (tests/conftest.py: the tiers)
SMALLEST = "tests/model/test_darknet_model.py::test_forward_shapes_yolov3[320]"

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


@pytest.mark.parametrize("size", [320, *(pytest.param(size, marks=pytest.mark.full(covered_by=SMALLEST))
                                          for size in (416, 608))])
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


@pytest.mark.parametrize("height,width", [(9, 7), (8, 6)])
@pytest.mark.parametrize("size,stride", [(2, 2), (3, 1), (5, 1), (3, 2)])
def test_darknet_maxpool_matches_definition(size, stride, height, width):
    x = torch.randn(1, 2, height, width)
    spec = MaxPoolSpec(size=size, stride=stride, padding=size - 1)
    out = DarknetMaxPool(spec)(x)
    offset = -(spec.padding // 2)
    out_h = (height + spec.padding - size) // stride + 1
    out_w = (width + spec.padding - size) // stride + 1
    assert out.shape[-2:] == (out_h, out_w)
    for i in range(out_h):
        for j in range(out_w):
            y0, x0 = offset + i * stride, offset + j * stride
            window = x[..., max(y0, 0) : y0 + size, max(x0, 0) : x0 + size]
            assert torch.equal(out[..., i, j], window.amax((-2, -1)))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("size,stride,padding", [(2, 2, 1), (2, 1, 1), (3, 2, 2), (2, 2, 0), (3, 2, 1),
                                                 (4, 2, 3)])
def test_darknet_maxpool_skips_only_an_unread_pad(size, stride, padding, channels_last):
    """Where the pool skips its -inf pad (a pad no window reaches), outputs and gradients are bit for bit
    those of always padding; the inputs hold ties (small integers), where the chosen index matters."""
    gen = torch.Generator().manual_seed(size * 100 + stride * 10 + padding)
    spec = MaxPoolSpec(size=size, stride=stride, padding=padding)
    pool = DarknetMaxPool(spec)
    skipped = []
    for height, width in [(8, 8), (9, 7), (6, 11), (13, 13), (2, 2)]:
        x = torch.randint(-3, 3, (2, 3, height, width), generator=gen).float()
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        out_h, out_w = (height + padding - size) // stride + 1, (width + padding - size) // stride + 1
        grad = torch.randn(2, 3, out_h, out_w, generator=gen)
        ours, reference = x.clone().requires_grad_(), x.clone().requires_grad_()
        out = pool(ours)
        expected = F.max_pool2d(F.pad(reference, pool.pad, value=float("-inf")), size, stride)
        out.backward(grad)
        expected.backward(grad)
        assert torch.equal(out, expected)
        assert torch.equal(ours.grad, reference.grad)
        skipped.append(not pool.pad_is_read(height, width))
    # yolov3-tiny's pools (size 2, stride 2, padding 1) skip the pad on even sides, and keep it on odd ones
    if (size, stride, padding) == (2, 2, 1):
        assert skipped == [True, False, False, False, True]


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


def _darknet_batchnorm_reference(x, gamma, beta, delta):
    """pjreddie's forward_batchnorm_layer / backward_batchnorm_layer (blas.c, batchnorm_layer.c), transcribed
    loop by loop into NumPy (float64): returns (output, input delta, scale updates, bias updates)."""
    batch, filters, height, width = x.shape
    n = batch * height * width
    mean = x.sum((0, 2, 3)) / n  # mean_cpu
    variance = ((x - mean[None, :, None, None]) ** 2).sum((0, 2, 3)) / (n - 1)  # variance_cpu: n - 1
    x_norm = (x - mean[None, :, None, None]) / (np.sqrt(variance) + 0.000001)[None, :, None, None]
    output = x_norm * gamma[None, :, None, None] + beta[None, :, None, None]
    bias_updates = delta.sum((0, 2, 3))  # backward_bias
    scale_updates = (delta * x_norm).sum((0, 2, 3))  # backward_scale_cpu
    delta = delta * gamma[None, :, None, None]  # scale_bias
    mean_delta = delta.sum((0, 2, 3)) * (-1.0 / np.sqrt(variance + 0.00001))  # mean_delta_cpu
    variance_delta = (delta * (x - mean[None, :, None, None])).sum((0, 2, 3)) * (
        -0.5 * (variance + 0.00001) ** -1.5)  # variance_delta_cpu
    delta = (delta / np.sqrt(variance + 0.00001)[None, :, None, None]  # normalize_delta_cpu
             + variance_delta[None, :, None, None] * 2.0 * (x - mean[None, :, None, None]) / n
             + mean_delta[None, :, None, None] / n)
    return output, delta, scale_updates, bias_updates, mean, variance


def test_darknet_training_batchnorm_is_darknets_code():
    """``bn_train=darknet``: forward, backward and rolling statistics as pjreddie's C code computes them
    (not PyTorch's: biased variance inside sqrt(var + eps), and the exact derivative)."""
    torch.manual_seed(0)
    from turboyolo.exact.modules import DarknetTrainingBatchNorm2d

    bn = DarknetTrainingBatchNorm2d.replacing(DarknetBatchNorm2d(5), exact=False).double().train()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.uniform_(-1.0, 1.0)
        bn.running_mean.fill_(0.3)
        bn.running_var.fill_(2.0)
    x = (torch.randn(2, 5, 3, 4, dtype=torch.float64) * torch.tensor([1e-3, 0.1, 1, 3, 10]).view(1, -1, 1, 1)
         ).requires_grad_(True)
    out = bn(x)
    upstream = torch.randn_like(out)
    out.backward(upstream)
    ref_out, ref_dx, ref_dgamma, ref_dbeta, mean, var = _darknet_batchnorm_reference(
        x.detach().numpy(), bn.weight.detach().numpy(), bn.bias.detach().numpy(), upstream.numpy())
    np.testing.assert_allclose(out.detach().numpy(), ref_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), ref_dx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bn.weight.grad.numpy(), ref_dgamma, rtol=1e-12)
    np.testing.assert_allclose(bn.bias.grad.numpy(), ref_dbeta, rtol=1e-12)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.99 * 0.3 + 0.01 * mean, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.99 * 2.0 + 0.01 * var, rtol=1e-12)
    # Darknet's backward is not the derivative of its own forward (eps inside vs outside the root), and the
    # unbiased variance differs from PyTorch's biased one: for 24 values per channel, visibly
    plain = torch.nn.functional.batch_norm(x.detach(), None, None, bn.weight.detach(), bn.bias.detach(),
                                           training=True, eps=1e-5)
    assert (plain - out.detach()).abs().max() > 1e-3
