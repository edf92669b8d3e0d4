"""``--backend tuned``: the CPU's fastest way through each layer of the inference copy, measured on this
machine. An explicit choice (``detect``/``label --backend tuned``, ``test --kernels tuned``,
``turboyolo.load(..., backend="tuned")``), never the default: it calls PyTorch internals that carry no
compatibility promise (``torch.ops.mkldnn._*``, ``torch._nnpack_*``) and NNPACK's C function through
ctypes, and its choice follows timings. Only :meth:`Darknet.inference_copy_for
<turboyolo.model.darknet.Darknet.inference_copy_for>` imports it (an import-linter contract).

Two guards: the internals are used only on the PyTorch releases the test suite has run
(:data:`TESTED_TORCH`; on any other, the copy stays on PyTorch's public convolution and one line says so),
and each chosen way is checked against PyTorch's convolution on the input it was timed on (a way whose
output differs beyond rounding, :data:`AGREEMENT`, is dropped for that layer, with one line).

:func:`tune_for_cpu` turns the folded, channels_last float32 copy into one whose convolutions each take the
fastest of these ways, timed on the layer's own input the first time it runs:

- ``onednn``: oneDNN with the weight reordered once into its blocked layout and the activation (leaky,
  ReLU or none) applied inside the convolution (``torch.ops.mkldnn._convolution_pointwise``, what
  ``torch.compile``'s CPU freezing emits), instead of a weight reorder on every call and a second pass
  for the activation;
- ``winograd``: NNPACK's Winograd F(6x6, 3x3) convolution for 3 x 3, stride-1, pad-1 convolutions, one
  image at a time in NCHW: about a fifth of a direct convolution's multiplications. It is called
  through NNPACK's own inference function (:class:`_NnpackInference`: the kernel transformed once per
  layer, on the calling thread), or through ``torch._nnpack_spatial_convolution`` where this PyTorch
  does not export that function. Where it wins, on one thread, is in docs/PERFORMANCE.md
  (``bench/cpu_kernels.py``). Its outputs differ from a direct convolution's by rounding, the same on any
  thread count;
- ``direct``: PyTorch's ``conv2d``, then the block's activation (what the untuned copy does; the way
  for activations oneDNN cannot fuse exactly, such as mish or logistic).

Each way runs three times, the rounds alternating (wall clock, at torch's thread count), on the first
image of the first batch; the fastest stays for the rest of the process, layers of the same shape share
the choice, and the weight copies the other ways needed are dropped. The choice is made once, during
the first forward pass (docs/PERFORMANCE.md says how long), and depends on the timing, so two processes
may pick differently and differ by that rounding (the default, PyTorch's public convolution, gives the
same digits every run). Size-2 stride-2 max-pools whose padding is never read (YOLOv3-tiny's five) become
the element-wise maximum of the four strided views: the same numbers as ``max_pool2d``, without its
indices.
"""

from __future__ import annotations

import ctypes
import functools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from turboyolo.model.layers import ConvBlock, DarknetMaxPool

WAYS = ("onednn", "winograd", "direct")  # what TunedConv may choose from (tests narrow it)
# PyTorch releases (major.minor) the test suite has run the internals this module calls on; on any other
# the tuned backend keeps PyTorch's public convolution (an internal's signature may differ there, and a
# wrong C signature is a crash, not an error)
TESTED_TORCH = ("2.14",)
# a way's output may differ from PyTorch's convolution by this share of the layer's largest output
# (rounding: Winograd's is far below it); more, and the layer falls back to PyTorch's convolution
AGREEMENT = 1e-3


def torch_release(version: str | None = None) -> str:
    """``major.minor`` of this PyTorch (``2.14.1+cu130`` -> ``2.14``)."""
    parts = (version or torch.__version__).split("+")[0].split(".")
    return ".".join(parts[:2])


def tested_torch() -> bool:
    """Whether this PyTorch's release is one the suite has run the tuned kernels on."""
    return torch_release() in TESTED_TORCH


def nnpack_usable() -> bool:
    """Whether this build of PyTorch has NNPACK and this CPU runs it (``_nnpack_available`` also
    initialises NNPACK, which ``_nnpack_spatial_convolution`` needs before its first call)."""
    try:
        return bool(torch._nnpack_available())
    except (AttributeError, RuntimeError):
        return False


class _NnpackInference:
    """NNPACK's own single-image call, ``nnp_convolution_inference``, which libtorch_cpu exports (NNPACK's
    C API, unchanged since 2020). PyTorch's ``_nnpack_spatial_convolution`` transforms the kernel on
    every call; this one transforms it once per layer where :data:`PRECOMPUTED_BYTES` allows
    (``precompute``, then ``reuse``; else ``compute``: per call). Winograd F(6x6, 3x3) (``wt8x8``), no
    activation, on the calling thread: NNPACK's own thread pool beside PyTorch's OpenMP threads made
    the whole network slower on 2 threads (each pool's threads spin while the other's work), and with
    several threads oneDNN wins these layers anyway."""

    WT8X8, COMPUTE, PRECOMPUTE, REUSE, IDENTITY = 3, 1, 2, 3, 0

    class _Size(ctypes.Structure):
        _fields_ = [("width", ctypes.c_size_t), ("height", ctypes.c_size_t)]

    class _Padding(ctypes.Structure):
        _fields_ = [(side, ctypes.c_size_t) for side in ("top", "right", "bottom", "left")]

    def __init__(self, library: Path):
        lib = ctypes.CDLL(str(library))
        pointer, size = ctypes.c_void_p, ctypes.c_size_t
        self.call = lib.nnp_convolution_inference
        self.call.restype = ctypes.c_int
        self.call.argtypes = [ctypes.c_int, ctypes.c_int, size, size, self._Size, self._Padding, self._Size,
                              self._Size, pointer, pointer, pointer, pointer, pointer, ctypes.POINTER(size),
                              ctypes.c_int, pointer, pointer, pointer]
        if lib.nnp_initialize() != 0:
            raise OSError("nnp_initialize failed")
        self.local = threading.local()  # one scratch buffer per calling thread, shared by the layers

    def _call(self, strategy: int, channels: tuple[int, int], height: int, width: int, image, kernel, bias,
              out, buffer, buffer_size: ctypes.c_size_t) -> None:
        status = self.call(self.WT8X8, strategy, channels[0], channels[1], self._Size(width, height),
                           self._Padding(1, 1, 1, 1), self._Size(3, 3), self._Size(1, 1), image, kernel, bias,
                           out, buffer, ctypes.byref(buffer_size), self.IDENTITY, None, None, None)
        if status != 0:
            raise RuntimeError(f"nnp_convolution_inference returned status {status}")

    def transform(self, weight: torch.Tensor, height: int, width: int) -> _Transformed:
        """The Winograd transform of ``weight`` ``[K, C, 3, 3]`` (contiguous float32)."""
        channels = (weight.shape[1], weight.shape[0])
        size = ctypes.c_size_t(0)
        self._call(self.PRECOMPUTE, channels, height, width, None, weight.data_ptr(), None, None, None, size)
        transformed = _Transformed(size.value)
        self._call(self.PRECOMPUTE, channels, height, width, None, weight.data_ptr(), None, None,
                   transformed.address(), size)
        return transformed

    def run(self, image: torch.Tensor, kernel: int, bias: torch.Tensor, out_channels: int,
            transformed: bool) -> torch.Tensor:
        """One contiguous float32 ``[1, C, H, W]`` image through the kernel at address ``kernel``: a
        :meth:`transform` when ``transformed``, else the contiguous ``[K, C, 3, 3]`` weight."""
        _, channels, height, width = image.shape
        out = torch.empty(1, out_channels, height, width, dtype=image.dtype)
        strategy = self.REUSE if transformed else self.COMPUTE
        size = ctypes.c_size_t(0)
        args = ((channels, out_channels), height, width, image.data_ptr(), kernel, bias.data_ptr(),
                out.data_ptr())
        self._call(strategy, *args, None, size)
        held = getattr(self.local, "scratch", None)
        if held is None or held[0].numel() - 64 < size.value:
            held = self.local.scratch = _aligned(size.value)
        self._call(strategy, *args, held[1], ctypes.c_size_t(held[0].numel() - 64))
        return out


def _aligned(nbytes: int) -> tuple[torch.Tensor, int]:
    """A byte buffer of at least ``nbytes`` and its first 64-byte-aligned address (NNPACK's rule)."""
    buffer = torch.empty(nbytes + 64, dtype=torch.uint8)
    return buffer, buffer.data_ptr() + (-buffer.data_ptr()) % 64


class _Transformed:
    """A precomputed Winograd kernel: ``nbytes`` at a 64-byte-aligned address inside a byte tensor. The
    address is found again on every use (never stored), so a copy of the layer (``copy.deepcopy``,
    pickling) reads its own memory; a copy that lands misaligned is moved when it is made."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.buffer, address = _aligned(nbytes)
        self.offset = address - self.buffer.data_ptr()

    def address(self) -> int:
        address = self.buffer.data_ptr() + self.offset
        if address % 64:
            raise RuntimeError("a precomputed Winograd kernel lost its 64-byte alignment")
        return address

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if (self.buffer.data_ptr() + self.offset) % 64:
            moved, aligned = _aligned(self.nbytes)
            start = aligned - moved.data_ptr()
            moved[start : start + self.nbytes] = self.buffer[self.offset : self.offset + self.nbytes]
            self.buffer, self.offset = moved, start


@functools.cache
def nnpack_inference() -> _NnpackInference | None:
    """NNPACK's inference call from this PyTorch's own library, or ``None`` where it is not there (then
    the Winograd way uses ``torch._nnpack_spatial_convolution``)."""
    if not nnpack_usable():
        return None
    for library in sorted((Path(torch.__file__).parent / "lib").glob("libtorch_cpu.*")):
        try:
            return _NnpackInference(library)
        except (OSError, AttributeError):
            continue
    return None


# Precomputed Winograd kernels take 64/9 of their weights' bytes (YOLOv3-tiny's chosen ones 226 MiB in
# one run); this many bytes per network, in layer order, then a layer transforms its kernel per call
PRECOMPUTED_BYTES = 256 * 2**20


@dataclass
class Tuning:
    """What the layers of one network share: the choice per layer shape, the bytes left for precomputed
    Winograd kernels, and the lock under which layers choose and prepare their weights (a model may be
    called from several threads)."""

    budget: int = PRECOMPUTED_BYTES
    choices: dict = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    say: Callable[[str], object] = print  # where a way that fails its check is named

    def __deepcopy__(self, memo: dict) -> Tuning:
        return Tuning(self.budget, dict(self.choices), say=self.say)

    def __getstate__(self) -> dict:
        return {"budget": self.budget, "choices": self.choices}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)


def _fused_activation(act: nn.Module) -> tuple[str, list[float]] | None:
    """The oneDNN post-op that computes ``act`` exactly as PyTorch does, or ``None``."""
    if isinstance(act, nn.Identity):
        return "none", []
    if isinstance(act, nn.ReLU):
        return "relu", []
    if isinstance(act, nn.LeakyReLU):
        return "leaky_relu", [act.negative_slope]
    return None


class TunedConv(nn.Module):
    """A folded :class:`ConvBlock` (convolution with bias, then activation) that runs the fastest of its
    ways on this machine, chosen on its first input; layers of the same shape share one choice
    (:class:`Tuning`, one per network). For inference: float32 CPU tensors in, no autograd."""

    PACKED_SHAPES = 2  # oneDNN weights kept packed for this many input shapes (e.g. batch 8 and the rest)

    def __init__(self, block: ConvBlock, allowed: tuple[str, ...] | None = None,
                 tuning: Tuning | None = None):
        super().__init__()
        conv = block.conv
        self.act = block.act
        self.kernel_size, self.in_channels, self.out_channels = (list(conv.kernel_size), conv.in_channels,
                                                                 conv.out_channels)
        self.stride, self.padding = list(conv.stride), list(conv.padding)
        self.dilation, self.groups = list(conv.dilation), conv.groups
        self.weight: torch.Tensor | None = conv.weight.detach().contiguous(memory_format=torch.channels_last)
        self.bias = conv.bias.detach() if conv.bias is not None else torch.zeros(conv.out_channels)
        self.fused = _fused_activation(block.act)
        ways = ["onednn"] if self.fused is not None and torch.backends.mkldnn.is_available() else ["direct"]
        plain_3x3 = conv.kernel_size == (3, 3) and self.groups == 1 and self.dilation == [1, 1]
        if plain_3x3 and self.stride == [1, 1] and self.padding == [1, 1] and nnpack_usable():
            ways.append("winograd")
        self.candidates = [way for way in ways if way in (allowed or WAYS)] or ["direct"]
        self.tuning = Tuning() if tuning is None else tuning
        self.way: str | None = None
        self.packed: dict[tuple[int, ...], torch.Tensor] = {}  # oneDNN's layout, per input shape
        self.nchw_weight: torch.Tensor | None = None
        self.transformed: _Transformed | None = None  # the precomputed Winograd kernel
        self.timings: dict[str, float] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32 or x.device.type != "cpu":
            raise RuntimeError(f"this inference copy is tuned for float32 on the CPU; got {x.dtype} on "
                               f"{x.device} (make the copy with Darknet.inference_copy_for for that)")
        if x.dim() != 4 or x.shape[1] != self.in_channels:  # NNPACK's call would read past the kernel
            raise RuntimeError(f"expected an input [N, {self.in_channels}, H, W], got {list(x.shape)}")
        if x.shape[0] == 0:
            height, width = (
                (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
                for size, pad, dilation, kernel, stride in zip(x.shape[2:], self.padding, self.dilation,
                                                               self.kernel_size, self.stride))
            return x.new_empty(0, self.out_channels, height, width)
        if self.way is None:
            with self.tuning.lock:
                if self.way is None:
                    key = (tuple(self.weight.shape), tuple(x.shape[1:]), tuple(self.stride),
                           tuple(self.padding), tuple(self.dilation), self.groups, type(self.act),
                           tuple(self.candidates), self._transform_fits())
                    if key not in self.tuning.choices:
                        self.tuning.choices[key] = self._fastest(x[:1])
                    self._keep(self.tuning.choices[key])
        return getattr(self, f"_{self.way}")(x)

    def __getstate__(self) -> dict:
        # oneDNN's packed weights are opaque tensors that neither copy nor pickle; the layer packs again
        # on its next call, from the channels_last weight it keeps for that
        return {**super().__getstate__(), "packed": {}}

    # ------------------------------------------------------------------ the ways

    def _direct(self, x: torch.Tensor) -> torch.Tensor:
        out = F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        return self.act(out)

    def _onednn(self, x: torch.Tensor) -> torch.Tensor:
        # the packed layout depends on the input's shape (a weight packed for another shape is reordered
        # again inside every call), so it is made per shape, from the channels_last weight kept for that
        shape = tuple(x.shape)
        packed = self.packed.get(shape)
        if packed is None:
            with self.tuning.lock:
                packed = torch.ops.mkldnn._reorder_convolution_weight(
                    self.weight, self.padding, self.stride, self.dilation, self.groups, list(shape))
                while len(self.packed) >= self.PACKED_SHAPES:
                    self.packed.pop(next(iter(self.packed)))
                self.packed[shape] = packed
        attr, scalars = self.fused
        return torch.ops.mkldnn._convolution_pointwise(
            x.contiguous(memory_format=torch.channels_last), packed, self.bias, self.padding, self.stride,
            self.dilation, self.groups, attr, scalars, "")

    def _winograd(self, x: torch.Tensor) -> torch.Tensor:
        # NNPACK reads and writes NCHW; the output stays NCHW, so that a chain of Winograd layers (and
        # the pools between them) converts the layout only where it begins and ends
        nnpack = nnpack_inference()
        if self.nchw_weight is None and self.transformed is None:
            with self.tuning.lock:
                self._prepare_winograd(nnpack, *x.shape[2:])
        images = [x[i : i + 1].contiguous() for i in range(x.shape[0])]
        transformed, weight = self.transformed, self.nchw_weight
        if nnpack is not None:
            kernel = transformed.address() if transformed is not None else weight.data_ptr()
            images = [nnpack.run(image, kernel, self.bias, self.out_channels, transformed is not None)
                      for image in images]
        else:
            images = [torch._nnpack_spatial_convolution(image, weight, self.bias, self.padding)
                      for image in images]
        return self.act(images[0] if len(images) == 1 else torch.cat(images))

    def _prepare_winograd(self, nnpack: _NnpackInference | None, height: int, width: int) -> None:
        """The NCHW weight, and the precomputed kernel where NNPACK's call exists and the budget allows;
        once the way is chosen, only the one of them that runs stays."""
        if self.nchw_weight is not None or self.transformed is not None:
            return
        self.nchw_weight = self.weight.contiguous()
        if nnpack is not None and self._transform_fits():
            self.transformed = nnpack.transform(self.nchw_weight, height, width)
            self.tuning.budget -= self.transformed.nbytes
        if self.way == "winograd":  # chosen already (by a layer of the same shape)
            self._drop_for_winograd()

    def _transform_fits(self) -> bool:
        """Whether this layer's Winograd kernel could be precomputed now (a way timed with one may not
        be the fastest for a layer that has to transform its kernel on every call, so this is part of
        the choice's key)."""
        if "winograd" not in self.candidates or nnpack_inference() is None:
            return False
        nbytes = 64 * self.weight.numel() // 9 * self.weight.element_size()  # 8 x 8 floats per 3 x 3
        return nbytes <= self.tuning.budget

    def _drop_for_winograd(self) -> None:
        if self.transformed is not None:
            self.nchw_weight = None
        self.weight = None

    # ------------------------------------------------------------------ the choice

    def _fastest(self, sample: torch.Tensor) -> str:
        """The way with the shortest of three wall-clock runs on ``sample`` (rounds alternate between
        the ways; the first run also prepares the way's weight copy)."""
        best: dict[str, float | None] = dict.fromkeys(self.candidates, float("inf"))
        for _ in range(3):
            for way in [way for way, seconds in best.items() if seconds is not None]:
                begin = time.perf_counter()
                try:
                    getattr(self, f"_{way}")(sample)
                except RuntimeError:  # a way this build or CPU cannot run for this shape
                    best[way] = None
                    continue
                best[way] = min(best[way], time.perf_counter() - begin)
        self.timings = {way: seconds for way, seconds in best.items() if seconds is not None}
        way = min(self.timings, key=self.timings.get) if self.timings else "direct"
        return way if way == "direct" else self._checked(way, sample)

    def _checked(self, way: str, sample: torch.Tensor) -> str:
        """``way`` when its output on ``sample`` is PyTorch's convolution's to rounding (:data:`AGREEMENT`
        of the largest output; NaN where it has NaN); else ``direct``, named in one line."""
        got, expected = getattr(self, f"_{way}")(sample), self._direct(sample)
        scale = float(expected.nan_to_num().abs().max().clamp(min=1e-6))
        same_nan = got.shape == expected.shape and torch.equal(got.isnan(), expected.isnan())
        worst = math.inf
        if same_nan:
            worst = float((got.nan_to_num() - expected.nan_to_num()).abs().max()) / scale
        if worst <= AGREEMENT:
            return way
        shape = f"{self.in_channels}->{self.out_channels} {'x'.join(map(str, self.kernel_size))}"
        self.tuning.say(f"--backend tuned: the {way} kernel of a {shape} convolution on "
                        f"{'x'.join(map(str, sample.shape[2:]))} differs from PyTorch's convolution by "
                        f"{worst:.2g} of its largest output (more than rounding): that layer uses PyTorch's")
        return "direct"

    def _keep(self, way: str) -> None:
        """Run ``way`` from now on, holding only the weights it reads: the channels_last weight (and
        oneDNN's packed copies) for ``direct`` and ``onednn``, the precomputed or NCHW kernel for
        ``winograd``. ``self.way`` is set last: other threads run the layer once it is."""
        if way != "onednn":
            self.packed = {}
        if way != "winograd":
            self.nchw_weight = None
            if self.transformed is not None:  # its bytes go back to the budget
                self.tuning.budget += self.transformed.nbytes
                self.transformed = None
        elif self.nchw_weight is not None or self.transformed is not None:
            self._drop_for_winograd()  # else prepared (then dropped) on the first call
        self.way = way


class StridedMaxPool(nn.Module):
    """A size-2, stride-2 :class:`DarknetMaxPool` that, wherever its padding is never read, takes the
    element-wise maximum of the four strided views: the same numbers as ``max_pool2d`` (NaN included),
    without its indices."""

    def __init__(self, pool: DarknetMaxPool):
        super().__init__()
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if min(x.shape[-2:]) < 2 or self.pool.pad_is_read(x.shape[-2], x.shape[-1]):
            return self.pool(x)
        height, width = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
        x = x[..., :height, :width]
        top = torch.maximum(x[..., 0::2, 0::2], x[..., 0::2, 1::2])
        return torch.maximum(top, torch.maximum(x[..., 1::2, 0::2], x[..., 1::2, 1::2]))


def tune_for_cpu(model: nn.Module, allowed: tuple[str, ...] | None = None,
                 say: Callable[[str], object] = print) -> nn.Module:
    """Replace, in place, the folded float32 copy's convolution blocks by :class:`TunedConv` and its
    size-2 stride-2 max-pools by :class:`StridedMaxPool`; returns ``model``. ``allowed``: the ways the
    layers may choose from (default :data:`WAYS`; a layer none of them can run uses ``direct``). Blocks
    whose convolution is not PyTorch's own (Darknet's arithmetic, :mod:`turboyolo.exact.modules`) or
    with their batch norm unfolded stay. On a PyTorch release the suite has not run
    (:data:`TESTED_TORCH`), ``model`` is returned as it is, and ``say`` gets one line."""
    if not tested_torch():
        say(f"note: --backend tuned: its kernels call PyTorch internals checked on PyTorch "
            f"{', '.join(TESTED_TORCH)} only; this is {torch_release()}: PyTorch's public convolution runs")
        return model
    tuning = Tuning(say=say)
    for index, module in enumerate(model.layers):
        if isinstance(module, ConvBlock) and module.bn is None and type(module.conv) is nn.Conv2d:
            model.layers[index] = TunedConv(module, allowed, tuning)
        elif isinstance(module, DarknetMaxPool) and module.size == 2 and module.stride == 2:
            model.layers[index] = StridedMaxPool(module)
    return model
