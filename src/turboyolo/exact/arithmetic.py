"""``--arithmetic darknet``: the forward pass of a convolution block in the float32 operations of pjreddie's
Darknet CPU code, so its leaky-ReLU slopes and max-pool choices are Darknet's even where a value lies within
float rounding of a tie.

Why: the two programs otherwise add the same numbers in different orders. PyTorch's convolution kernels
agree with Darknet's ``gemm_nn`` to ~1e-6 of a layer's largest output, and an element that Darknet puts
just above the leaky ReLU's kink (0) and PyTorch just below it takes the other slope (1 or 0.1): its
channel's gradient then differs by percents (docs/DARKNET_TRAINING.md, item 13).

What Darknet computes (checked bit for bit against ``libdarknet.so``'s layer outputs):

* convolution (``im2col_cpu`` + ``gemm_nn``): each output is ``0 + w_0 x_0 + w_1 x_1 + ...`` with the
  K = channels x size x size products in (channel, row, column) order, each product and each sum rounded
  to float32 (no fused multiply-add); a bias (no batch norm) is added after;
* batch norm (``mean_cpu``, ``variance_cpu``, ``normalize_cpu``): the mean a sequential float32 sum times
  the float 1/n; the variance a sequential sum in which each ``float + double(d)^2`` is rounded to float
  once (``pow`` returns a double), times the float 1/(n-1); ``(x - mean) / (sqrt(var) + 1e-6f)`` in
  double, rounded to float; then ``* scale``, ``+ bias`` in float32;
* leaky ReLU: ``.1 * x`` in double, rounded to float.

These are the forward pieces. With ``--config darknet``'s settings, :mod:`turboyolo.exact.step` runs them
with Darknet's deltas, backward and update (the whole step equal to the binary's); otherwise the modules
that carry them (:mod:`turboyolo.exact.modules`, swapped into the network's blocks) use them in their
forward and autograd's gradients are the usual ones (their rounding moves an update by ~1e-6 of its scale,
not by a slope). Slow: the convolution is a loop over K (some 100x PyTorch's kernels on the CPU); meant
for checking against Darknet and for Darknet-exact runs of small models.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

EPS = float(np.float32(1e-6))  # .000001f, as a double


class DarknetConvFunction(torch.autograd.Function):
    """``conv2d`` (groups 1, dilation 1) whose forward adds the K products of each output one at a time."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.stride, ctx.padding = stride, padding
        return sequential_conv2d(x, weight, stride, padding)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = torch.nn.grad.conv2d_input(x.shape, weight, grad, ctx.stride, ctx.padding)
        if ctx.needs_input_grad[1]:
            grad_w = torch.nn.grad.conv2d_weight(x, weight.shape, grad, ctx.stride, ctx.padding)
        return grad_x, grad_w, None, None


def sequential_conv2d(x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int) -> torch.Tensor:
    """``[B, C, H, W]`` x ``[O, C, k, k]`` -> ``[B, O, H', W']``, each output summed over (c, row, col) in
    order, one float32 rounding per product and per sum."""
    batch, _, height, width = x.shape
    out_channels, _, size, _ = weight.shape
    out_h = (height + 2 * padding - size) // stride + 1
    out_w = (width + 2 * padding - size) // stride + 1
    columns = F.unfold(x.detach().float(), size, padding=padding, stride=stride).numpy()  # [B, K, L]
    taps = weight.detach().float().reshape(out_channels, -1).t().numpy()  # [K, O]: tap k's weights
    out = np.stack([ordered_sum_of_products(taps, columns[b]) for b in range(batch)])
    return torch.from_numpy(out).reshape(batch, out_channels, out_h, out_w)


CACHED = 1 << 20  # floats of an output block kept together while its sums run


def ordered_sum_of_products(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[K, M]``, ``[K, N]`` -> ``[M, N]``: ``0 + a[0, m] b[0, n] + a[1, m] b[1, n] + ...``, ``k`` in order,
    each product and each sum rounded to float32 (no fused multiply-add): Darknet's ``gemm_nn`` (the
    forward convolution) and ``gemm_tn`` (its input gradient), whose loops over ``k`` the compiler
    vectorises across ``n`` only. Two tensor operations per ``k`` (PyTorch's broadcasting loops are
    faster here than numpy's), over blocks of columns."""
    a_t, b_t = torch.from_numpy(np.ascontiguousarray(a)), torch.from_numpy(np.ascontiguousarray(b))
    depth, rows = a.shape
    cols = b.shape[1]
    out = torch.empty((rows, cols))
    width = max(1, CACHED // max(rows, 1))
    for start in range(0, cols, width):
        stop = min(start + width, cols)
        total = torch.zeros((rows, stop - start))
        product = torch.empty_like(total)
        for k in range(depth):
            torch.mul(a_t[k, :, None], b_t[k, None, start:stop], out=product)  # rounded, then added
            total.add_(product)
        out[:, start:stop] = total
    return out.numpy()


def conv_forward(conv: torch.nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` in Darknet's arithmetic (its bias, if any, added after the sum)."""
    if conv.groups != 1 or conv.dilation != (1, 1) or x.dtype != torch.float32:
        # not a pjreddie yolov3 convolution: PyTorch's own
        return F.conv2d(x, conv.weight, conv.bias, conv.stride, conv.padding, conv.dilation, conv.groups)
    out = DarknetConvFunction.apply(x, conv.weight, conv.stride[0], conv.padding[0])
    return out if conv.bias is None else out + conv.bias.view(1, -1, 1, 1)


def variance(centred: torch.Tensor) -> torch.Tensor:
    """``variance_cpu``: per channel of ``[N, C, H, W]`` (already less the mean), ``float(v + d * d)`` in
    double, one element after another (image, row, column), times the float 1 / (n - 1). ``[C]``."""
    channels = centred.shape[1]
    squares = centred.detach().transpose(0, 1).reshape(channels, -1).double().square().numpy()
    total = np.zeros(channels, np.float32)
    for column in squares.T:
        total = (total + column).astype(np.float32)  # float32 + double -> double, rounded to float
    count = squares.shape[1]
    return torch.from_numpy(total * np.float32(1.0 / max(count - 1, 1)))


def sequential_sums(rows: np.ndarray) -> np.ndarray:
    """Per row of ``rows`` ``[R, L]`` float32, the sum one float after another from 0, as Darknet adds into
    memory (``mean_cpu``, ``variance_cpu``'s float part, ``mean_delta_cpu``, ``variance_delta_cpu``); numpy's
    ``add.accumulate`` is sequential by definition (torch's ``cumsum`` is not)."""
    if rows.shape[1] == 0:
        return np.zeros(rows.shape[0], np.float32)
    return np.add.accumulate(rows, axis=1, dtype=np.float32)[:, -1].copy()


def leaky(x: torch.Tensor) -> torch.Tensor:
    """Darknet's leaky ReLU: ``x`` above 0, else ``.1 * x`` in double rounded to float."""
    return torch.where(x > 0, x, (x.double() * 0.1).float())


def normalise(centred: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """``normalize_cpu``: ``(x - mean) / (sqrt(var) + .000001f)`` in double, rounded to float32."""
    denominator = var.double().sqrt() + EPS
    return (centred.double() / denominator.view(1, -1, 1, 1)).float()


class DarknetLeakyFunction(torch.autograd.Function):
    """Leaky ReLU with Darknet's ``.1 * x`` (a double product rounded to float); slope 1 or 0.1f back."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return leaky(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (x,) = ctx.saved_tensors
        return torch.where(x > 0, grad, grad * 0.1)
