"""Darknet's arithmetic in a network's own modules, brought in by swapping modules (:func:`to_darknet`), as
:func:`turboyolo.model.cpu_kernels.tune_for_cpu` swaps convolutions: the layers themselves
(:mod:`turboyolo.model.layers`) know nothing of it.

- :class:`DarknetConv2d` (``--arithmetic darknet``): a convolution whose forward adds its products in
  Darknet's order (:func:`turboyolo.exact.arithmetic.conv_forward`);
- :class:`DarknetLeakyReLU` (``--arithmetic darknet``): ``.1 * x`` in double, rounded to float;
- :class:`DarknetTrainingBatchNorm2d` (``--bn-train darknet``): batch norm in training as Darknet computes
  it (:class:`DarknetBatchNormFunction`), in Darknet's float operations too with ``--arithmetic darknet``.

Each keeps the parameters, buffers and ``state_dict`` keys of the module it replaces, so checkpoints,
``.weights`` files and the optimizer see the same tensors.
"""

from __future__ import annotations

import torch
from torch import nn

from turboyolo.exact import arithmetic
from turboyolo.model.layers import DARKNET_BN_EPS, DARKNET_BN_MOMENTUM, ConvBlock, DarknetBatchNorm2d

# Darknet's batch-norm backward (batchnorm_layer.c) divides by sqrt(var + 1e-5), not by the forward's
# sqrt(var) + 1e-6.
DARKNET_BN_BACKWARD_EPS = 1e-5


class DarknetConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose float32 forward is Darknet's (``im2col_cpu`` + ``gemm_nn``: the products added
    in order, each rounded); autograd's gradients."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or self.groups != 1 or self.dilation != (1, 1):
            return super().forward(x)  # not a pjreddie yolov3 convolution: PyTorch's own
        return arithmetic.conv_forward(self, x)

    @classmethod
    def replacing(cls, conv: nn.Conv2d) -> DarknetConv2d:
        """A Darknet convolution holding ``conv``'s own parameters (the same tensors)."""
        new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                  conv.dilation, conv.groups, bias=conv.bias is not None, padding_mode=conv.padding_mode,
                  device="meta")
        new.weight = conv.weight
        if conv.bias is not None:
            new.bias = conv.bias
        return new


class DarknetLeakyReLU(nn.LeakyReLU):
    """Darknet's leaky ReLU (slope 0.1): ``.1 * x`` in double rounded to float in float32."""

    def __init__(self):
        super().__init__(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            return super().forward(x)
        return arithmetic.DarknetLeakyFunction.apply(x)


class DarknetTrainingBatchNorm2d(DarknetBatchNorm2d):
    """:class:`~turboyolo.model.layers.DarknetBatchNorm2d` whose training is Darknet's
    (:class:`DarknetBatchNormFunction`: the unbiased variance, ``(x - mean) / (sqrt(var) + 1e-6)`` and
    its hand-written backward); the running statistics move by ``momentum`` towards the batch mean and
    unbiased variance. ``exact`` (``--arithmetic darknet``): the variance and the normalisation in
    Darknet's float operations on the CPU. Inference is the parent's."""

    def __init__(self, num_features: int, exact: bool = False):
        super().__init__(num_features)
        self.exact = exact

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        exact = self.exact and x.device.type == "cpu" and x.dtype == torch.float32
        out, mean, var = DarknetBatchNormFunction.apply(x, self.weight, self.bias, exact)
        with torch.no_grad():
            momentum = self.momentum if self.momentum is not None else DARKNET_BN_MOMENTUM
            self.running_mean.mul_(1.0 - momentum).add_(mean.to(self.running_mean.dtype), alpha=momentum)
            self.running_var.mul_(1.0 - momentum).add_(var.to(self.running_var.dtype), alpha=momentum)
            self.num_batches_tracked.add_(1)
        return out

    @classmethod
    def replacing(cls, bn: nn.BatchNorm2d, exact: bool) -> DarknetTrainingBatchNorm2d:
        """Darknet's batch norm holding ``bn``'s own parameters and statistics (the same tensors)."""
        new = cls(bn.num_features, exact)
        new.momentum = bn.momentum
        new.weight, new.bias = bn.weight, bn.bias
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            setattr(new, name, getattr(bn, name))
        new.train(bn.training)
        return new


def to_darknet(model: nn.Module, *, arithmetic: bool, batch_norm: bool) -> nn.Module:
    """Swap, in place, the modules of ``model``'s convolution blocks for Darknet's: with ``arithmetic``
    (``--arithmetic darknet``) the convolution and the leaky ReLU; with ``batch_norm`` (``--bn-train
    darknet``) the batch norm in training. Returns ``model``. Call it before the optimizer and the
    EMA are made (they hold the same parameters either way; the EMA copies the modules)."""
    for block in model.modules():
        if not isinstance(block, ConvBlock):
            continue
        if arithmetic:
            block.conv = DarknetConv2d.replacing(block.conv)
            act = block.act
            if isinstance(act, nn.LeakyReLU) and act.negative_slope == 0.1:
                block.act = DarknetLeakyReLU()
        if batch_norm and isinstance(block.bn, DarknetBatchNorm2d):
            block.bn = DarknetTrainingBatchNorm2d.replacing(block.bn, exact=arithmetic)
    return model


class DarknetBatchNormFunction(torch.autograd.Function):
    """Darknet's batch norm in training (``forward_batchnorm_layer`` / ``backward_batchnorm_layer``, CPU).

    Forward: ``y = weight * (x - mean) / (sqrt(var) + 1e-6) + bias`` with the mini-batch's per-channel
    mean and *unbiased* variance (``variance_cpu`` divides by ``n - 1``); returns ``(y, mean, var)``
    (``mean`` and ``var`` ``[C]``, without gradient, for the running statistics).

    Backward: Darknet's deltas, which are not the exact derivative of its forward: they are the textbook
    batch-norm gradient evaluated with ``sqrt(var + 1e-5)`` (``mean_delta_cpu``, ``variance_delta_cpu``,
    ``normalize_delta_cpu``); the weight's gradient uses the forward's normalised ``x``.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, exact: bool = False):
        ctx.input_dtype = x.dtype
        x = x.to(weight.dtype)  # statistics in the parameters' precision (float32) under autocast too
        mean, centred, var, normalised = batch_statistics(x, exact)
        ctx.save_for_backward(centred, normalised, var, weight)
        ctx.mark_non_differentiable(mean, var)
        out = normalised * weight.view(1, -1, 1, 1) + bias.view(1, -1, 1, 1)
        return out.to(ctx.input_dtype), mean, var

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _mean_grad, _var_grad):
        centred, normalised, var, weight = ctx.saved_tensors
        grad = grad.to(weight.dtype)
        dims = (0, 2, 3)
        count = grad.numel() // grad.shape[1]
        grad_bias = grad.sum(dims)
        grad_weight = (grad * normalised).sum(dims)
        delta = grad * weight.view(1, -1, 1, 1)
        std = (var + DARKNET_BN_BACKWARD_EPS).sqrt()
        mean_delta = -delta.sum(dims) / std
        var_delta = -0.5 * (delta * centred).sum(dims) / std.pow(3)
        grad_x = (delta / std.view(1, -1, 1, 1) + (2.0 / count) * var_delta.view(1, -1, 1, 1) * centred
                  + (mean_delta / count).view(1, -1, 1, 1))
        return grad_x.to(ctx.input_dtype), grad_weight, grad_bias, None


def batch_statistics(x: torch.Tensor, exact: bool) -> tuple[torch.Tensor, ...]:
    """Darknet's training-time batch norm before its scale and bias (``mean_cpu``, ``variance_cpu``,
    ``normalize_cpu``): ``(mean, x - mean, var, normalised)``, the mean and the *unbiased* variance ``[C]``.
    ``exact`` (``--arithmetic darknet``): the variance's double additions and the normalisation in
    double, as the C code; else PyTorch's float32 arithmetic in the same formula."""
    count = x.numel() // x.shape[1]
    mean = channel_sums(x) * (1.0 / count)  # mean_cpu: the sum times the float 1/n
    centred = x - mean.view(1, -1, 1, 1)
    if exact:
        var = arithmetic.variance(centred)
        return mean, centred, var, arithmetic.normalise(centred, var)
    var = channel_sums(centred.square()) * (1.0 / max(count - 1, 1))
    return mean, centred, var, centred / (var.sqrt() + DARKNET_BN_EPS).view(1, -1, 1, 1)


def channel_sums(values: torch.Tensor) -> torch.Tensor:
    """Per channel, the sum of ``values`` ``[N, C, H, W]`` -> ``[C]``, as Darknet's ``mean_cpu`` and
    ``variance_cpu`` add: one float32 at a time, image after image, row after row.

    The order matters: on a 128 x 128 map a float32 sum in another order (PyTorch's) is some 1e-5 of a
    standard deviation away from Darknet's, enough to put a pre-activation that Darknet has just above
    the leaky ReLU's kink just below it (docs/DARKNET_TRAINING.md). On the CPU, float32 tensors are
    summed in Darknet's order (numpy's ``cumsum`` is sequential; torch's is not); elsewhere the
    device's own reduction is used (Darknet's GPU build does not add in this order either).
    """
    channels = values.shape[1]
    if values.device.type != "cpu" or values.dtype != torch.float32:
        return values.sum((0, 2, 3))
    flat = values.detach().transpose(0, 1).reshape(channels, -1).numpy()
    return torch.from_numpy(arithmetic.sequential_sums(flat))
