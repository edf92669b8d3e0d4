"""GPU utilisation during training: NVML readings and the GPU-idle share from CUDA events.

- NVML (``nvidia-ml-py``, optional: ``pip install turboyolo[gpu]``): utilisation % and memory used,
  sampled by a daemon thread every ``interval_s`` and averaged between two :meth:`GpuMonitor.read` calls.
- GPU-idle share: :meth:`GpuMonitor.wrap` wraps the batch iterable; before asking for the next batch
  it records a CUDA event ("the step's work is queued"), after getting it another ("the next step
  starts"). The device time between the two is time the GPU had nothing to do because the CPU was
  waiting for data; divided by the device time spanned, it is the idle share. Events are read only in
  :meth:`read` (called at log points, after the engine's own synchronisation), so no extra sync.
- Data-wait warning: :meth:`data_wait_warning` returns one line when the data-wait share stayed above
  10% for ``patience`` consecutive log points, naming the doctor's usual first fix.

On the CPU (or without CUDA) every method is a cheap no-op and :meth:`read` returns ``{}``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator

import torch

from turboyolo.train.auto import FAR_ABOVE, Machine, advice

DATA_WAIT_WARN = 0.10


class GpuMonitor:
    def __init__(self, device: torch.device | str, interval_s: float = 0.5, patience: int = 3):
        self.device = torch.device(device)
        self.enabled = self.device.type == "cuda" and torch.cuda.is_available()
        self.patience = patience
        self._pairs: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._span: list[torch.cuda.Event] = []
        self._nvml = None
        self._samples: list[tuple[float, float]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._high = 0
        self._warned = False
        if self.enabled:
            self._start_nvml(interval_s)

    # ------------------------------------------------------------------ NVML
    def _start_nvml(self, interval_s: float) -> None:
        try:
            import pynvml  # nvidia-ml-py
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001 - no driver access: utilisation is simply not reported
            return
        self._nvml = pynvml

        def poll() -> None:
            while not self._stop.wait(interval_s):
                try:
                    util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                    used = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30
                except Exception:  # noqa: BLE001
                    continue
                with self._lock:
                    self._samples.append((float(util), float(used)))

        threading.Thread(target=poll, name="gpu-monitor", daemon=True).start()

    # ------------------------------------------------------------------ CUDA events
    def _event(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def wrap(self, batches: Iterable) -> Iterator:
        """Yield ``batches`` unchanged, recording the events around every wait for data."""
        if not self.enabled:
            yield from batches
            return
        iterator = iter(batches)
        while True:
            queued = self._event()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            started = self._event()
            self._pairs.append((queued, started))
            yield batch

    def read(self) -> dict[str, float]:
        """``gpu_util`` (%), ``gpu_mem_gb`` and ``gpu_idle`` (share) since the previous read."""
        if not self.enabled:
            return {}
        values: dict[str, float] = {}
        with self._lock:
            samples, self._samples = self._samples, []
        if samples:
            values["gpu_util"] = sum(s[0] for s in samples) / len(samples)
            values["gpu_mem_gb"] = max(s[1] for s in samples)
        pairs, self._pairs = self._pairs, []
        if len(pairs) >= 2:
            pairs[-1][1].synchronize()
            idle = sum(q.elapsed_time(s) for q, s in pairs[1:])  # the first gap precedes the interval
            span = pairs[0][1].elapsed_time(pairs[-1][1])
            values["gpu_idle"] = min(1.0, idle / span) if span > 0 else 0.0
            self._pairs = [pairs[-1]]
        else:
            self._pairs = pairs
        return values

    def data_wait_warning(self, data_wait: float, advice: str, predicted: float | None = None) -> str | None:
        """One warning line, once per run, after ``patience`` log points above 10% data-wait (and far
        above ``predicted``, the share the run's ``auto`` choice predicted at the start, when given)."""
        limit = DATA_WAIT_WARN if predicted is None else max(DATA_WAIT_WARN, predicted + FAR_ABOVE)
        self._high = self._high + 1 if data_wait > limit else 0
        if self._warned or self._high < self.patience:
            return None
        self._warned = True
        expected = "" if predicted is None else f" (predicted at the start: {100 * predicted:.0f}%)"
        return (f"warning: the training step waited for data {100 * data_wait:.0f}% of the time for "
                f"{self._high} log intervals{expected}; {advice}")

    def close(self) -> None:
        self._stop.set()


def data_wait_advice(cache: str, augment_on: str, workers: int | None, cores: int) -> str:
    """The usual first fix for the settings a run uses (:func:`turboyolo.train.auto.advice`)."""
    machine = Machine(cores, 0, 0, "cuda")
    return advice(cache, augment_on, machine.max_workers if workers is None else workers, machine, None)
