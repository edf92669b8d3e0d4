"""Timing the data path: images/s and CPU-seconds per image of a loader (every process), and the median
CPU time of a per-image function. One home for what ``turboyolo train``'s ``auto`` measures at the start
of a run, ``turboyolo doctor`` and ``turboyolo bench data``.

Per core = images / CPU-seconds of the main process (all threads, pinning included) and every live
DataLoader worker (user + system, from /proc).
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


def median_pass(fn: Callable, items: Sequence, repeats: int) -> float:
    """Median over ``repeats`` passes of the mean CPU seconds of ``fn(item)`` (one warm-up call)."""
    fn(items[0])
    passes = []
    for _ in range(max(1, repeats)):
        start = time.process_time()
        for item in items:
            fn(item)
        passes.append((time.process_time() - start) / len(items))
    return statistics.median(passes)


@dataclass
class Measurement:
    images: int
    wall_s: float
    cpu_s: float  # main + workers
    main_cpu_s: float
    untimed_images: int = 0  # delivered before the timing started (the warm-up batch, the rest of its pool)

    @property
    def images_per_s(self) -> float:
        return self.images / self.wall_s

    @property
    def images_per_core_s(self) -> float:
        return self.images / max(self.cpu_s, 1e-9)

    @property
    def main_ms_per_image(self) -> float:
        return 1000 * self.main_cpu_s / self.images


def _process_cpu_s(pid: int) -> float:
    """user + system CPU seconds of a live process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ring_round_batches(loader) -> int:
    """Batches a timing of ``loader`` runs before every loader process has been through its buffer ring
    once: per process its ring (the device path's ``dataset.ring``; none on the CPU path) and two more
    requests, of ``request_batches`` each, the processes taking requests in turn. Until then the device
    path's requests allocate, and first touch, their buffers; a timing shorter than this charges every
    request with that."""
    ring = getattr(getattr(loader, "dataset", None), "ring", 0)
    per_request = max(1, getattr(loader, "request_batches", 1))
    return (ring + 2) * max(1, getattr(loader, "workers", 0)) * per_request


def measure_loader(loader, images: int, min_cpu_s: float = 0.0, max_images: int | None = None,
                   own_thread: bool = False) -> Measurement:
    """Iterate ``loader`` (repeating epochs) until ``images`` images arrived, after one warm-up batch (and
    the rest of its request), timing whole requests; with ``min_cpu_s``, on (whole requests, up to
    ``max_images``) until the timed CPU time reaches it too (a cheap path timed long enough that the timer's
    and the epochs' fixed costs do not weigh, without a second warm-up).

    CPU time counts the main process (all threads, including pinning) and every live worker;
    ``own_thread`` (a loader without workers, OpenCV and torch on one thread: all of its work is in the
    calling thread) counts the calling thread instead of the whole process. The epochs
    follow one another as `train` has them (the workers go on into the next epoch's first batches), so a
    small data set's epoch starts cost what they cost in training, not a restart each.
    """
    epoch = 0
    loader.set_epoch(epoch, upcoming=_every_epoch)
    iterator = iter(loader)
    first = next(iterator)  # warm-up: workers started, first batch in flight
    untimed = first[0].shape[0]
    # Time whole requests, from the one after the warm-up's: with mosaic partner pools a pool's first
    # batch decodes the whole pool (else a short measurement reads up to a pool's decodes too few or too
    # many: BCCD, 96 images, 4.6 or 8.6 against 6.6 ms per image), and the device path makes several
    # batches per request (a measurement ending inside one counts its work and not all its images).
    unit = max(1, getattr(loader, "request_batches", 0)
               or getattr(getattr(loader, "batch_sampler", None), "pool_batches", 0))
    in_epoch = 1  # batches taken in this epoch
    for _ in range(unit - 1):
        batch = next(iterator, None)
        if batch is None:
            break  # the epoch (and so the request) ended
        untimed += batch[0].shape[0]
        in_epoch += 1
    workers = _worker_pids(loader)
    # own_thread without workers: all of the loading happens in this thread, so its CPU time is the main
    # process's share and another thread of the process (a run's anchor check) does not count
    main_clock = time.thread_time if own_thread and not workers else _self_cpu_s
    start_wall, start_main = time.perf_counter(), main_clock()
    start_workers = sum(_process_cpu_s(p) for p in workers)
    seen = 0
    limit = max(images, max_images or 0)

    def short() -> bool:  # the timed CPU time under min_cpu_s, and images left to time
        if seen >= limit:
            return False
        spent = main_clock() - start_main + sum(_process_cpu_s(p) for p in workers) - start_workers
        return spent < min_cpu_s

    while seen < images or in_epoch % unit or (min_cpu_s and short()):
        try:
            batch = next(iterator)
        except StopIteration:
            if seen >= images and not (min_cpu_s and short()):
                break  # the epoch's last request is whole
            epoch += 1
            loader.set_epoch(epoch, upcoming=_every_epoch)
            iterator = iter(loader)
            in_epoch = 0
            continue
        seen += batch[0].shape[0]
        in_epoch += 1
    wall = time.perf_counter() - start_wall
    main = main_clock() - start_main
    worker_cpu = sum(_process_cpu_s(p) for p in workers) - start_workers
    del iterator
    return Measurement(seen, wall, main + worker_cpu, main, untimed)


def _every_epoch(_: int) -> bool:
    return True  # a measurement plans every later epoch, mosaic and mixup on


def _worker_pids(loader) -> list[int]:
    """PIDs of the persistent DataLoader workers behind a DetectionLoader (empty when in-process)."""
    inner = getattr(loader, "_loader", None)
    it = getattr(inner, "_iterator", None)
    return [w.pid for w in getattr(it, "_workers", [])] if it is not None else []
