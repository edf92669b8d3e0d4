"""Darknet's training step (exact/step.py): each reduction against the compiled loop it transcribes
(written out here element by element, and, where ``libdarknet.so`` is installed, against the library's own
functions), the whole step against autograd's gradient on a generated network with every layer type it
takes, and through ``turboyolo train --config darknet``.

The comparison with the ``darknet`` binary through the command is tests/train/test_darknet_command.py.
"""

from __future__ import annotations

import copy
import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from turboyolo.exact import arithmetic as arith
from turboyolo.exact import step as ds
from turboyolo.exact.modules import to_darknet

F32 = np.float32
LIBDARKNET = Path("/usr/lib/darknet/libdarknet.so")
HELPER = Path(__file__).parents[1] / "fixtures" / "darknet_step" / "dump_step.c"


def _sse_sum(values: np.ndarray, pair_tail: bool) -> np.float32:
    """The loop ``-Ofast`` made of ``sum += p[k]`` (sum_array, backward_scale_cpu, gemm_nt), one element at
    a time: 4 lanes over the first 4 * (n // 4) elements (none when n < 4), joined (l0 + l2) + (l1 + l3),
    then the rest (gemm_nt: a pair, then the last)."""
    n = len(values)
    vector = 4 * (n // 4) if n >= 4 else 0
    lanes = [F32(0)] * 4
    for k in range(vector):
        lanes[k % 4] = F32(lanes[k % 4] + values[k])
    total = F32(F32(lanes[0] + lanes[2]) + F32(lanes[1] + lanes[3])) if vector else F32(0)
    rest = list(values[vector:])
    if pair_tail and len(rest) >= 2:
        total = F32(total + F32(rest[0] + rest[1]))
        rest = rest[2:]
    for value in rest:
        total = F32(total + value)
    return total


@pytest.mark.parametrize("length", [1, 2, 3, 4, 7, 64, 169, 1023])
def test_lane_sums_are_the_compiled_loops(length):
    rng = np.random.default_rng(length)
    products = (rng.standard_normal((6, length)) * 10).astype(F32)
    for pair_tail in (False, True):
        expected = np.array([_sse_sum(row, pair_tail) for row in products], F32)
        assert np.array_equal(ds.lane_sums(products, pair_tail), expected)
    delta = rng.standard_normal((5, length)).astype(F32)
    columns = rng.standard_normal((7, length)).astype(F32)
    expected = np.array([[_sse_sum(d * c, True) for c in columns] for d in delta], F32)
    assert np.array_equal(ds.gemm_nt_sums(delta, columns), expected)
    if length >= 64:  # the lanes are not the sequential sum: the test sees an order change
        assert not np.array_equal(ds.lane_sums(products), arith.sequential_sums(products))


def test_ordered_products_add_in_order():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((37, 5)).astype(F32)
    b = rng.standard_normal((37, 300)).astype(F32)
    expected = np.zeros((5, 300), F32)
    for k in range(37):
        expected = expected + a[k][:, None] * b[k][None, :]  # float32 product, then float32 sum
    assert np.array_equal(arith.ordered_sum_of_products(a, b), expected)
    assert not np.array_equal(expected, (a.T.astype(np.float64) @ b).astype(F32))


def _bn_backward_loops(delta, x, x_norm, mean, var, scales, bias_updates, scale_updates):
    """backward_batchnorm_layer as compiled, element by element (double where the C computes in double)."""
    batch, channels, height, width = delta.shape
    spatial, count = height * width, height * width * batch
    delta = delta.reshape(batch, channels, spatial).copy()
    x, x_norm = x.reshape(batch, channels, spatial), x_norm.reshape(batch, channels, spatial)
    for b in range(batch):
        for c in range(channels):
            bias_updates[c] = F32(bias_updates[c] + _sse_sum(delta[b, c], False))
    vector = 4 * (spatial // 4) if spatial >= 4 else 0
    for c in range(channels):
        total = F32(0)
        for b in range(batch):
            products = delta[b, c] * x_norm[b, c]
            if vector:
                total = F32(total + _sse_sum(products[:vector], False))
            for value in products[vector:]:
                total = F32(total + value)
        scale_updates[c] = F32(scale_updates[c] + total)
    delta = delta * scales[None, :, None]
    out = np.empty_like(delta)
    inverse, inverse_f = 1.0 / count, F32(1) / F32(count)
    for c in range(channels):
        v = float(F32(var[c] + F32(1e-5)))
        mean_sum = var_sum = F32(0)
        for b in range(batch):
            for k in range(spatial):
                mean_sum = F32(mean_sum + delta[b, c, k])
                var_sum = F32(var_sum + F32(F32(x[b, c, k] - mean[c]) * delta[b, c, k]))
        mean_delta = F32((-1.0 / np.sqrt(v)) * float(mean_sum))
        var_delta = F32((float(var_sum) * -0.5) * (1.0 / (v * np.sqrt(v))))
        md = float(F32(mean_delta * inverse_f))
        for b in range(batch):
            for k in range(spatial):
                centred, d = float(F32(x[b, c, k] - mean[c])), float(delta[b, c, k])
                if spatial < 4:
                    value = (centred * float(var_delta)) * (inverse + inverse) + (d / np.sqrt(v) + md)
                elif k < vector:
                    twice = float(var_delta) + float(var_delta)
                    value = centred * (twice * inverse) + (d * (1.0 / np.sqrt(v)) + md)
                else:
                    value = ((centred * float(var_delta)) * (inverse + inverse) + md) + d / np.sqrt(v)
                out[b, c, k] = F32(value)
    return out.reshape(batch, channels, height, width)


def _bn_inputs(rng, shape):
    batch, channels = shape[:2]
    delta = rng.standard_normal(shape).astype(F32)
    x = (rng.standard_normal(shape) * 3 + 1).astype(F32)
    flat = x.transpose(1, 0, 2, 3).reshape(channels, -1)
    mean, var = flat.mean(1).astype(F32), (flat.var(1) + 0.01).astype(F32)
    x_norm = ((x - mean[None, :, None, None]) / np.sqrt(var)[None, :, None, None]).astype(F32)
    scales = rng.standard_normal(channels).astype(F32)
    return delta, x, x_norm, mean, var, scales


@pytest.mark.parametrize("shape", [(1, 4, 8, 8), (2, 3, 13, 13), (1, 5, 1, 3), (2, 2, 5, 5)])
def test_batchnorm_backward_is_the_compiled_loops(shape):
    rng = np.random.default_rng(sum(shape))
    delta, x, x_norm, mean, var, scales = _bn_inputs(rng, shape)
    updates = [rng.standard_normal(shape[1]).astype(F32) for _ in range(2)]
    theirs = [u.copy() for u in updates]
    ours = ds.batchnorm_backward(delta, x, x_norm, mean, var, scales, *updates)
    expected = _bn_backward_loops(delta, x, x_norm, mean, var, scales, *theirs)
    assert np.array_equal(ours, expected)
    assert all(np.array_equal(u, t) for u, t in zip(updates, theirs))


def _maxpool_loops(inp, size, stride, pad, delta):
    """forward_maxpool_layer and backward_maxpool_layer, element by element."""
    batch, channels, height, width = inp.shape
    out_h, out_w = (height + pad - size) // stride + 1, (width + pad - size) // stride + 1
    out = np.empty((batch, channels, out_h, out_w), F32)
    back = np.zeros(inp.size, F32)
    for b in range(batch):
        for c in range(channels):
            for i in range(out_h):
                for j in range(out_w):
                    best, where = -np.finfo(F32).max, -1
                    for n in range(size):
                        for m in range(size):
                            row, col = -(pad // 2) + i * stride + n, -(pad // 2) + j * stride + m
                            if 0 <= row < height and 0 <= col < width and inp[b, c, row, col] > best:
                                where = ((b * channels + c) * height + row) * width + col
                                best = inp[b, c, row, col]
                    out[b, c, i, j] = best
                    back[where] = F32(back[where] + delta[b, c, i, j])
    return out, back.reshape(inp.shape)


@pytest.mark.parametrize("size,stride,pad", [(2, 1, 1), (2, 2, 1), (3, 2, 2)])
def test_maxpool_picks_and_adds_as_darknet(size, stride, pad):
    from turboyolo.formats.darknet_cfg import MaxPoolSpec
    from turboyolo.model.layers import DarknetMaxPool

    rng = np.random.default_rng(size * 10 + stride)
    inp = rng.integers(-2, 3, (2, 3, 7, 6)).astype(F32)  # many ties: the first maximum wins
    pool = DarknetMaxPool(MaxPoolSpec(size=size, stride=stride, padding=pad))
    saved = {}
    out = ds._maxpool_forward(pool, inp, saved)
    delta = rng.standard_normal(out.shape).astype(F32)
    back = np.zeros_like(inp)
    np.add.at(back.reshape(-1), saved["indexes"].reshape(-1), delta.reshape(-1))
    expected_out, expected_back = _maxpool_loops(inp, size, stride, pad, delta)
    assert np.array_equal(out, expected_out) and np.array_equal(back, expected_back)


def test_col2im_adds_each_channels_taps_in_order():
    rng = np.random.default_rng(5)
    shapes = ((3, 8, 8, 3, 1, 1), (2, 7, 9, 3, 2, 1), (2, 6, 6, 3, 1, 0))
    for channels, height, width, size, stride, pad in shapes:
        out_h, out_w = (height + 2 * pad - size) // stride + 1, (width + 2 * pad - size) // stride + 1
        columns = rng.standard_normal((channels * size * size, out_h * out_w)).astype(F32)
        image = rng.standard_normal((channels, height, width)).astype(F32)
        expected = image.copy()
        for c in range(channels * size * size):  # col2im_cpu's loops
            for h in range(out_h):
                for w in range(out_w):
                    row = (c // size) % size + h * stride - pad
                    col = c % size + w * stride - pad
                    if 0 <= row < height and 0 <= col < width:
                        channel = c // size // size
                        value = columns[c, h * out_w + w]
                        expected[channel, row, col] = F32(expected[channel, row, col] + value)
        ds.col2im_add(columns, image, size, stride, pad)
        assert np.array_equal(image, expected)


# ---------------------------------------------------------------------------------- against libdarknet.so


@pytest.mark.darknet
@pytest.mark.skipif(not LIBDARKNET.exists(), reason="libdarknet.so (apt-get install darknet) not installed")
def test_reductions_equal_libdarknet():
    lib = ctypes.CDLL(str(LIBDARKNET))
    pointer = ctypes.POINTER(ctypes.c_float)

    def ptr(array):
        return array.ctypes.data_as(pointer)

    rng = np.random.default_rng(11)
    lib.sum_array.restype = ctypes.c_float
    for outs, taps, length in ((5, 7, 64), (3, 9, 169), (4, 6, 3), (2, 5, 2), (3, 4, 1), (6, 10, 1023)):
        delta = rng.standard_normal((outs, length)).astype(F32)
        columns = rng.standard_normal((taps, length)).astype(F32)
        c = rng.standard_normal((outs, taps)).astype(F32)
        expected = c.copy()
        lib.gemm_nt(outs, taps, length, ctypes.c_float(1), ptr(delta), length, ptr(columns), length, ptr(c),
                    taps)
        assert np.array_equal(c, expected + ds.gemm_nt_sums(delta, columns))
        weights = rng.standard_normal((outs, taps)).astype(F32)
        into = rng.standard_normal((taps, length)).astype(F32)
        lib.gemm_cpu(1, 0, taps, length, outs, ctypes.c_float(1), ptr(weights), taps, ptr(delta), length,
                     ctypes.c_float(0), ptr(into), length)
        assert np.array_equal(into, arith.ordered_sum_of_products(weights, delta))
        sums = [lib.sum_array(ptr(np.ascontiguousarray(row)), length) for row in delta]
        assert np.array_equal(np.array(sums, F32), ds.lane_sums(delta))
    for shape in ((1, 4, 8, 8), (2, 3, 13, 13), (1, 5, 1, 3), (2, 2, 5, 5)):
        batch, channels, height, width = shape
        spatial = height * width
        delta, x, x_norm, mean, var, scales = _bn_inputs(rng, shape)
        updates = [rng.standard_normal(channels).astype(F32) for _ in range(2)]
        c_delta, c_updates = delta.copy(), [u.copy() for u in updates]
        mean_delta, var_delta = np.zeros(channels, F32), np.zeros(channels, F32)
        lib.backward_bias(ptr(c_updates[0]), ptr(c_delta), batch, channels, spatial)
        lib.backward_scale_cpu(ptr(x_norm), ptr(c_delta), batch, channels, spatial, ptr(c_updates[1]))
        lib.scale_bias(ptr(c_delta), ptr(scales), batch, channels, spatial)
        lib.mean_delta_cpu(ptr(c_delta), ptr(var), batch, channels, spatial, ptr(mean_delta))
        lib.variance_delta_cpu(ptr(x), ptr(c_delta), ptr(mean), ptr(var), batch, channels, spatial,
                               ptr(var_delta))
        lib.normalize_delta_cpu(ptr(x), ptr(mean), ptr(var), ptr(mean_delta), ptr(var_delta), batch, channels,
                                spatial, ptr(c_delta))
        ours = ds.batchnorm_backward(delta, x, x_norm, mean, var, scales, *updates)
        assert np.array_equal(ours, c_delta)
        assert all(np.array_equal(u, c) for u, c in zip(updates, c_updates))


# ---------------------------------------------------------------------------------- the whole step

NET = """[net]
batch=2
subdivisions=1
width=32
height=32
channels=3
momentum=0.9
decay=0.0005
learning_rate=0.001
burn_in=0
max_batches=10
policy=steps
steps=5
scales=.5

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=16
size=3
stride=2
pad=1
activation=leaky

[convolutional]
batch_normalize=1
filters=8
size=1
stride=1
pad=1
activation=leaky

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=leaky

[shortcut]
from=-3
activation=linear

[maxpool]
size=2
stride=1

[convolutional]
size=1
stride=1
pad=1
filters=21
activation=linear

[yolo]
mask=3,4,5
anchors=4,4, 6,8, 10,10, 12,16, 20,20, 28,28
classes=2
num=6
jitter=0
ignore_thresh=.5
truth_thresh=1
random=0

[route]
layers=-4

[upsample]
stride=2

[route]
layers=-1, 1

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=leaky

[convolutional]
size=1
stride=1
pad=1
filters=21
activation=linear

[yolo]
mask=0,1,2
anchors=4,4, 6,8, 10,10, 12,16, 20,20, 28,28
classes=2
num=6
jitter=0
ignore_thresh=.5
truth_thresh=1
random=0
"""


def _generated_model(tmp_path, text: str = NET, seed: int = 0):
    """The network of ``text`` (written to ``tmp_path / "net.cfg"``) with ``seed``'s random weights."""
    from turboyolo.formats.darknet_cfg import parse_cfg
    from turboyolo.model.darknet import Darknet

    cfg = tmp_path / "net.cfg"
    cfg.write_text(text)
    torch.manual_seed(seed)
    return Darknet(parse_cfg(cfg)).train()


def _generated_batch(seed: int):
    """Two random 32x32 images and 2-4 boxes each (small and large, random classes), one box per cell."""
    rng = np.random.default_rng(seed)
    images = torch.from_numpy(rng.random((2, 3, 32, 32), dtype=np.float32))
    rows = []
    for image in range(2):
        cells = rng.choice(16, size=rng.integers(2, 5), replace=False)  # distinct cells of a 4x4 grid
        for cell in cells:
            cx, cy = (cell % 4 + rng.uniform(0.2, 0.8)) / 4, (cell // 4 + rng.uniform(0.2, 0.8)) / 4
            w, h = rng.uniform(0.08, 0.9, 2)
            rows.append([image, rng.integers(0, 2), cx, cy, w, h])
    return images, torch.tensor(rows, dtype=torch.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_is_autograds_gradient_in_darknets_order(tmp_path, seed):
    """On a generated network with every layer the step takes (3x3 / 1x1 / strided convolutions, both
    pools, route, upsample, shortcut, two heads), the summed deltas are the negated gradient of the
    Darknet loss (autograd, the recipe's forward) to float rounding, less what Darknet's 1x1 convolution
    drops; the update moves every parameter."""
    from turboyolo.model.layers import ConvBlock
    from turboyolo.train.loss import YoloLoss
    from turboyolo.train.optim import OptimizerSettings, Schedule, build_optimizer

    model = _generated_model(tmp_path, seed=seed)
    to_darknet(model, arithmetic=True, batch_norm=True)
    assert ds.unsupported(model) is None
    assert ds.overwritten_deltas(model) == [2]  # layer 2 feeds the 1x1 convolution 3 and the shortcut 5
    images, targets = _generated_batch(seed)
    loss = YoloLoss(model.heads, box_loss="darknet", iou_thresh=1.0)
    reference, summed = copy.deepcopy(model), copy.deepcopy(model)
    # Darknet's 1x1 convolution writes its input's delta (gemm with beta 0) instead of adding to it: layer
    # 3 wipes what the shortcut (layer 5, backward earlier) put into layer 2's delta. Its gradient through
    # the shortcut is lost, in the binary too (test_step_equals_libdarknet); the reference detaches it.
    shortcut = reference.layers[5]
    shortcut.forward = lambda x, outputs: shortcut.act(x + outputs[shortcut.source].detach())
    for net in (reference, summed):
        total, _ = loss(net(images), targets, (32, 32))
        total.backward()
    first = summed.layers[0].conv.weight.grad
    assert (first - reference.layers[0].conv.weight.grad).abs().max() > 0.1 * first.abs().max()

    settings = OptimizerSettings("sgd", 0.001, 0.9, 0.0005)
    step = ds.DarknetStep(model, build_optimizer(model, settings), images_per_iteration=2)
    outputs = step.forward_backward(images, targets)
    for ours, theirs in zip(outputs, reference(images)):
        assert torch.equal(ours, theirs.detach())  # the same forward, to the bit
    checked = 0
    for mine, theirs in zip(model.modules(), reference.modules()):
        if not isinstance(mine, ConvBlock):
            continue
        pairs = [(mine.conv.weight, theirs.conv.weight)]
        pairs += [(mine.conv.bias, theirs.conv.bias)] if mine.bn is None else [
            (mine.bn.weight, theirs.bn.weight), (mine.bn.bias, theirs.bn.bias)]
        for param, ref in pairs:
            updates, grad = torch.from_numpy(step.updates(param)), -ref.grad
            scale = grad.abs().max()
            assert scale > 0
            assert (updates - grad).abs().max() <= 1e-4 * scale
            checked += 1
    assert checked == 19
    before = [p.detach().clone() for p in step.params()]
    step.update(Schedule(0.001, policy="steps", steps=(5,), scales=(0.5,)), 1)
    for param, start in zip(step.params(), before):
        assert not torch.equal(param, start)


@pytest.mark.darknet
@pytest.mark.skipif(not LIBDARKNET.exists() or shutil.which("gcc") is None,
                    reason="libdarknet.so (apt-get install darknet) and gcc, to build the helper, needed")
@pytest.mark.parametrize("images_per_batch", [1, 2])
@pytest.mark.parametrize("seed", [0, 1])
def test_step_equals_libdarknet(tmp_path, seed, images_per_batch):
    """The generated network's mini-batch through libdarknet.so's forward_network + backward_network
    (tests/fixtures/darknet_step/dump_step.c) and through the step: every output and every summed delta
    equal to the bit."""
    from turboyolo.formats.darknet_weights import WeightsHeader, write_weights
    from turboyolo.model.layers import ConvBlock
    from turboyolo.train.optim import OptimizerSettings, build_optimizer

    helper = tmp_path / "dump_step"
    subprocess.run(["gcc", "-O1", f"-I{LIBDARKNET.parent / 'include'}", str(HELPER), "-o", str(helper),
                    f"-L{LIBDARKNET.parent}", "-ldarknet", f"-Wl,-rpath,{LIBDARKNET.parent}", "-lm"],
                   check=True, capture_output=True)
    model = _generated_model(tmp_path, NET.replace("batch=2\nsubdivisions=1",
                                                   f"batch={images_per_batch}\nsubdivisions=1"), seed)
    cfg = tmp_path / "net.cfg"
    write_weights(tmp_path / "net.weights", WeightsHeader(), model.flat_weights())
    images, targets = _generated_batch(seed)
    images, targets = images[:images_per_batch], targets[targets[:, 0] < images_per_batch]
    truth = np.zeros((images_per_batch, ds.MAX_BOXES, 5), F32)
    for image in range(images_per_batch):
        rows = targets[targets[:, 0] == image].numpy()
        truth[image, :len(rows)] = np.concatenate([rows[:, 2:6], rows[:, 1:2]], 1)
    images.numpy().tofile(tmp_path / "input.f32")
    truth.tofile(tmp_path / "truth.f32")
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run([str(helper), str(cfg), str(tmp_path / "net.weights"), str(tmp_path / "input.f32"),
                    str(tmp_path / "truth.f32"), str(out)], check=True, capture_output=True)

    step = ds.DarknetStep(model, build_optimizer(model, OptimizerSettings("sgd", 0.001, 0.9, 0.0005)),
                          images_per_iteration=images_per_batch)
    step.trace = ()
    step.forward_backward(images, targets)
    outputs = step.trace[0]
    compared = 0
    for index, module in enumerate(model.layers):
        theirs = np.fromfile(out / f"{index:02d}_output.f32", F32)
        assert np.array_equal(outputs[index].reshape(-1), theirs), f"layer {index}: output"
        if not isinstance(module, ConvBlock):
            continue
        params = {"wu": module.conv.weight, "bu": module.conv.bias if module.bn is None else module.bn.bias}
        if module.bn is not None:
            params["su"] = module.bn.weight
        for what, param in params.items():
            theirs = np.fromfile(out / f"{index:02d}_{what}.f32", F32)
            assert np.array_equal(step.updates(param).reshape(-1), theirs), f"layer {index}: {what}"
            compared += 1
    assert compared == 19


def test_train_command_runs_darknets_step(tmp_path, capsys):
    """``turboyolo train --config darknet`` takes the step (its momentum buffers are in the checkpoint);
    a setting Darknet's step does not have keeps autograd's backward and says so."""
    from synth import make_dataset, micro_cfg
    from turboyolo.cli import main as cli

    data = make_dataset(tmp_path / "data", 4, 2, num_classes=2)
    cfg = micro_cfg(tmp_path / "m.cfg", size=32, batch=2, num_classes=2)
    common = ["--cfg", str(cfg), "--data", str(data), "--max-batches", "2", "--workers", "0",
              "--evaluation-interval", "0", "--project", str(tmp_path / "runs")]
    assert cli(["train", "--config", "darknet", *common, "--name", "exact"]) == 0
    assert "backward pass PyTorch's" not in capsys.readouterr().out
    state = torch.load(tmp_path / "runs" / "exact" / "weights" / "last.pt", map_location="cpu",
                       weights_only=False)
    buffers = [s[ds.UPDATES] for s in state["optimizer"]["state"].values()]
    assert buffers and all(b.abs().sum() > 0 for b in buffers)

    assert cli(["train", "--config", "darknet", *common, "--name", "clipped", "--clip-norm", "10"]) == 0
    assert "the backward pass PyTorch's (--clip-norm 10" in capsys.readouterr().out


def test_unsupported_names_what_the_step_does_not_apply(tmp_path):
    assert ds.unsupported(_generated_model(tmp_path)) is None
    clipped = NET.replace("ignore_thresh=.5", "ignore_thresh=.5\nmax_delta=5", 1)
    assert "[yolo]" in ds.unsupported(_generated_model(tmp_path, clipped))
    scaled = NET.replace("filters=16\nsize=3\nstride=2", "learning_rate=0.5\nfilters=16\nsize=3\nstride=2", 1)
    with pytest.warns(UserWarning, match="learning_rate"):  # the parser keeps the key and says so
        model = _generated_model(tmp_path, scaled)
    assert "layer 2: learning_rate=" in ds.unsupported(model)
    assert ds.unsupported(_generated_model(tmp_path, NET.replace("activation=leaky", "activation=mish", 1)))
    stopped = NET.replace("[maxpool]\nsize=2\nstride=1", "[maxpool]\nstopbackward=1\nsize=2\nstride=1", 1)
    with pytest.warns(UserWarning, match="stopbackward"):
        model = _generated_model(tmp_path, stopped)
    assert "layer 6: stopbackward=" in ds.unsupported(model)  # on any layer, as backward_network reads it
    for key, value in (("stopbackward", "0"), ("learning_rate", "1.0")):  # values that change nothing
        neutral = NET.replace("[maxpool]\nsize=2\nstride=1", f"[maxpool]\n{key}={value}\nsize=2\nstride=1", 1)
        with pytest.warns(UserWarning):
            assert ds.unsupported(_generated_model(tmp_path, neutral)) is None
    broken = NET.replace("filters=16\nsize=3\nstride=2", "learning_rate=abc\nfilters=16\nsize=3\nstride=2", 1)
    with pytest.warns(UserWarning):
        assert "learning_rate=" in ds.unsupported(_generated_model(tmp_path, broken))  # refused, no crash


def test_momentum_carries_over_between_pytorchs_sgd_and_darknets_step(tmp_path):
    """A run resumed across the two steps keeps its momentum: after a PyTorch SGD update, Darknet's step
    (its buffer converted) makes the same second update as PyTorch's SGD would, and back again."""
    from turboyolo.train.optim import OptimizerSettings, Schedule, build_optimizer

    batch, lr = 2, 0.01
    model = _generated_model(tmp_path)
    optimizer = build_optimizer(model, OptimizerSettings("sgd", lr, 0.9, 0.0005))
    params = [p for group in optimizer.param_groups for p in group["params"]]
    generator = torch.Generator().manual_seed(1)
    first, second = ([torch.randn(p.shape, generator=generator) for p in params] for _ in range(2))
    for param, grad in zip(params, first):
        param.grad = grad.clone()
    optimizer.step()
    twin_model = copy.deepcopy(model)
    twin = build_optimizer(twin_model, OptimizerSettings("sgd", lr, 0.9, 0.0005))
    twin.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # as from a checkpoint: its own tensors
    for param, grad in zip(params, second):  # PyTorch's second update
        param.grad = grad.clone()
    optimizer.step()
    step = ds.DarknetStep(twin_model, twin, batch)  # converts the buffers
    assert all(set(state) == {ds.UPDATES} for state in twin.state.values())
    twin_params = [p for group in twin.param_groups for p in group["params"]]
    for param, grad in zip(twin_params, second):  # Darknet's summed deltas: -batch x the mean's gradient
        step.updates(param)[...] += (-batch * grad).numpy()
    step.update(Schedule(lr), 2)
    for mine, theirs in zip(twin_params, params):
        assert torch.allclose(mine, theirs, rtol=0, atol=1e-6)
    ds.momentum_from_darknet(twin, batch)
    for mine, theirs in zip(twin_params, params):
        state, reference = twin.state[mine], optimizer.state[theirs]
        assert set(state) == {"momentum_buffer"}
        assert torch.allclose(state["momentum_buffer"], reference["momentum_buffer"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy", ["constant", "steps", "step", "poly"])
def test_rate_is_get_current_rate(policy):
    from turboyolo.train.optim import Schedule, lr_at

    schedule = Schedule(0.001, burn_in=3, power=4.0, policy=policy, steps=(5, 8), scales=(0.1, 0.5),
                        max_batches=12, step=4, scale=0.5)
    for iteration in range(1, 13):
        rate = ds.darknet_rate(schedule, iteration)
        assert rate.dtype == F32
        assert math.isclose(float(rate), lr_at(schedule, iteration), rel_tol=1e-6)
    steps = Schedule(0.001, policy="steps", steps=(5, 8), scales=(0.1, 0.5))
    assert ds.darknet_rate(steps, 9) == F32(F32(F32(0.001) * F32(0.1)) * F32(0.5))  # rate *= scale, in float
    cosine = Schedule(0.001, policy="cosine", max_batches=12)  # turboyolo's own: the trainer's rate, in float
    assert ds.darknet_rate(cosine, 6, lr_at) == F32(lr_at(cosine, 6))
    with pytest.raises(ValueError, match="rate_at"):
        ds.darknet_rate(cosine, 6)
