"""Darknet's training step to the bit: ``--arithmetic darknet``'s forward, the ``[yolo]`` deltas, the
backward pass and the update in the float32 operations of pjreddie's CPU code (61c9d02e) as the Debian
build compiles it (``-Ofast``, x86-64 SSE2, no fused multiply-add).

Why a step of its own and not autograd: the update after one iteration agrees with Darknet's either way
to ~1e-5 of its scale, but a backward in another order of additions starts every later iteration from
weights a float rounding away, and that difference grows (docs/DARKNET_TRAINING.md, item 13). Here every
float operation is Darknet's, read from the binary's machine code where ``-Ofast`` rewrote the C:

* reductions into a local variable are 4-lane SSE sums: lane ``j`` adds elements ``4t + j`` in order, the
  lanes are joined as ``(l0 + l2) + (l1 + l3)`` and the 0-3 left over are added after (``gemm_nt`` adds a
  pair first, then the last one): ``gemm_nt`` (weight gradient), ``sum_array`` (``backward_bias``),
  ``backward_scale_cpu``; reductions into memory (``mean_delta_cpu``, ``variance_delta_cpu``) add one
  float after another;
* ``gemm_tn`` (input gradient) adds the products of each output channel in order, ``col2im_cpu`` the
  taps of each channel in order, into what the layer's delta holds already (a route's, a max-pool's);
  a 1x1 convolution writes its input's delta (``gemm`` with beta 0), as Darknet does;
* ``normalize_delta_cpu`` is three formulas: the vectorised loop (``delta * (1/s)`` and ``2 vd * (1/n)``,
  ``s = sqrt(var + 1e-5)``, in double), its tail, and the scalar loop, with divisions turned into
  products as compiled; ``variance_delta_cpu``'s ``pow(v, -1.5)`` is ``1 / (v sqrt(v))``;
* the update is ``axpy`` / ``scal`` (a product and a sum, each rounded), the momentum buffer holding
  Darknet's summed deltas (stored in the optimizer's state as ``darknet_updates``, so checkpoints keep it);
  the rate is ``get_current_rate``'s float arithmetic.

Layers: convolution (groups 1, leaky or linear, batch norm or bias), max-pool, upsample, route, shortcut
(same shapes, linear) and ``[yolo]`` (pjreddie's keys). :func:`unsupported` names what a network has
beyond them; ``turboyolo train`` then keeps autograd's backward and says so.

Slow (each sum a loop of float32 vector operations; the step costs some 2.3x its forward, ~1.9 s per 256x256
image on one core of a Zen 2 VM): meant for checking against
Darknet and for Darknet-exact runs of small models on the CPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from turboyolo.exact import arithmetic as darknet_arithmetic
from turboyolo.exact.modules import batch_statistics
from turboyolo.model.darknet import Darknet, HeadInfo
from turboyolo.model.layers import ConvBlock, DarknetMaxPool, Route, Shortcut, Upsample, YoloHead

F32 = np.float32
UPDATES = "darknet_updates"  # the optimizer state key of a parameter's Darknet momentum buffer
MAX_BOXES = 90  # [yolo] max= default: the truths a layer reads per image
FLT_MAX = np.finfo(np.float32).max
# Darknet's per-layer keys (any section) that neither the step nor autograd applies: the step refuses them
PER_LAYER_KEYS = ("learning_rate", "stopbackward", "dont_update", "train_only_bn")
_CACHED = 1 << 15  # floats of a block of lane sums kept in the cache (gemm_nt_sums)


def unsupported(model: Darknet) -> str | None:
    """Why :class:`DarknetStep` cannot run ``model`` (a layer it does not transcribe), or None."""
    for index, module in enumerate(model.layers):
        keys = sorted(key for key, value in getattr(model.spec.layers[index], "extra", ())
                      if key in PER_LAYER_KEYS and not _neutral(key, value))
        if keys:
            return f"layer {index}: {', '.join(keys)}= (a per-layer key the step does not apply)"
        if isinstance(module, ConvBlock):
            conv = module.conv
            slope = getattr(module.act, "negative_slope", None)
            if conv.groups != 1 or conv.dilation != (1, 1):
                return f"layer {index}: a grouped or dilated convolution"
            if not (slope == 0.1 or isinstance(module.act, nn.Identity)):
                return f"layer {index}: activation {type(module.act).__name__} (only leaky and linear)"
            if conv.kernel_size[0] == 1 and (conv.stride[0] != 1 or conv.padding[0] != 0):
                return f"layer {index}: a 1x1 convolution with stride or padding"
        elif isinstance(module, Route):
            if module.groups != 1:
                return f"layer {index}: a route with groups"
        elif isinstance(module, Shortcut):
            if not isinstance(module.act, nn.Identity):
                return f"layer {index}: a shortcut with an activation"
        elif isinstance(module, YoloHead):
            head = next(h for h in model.heads if h.layer_index == index)
            if (head.new_coords or head.scale_x_y != 1.0 or head.truth_thresh < 1.0 or head.iou_loss != "mse"
                    or head.iou_normalizer not in (None, 1.0) or head.obj_normalizer != 1.0
                    or head.iou_thresh < 1.0 or not math.isinf(head.max_delta)):
                return f"layer {index}: a [yolo] layer with AlexeyAB's keys"
        elif not isinstance(module, (DarknetMaxPool, Upsample)):
            return f"layer {index}: {type(module).__name__}"
    return None


def overwritten_deltas(model: Darknet) -> list[int]:
    """The layers whose gradient Darknet's CPU backward partly loses: a 1x1 convolution writes its input's
    delta (``gemm`` with beta 0) instead of adding to it, so what a later route or shortcut put there first
    is gone (darknet53's residual blocks: the shortcut's gradient into its source). This step does the
    same; ``--arithmetic torch`` (autograd) keeps those gradients."""
    consumers: dict[int, list[int]] = {}
    for index, module in enumerate(model.layers):
        if isinstance(module, Route):
            sources = list(module.sources)
        elif isinstance(module, Shortcut):
            sources = [index - 1, module.source]
        else:
            sources = [index - 1] if index > 0 else []
        for source in sources:
            consumers.setdefault(source, []).append(index)
    return [index - 1 for index, module in enumerate(model.layers)
            if index and isinstance(module, ConvBlock) and module.conv.kernel_size[0] == 1
            and any(consumer > index for consumer in consumers.get(index - 1, []))]


def _neutral(key: str, value: str) -> bool:
    """Whether a per-layer key's value changes nothing (``learning_rate=1``, ``stopbackward=0``, ...)."""
    try:
        return float(value) == (1.0 if key == "learning_rate" else 0.0)
    except ValueError:
        return False


# ------------------------------------------------------------------------------------ reductions


def lane_sums(products: np.ndarray, pair_tail: bool = False, start: np.ndarray | None = None) -> np.ndarray:
    """Per row of ``products`` ``[R, L]`` float32, the sum as ``-Ofast`` vectorises ``sum += p[k]``.

    Four lanes when ``L >= 4`` (lane ``j``: ``p[4t + j]`` in order), joined as ``(l0 + l2) + (l1 + l3)``;
    the ``L % 4`` left (all of them when ``L < 4``) are added after, one by one, or (``pair_tail``,
    ``gemm_nt``) a pair ``(p[a] + p[a+1])`` first and then the last one. ``start``: the joined lanes when
    the caller summed them (``products`` then holds the left-over elements only).
    """
    rows, length = products.shape
    vector = 4 * (length // 4) if length >= 4 and start is None else 0
    total = np.zeros(rows, F32) if start is None else start
    if vector:
        lanes = np.add.accumulate(products[:, :vector].reshape(rows, -1, 4), axis=1, dtype=F32)[:, -1]
        total = (lanes[:, 0] + lanes[:, 2]) + (lanes[:, 1] + lanes[:, 3])
    rest = products[:, vector:]
    if pair_tail and rest.shape[1] >= 2:
        total = total + (rest[:, 0] + rest[:, 1])
        rest = rest[:, 2:]
    for column in rest.T:
        total = total + column
    return total


def gemm_nt_sums(delta: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``gemm_nt``'s sums ``[O, K]``: ``sum_l delta[o, l] * columns[k, l]`` in its lane order.

    The four lanes of every ``(o, k)`` are accumulated together, one step ``t`` (elements ``4t .. 4t+3``)
    after another, over blocks of ``o`` small enough to stay in the cache."""
    outs, length = delta.shape
    taps = columns.shape[0]
    vector = 4 * (length // 4) if length >= 4 else 0
    steps = vector // 4
    by_step = np.ascontiguousarray(delta[:, :vector].reshape(outs, steps, 4).transpose(1, 2, 0))  # [T, 4, O]
    col_step = np.ascontiguousarray(columns[:, :vector].reshape(taps, steps, 4).transpose(1, 2, 0))
    rest_delta, rest_columns = delta[:, vector:], columns[:, vector:]
    result = np.empty((outs, taps), F32)
    rows = max(1, _CACHED // (4 * taps))
    for start in range(0, outs, rows):
        stop = min(start + rows, outs)
        lanes = np.zeros((4, stop - start, taps), F32)
        product = np.empty_like(lanes)
        for t in range(steps):
            np.multiply(by_step[t, :, start:stop, None], col_step[t, :, None, :], out=product)
            lanes += product
        tail = rest_delta[start:stop, None, :] * rest_columns[None, :, :]  # [o, K, L % 4]
        total = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3])
        tail = tail.reshape((stop - start) * taps, rest_delta.shape[1])
        sums = lane_sums(tail, pair_tail=True, start=total.reshape(-1))
        result[start:stop] = sums.reshape(stop - start, taps)
    return result


def col2im_add(columns: np.ndarray, image_delta: np.ndarray, size: int, stride: int, pad: int) -> None:
    """``col2im_cpu``: add ``columns`` ``[C * size * size, H' * W']`` into ``image_delta`` ``[C, H, W]`` in
    place, each channel's taps in order (out-of-image positions dropped)."""
    channels, height, width = image_delta.shape
    out_h = (height + 2 * pad - size) // stride + 1
    out_w = (width + 2 * pad - size) // stride + 1
    padded = np.zeros((channels, height + 2 * pad + stride, width + 2 * pad + stride), F32)
    padded[:, pad:pad + height, pad:pad + width] = image_delta
    taps = columns.reshape(channels, size, size, out_h, out_w)
    for row in range(size):
        for col in range(size):
            window = padded[:, row:row + stride * out_h:stride, col:col + stride * out_w:stride]
            window += taps[:, row, col]
    image_delta[...] = padded[:, pad:pad + height, pad:pad + width]


# ------------------------------------------------------------------------------------ batch norm


def batchnorm_backward(delta: np.ndarray, x: np.ndarray, x_norm: np.ndarray, mean: np.ndarray,
                       var: np.ndarray, scales: np.ndarray, bias_updates: np.ndarray,
                       scale_updates: np.ndarray) -> np.ndarray:
    """``backward_batchnorm_layer`` on ``delta`` ``[B, C, H, W]`` (after the activation's gradient):
    adds to ``bias_updates`` and ``scale_updates`` in place, returns the delta of the convolution's output."""
    batch, channels = delta.shape[:2]
    spatial = delta.shape[2] * delta.shape[3]
    flat = delta.reshape(batch, channels, spatial)
    for b in range(batch):  # backward_bias: sum_array per image, added image after image
        bias_updates += lane_sums(flat[b])
    products = flat * x_norm.reshape(batch, channels, spatial)
    scale_sum = np.zeros(channels, F32)  # backward_scale_cpu: per image the lanes, then the tail, one sum
    vector = 4 * (spatial // 4) if spatial >= 4 else 0
    for b in range(batch):
        if vector:
            scale_sum = scale_sum + lane_sums(products[b][:, :vector])
        for column in products[b][:, vector:].T:
            scale_sum = scale_sum + column
    scale_updates += scale_sum
    scaled = flat * scales[None, :, None]  # scale_bias
    by_channel = scaled.transpose(1, 0, 2).reshape(channels, -1)
    centred = (x.reshape(batch, channels, spatial) - mean[None, :, None]).astype(F32)
    variance = (var + F32(1e-5)).astype(np.float64)  # var + .00001f in float, then double
    root = np.sqrt(variance)
    sums = darknet_arithmetic.sequential_sums
    mean_delta = (sums(by_channel).astype(np.float64) * (-1.0 / root)).astype(F32)
    centred_delta = (centred * scaled).transpose(1, 0, 2).reshape(channels, -1)
    var_delta = ((sums(centred_delta).astype(np.float64) * -0.5)
                 * (1.0 / (variance * root))).astype(F32)
    count = spatial * batch
    inverse_f = F32(1.0) / F32(count)
    inverse = 1.0 / count
    mean_term = (mean_delta * inverse_f).astype(np.float64)[None, :, None]
    centred64 = centred.astype(np.float64)
    delta64 = scaled.astype(np.float64)
    vd = var_delta.astype(np.float64)[None, :, None]
    rooted = root[None, :, None]
    out = np.empty_like(scaled)
    if spatial >= 4:  # normalize_delta_cpu's vectorised loop, then its tail
        out[..., :vector] = (centred64[..., :vector] * ((vd + vd) * inverse)
                             + (delta64[..., :vector] * (1.0 / rooted) + mean_term))
        out[..., vector:] = ((centred64[..., vector:] * vd) * (inverse + inverse) + mean_term
                             + delta64[..., vector:] / rooted)
    else:  # its scalar loop
        out[...] = (centred64 * vd) * (inverse + inverse) + (delta64 / rooted + mean_term)
    return out.reshape(delta.shape)


# ------------------------------------------------------------------------------------ the [yolo] layer


def c_exp(x: np.ndarray) -> np.ndarray:
    """The C library's double ``exp`` of each element (Python's ``math.exp`` calls it): what Darknet's
    logistic and ``get_yolo_box`` call; numpy's own vectorised ``exp`` may differ in the last bit."""
    flat = np.asarray(x, np.float64).reshape(-1)
    return np.fromiter(map(math.exp, flat.tolist()), np.float64, flat.size).reshape(np.shape(x))


def logistic(x: np.ndarray) -> np.ndarray:
    """``logistic_activate``: ``1. / (1. + exp(-x))`` in double, rounded to float."""
    return (1.0 / (1.0 + c_exp(-x))).astype(F32)


def _overlap(x1, w1, x2, w2):
    left = np.maximum(x1 - w1 * F32(0.5), x2 - w2 * F32(0.5))
    right = np.minimum(x1 + w1 * F32(0.5), x2 + w2 * F32(0.5))
    return right - left


def box_iou(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> np.ndarray:
    """Darknet's ``box_iou`` in float32, broadcasting ``(x, y, w, h)`` arrays."""
    w = _overlap(a[0], a[2], b[0], b[2])
    h = _overlap(a[1], a[3], b[1], b[3])
    inter = np.where((w < 0) | (h < 0), F32(0), w * h).astype(F32)
    union = (a[2] * a[3] + b[2] * b[3]) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return (inter / union).astype(F32)


def _c_logf():
    """The C library's ``logf`` (what ``delta_yolo_box`` calls; numpy's float32 log can differ from
    glibc's in the last bit), or None where it cannot be loaded."""
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        logf = libm.logf
    except (OSError, AttributeError):
        return None
    logf.restype, logf.argtypes = ctypes.c_float, [ctypes.c_float]
    return logf


_LOGF = _c_logf()


def _logf(value: np.float32) -> np.float32:
    return F32(_LOGF(float(value))) if _LOGF is not None else F32(np.log(F32(value)))


def yolo_deltas(raw: np.ndarray, head: HeadInfo, truths: list[np.ndarray], net_hw: tuple[int, int]
                ) -> tuple[np.ndarray, np.ndarray]:
    """``forward_yolo_layer`` in training: ``(output, delta)``, both ``[B, A * (5 + C), H, W]``.

    ``raw``: the layer's input; ``truths``: per image, ``[T, 5]`` float32 (x, y, w, h relative, class) in
    the loader's order.
    """
    batch, _, grid_h, grid_w = raw.shape
    anchors_n, entries = len(head.mask), 5 + head.num_classes
    net_h, net_w = net_hw
    biases = np.asarray(head.all_anchors, F32).reshape(-1)
    out = raw.reshape(batch, anchors_n, entries, grid_h, grid_w).copy()
    out[:, :, 0:2] = logistic(out[:, :, 0:2])
    out[:, :, 4:] = logistic(out[:, :, 4:])
    delta = np.zeros_like(out)
    cols = np.arange(grid_w, dtype=F32)[None, :]
    rows = np.arange(grid_h, dtype=F32)[:, None]
    for b in range(batch):
        truth = truths[b][:MAX_BOXES]
        stop = np.flatnonzero(truth[:, 0] == 0)  # `if(!truth.x) break;`
        truth = truth[: stop[0]] if len(stop) else truth
        best = np.zeros((anchors_n, grid_h, grid_w), F32)
        for n, anchor in enumerate(head.mask):
            px = (cols + out[b, n, 0]) / F32(grid_w)
            py = (rows + out[b, n, 1]) / F32(grid_h)
            pw = (c_exp(out[b, n, 2]) * np.float64(biases[2 * anchor]) / net_w).astype(F32)
            ph = (c_exp(out[b, n, 3]) * np.float64(biases[2 * anchor + 1]) / net_h).astype(F32)
            for t in truth:
                iou = box_iou((px, py, pw, ph), (t[0], t[1], t[2], t[3]))
                best[n] = np.where(iou > best[n], iou, best[n])
        objectness = out[b, :, 4]
        delta[b, :, 4] = np.where(best > F32(head.ignore_thresh), F32(0), F32(0) - objectness)
        for t in truth:
            x, y, w, h, cls = (F32(v) for v in t)
            i, j = int(x * F32(grid_w)), int(y * F32(grid_h))
            best_iou, best_n = F32(0), 0
            for n in range(len(biases) // 2):
                shape = (F32(0), F32(0), biases[2 * n] / F32(net_w), biases[2 * n + 1] / F32(net_h))
                iou = box_iou(shape, (F32(0), F32(0), w, h))
                if iou > best_iou:
                    best_iou, best_n = iou, n
            if best_n not in head.mask:
                continue
            n = head.mask.index(best_n)
            scale = F32(2) - w * h
            tx = x * F32(grid_w) - F32(i)
            ty = y * F32(grid_h) - F32(j)
            tw = _logf(w * F32(net_w) / biases[2 * best_n])
            th = _logf(h * F32(net_h) / biases[2 * best_n + 1])
            cell = out[b, n, :, j, i]
            d = delta[b, n, :, j, i]
            d[0] = scale * (tx - cell[0])
            d[1] = scale * (ty - cell[1])
            d[2] = scale * (tw - cell[2])
            d[3] = scale * (th - cell[3])
            d[4] = F32(1) - cell[4]
            c = int(cls)
            if d[5]:  # delta_yolo_class: a second truth in the cell sets only its own class
                d[5 + c] = F32(1) - cell[5 + c]
            else:
                d[5:] = F32(0) - cell[5:]
                d[5 + c] = F32(1) - cell[5 + c]
    shape = (batch, anchors_n * entries, grid_h, grid_w)
    return out.reshape(shape), delta.reshape(shape)


# ------------------------------------------------------------------------------------ the step


def darknet_rate(schedule, iteration: int, rate_at: Callable[[object, int], float] | None = None
                 ) -> np.float32:
    """``get_current_rate`` in its float arithmetic (float rate, the C library's double ``pow``) for
    burn-in and pjreddie's ``constant``, ``steps``, ``step`` and ``poly`` (``schedule``: a
    :class:`turboyolo.train.optim.Schedule`); turboyolo's own ``cosine`` and ``linear`` (not Darknet's)
    through ``rate_at`` (the trainer's :func:`turboyolo.train.optim.lr_at`), rounded to float."""
    lr = F32(schedule.learning_rate)
    if iteration < schedule.burn_in:
        ratio = F32(iteration) / F32(schedule.burn_in)
        return F32(float(lr) * math.pow(float(ratio), float(F32(schedule.power))))
    if schedule.policy == "constant":
        return lr
    if schedule.policy == "steps":
        for step, scale in zip(schedule.steps, schedule.scales, strict=False):
            if step > iteration:
                break
            lr = F32(lr * F32(scale))
        return lr
    if schedule.policy == "step":
        return F32(float(lr) * math.pow(float(F32(schedule.scale)), iteration // max(schedule.step, 1)))
    if schedule.policy == "poly":
        left = F32(1) - F32(iteration) / F32(schedule.max_batches)
        return F32(float(lr) * math.pow(float(left), float(F32(schedule.power))))
    if rate_at is None:
        raise ValueError(f"the {schedule.policy} schedule is turboyolo's own: pass its rate_at")
    return F32(rate_at(schedule, iteration))


def momentum_to_darknet(optimizer: torch.optim.Optimizer, batch: int) -> None:
    """A run resumed into Darknet's step from a checkpoint of PyTorch's SGD: each ``momentum_buffer``
    becomes Darknet's buffer (``-batch * momentum * buffer``, what Darknet holds after its update)."""
    momentum = float(optimizer.param_groups[0].get("momentum", 0.0))
    for state in optimizer.state.values():
        buffer = state.pop("momentum_buffer", None)
        if buffer is not None and UPDATES not in state and momentum:
            state[UPDATES] = (buffer.float() * (-batch * momentum)).contiguous()


def momentum_from_darknet(optimizer: torch.optim.Optimizer, batch: int) -> None:
    """The reverse, for a run resumed from Darknet's step into PyTorch's SGD (another device, a setting
    the step does not have): Darknet's buffers become ``momentum_buffer``s."""
    momentum = float(optimizer.param_groups[0].get("momentum", 0.0))
    for state in optimizer.state.values():
        updates = state.pop(UPDATES, None)
        if updates is not None and "momentum_buffer" not in state and momentum:
            state["momentum_buffer"] = updates / (-batch * momentum)


class DarknetStep:
    """Forward, deltas and backward of one mini-batch, and the iteration's update, as Darknet's C code: a
    :class:`turboyolo.train.engine.TrainStep` (:meth:`begin`, :meth:`mini_batch`, :meth:`apply`), chosen
    by :func:`turboyolo.train.engines.choose_step`.

    Args:
        model: the network (its parameters and batch-norm statistics are updated in place).
        optimizer: the run's SGD: its ``momentum`` and the decay of its decayed group are Darknet's
            ``momentum`` and ``decay``; the momentum buffers live in its state.
        images_per_iteration: the cfg's ``batch`` (Darknet's ``a.batch``).
        rate_at: the trainer's rate of a schedule at an iteration, for turboyolo's own policies
            (:func:`darknet_rate`).
    """

    def __init__(self, model: Darknet, optimizer: torch.optim.Optimizer, images_per_iteration: int,
                 rate_at: Callable[[object, int], float] | None = None):
        self.model, self.optimizer, self.batch = model, optimizer, images_per_iteration
        self.rate_at = rate_at
        self.heads = {head.layer_index: head for head in model.heads}
        self.decay = F32(max(group["weight_decay"] for group in optimizer.param_groups))
        self.momentum = F32(optimizer.param_groups[0]["momentum"])
        self.saved: list[np.ndarray] = []
        momentum_to_darknet(optimizer, images_per_iteration)
        self.trace: tuple | None = None  # (outputs, deltas, cache) of the last mini-batch when set to ()

    # -- the momentum buffers (Darknet's weight_updates, bias_updates, scale_updates)

    def updates(self, param: torch.Tensor) -> np.ndarray:
        state = self.optimizer.state[param]
        if UPDATES not in state:
            state[UPDATES] = torch.zeros_like(param.data, memory_format=torch.contiguous_format)
        return state[UPDATES].numpy()

    def params(self) -> list[torch.Tensor]:
        blocks = [module for module in self.model.layers if isinstance(module, ConvBlock)]
        return [param for block in blocks for param in block.parameters()]

    def save(self) -> None:
        """Keep the buffers as they are (an iteration that turns out not finite is undone)."""
        self.saved = [self.updates(p).copy() for p in self.params()]

    def restore(self) -> None:
        for param, saved in zip(self.params(), self.saved, strict=True):
            self.updates(param)[...] = saved

    def finite(self) -> bool:
        return all(np.isfinite(self.updates(p)).all() for p in self.params())

    # -- the TrainStep the training loop calls

    def begin(self, state) -> None:
        """An iteration starts: keep the buffers (an iteration that turns out not finite is undone)."""
        self.save()

    def mini_batch(self, state, options, x: torch.Tensor, targets: torch.Tensor, metas,
                   last_micro: bool) -> torch.Tensor:
        """Darknet's forward, deltas and backward of ``x``; the run's loss terms of its outputs (read,
        not differentiated: the deltas are Darknet's)."""
        outputs = self.forward_backward(x, targets)
        with torch.no_grad():
            return state.loss_fn(outputs, targets, tuple(x.shape[2:]))[1]

    def apply(self, state, options, terms: torch.Tensor) -> bool:
        """The update of the iteration (its deltas are in the momentum buffers already) and the EMA's;
        False, with the buffers as they were, when the loss or a buffer is NaN or inf."""
        if not (bool(torch.isfinite(terms).all()) and self.finite()):
            self.restore()
            return False
        self.update(state.schedule, state.iteration + 1)
        if state.ema is not None:
            state.ema.update(state.model)
        return True

    # -- one mini-batch

    @torch.no_grad()
    def forward_backward(self, images: torch.Tensor, targets: torch.Tensor) -> list[torch.Tensor]:
        """Darknet's forward (batch-norm statistics updated), ``[yolo]`` deltas and backward for
        ``images`` ``[B, 3, H, W]`` float32 in [0, 1] and ``targets`` ``[N, 6]``; the deltas' sums are
        added to the momentum buffers. Returns the raw head outputs ``[B, A, H, W, 5 + C]``."""
        x = images.detach().float().contiguous().numpy()
        batch, net_hw = x.shape[0], x.shape[2:]
        truths = self._truths(targets, batch)
        layers = self.model.layers
        inputs: list[np.ndarray] = []
        outputs: list[np.ndarray] = []
        cache: list[dict] = []
        deltas: list[np.ndarray] = []
        heads_raw = []
        for index, module in enumerate(layers):
            inp = x if index == 0 else outputs[-1]
            saved: dict = {}
            if isinstance(module, ConvBlock):
                out = self._conv_forward(module, inp, saved)
            elif isinstance(module, DarknetMaxPool):
                out = _maxpool_forward(module, inp, saved)
            elif isinstance(module, Upsample):
                out = np.repeat(np.repeat(inp, module.stride, axis=2), module.stride, axis=3)
            elif isinstance(module, Route):
                out = np.concatenate([outputs[i] for i in module.sources], axis=1)
            elif isinstance(module, Shortcut):
                out = inp + outputs[module.source]
            else:  # YoloHead
                head = self.heads[index]
                heads_raw.append(module(torch.from_numpy(inp.copy())))
                out, saved["delta"] = yolo_deltas(inp, head, truths, net_hw)
            inputs.append(inp)
            outputs.append(out)
            cache.append(saved)
            deltas.append(saved.pop("delta") if "delta" in saved else np.zeros_like(out))
        for index in range(len(layers) - 1, -1, -1):
            module, delta = layers[index], deltas[index]
            previous = deltas[index - 1] if index > 0 else None
            if isinstance(module, ConvBlock):
                self._conv_backward(module, inputs[index], outputs[index], delta, cache[index], previous)
            elif isinstance(module, DarknetMaxPool):
                flat = previous.reshape(-1)
                np.add.at(flat, cache[index]["indexes"].reshape(-1), delta.reshape(-1))
            elif isinstance(module, Upsample):
                s = module.stride
                for row in range(s):
                    for col in range(s):
                        previous += delta[:, :, row::s, col::s]
            elif isinstance(module, Route):
                offset = 0
                for source in module.sources:
                    size = outputs[source].shape[1]
                    deltas[source] += delta[:, offset:offset + size]
                    offset += size
            elif isinstance(module, Shortcut):
                previous += delta
                deltas[module.source] += delta
            elif previous is not None:  # YoloHead: backward_yolo_layer adds its delta
                previous += delta
        if self.trace is not None:
            self.trace = (outputs, deltas, cache)
        return heads_raw

    def _truths(self, targets: torch.Tensor, batch: int) -> list[np.ndarray]:
        rows = targets.detach().cpu().numpy().astype(F32)
        result = []
        for b in range(batch):
            mine = rows[rows[:, 0] == b]
            result.append(np.concatenate([mine[:, 2:6], mine[:, 1:2]], axis=1).astype(F32))
        return result

    def _conv_forward(self, block: ConvBlock, inp: np.ndarray, saved: dict) -> np.ndarray:
        conv = block.conv
        out = darknet_arithmetic.sequential_conv2d(torch.from_numpy(inp), conv.weight.detach(),
                                                   conv.stride[0], conv.padding[0]).numpy()
        if block.bn is not None:
            bn = block.bn
            saved["x"] = out
            mean, _, var, x_norm = (t.numpy() for t in batch_statistics(torch.from_numpy(out), exact=True))
            keep = F32(1.0 - bn.momentum)
            for running, value in ((bn.running_mean, mean), (bn.running_var, var)):
                stats = running.numpy()  # scal_cpu(.99) then axpy_cpu(.01)
                stats[...] = stats * keep
                stats[...] = stats + F32(bn.momentum) * value
            bn.num_batches_tracked.add_(1)
            saved.update(mean=mean, var=var, x_norm=x_norm)
            out = x_norm * bn.weight.detach().numpy()[None, :, None, None]
            out = out + bn.bias.detach().numpy()[None, :, None, None]
        else:
            out = out + conv.bias.detach().numpy()[None, :, None, None]
        if isinstance(block.act, nn.Identity):
            return out
        return darknet_arithmetic.leaky(torch.from_numpy(out)).numpy()

    def _conv_backward(self, block: ConvBlock, inp: np.ndarray, out: np.ndarray, delta: np.ndarray,
                       saved: dict, previous: np.ndarray | None) -> None:
        conv = block.conv
        if not isinstance(block.act, nn.Identity):  # gradient_array: delta *= (output > 0 ? 1 : .1f)
            delta = np.where(out > 0, delta, delta * F32(0.1))
        if block.bn is not None:
            bn = block.bn
            delta = batchnorm_backward(delta, saved["x"], saved["x_norm"], saved["mean"], saved["var"],
                                       bn.weight.detach().numpy(), self.updates(bn.bias),
                                       self.updates(bn.weight))
        else:
            bias_updates = self.updates(conv.bias)
            spatial = delta.shape[2] * delta.shape[3]
            for b in range(delta.shape[0]):
                bias_updates += lane_sums(delta[b].reshape(delta.shape[1], spatial))
        weight = conv.weight.detach().numpy()
        outs, size = weight.shape[0], conv.kernel_size[0]
        stride, pad = conv.stride[0], conv.padding[0]
        weight_updates = self.updates(conv.weight).reshape(outs, -1)
        flat_weight = weight.reshape(outs, -1)
        for b in range(delta.shape[0]):
            image_delta = delta[b].reshape(outs, -1)
            if size == 1:
                columns = inp[b].reshape(inp.shape[1], -1)
            else:
                columns = F.unfold(torch.from_numpy(inp[b:b + 1]), size, padding=pad,
                                   stride=stride)[0].numpy()
            weight_updates += gemm_nt_sums(image_delta, columns)
            if previous is None:
                continue
            column_delta = darknet_arithmetic.ordered_sum_of_products(flat_weight, image_delta)  # gemm_tn
            if size == 1:
                previous[b] = column_delta.reshape(previous[b].shape)
            else:
                col2im_add(column_delta, previous[b], size, stride, pad)

    # -- the iteration's update

    @torch.no_grad()
    def update(self, schedule, iteration: int) -> None:
        """``update_convolutional_layer`` for every convolution, at iteration ``iteration`` (1-based)."""
        rate = darknet_rate(schedule, iteration, self.rate_at) / F32(self.batch)
        decay = -self.decay * F32(self.batch)
        for module in self.model.layers:
            if not isinstance(module, ConvBlock):
                continue
            vectors = [module.conv.bias] if module.bn is None else [module.bn.bias, module.bn.weight]
            for param in vectors:
                values, updates = param.data.numpy(), self.updates(param)
                values[...] = values + rate * updates
                updates[...] = updates * self.momentum
            weight, updates = module.conv.weight.data.numpy(), self.updates(module.conv.weight)
            updates[...] = updates + decay * weight
            weight[...] = weight + rate * updates
            updates[...] = updates * self.momentum


def _maxpool_forward(pool: DarknetMaxPool, inp: np.ndarray, saved: dict) -> np.ndarray:
    """``forward_maxpool_layer``: the first strict maximum in window order; ``saved["indexes"]`` the
    flat input index of each output."""
    batch, channels, height, width = inp.shape
    size, stride = pool.size, pool.stride
    before = pool.pad[0]
    padding = pool.pad[0] + pool.pad[1]
    out_h = (height + padding - size) // stride + 1
    out_w = (width + padding - size) // stride + 1
    best = np.full((batch, channels, out_h, out_w), -FLT_MAX, F32)
    index = np.full(best.shape, -1, np.int64)
    base = (np.arange(batch * channels).reshape(batch, channels, 1, 1) * height * width)
    for n in range(size):
        for m in range(size):
            rows = np.arange(out_h) * stride + n - before
            cols = np.arange(out_w) * stride + m - before
            valid = ((rows >= 0) & (rows < height))[:, None] & ((cols >= 0) & (cols < width))[None, :]
            r, c = np.clip(rows, 0, height - 1), np.clip(cols, 0, width - 1)
            values = np.where(valid, inp[:, :, r][:, :, :, c], -FLT_MAX)
            better = values > best
            best = np.where(better, values, best)
            index = np.where(better, base + (r[:, None] * width + c[None, :]), index)
    saved["indexes"] = index
    return best
