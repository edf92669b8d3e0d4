"""The one place that turns a device name into a ``torch.device`` and picks the mixed-precision type.

Every command and the Python API accept the same spellings: ``auto`` (CUDA when present, else CPU),
``cpu``, ``cuda``, ``cuda:N``, ``N`` (a GPU index, as Darknet and PyTorch-YOLOv3 users write it) and
``mps``. Under torchrun each process takes ``cuda:<LOCAL_RANK>`` (see :mod:`turboyolo.train.distributed`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from turboyolo.errors import FlagError

AMP_CHOICES = ("auto", "off", "bf16", "fp16")


def usable_cpus() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (``unknown CPU`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def evaluation_threads() -> int:
    """Intra-op threads of ``turboyolo test``'s forward pass on the CPU: one core left to the loader
    workers and the OS (cores - 1, at least 1; Ultralytics' choice on the CPU too). torch's default, a
    thread per core, makes each operation wait at its barrier for the thread whose core is busy elsewhere
    (docs/PERFORMANCE.md, "Evaluation at scale"). ``OMP_NUM_THREADS`` in the environment wins."""
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    return max(1, usable_cpus() - 1)


@contextmanager
def evaluation_threads_on(device: torch.device) -> Iterator[None]:
    """:func:`evaluation_threads` intra-op threads while inside, on the CPU (other devices: unchanged)."""
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(evaluation_threads())
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def resolve_device(name: str | int | torch.device | None = "auto") -> torch.device:
    """``--device`` -> ``torch.device``; raises :class:`FlagError` for a name torch does not know
    or a GPU that is not there."""
    if isinstance(name, torch.device):
        return name
    text = "auto" if name is None else str(name).strip().lower()
    if text in ("auto", ""):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if text.isdigit():
        text = f"cuda:{text}"
    try:
        device = torch.device(text)
    except RuntimeError:
        raise FlagError(f"--device {name!r}: use auto, cpu, cuda, cuda:N or a GPU index N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise FlagError(f"--device {name}: no CUDA GPU is visible here; use --device cpu (or auto)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise FlagError(f"--device {name}: only {torch.cuda.device_count()} GPU(s) are visible "
                            f"(indices 0..{torch.cuda.device_count() - 1})")
    return device


def amp_dtype_for(device: torch.device, amp: str) -> torch.dtype | None:
    """``--amp``: off | bf16 | fp16 | auto (bf16 where the GPU has it, else fp16; off on CPU)."""
    if amp not in AMP_CHOICES:
        raise FlagError(f"--amp {amp!r}: use one of {', '.join(AMP_CHOICES)}")
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None
    if amp == "bf16" or (amp == "auto" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16
    return torch.float16


def channels_last_for(device: torch.device, requested: bool | None) -> bool:
    """``--channels-last`` / ``--no-channels-last``; unset: on for the CPU, where oneDNN runs the training
    step about 25 % faster with it (no layout reorders around each convolution, vectorised pooling;
    docs/PERFORMANCE.md), off elsewhere until measured there (bench/gpu.sh)."""
    return device.type == "cpu" if requested is None else requested
