"""The tuned CPU inference copy (``turboyolo.model.cpu_kernels``): every way each layer may take computes
what the plain folded copy computes, on generated networks, sizes, batches and layouts; the choice is
made once per shape and keeps one weight copy; the strided max-pool is ``max_pool2d`` exactly."""

from __future__ import annotations

import re

import pytest
import torch

from turboyolo.formats.darknet_cfg import ConvSpec, MaxPoolSpec
from turboyolo.model import cpu_kernels
from turboyolo.model.cpu_kernels import StridedMaxPool, TunedConv, tune_for_cpu
from turboyolo.model.darknet import Darknet
from turboyolo.model.layers import ConvBlock, DarknetBatchNorm2d, DarknetMaxPool
from turboyolo.model.zoo import make_spec

NNPACK = cpu_kernels.nnpack_usable()
WAY_SETS = [("onednn",), ("direct",), pytest.param(("winograd",), marks=pytest.mark.skipif(
    not NNPACK, reason="this PyTorch build has no NNPACK"))]


def _random_bn(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, DarknetBatchNorm2d):
                channels = module.num_features
                module.running_mean.copy_(torch.randn(channels, generator=gen) * 0.1)
                module.running_var.copy_(0.5 + torch.rand(channels, generator=gen))
                module.weight.copy_(0.5 + torch.rand(channels, generator=gen))
                module.bias.copy_(torch.randn(channels, generator=gen) * 0.1)


def _close(got: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    """Worst difference relative to each head's largest value."""
    worst = 0.0
    for a, b in zip(got, expected, strict=True):
        assert a.shape == b.shape
        worst = max(worst, ((a - b).abs().max() / b.abs().max().clamp(min=1e-6)).item())
    return worst


@pytest.mark.parametrize("ways", WAY_SETS)
@pytest.mark.parametrize("arch,width,height,batch", [("yolov3-tiny", 160, 96, 1), ("yolov4-tiny", 96, 128, 2),
                                                     ("yolov3-tiny", 224, 160, 3)])
def test_each_way_computes_what_the_folded_copy_does(ways, arch, width, height, batch):
    model = Darknet(make_spec(arch, num_classes=4, width=width, height=height))
    _random_bn(model, seed=width + height)
    images = torch.rand(batch, 3, height, width, generator=torch.Generator().manual_seed(batch))
    plain = model.inference_copy(channels_last=True)
    tuned = tune_for_cpu(model.inference_copy(channels_last=True), allowed=ways)
    with torch.inference_mode():
        expected = plain(images)
        got = tuned(images.contiguous(memory_format=torch.channels_last))
        again = tuned(images)  # the second call runs the chosen ways only, from an NCHW batch
    convs = [m for m in tuned.layers if isinstance(m, TunedConv)]
    assert len(convs) == sum(isinstance(m, ConvBlock) for m in plain.layers)
    eligible = [m for m in convs if "winograd" in m.candidates]
    if ways == ("winograd",):
        assert eligible and all(m.way == "winograd" for m in eligible)
        assert all(m.way == "direct" for m in convs if m not in eligible)
    else:
        assert all(m.way == ways[0] for m in convs)
    assert _close(got, expected) < 1e-4
    assert all(torch.equal(a, b) for a, b in zip(got, again))


@pytest.mark.parametrize("activation", ["leaky", "linear", "relu", "mish", "logistic"])
@pytest.mark.parametrize("size,stride,pad", [(3, 1, 1), (1, 1, 0), (3, 2, 1), (5, 1, 2)])
def test_a_block_of_any_shape_and_activation_matches_conv_then_activation(activation, size, stride, pad):
    gen = torch.Generator().manual_seed(size * 10 + stride)
    block = ConvBlock(ConvSpec(filters=7, size=size, stride=stride, padding=pad, activation=activation,
                               batch_normalize=True), in_channels=5)
    _random_bn(block, seed=size)
    block.eval().fold_batchnorm()
    x = torch.randn(2, 5, 23, 17, generator=gen)
    with torch.inference_mode():
        expected = block(x)
        for way in cpu_kernels.WAYS:
            tuned = TunedConv(block, allowed=(way,))
            got = tuned(x)
            assert got.shape == expected.shape
            assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5), (way, tuned.way)
            fused = activation in ("leaky", "linear", "relu")
            winograd = size == 3 and stride == 1 and NNPACK
            expected_way = {"onednn": "onednn" if fused else "direct",
                            "winograd": "winograd" if winograd else "direct"}.get(way, "direct")
            assert tuned.way == expected_way


def test_the_choice_is_timed_once_per_shape_and_keeps_one_weight_copy(monkeypatch):
    model = Darknet(make_spec("yolov3", num_classes=2, width=64, height=64))
    tuned = tune_for_cpu(model.inference_copy(channels_last=True))
    timed = []
    original = TunedConv._fastest

    def counting(self, sample):
        timed.append(self)
        return original(self, sample)

    monkeypatch.setattr(TunedConv, "_fastest", counting)
    with torch.inference_mode():
        tuned(torch.rand(1, 3, 64, 64))
    convs = [m for m in tuned.layers if isinstance(m, TunedConv)]
    assert len(timed) == len(tuned.layers[0].tuning.choices)  # one timing per distinct shape
    assert len(timed) < len(convs) // 2  # darknet53's repeated blocks share their choice
    for m in convs:
        copies = [t for t in (m.weight, m.packed, m.nchw_weight, m.transformed) if t is not None]
        assert len(copies) == 1, (m.way, len(copies))
        assert m.transformed is None or m.way == "winograd"
        assert m.way in m.candidates and (m.timings == {} or m.way == min(m.timings, key=m.timings.get))


def test_a_way_that_fails_is_left_out(monkeypatch):
    spec = ConvSpec(filters=4, size=3, stride=1, padding=1, activation="leaky", batch_normalize=False)
    block = ConvBlock(spec, in_channels=3)

    def broken(self, x):
        raise RuntimeError("not on this CPU")

    monkeypatch.setattr(TunedConv, "_onednn", broken)
    monkeypatch.setattr(TunedConv, "_winograd", broken)
    tuned = TunedConv(block)
    x = torch.rand(1, 3, 9, 9)
    with torch.inference_mode():
        assert torch.allclose(tuned(x), block(x), atol=1e-6)
    assert tuned.way == "direct" and tuned.weight is not None


@pytest.mark.parametrize("height,width", [(8, 8), (9, 8), (8, 11), (1, 6), (26, 26)])
@pytest.mark.parametrize("padding", [0, 1])
def test_the_strided_max_pool_is_max_pool2d_nan_included(height, width, padding):
    pool = DarknetMaxPool(MaxPoolSpec(size=2, stride=2, padding=padding))
    x = torch.randn(2, 3, height, width, generator=torch.Generator().manual_seed(height * width))
    x[0, 1, 0, 0] = float("nan")
    x[1, 2, -1, -1] = float("-inf")
    for layout in (torch.contiguous_format, torch.channels_last):
        x = x.contiguous(memory_format=layout)
        with torch.inference_mode():
            try:
                expected = pool(x)
            except RuntimeError as err:  # a map too small for the pool: the same error either way
                with pytest.raises(RuntimeError, match=re.escape(str(err))):
                    StridedMaxPool(pool)(x)
                continue
            got = StridedMaxPool(pool)(x)
        assert got.shape == expected.shape
        assert torch.equal(got.isnan(), expected.isnan())
        assert torch.equal(got.nan_to_num(), expected.nan_to_num())


def test_tuning_leaves_darknet_arithmetic_and_other_pools_alone():
    model = Darknet(make_spec("yolov3-tiny", num_classes=2, width=64, height=64)).inference_copy()
    model.layers[0].darknet_arithmetic = True
    tune_for_cpu(model)
    assert isinstance(model.layers[0], ConvBlock)
    assert isinstance(model.layers[11], DarknetMaxPool) and model.layers[11].stride == 1
    assert sum(isinstance(m, StridedMaxPool) for m in model.layers) == 5


def test_inference_copy_for_tunes_only_plain_float32_on_the_cpu():
    model = Darknet(make_spec("yolov3-tiny", num_classes=2, width=64, height=64))
    cpu = torch.device("cpu")
    assert any(isinstance(m, TunedConv) for m in model.inference_copy_for(cpu).layers)
    for copy in (model.inference_copy_for(cpu, torch.bfloat16),
                 model.inference_copy_for(cpu, autocast=torch.bfloat16)):
        assert not any(isinstance(m, TunedConv) for m in copy.layers)
        assert copy.layers[0].conv.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.rand(1, 3, 64, 64)
    with torch.inference_mode():
        got, expected = model.inference_copy_for(cpu)(x), model.eval()(x)
    assert _close(got, expected) < 1e-4


@pytest.mark.skipif(cpu_kernels.nnpack_inference() is None, reason="no NNPACK inference call in this PyTorch")
def test_precomputed_winograd_kernels_compute_what_pytorchs_nnpack_does_within_their_budget():
    model = Darknet(make_spec("yolov3-tiny", num_classes=3, width=96, height=160))
    _random_bn(model, seed=5)
    images = torch.rand(2, 3, 160, 96, generator=torch.Generator().manual_seed(5))
    copies = {}
    for budget in (0, 300_000, cpu_kernels.PRECOMPUTED_BYTES):
        copy = tune_for_cpu(model.inference_copy(channels_last=True), allowed=("winograd",))
        copy.layers[0].tuning.budget = budget
        with torch.inference_mode():
            copies[budget] = copy, copy(images), copy(images[1:])
    winograd = {budget: [m for m in copy.layers if isinstance(m, TunedConv) and m.way == "winograd"]
                for budget, (copy, _, _) in copies.items()}
    assert all(m.transformed is None and m.nchw_weight is not None for m in winograd[0])
    some = [m.transformed is not None for m in winograd[300_000]]
    assert any(some) and not all(some)  # the budget ran out part-way, and those layers still ran
    full = cpu_kernels.PRECOMPUTED_BYTES
    assert all(m.transformed is not None and m.nchw_weight is None for m in winograd[full])
    spent = sum(m.transformed[0].numel() for m in winograd[full])
    assert copies[full][0].layers[0].tuning.budget == full - spent
    _, expected, expected_one = copies[0]
    for budget in (300_000, cpu_kernels.PRECOMPUTED_BYTES):
        _, got, got_one = copies[budget]
        assert _close(got, expected) < 1e-6 and _close(got_one, expected_one) < 1e-6
        assert _close(got_one, [head[1:] for head in got]) < 1e-5  # a batch of 2 and its second image alone
