"""The tuned CPU inference copy (``turboyolo.model.cpu_kernels``): every way each layer may take computes
what the plain folded copy computes, on generated networks, sizes, batches and layouts; the choice is
made once per shape and keeps one weight copy; the strided max-pool is ``max_pool2d`` exactly."""

from __future__ import annotations

import copy
import gc
import pickle
import re
import threading

import pytest
import torch

from synth import random_batch_norm
from turboyolo.formats.darknet_cfg import ConvSpec, MaxPoolSpec
from turboyolo.model import cpu_kernels
from turboyolo.model.cpu_kernels import StridedMaxPool, TunedConv, tune_for_cpu
from turboyolo.model.darknet import Darknet
from turboyolo.model.layers import ConvBlock, DarknetMaxPool
from turboyolo.model.zoo import make_spec

NNPACK = cpu_kernels.nnpack_usable()
WAY_SETS = [("onednn",), ("direct",), pytest.param(("winograd",), marks=pytest.mark.skipif(
    not NNPACK, reason="this PyTorch build has no NNPACK"))]


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
    torch.manual_seed(width * height)
    model = Darknet(make_spec(arch, num_classes=4, width=width, height=height))
    random_batch_norm(model, seed=width + height)
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
    torch.manual_seed(size * 10 + stride)  # the block's initial weights
    block = ConvBlock(ConvSpec(filters=7, size=size, stride=stride, padding=pad, activation=activation,
                               batch_normalize=True), in_channels=5)
    random_batch_norm(block, seed=size)
    block.eval().fold_batchnorm()
    x = torch.randn(2, 5, 23, 17, generator=gen)
    with torch.inference_mode():
        expected = block(x)
        for way in cpu_kernels.WAYS:
            tuned = TunedConv(block, allowed=(way,))
            got = tuned(x)
            assert got.shape == expected.shape
            assert _close([got], [expected]) < 5e-5, (way, tuned.way)  # Winograd's rounding at most
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
    for m in convs:  # each way holds the weights it reads, no more
        held = {"weight": m.weight is not None, "packed": len(m.packed),
                "nchw": m.nchw_weight is not None, "transformed": m.transformed is not None}
        expected = {"direct": [{"weight": True, "packed": 0, "nchw": False, "transformed": False}],
                    "onednn": [{"weight": True, "packed": 1, "nchw": False, "transformed": False}],
                    "winograd": [{"weight": False, "packed": 0, "nchw": True, "transformed": False},
                                 {"weight": False, "packed": 0, "nchw": False, "transformed": True}]}
        assert held in expected[m.way], (m.way, held)
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
    from turboyolo.exact.modules import DarknetConv2d

    model = Darknet(make_spec("yolov3-tiny", num_classes=2, width=64, height=64)).inference_copy()
    model.layers[0].conv = DarknetConv2d.replacing(model.layers[0].conv)
    tune_for_cpu(model)
    assert isinstance(model.layers[0], ConvBlock)
    assert isinstance(model.layers[11], DarknetMaxPool) and model.layers[11].stride == 1
    assert sum(isinstance(m, StridedMaxPool) for m in model.layers) == 5


def test_inference_copy_for_tunes_only_plain_float32_on_the_cpu():
    model = Darknet(make_spec("yolov3-tiny", num_classes=2, width=64, height=64))
    cpu = torch.device("cpu")
    assert any(isinstance(m, TunedConv) for m in model.inference_copy_for(cpu, tuned=True).layers)
    for untuned in (model.inference_copy_for(cpu),  # the default: PyTorch's public modules
                    model.inference_copy_for(cpu, torch.bfloat16, tuned=True),
                    model.inference_copy_for(cpu, autocast=torch.bfloat16, tuned=True)):
        assert not any(isinstance(m, TunedConv) for m in untuned.layers)
        assert untuned.layers[0].conv.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.rand(1, 3, 64, 64)
    with torch.inference_mode():
        got, expected = model.inference_copy_for(cpu, tuned=True)(x), model.eval()(x)
    assert _close(got, expected) < 1e-4


@pytest.mark.skipif(cpu_kernels.nnpack_inference() is None, reason="no NNPACK inference call in this PyTorch")
def test_precomputed_winograd_kernels_compute_what_per_call_transforms_do_within_their_budget():
    model = Darknet(make_spec("yolov3-tiny", num_classes=3, width=96, height=160))
    random_batch_norm(model, seed=5)
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
    spent = sum(m.transformed.nbytes for m in winograd[full])
    assert copies[full][0].layers[0].tuning.budget == full - spent
    _, expected, expected_one = copies[0]
    for budget in (300_000, cpu_kernels.PRECOMPUTED_BYTES):
        _, got, got_one = copies[budget]
        assert _close(got, expected) < 1e-6 and _close(got_one, expected_one) < 1e-6
        assert _close(got_one, [head[1:] for head in got]) < 1e-5  # a batch of 2 and its second image alone


@pytest.mark.skipif(not NNPACK, reason="this PyTorch build has no NNPACK")
def test_winograd_gives_the_same_numbers_through_pytorchs_op_and_on_any_thread_count(monkeypatch):
    spec = ConvSpec(filters=24, size=3, stride=1, padding=1, activation="leaky", batch_normalize=False)
    block = ConvBlock(spec, in_channels=16).eval()
    x = torch.randn(2, 16, 30, 22, generator=torch.Generator().manual_seed(7))
    threads = torch.get_num_threads()
    results = []
    try:
        for count, through_op in ((1, False), (2, False), (3, False), (1, True)):
            torch.set_num_threads(count)
            if through_op:  # no NNPACK entry point in this PyTorch: its own op, transforming per call
                monkeypatch.setattr(cpu_kernels, "nnpack_inference", lambda: None)
            with torch.inference_mode():
                results.append(TunedConv(block, allowed=("winograd",))(x))
    finally:
        torch.set_num_threads(threads)
    with torch.inference_mode():
        expected = block(x)
    assert all(torch.equal(results[0], other) for other in results[1:3])  # NNPACK splits work, not sums
    assert all(_close([got], [expected]) < 1e-5 for got in results)  # Winograd's rounding, not more


def _tuned_pair(arch="yolov3-tiny", width=96, height=64, seed=3, ways=None):
    torch.manual_seed(seed)
    model = Darknet(make_spec(arch, num_classes=2, width=width, height=height))
    random_batch_norm(model, seed)
    plain = model.inference_copy(channels_last=True)
    return plain, tune_for_cpu(model.inference_copy(channels_last=True), ways)


def test_onednn_packs_per_input_shape_and_keeps_the_last_few():
    plain, tuned = _tuned_pair(ways=("onednn",))
    gen = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for batch, height, width in ((1, 64, 96), (3, 64, 96), (2, 96, 64), (1, 64, 96)):
            x = torch.rand(batch, 3, height, width, generator=gen)
            assert _close(tuned(x), plain(x)) < 1e-5
    first = tuned.layers[0]
    assert list(first.packed) == [(2, 3, 96, 64), (1, 3, 64, 96)]  # packed for the shapes it ran, newest last
    assert len(first.packed) <= TunedConv.PACKED_SHAPES


def test_threads_sharing_an_untuned_copy_get_what_one_thread_gets():
    plain, _ = _tuned_pair(arch="yolov3", width=64, height=64)
    images = torch.rand(4, 1, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = [plain(image) for image in images]
    for _ in range(3):
        tuned = tune_for_cpu(copy.deepcopy(plain))
        results, errors = [None] * len(images), []

        def work(index: int, model=tuned, results=results, errors=errors) -> None:
            try:
                with torch.inference_mode():
                    results[index] = model(images[index])
            except Exception as err:  # noqa: BLE001 - collected, then asserted empty
                errors.append(err)

        threads = [threading.Thread(target=work, args=(index,)) for index in range(len(images))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not errors, errors
        assert all(_close(got, want) < 1e-4 for got, want in zip(results, expected))


@pytest.mark.parametrize("ways", [None, ("winograd",), ("onednn",)])
def test_a_copy_of_a_tuned_model_runs_on_its_own_memory(ways, tmp_path):
    plain, tuned = _tuned_pair(ways=ways)
    x = torch.rand(1, 3, 64, 96)
    with torch.inference_mode():
        expected = tuned(x)
        twin = copy.deepcopy(tuned)
        restored = pickle.loads(pickle.dumps(tuned))
        torch.save(tuned, tmp_path / "tuned.pt")
        del tuned
        gc.collect()
        torch.rand(10_000_000)  # reuse the freed memory
        loaded = torch.load(tmp_path / "tuned.pt", weights_only=False)
        for other in (twin, restored, loaded):
            assert all(torch.equal(a, b) for a, b in zip(other(x), expected))


def test_wrong_inputs_get_an_error_or_an_empty_answer():
    plain, tuned = _tuned_pair()
    with torch.inference_mode():
        tuned(torch.rand(1, 3, 64, 96))
        for dtype in (torch.float16, torch.bfloat16, torch.float64):
            with pytest.raises(RuntimeError, match="tuned for float32 on the CPU"):
                tuned(torch.rand(1, 3, 64, 96, dtype=dtype))
        for shape in ((1, 4, 64, 96), (3, 64, 96)):  # plain convolutions refuse these too
            with pytest.raises(RuntimeError, match="expected an input"):
                tuned(torch.rand(shape))
        empty, expected = tuned(torch.rand(0, 3, 64, 96)), plain(torch.rand(0, 3, 64, 96))
    assert [e.shape for e in empty] == [e.shape for e in expected]


@pytest.mark.skipif(cpu_kernels.nnpack_inference() is None, reason="no NNPACK inference call in this PyTorch")
def test_a_layer_without_budget_for_its_kernel_makes_its_own_choice():
    plain, tuned = _tuned_pair(arch="yolov3", width=64, height=64, ways=("onednn", "winograd"))
    tuning = next(m for m in tuned.layers if isinstance(m, TunedConv)).tuning
    tuning.budget = 3 * 2**20  # enough for some of darknet53's repeated 3 x 3 layers, not all
    x = torch.rand(1, 3, 64, 64)
    with torch.inference_mode():
        assert _close(tuned(x), plain(x)) < 1e-4
    fits = {key[-1] for key in tuning.choices}
    assert fits == {True, False}  # the same shape, timed once with its kernel precomputable, once without
