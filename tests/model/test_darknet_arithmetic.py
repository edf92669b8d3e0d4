"""``--arithmetic darknet`` (exact/arithmetic.py, carried by the modules of exact/modules.py): Darknet's
float32 operations, checked against the C loops they transcribe, written out here element by element;
gradients are PyTorch's usual ones.

(The whole forward of yolov3-tiny was compared with ``libdarknet.so``'s layer outputs: every element of
every layer equal; tests/train/test_darknet_command.py checks the effect through the command.)
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from turboyolo.exact import arithmetic as arith
from turboyolo.exact.modules import DarknetTrainingBatchNorm2d


def _gemm_reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """``im2col_cpu`` + ``gemm_nn`` for one image as Darknet's C: C[i][j] += A[i][k] * B[k][j], k in order."""
    channels, height, width = x.shape
    out_channels, _, size, _ = w.shape
    out_h, out_w = (height + 2 * pad - size) // stride + 1, (width + 2 * pad - size) // stride + 1
    padded = np.zeros((channels, height + 2 * pad, width + 2 * pad), np.float32)
    padded[:, pad:pad + height, pad:pad + width] = x
    out = np.zeros((out_channels, out_h, out_w), np.float32)
    for c in range(channels):
        for row in range(size):
            for col in range(size):
                patch = padded[c, row:row + stride * out_h:stride, col:col + stride * out_w:stride]
                for o in range(out_channels):
                    out[o] = out[o] + np.float32(w[o, c, row, col]) * patch  # float32 product, float32 sum
    return out


def test_sequential_conv_is_darknets_gemm():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    for stride, pad in ((1, 1), (2, 1), (1, 0)):
        ours = arith.sequential_conv2d(torch.from_numpy(x), torch.from_numpy(w), stride, pad).numpy()
        for b in range(2):
            assert np.array_equal(ours[b], _gemm_reference(x[b], w, stride, pad))
        torch_out = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=stride, padding=pad).numpy()
        assert np.abs(ours - torch_out).max() < 1e-5


def test_conv_gradients_are_conv2d_gradients():
    rng = np.random.default_rng(1)
    conv = torch.nn.Conv2d(3, 5, 3, 1, 1, bias=True)
    x = torch.from_numpy(rng.standard_normal((2, 3, 8, 8)).astype(np.float32)).requires_grad_()
    grad = torch.from_numpy(rng.standard_normal((2, 5, 8, 8)).astype(np.float32))
    arith.conv_forward(conv, x).backward(grad)
    ours = (x.grad.clone(), conv.weight.grad.clone(), conv.bias.grad.clone())
    x.grad = conv.weight.grad = conv.bias.grad = None
    conv(x).backward(grad)
    for mine, theirs in zip(ours, (x.grad, conv.weight.grad, conv.bias.grad)):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


def test_variance_and_normalise_are_darknets():
    """variance_cpu: ``variance += pow(x - mean, 2)`` (float accumulator, double addend), then times the
    float 1/(n-1); normalize_cpu: ``(x - mean) / (sqrt(var) + .000001f)`` in double."""
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 3, 5, 5)) * 3 + 1).astype(np.float32)
    centred = torch.from_numpy(x) - torch.from_numpy(x).mean((0, 2, 3), keepdim=True)
    c = centred.numpy()
    expected = []
    for channel in range(3):
        total = np.float32(0)
        for b in range(2):
            for value in c[b, channel].ravel():
                total = np.float32(float(total) + float(value) ** 2)
        expected.append(total * np.float32(1.0 / 49))
    var = arith.variance(centred)
    assert np.array_equal(var.numpy(), np.array(expected, np.float32))
    normalised = arith.normalise(centred, var).numpy()
    want = (c.astype(np.float64) / (np.sqrt(var.numpy().astype(np.float64)) + float(np.float32(1e-6)))
            [None, :, None, None]).astype(np.float32)
    assert np.array_equal(normalised, want)


def test_leaky_is_a_double_tenth():
    x = torch.tensor([-3.0, -1e-8, 0.0, 2.5, -0.7], requires_grad=True)
    y = arith.DarknetLeakyFunction.apply(x)
    assert y.tolist() == [float(np.float32(v * 0.1)) if v <= 0 else float(np.float32(v))
                          for v in x.detach().double().tolist()]
    y.sum().backward()
    assert x.grad.tolist() == [float(np.float32(0.1)), float(np.float32(0.1)), float(np.float32(0.1)), 1.0,
                               float(np.float32(0.1))]


def test_batch_norm_exact_path_differs_only_by_rounding():
    """The exact path (CPU, float32) computes the same batch norm, rounded as Darknet rounds."""
    torch.manual_seed(0)
    bn = DarknetTrainingBatchNorm2d(4).train()
    x = torch.randn(2, 4, 6, 6) * 5 + 2
    plain = bn(x)
    bn.exact = True
    exact = bn(x)
    torch.testing.assert_close(plain, exact, rtol=0, atol=1e-5)


def test_to_darknet_swaps_the_blocks_modules_and_keeps_their_tensors():
    """Darknet's arithmetic comes in by swapping modules: the network built from a cfg has none of it, and
    the swap keeps every parameter and buffer (the same tensors, the same state_dict keys)."""
    from turboyolo.exact.modules import DarknetConv2d, DarknetLeakyReLU, to_darknet
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.zoo import make_spec

    torch.manual_seed(0)
    model = Darknet(make_spec("yolov3-tiny", num_classes=2, width=32, height=32))
    assert not [m for m in model.modules() if type(m).__module__.startswith("turboyolo.exact")]
    keys, tensors = list(model.state_dict()), [id(t) for t in (*model.parameters(), *model.buffers())]
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        plain = model.train()(x)
    to_darknet(model, arithmetic=True, batch_norm=True)
    assert list(model.state_dict()) == keys
    assert [id(t) for t in (*model.parameters(), *model.buffers())] == tensors
    block = model.layers[0]
    assert (type(block.conv), type(block.bn), type(block.act)) == (
        DarknetConv2d, DarknetTrainingBatchNorm2d, DarknetLeakyReLU)
    assert block.bn.exact
    with torch.no_grad():
        exact = model(x)
    # Darknet's batch norm in training (the unbiased variance, sqrt(var) + 1e-6) gives other outputs
    assert all(a.isfinite().all() and not torch.equal(a, b) for a, b in zip(exact, plain))
