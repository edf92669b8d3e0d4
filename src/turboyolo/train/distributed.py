"""torchrun environment, rank helpers and reductions; nothing else.

A single process without torchrun sees ``world_size == 1`` and every helper is a no-op, so the same
training code runs unchanged either way.
"""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
import torch.distributed as dist

from turboyolo.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_local_main(self) -> bool:
        return self.local_rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def read_env() -> DistEnv:
    """The process's place in the job, from the variables torchrun sets (defaults: one process)."""
    get = os.environ.get
    return DistEnv(int(get("RANK", 0)), int(get("WORLD_SIZE", 1)), int(get("LOCAL_RANK", 0)),
                   int(get("LOCAL_WORLD_SIZE", get("WORLD_SIZE", 1))))


def init(device_type: str, timeout_minutes: float = 30.0) -> DistEnv:
    """Join the process group when launched by torchrun: NCCL on CUDA, gloo on CPU."""
    env = read_env()
    if env.enabled and not dist.is_initialized():
        backend = "nccl" if device_type == "cuda" else "gloo"
        if device_type == "cuda":
            torch.cuda.set_device(env.local_rank)
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=timeout_minutes))
    return env


def device_for(env: DistEnv, requested: str | None) -> torch.device:
    """``cuda:<local_rank>`` under torchrun on GPUs; otherwise the requested or best device."""
    if requested:
        device = torch.device(requested)
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and env.enabled:
        return torch.device("cuda", env.local_rank)
    return device


def cleanup() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum over ranks in place (identity in a single process)."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_gather_objects(value: T) -> list[T]:
    """Every rank's ``value`` (a one-element list in a single process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [value]
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def broadcast_object(value: T, src: int = 0) -> T:
    if not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def once_per_node(env: DistEnv, done_marker: Path, work: Callable[[], T], poll_s: float = 0.5,
                  timeout_s: float = 6 * 3600) -> T | None:
    """Run ``work`` on the node's local rank 0; other local ranks poll for ``done_marker``.

    Polling a file instead of waiting in a collective keeps long one-rank work (a data scan, building
    the prepared cache) clear of NCCL's collective timeout. ``work`` must create ``done_marker`` (or
    this function does after it returns). A failure is written to the marker so waiting ranks stop
    with the same message instead of hanging.
    """
    done_marker = Path(done_marker)
    failed = done_marker.with_name(done_marker.name + ".failed")
    if not env.enabled or env.is_local_main:
        failed.unlink(missing_ok=True)
        try:
            result = work()
        except Exception as err:
            if env.enabled:
                failed.parent.mkdir(parents=True, exist_ok=True)
                failed.write_text(f"{type(err).__name__}: {err}")
            raise
        done_marker.parent.mkdir(parents=True, exist_ok=True)
        done_marker.touch()
        return result
    deadline = time.monotonic() + timeout_s
    while not done_marker.exists():
        if failed.exists():
            raise ConfigError(f"local rank 0 failed while preparing shared data: {failed.read_text()}")
        if time.monotonic() > deadline:
            raise ConfigError(f"waited {timeout_s:.0f} s for {done_marker}; local rank 0 never finished")
        time.sleep(poll_s)
    return None


def convert_sync_batchnorm(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """SyncBatchNorm across ranks; it runs only with NCCL on GPUs, so CPU is a clear error."""
    if device.type != "cuda":
        raise ConfigError("--sync-bn needs CUDA devices (SyncBatchNorm runs only on GPUs); drop it on CPU")
    return torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
