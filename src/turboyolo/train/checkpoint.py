"""Full-state checkpoints: atomic, written by a background thread, readable with ``weights_only=True``.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts (so ``torch.load`` never has to
run code from the file), built by :func:`checkpoint_dict` and read back by :func:`restore`::

    format, version, model, ema (or None), ema_updates, optimizer, scaler, iteration, epoch,
    epoch_batches (mini-batches of ``epoch`` already consumed), epoch_start_sample, world_size,
    mini_batch, seen, best_fitness, best_epoch, rng, config (TrainConfig.as_dict()), cfg_text,
    plan (the run's optimizer, schedule and EMA settings: :class:`turboyolo.train.plan.Plan`)

Saving copies every tensor into buffers allocated once and reused (pinned memory on CUDA), hands the
copy to a writer thread and returns: the training loop blocks only for the copy. The thread writes a
temporary file, fsyncs it and renames it over the target, so a crash leaves either the old file or the
new one, never a partial file under a checkpoint's name.
"""

from __future__ import annotations

import errno
import os
import queue
import random
import shutil
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from turboyolo.errors import CheckpointError

FORMAT = "turboyolo-checkpoint"
VERSION = 1
WRITER_ENV = "TURBOYOLO_CHECKPOINT_WRITER"  # force "fork" or "thread" (tests, debugging)
FAULT_ENV = "TURBOYOLO_CHECKPOINT_FAULT"  # "<kill|enospc|sigint>:<n>": a fault midway through the n-th write


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
    """The fault-injection hook for tests: ``TURBOYOLO_CHECKPOINT_FAULT=<fault>:<n>`` strikes midway
    through the n-th write. ``kill``: SIGKILL the training process (and a forked writer); ``enospc``:
    the write fails as on a full disk; ``sigint``: Ctrl-C reaches the whole process group."""
    kind, _, number = os.environ.get(FAULT_ENV, "").partition(":")
    if kind not in ("kill", "enospc", "sigint") or not number.isdigit():
        return lambda _: None
    target = int(number)

    def strike(tmp: Path) -> None:
        if kind == "enospc":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
        if kind == "sigint":
            os.killpg(os.getpgid(0), signal.SIGINT)
            return
        if _WRITER_PARENT is not None and os.getpid() != _WRITER_PARENT:
            os.kill(_WRITER_PARENT, signal.SIGKILL)  # a forked writer: the whole run dies
        os.kill(os.getpid(), signal.SIGKILL)

    return lambda count: strike if count == target else None


def checkpoint_bytes(state: Any) -> int:
    """Bytes of the tensors in ``state`` (about the size of its file)."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(checkpoint_bytes(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(checkpoint_bytes(v) for v in state)
    return 0


def check_room(state: dict, paths: list[Path]) -> None:
    """Refuse a write that the disk cannot hold, before it starts (the previous checkpoints stay whole).

    Each path is written to a temporary file and renamed over the old one, so the disk needs one
    checkpoint's size plus one for every path that does not exist yet.
    """
    need = int(checkpoint_bytes(state) * 1.02) + (1 << 20)
    new = sum(not Path(p).exists() for p in paths)
    folder = Path(paths[0]).parent
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if free < need * (1 + new):
        raise CheckpointError(_failure(paths[0], f"the disk has {free / 2**20:.0f} MB free and the "
                                       f"checkpoint needs {need / 2**20:.0f} MB ({1 + new} x that while "
                                       "it is written)"))


def _failure(path: Path, why: str) -> str:
    last = Path(path).parent / "last.pt"
    resume = (f"{last} still holds the last good state: free space (or choose another --project) and "
              f"continue with `turboyolo train --resume {last}`" if last.exists()
              else "no checkpoint of this run was written yet: free space or choose another --project")
    return f"could not write checkpoint {path}: {why}; {resume}"


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
        self._paths: list[Path] = []
        self._failed_path: Path | None = None
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
        """Start writing ``state`` to ``paths`` (waits for the previous write first).

        Raises :class:`CheckpointError` (before writing anything) when the disk cannot hold it, or
        when the previous write failed.
        """
        self.wait()
        check_room(state, [Path(p) for p in paths])
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
        self._failed_path = paths[0]
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
            code = 255
            try:
                # Ctrl-C reaches the whole process group: the training process saves and stops; the
                # write in progress finishes rather than die half-way
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                for index, path in enumerate(paths):
                    atomic_save(state, path, fault if index == 0 else None)
                code = 0
            except OSError as err:  # the errno travels back as the exit code
                code = err.errno if err.errno and 0 < err.errno < 255 else 255
            finally:
                os._exit(code)
        self._child = pid
        self._paths = paths

    def wait(self) -> None:
        """Block until the queued write is on disk; raise :class:`CheckpointError` if it failed."""
        if self._child is not None:
            _, status = os.waitpid(self._child, 0)
            self._child = None
            self._raise_for(status)
        self._idle.wait()
        self._raise_thread_error()

    def poll(self) -> None:
        """Without blocking: raise :class:`CheckpointError` if a write has failed since the last call."""
        if self._child is not None:
            pid, status = os.waitpid(self._child, os.WNOHANG)
            if pid:
                self._child = None
                self._raise_for(status)
        if self._idle.is_set():
            self._raise_thread_error()

    def _raise_for(self, status: int) -> None:
        if status == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        why = os.strerror(code) if 0 < code < 255 else f"the writer process ended with status {code}"
        raise CheckpointError(_failure(self._paths[0], why))

    def _raise_thread_error(self) -> None:
        if self._error is None:
            return
        error, self._error = self._error, None
        if isinstance(error, OSError):
            raise CheckpointError(_failure(self._failed_path, error.strerror or str(error))) from error
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
        "plan": state.plan.as_dict() if state.plan is not None else None,
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
