"""Full-state checkpoints: atomic, written by a background thread, readable with ``weights_only=True``.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts (so ``torch.load`` never has to
run code from the file), built by :func:`checkpoint_dict` and read back by :func:`restore`::

    format, version, model, ema (or None), ema_updates, optimizer, scaler, iteration, epoch,
    epoch_batches (mini-batches of ``epoch`` already consumed), epoch_start_sample, world_size,
    mini_batch, seen, best_fitness, best_epoch, rng, config (TrainConfig.as_dict()), cfg_text

Saving copies every tensor into buffers allocated once and reused (pinned memory on CUDA), hands the
copy to a writer thread and returns: the training loop blocks only for the copy. The thread writes a
temporary file, fsyncs it and renames it over the target, so a crash leaves either the old file or the
new one, never a partial file under a checkpoint's name.
"""

from __future__ import annotations

import os
import queue
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

FORMAT = "turboyolo-checkpoint"
VERSION = 1
WRITER_ENV = "TURBOYOLO_CHECKPOINT_WRITER"  # force "fork" or "thread" (tests, debugging)
FAULT_ENV = "TURBOYOLO_CHECKPOINT_FAULT"  # "kill:<n>": SIGKILL the process midway through the n-th write


def rng_state() -> dict[str, Any]:
    """Torch (CPU and CUDA) and Python RNG states as tensors and lists."""
    version, internal, gauss = random.getstate()
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": [version, list(internal), gauss]}
    if torch.cuda.is_available():
        state["cuda"] = [s for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def atomic_save(obj: Any, path: str | Path, fault: Callable[[Path], None] | None = None) -> Path:
    """``torch.save`` to ``path`` through a temporary file, fsync and rename (then fsync the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    for stale in path.parent.glob(f".{path.name}.tmp*"):  # left by a writer that was killed mid-write
        stale.unlink(missing_ok=True)
    try:
        with open(tmp, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            if fault is not None:
                fault(tmp)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # an error (not a kill): leave no temporary file behind
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:  # pragma: no cover - some filesystems refuse a directory fsync
        pass
    return path


_WRITER_PARENT: int | None = None  # pid of the training process, for the fault hook in a forked writer


def _fault_from_env() -> Callable[[int], Callable[[Path], None] | None]:
    """The fault-injection hook for tests: ``TURBOYOLO_CHECKPOINT_FAULT=kill:<n>``."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith("kill:"):
        return lambda _: None
    target = int(spec.split(":", 1)[1])

    def hook_for(count: int):
        if count != target:
            return None

        def kill(tmp: Path) -> None:
            import signal

            if _WRITER_PARENT is not None and os.getpid() != _WRITER_PARENT:
                os.kill(_WRITER_PARENT, signal.SIGKILL)  # a forked writer: the whole run dies
            os.kill(os.getpid(), signal.SIGKILL)

        return kill

    return hook_for


class CheckpointWriter:
    """Background, atomic checkpoint writer.

    ``save(state, paths)`` waits for the previous write (if still running), snapshots ``state`` and
    returns while the write goes on. ``close()`` waits for the last write. Two ways to snapshot:

    * ``"fork"`` (default for CPU training on POSIX): ``os.fork()``; the child holds a copy-on-write
      image of the process, writes the file and exits. The loop blocks only for the fork (page
      tables), not for copying 3 x the parameters; memory grows only by the pages the loop changes
      while the child writes.
    * ``"thread"`` (default with CUDA tensors, which must not cross a fork): the tensors are copied
      into pinned host buffers allocated once and reused; a thread writes them.
    """

    def __init__(self, background: bool = True, mode: str = "auto"):
        if mode == "auto":
            mode = os.environ.get(WRITER_ENV, "auto")
        if mode == "auto":
            mode = "fork" if hasattr(os, "fork") and not torch.cuda.is_initialized() else "thread"
        if mode not in ("fork", "thread"):
            raise ValueError(f"mode must be fork, thread or auto, got {mode!r}")
        self.mode = mode if background else "thread"
        self._child: int | None = None
        self.background = background
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._idle = threading.Event()
        self._idle.set()
        self._error: BaseException | None = None
        self._count = 0
        self._fault = _fault_from_env()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ copy into reused buffers
    def _snapshot(self, value: Any, key: tuple) -> Any:
        if isinstance(value, torch.Tensor):
            buffer = self._buffers.get(key)
            if buffer is None or buffer.shape != value.shape or buffer.dtype != value.dtype:
                pin = value.is_cuda and torch.cuda.is_available()
                buffer = torch.empty(value.shape, dtype=value.dtype, pin_memory=pin)
                self._buffers[key] = buffer
            buffer.copy_(value.detach(), non_blocking=True)
            return buffer
        if isinstance(value, dict):
            return {k: self._snapshot(v, (*key, k)) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._snapshot(v, (*key, i)) for i, v in enumerate(value)]
        return value

    def save(self, state: dict, paths: list[Path]) -> None:
        self.wait()
        if self.mode == "fork":
            self._fork_write(state, [Path(p) for p in paths])
            return
        snapshot = self._snapshot(state, ())
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the non-blocking copies must land before the thread reads them
        self._count += 1
        job = (snapshot, [Path(p) for p in paths], self._fault(self._count))
        self._idle.clear()
        if self.background:
            self._queue.put(job)
        else:
            self._write(job)

    def _write(self, job) -> None:
        snapshot, paths, fault = job
        try:
            for index, path in enumerate(paths):
                atomic_save(snapshot, path, fault if index == 0 else None)
        except BaseException as err:  # noqa: BLE001 - surfaced in the training thread by wait()
            self._error = err
        finally:
            self._idle.set()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._write(job)

    def _fork_write(self, state: dict, paths: list[Path]) -> None:
        global _WRITER_PARENT
        self._count += 1
        fault = self._fault(self._count)
        _WRITER_PARENT = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: write from the copy-on-write image, never return into training
            code = 1
            try:
                for index, path in enumerate(paths):
                    atomic_save(state, path, fault if index == 0 else None)
                code = 0
            finally:
                os._exit(code)
        self._child = pid
        self._paths = paths

    def wait(self) -> None:
        """Block until the queued write is on disk; re-raise its error, if any."""
        if self._child is not None:
            _, status = os.waitpid(self._child, 0)
            self._child = None
            if status != 0:
                raise OSError(f"checkpoint writer for {self._paths[0]} failed (wait status {status}); "
                              "check free disk space and permissions")
        self._idle.wait()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        self.wait()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None


def checkpoint_dict(state, config_dict: dict, cfg_text: str) -> dict:
    """The checkpoint of a :class:`turboyolo.train.engine.TrainState` (see the module docstring)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": state.model.state_dict(),
        "ema": state.ema.state_dict() if state.ema is not None else None,
        "ema_updates": state.ema.updates if state.ema is not None else 0,
        "optimizer": state.optimizer.state_dict(),
        "scaler": state.scaler.state_dict() if state.scaler is not None else {},
        "iteration": state.iteration,
        "epoch": state.epoch,
        "epoch_batches": state.epoch_batches,
        "epoch_start_sample": state.epoch_start_sample,
        "world_size": state.world_size,
        "mini_batch": state.images_per_iteration // max(state.subdivisions, 1),
        "seen": state.seen,
        "best_fitness": state.best_fitness,
        "best_epoch": state.best_epoch,
        "rng": rng_state(),
        "config": config_dict,
        "cfg_text": cfg_text,
    }


def restore(state, saved: dict) -> None:
    """Put a checkpoint's weights, optimizer, EMA, scaler, position and RNG back into ``state``.

    A run resumed on another number of processes continues at the same global sample of the epoch
    and re-shards what is left of it.
    """
    state.model.load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])
    if state.ema is not None and saved.get("ema") is not None:
        state.ema.load_state_dict(saved["ema"])
        state.ema.updates = int(saved.get("ema_updates", 0))
    if state.scaler is not None and saved.get("scaler"):
        state.scaler.load_state_dict(saved["scaler"])
    state.iteration, state.epoch = int(saved["iteration"]), int(saved["epoch"])
    state.epoch_batches, state.seen = int(saved["epoch_batches"]), int(saved["seen"])
    state.epoch_start_sample = int(saved.get("epoch_start_sample", 0))
    saved_world = int(saved.get("world_size", 1))
    if saved_world != state.world_size and state.epoch_batches:
        consumed = state.epoch_batches * int(saved.get("mini_batch", 0)) * saved_world
        state.epoch_start_sample += consumed
        state.epoch_batches = 0
    state.best_fitness = float(saved.get("best_fitness", -1.0))
    state.best_epoch = saved.get("best_epoch")
    set_rng_state(saved.get("rng", {}))
