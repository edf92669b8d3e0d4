"""What runs the network for detection: PyTorch or onnxruntime, on an inference copy of the model.

Each starts from :meth:`Darknet.inference_copy` (batch norm folded into the convolutions; the model
itself is untouched) and returns what ``Darknet.forward`` returns, the raw heads as torch tensors, so
decoding and NMS (:mod:`turboyolo.model.postprocess`) are the same code whichever ran the network.

``--backend``:

- ``torch``: the folded copy under ``torch.inference_mode``, PyTorch's public modules only; on the CPU in
  channels_last. The same input gives the same digits every run;
- ``tuned`` (CPU, float32): the same copy with each convolution on the fastest of its kernels on this
  machine (:mod:`turboyolo.model.cpu_kernels`: oneDNN with packed weights and the activation fused, or
  NNPACK's Winograd convolution), through PyTorch internals: used only on the PyTorch releases the suite
  has run, each chosen kernel checked against PyTorch's convolution; the choice follows timings, so two
  runs may differ in the last digits;
- ``onnxruntime``: the folded copy exported by :func:`turboyolo.infer.export.export_onnx` (raw heads, any
  batch size), run by onnxruntime on the CPU with torch's thread count. The export is kept in
  ``<cache>/onnx/`` under a hash of the network and its weights, so it is paid once per model;
- ``auto`` (default): ``torch``. It does not pick the faster of the others by timing them: a choice that
  follows timings would let two runs of one command write different digits, and the others are not
  PyTorch's public API (``tuned``) or need an export written on first use (``onnxruntime``).
  docs/PERFORMANCE.md compares their speed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from turboyolo.assets import cache_dir, package_version
from turboyolo.errors import ConfigError, FlagError
from turboyolo.formats.darknet_cfg import format_cfg
from turboyolo.infer.export import ExportOptions, export_onnx
from turboyolo.model.darknet import Darknet

BACKENDS = ("auto", "torch", "tuned", "onnxruntime")
CPU_ONLY = ("tuned", "onnxruntime")  # float32 on the CPU only


def onnxruntime_missing() -> str | None:
    """Why the onnxruntime backend cannot run here (a missing package), or ``None``."""
    for package in ("onnxruntime", "onnx"):
        try:
            __import__(package)
        except ImportError:
            return f"{package} is not installed (pip install 'turboyolo[onnx]')"
    return None


def choose_backend(name: str, device: torch.device, dtype: torch.dtype) -> str:
    """``--backend`` -> ``torch``, ``tuned`` or ``onnxruntime`` for this device and precision (``auto``:
    ``torch``).

    Raises:
        FlagError: an unknown name, or ``tuned`` or ``onnxruntime`` asked for where it cannot run.
    """
    if name not in BACKENDS:
        raise FlagError(f"--backend {name!r}: use one of {', '.join(BACKENDS)}")
    if name in ("auto", "torch"):
        return "torch"
    if device.type != "cpu" or dtype != torch.float32:
        raise FlagError(f"--backend {name} runs float32 on the CPU; this run asks for {dtype} on "
                        f"{device}: use --backend torch (or auto), or drop --half / use --device cpu")
    if name == "tuned":
        return name
    missing = onnxruntime_missing()
    if missing:
        raise FlagError(f"--backend onnxruntime: {missing}, or use --backend torch")
    return name


class TorchRunner:
    """The folded copy of the model under ``inference_mode``, on the CPU in channels_last; ``tuned``: each
    layer on its fastest kernel on this machine (:mod:`turboyolo.model.cpu_kernels`; ``say`` gets its
    notes)."""

    def __init__(self, model: Darknet, device: torch.device, dtype: torch.dtype, tuned: bool = False,
                 say=print):
        self.name = "tuned" if tuned else "torch"
        self.model = model.inference_copy_for(device, dtype, tuned=tuned, say=say)
        self.device, self.dtype = device, dtype

    @torch.inference_mode()
    def __call__(self, batch: torch.Tensor) -> list[torch.Tensor]:
        cpu = self.device.type == "cpu"
        batch = batch.contiguous(memory_format=torch.channels_last if cpu else torch.contiguous_format)
        return self.model(batch.to(self.dtype))


class OnnxRunner:
    """The folded copy, exported once (cached by content) and run by onnxruntime on the CPU."""

    name = "onnxruntime"

    def __init__(self, model: Darknet, img_size: tuple[int, int], say=print):
        import onnxruntime

        folded = model.inference_copy().float().cpu()
        self.path = cached_export(folded, img_size, say)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(self.path), options,
                                                    providers=["CPUExecutionProvider"])
        self.heads = len(model.heads)

    def __call__(self, batch: torch.Tensor) -> list[torch.Tensor]:
        images = np.ascontiguousarray(batch.detach().float().cpu().numpy())
        return [torch.from_numpy(out) for out in self.session.run(None, {"images": images})]


def cached_export(folded: Darknet, img_size: tuple[int, int], say=print) -> Path:
    """The ONNX file of ``folded`` at ``img_size`` (raw heads, dynamic batch), exported on first use into
    ``<cache>/onnx/<hash>.onnx``; the hash covers the cfg, every weight, the size and the versions."""
    digest = hashlib.sha256()
    for part in (format_cfg(folded.spec), str(img_size), torch.__version__, package_version("turboyolo"),
                 package_version("onnx")):
        digest.update(part.encode())
    for name, tensor in folded.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    path = cache_dir() / "onnx" / f"{digest.hexdigest()[:32]}.onnx"
    if path.is_file():
        return path
    say(f"exporting the network for onnxruntime into {path} (once per model and input size)")
    partial = path.with_name(f".{path.stem}.{os.getpid()}.onnx")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        options = ExportOptions(img_size=img_size, dynamic_batch=True, exporter="torchscript")
        export_onnx(folded, partial, options)
        os.replace(partial, path)
    except OSError as err:
        raise ConfigError(f"--backend onnxruntime: cannot write the exported model to {path.parent} ({err}); "
                          "set TURBOYOLO_CACHE to a writable folder or use --backend torch") from None
    finally:
        partial.unlink(missing_ok=True)
    return path


def make_runner(name: str, model: Darknet, device: torch.device, dtype: torch.dtype,
                img_size: tuple[int, int], say=print) -> TorchRunner | OnnxRunner:
    """The runner ``--backend name`` gives on this device (see :func:`choose_backend`)."""
    chosen = choose_backend(name, device, dtype)
    if chosen == "onnxruntime":
        return OnnxRunner(model, img_size, say)
    return TorchRunner(model, device, dtype, tuned=chosen == "tuned", say=say)
