"""What ``auto`` decides from, measured at the start of a run (and by ``turboyolo doctor``, the same code).

- :func:`measure_costs`: the real loader (:func:`turboyolo.data.pipeline.build_loader`, the run's
  augmentation, mosaic included) on a sample of the training images, in-process: CPU-seconds per image
  cold (original files), warm (a RAM cache of the sample) and with ``--augment-on device`` (CPU side).
- :func:`machine_facts`: usable cores, free RAM, free disk at the cache folder, the device.
- :func:`estimate_step_s`: the training step's seconds per image before the first step, from the
  model's FLOPs and the device's rate (a named GPU's table rate, else a short matrix-multiply
  measurement) at an assumed utilisation; the run then measures it (the data-wait readout).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import cv2
import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from turboyolo.assets import cache_dir, package_version
from turboyolo.data.augment import AugmentParams
from turboyolo.data.cache import available_bytes, default_cache_root, estimate_bytes, prepare_cache
from turboyolo.data.device_loader import device_augment_unsupported
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import Sample, ScanResult, scan_dataset
from turboyolo.data.timing import measure_loader, ring_round_batches
from turboyolo.devices import cpu_model, usable_cpus
from turboyolo.formats.darknet_cfg import ModelSpec
from turboyolo.model.darknet import Darknet
from turboyolo.rundir import write_atomically
from turboyolo.train.auto import AUTO, ImageCosts, Machine, PipelineChoice, choose_pipeline, given_pipeline

SAMPLE_IMAGES = 8  # training images the start-of-run measurement decodes (twice: warm-up and timed)
WORKER_REQUESTS = 24  # requests a loader with workers is timed over at least (the doctor's one-worker
# runs: a worker's first requests allocate its shared memory), or past its buffer ring if that is longer
MIN_TIMED_S = 0.2  # a loader measurement goes on past its passes until it has timed this much CPU time ...
COSTS_CACHE_VERSION = 1  # of what kept_costs keeps (a new meaning of ImageCosts: a new number)
MAX_MORE_PASSES = 20  # ... over at most this many times as many images (one warm-up: a file decodes twice)
# Step time from FLOPs: bf16 matrix rate of a named GPU and a YOLOv3 training utilisation.
# H200/H100: 790 TFLOP/s measured on an H200 (989 datasheet); A100: 312 datasheet x 0.8.
GPU_RATES = {"h200": 790e12, "h100": 790e12, "a100": 250e12}
ASSUMED_MFU = 0.35
CPU_MFU = 0.5  # convolutions against the measured fp32 matrix-multiply rate of this CPU


def assumed_step_s(gpu: str, forward_flops_per_image: float, mini_batch: int) -> float:
    """Seconds of one training step (forward + backward + optimizer = 3 x forward) on ``gpu``."""
    return 3.0 * forward_flops_per_image * mini_batch / (GPU_RATES[gpu] * ASSUMED_MFU)


def forward_flops(spec: ModelSpec, img_size: int) -> float:
    """Forward FLOPs (2 x multiply-adds) of one image, counted on the meta device (no compute)."""
    spec = spec.with_net(width=img_size, height=img_size)
    with torch.device("meta"):
        model = Darknet(spec)
        x = torch.empty(1, 3, img_size, img_size)
    with FlopCounterMode(display=False) as counter:
        model(x)
    return float(counter.get_total_flops())


def device_rate(device: torch.device) -> tuple[float, str]:
    """(FLOP/s a training step reaches on ``device``, how it was found)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device).lower()
        for gpu, rate in GPU_RATES.items():
            if gpu in name:
                return rate * ASSUMED_MFU, f"{gpu.upper()} table rate x {ASSUMED_MFU}"
    size = 512 if device.type == "cpu" else 4096
    a = torch.randn(size, size, device=device)
    _sync(device)
    a @ a  # warm-up
    _sync(device)
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < 0.05 or count < 2:
        a @ a
        count += 1
        _sync(device)
    rate = 2 * size**3 * count / (time.perf_counter() - start)
    mfu = CPU_MFU if device.type == "cpu" else ASSUMED_MFU
    return rate * mfu, f"measured matrix multiply x {mfu}"


def estimate_step_s(spec: ModelSpec, img_size: int, device: torch.device) -> tuple[float, str]:
    """(seconds of the training step per image, how it was estimated): 3 x forward FLOPs / rate."""
    flops = forward_flops(spec, img_size)
    rate, how = device_rate(device)
    return 3.0 * flops / rate, f"3 x {flops / 1e9:.2f} GFLOP per image at {rate / 1e12:.2f} TFLOP/s ({how})"


def step_memory(spec: ModelSpec, device: torch.device, amp_dtype: torch.dtype | None) -> tuple[float, float]:
    """CUDA: (activation bytes per image of a forward + backward, bytes of the model, its gradients and
    an Adam state), from two small mini-batches (2 and 4 images) at the training size."""
    model = Darknet(spec).to(device)
    size, peaks = spec.net.width, []
    for mini in (2, 4):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        x = torch.rand(mini, 3, size, size, device=device)
        with torch.autocast("cuda", dtype=amp_dtype, enabled=amp_dtype is not None):
            outputs = model(x)
        sum(o.float().sum() for o in outputs).backward()
        peaks.append(torch.cuda.max_memory_allocated(device) - start)
        model.zero_grad(set_to_none=True)
        del x, outputs
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    return max((peaks[1] - peaks[0]) / 2, 1.0), 4.0 * weights


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def sample_subset(samples: Sequence[Sample], count: int = SAMPLE_IMAGES, seed: int = 0) -> list[Sample]:
    """A fixed random subset of ``samples`` (in their order)."""
    rng = np.random.default_rng(seed)
    pick = sorted(rng.choice(len(samples), min(count, len(samples)), replace=False))
    return [samples[int(i)] for i in pick]


@contextlib.contextmanager
def one_thread():
    """One OpenCV and one torch thread, as in a loader worker (restored after)."""
    threads, cv_threads = torch.get_num_threads(), cv2.getNumThreads()
    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        cv2.setNumThreads(cv_threads)


def loader_cpu_s(subset: Sequence[Sample], img_size: int, batch: int, augment: AugmentParams | None,
                 cache, augment_on: str, workers: int = 0, multiscale=None,
                 passes: int = 1) -> tuple[float, float]:
    """(CPU-seconds per image of all loader processes, main process's share) over ``passes`` timed passes
    of ``subset`` after a warm-up batch; with workers, over at least :data:`WORKER_REQUESTS` requests and
    past every worker's buffer ring (:func:`turboyolo.data.timing.ring_round_batches`)."""
    loader = build_loader(subset, img_size=img_size, batch_size=max(1, min(batch, len(subset))),
                          augment=augment, workers=workers, shuffle=True, cache=cache,
                          augment_on=augment_on, multiscale=multiscale, pin_memory=False)
    if workers:  # at least WORKER_REQUESTS requests (a request of several batches: as many requests as
        # passes), and past the first round of every worker's buffer ring
        per_request = min(getattr(loader, "request_batches", 1), len(loader))
        passes = max(passes, -(-WORKER_REQUESTS * batch // len(subset))) * per_request
        passes = max(passes, -(-ring_round_batches(loader) * batch // len(subset)))
    # a cheap path (cached, device augmentation) is timed on past its passes, long enough that the timer's
    # and the epochs' fixed costs do not weigh (a few ms on 8-40 images read 0.6-0.8x)
    # in-process under one_thread: this thread's CPU (a run's anchor check runs beside it meanwhile)
    m = measure_loader(loader, len(subset) * passes, min_cpu_s=MIN_TIMED_S,
                       max_images=len(subset) * passes * MAX_MORE_PASSES, own_thread=not workers)
    del loader
    return m.cpu_s / m.images, m.main_cpu_s / m.images


def measure_costs(samples: Sequence[Sample], img_size: int, batch: int, augment: AugmentParams | None,
                  count: int = SAMPLE_IMAGES, multiscale=None, handoff: bool = False,
                  cache_side: Callable[[float], bool] | None = None) -> ImageCosts:
    """The loader's CPU-seconds per image on ``count`` of ``samples``: cold, warm and device-side; with
    ``handoff`` also, with one worker, the main process's share and the worker's cost beyond the
    in-process one (a worker process starts: the doctor does it, a run's start does not).
    ``cache_side(cold_s)`` False: the choice cannot use what a cache would cost (the run reads the files
    whatever it costs from a cache): only the cold cost is measured (``warm_s`` None)."""
    subset = sample_subset(samples, count)
    size = max(img_size, multiscale[1] if multiscale else 0)
    with one_thread():
        cold, _ = loader_cpu_s(subset, img_size, batch, augment, None, "cpu", multiscale=multiscale)
        if cache_side is not None and not cache_side(cold):
            return ImageCosts(cold, None)
        cache = prepare_cache(subset, size, None, memory="ram", workers=1, log=lambda *_: None)
        warm, _ = loader_cpu_s(subset, img_size, batch, augment, cache, "cpu", multiscale=multiscale)
        device = None
        if device_augment_unsupported(augment) is None:
            device, _ = loader_cpu_s(subset, img_size, batch, augment, cache, "device", multiscale=multiscale)
        main = extra = 0.0
        device_main = device_extra = None
        if handoff:
            total, main = loader_cpu_s(subset, img_size, batch, augment, cache, "cpu", workers=1,
                                       multiscale=multiscale)
            extra = max(0.0, total - main - warm)
            if device is not None:
                total, device_main = loader_cpu_s(subset, img_size, batch, augment, cache, "device",
                                                  workers=1, multiscale=multiscale)
                device_extra = max(0.0, total - device_main - device)
    parts = 1 + 3 * augment.mosaic if augment is not None else 1.0
    spread = parts * (1 + augment.mixup) if augment is not None else 1.0
    return ImageCosts(cold, warm, device, main, extra, device_main, device_extra, spread)


def kept_costs(samples: Sequence[Sample], img_size: int, batch: int, augment: AugmentParams | None,
               multiscale, cache_side: Callable[[float], bool]) -> tuple[ImageCosts, bool]:
    """:func:`measure_costs` for a run's start, kept in ``$TURBOYOLO_CACHE/pipeline`` for the next start:
    (the costs, whether they came from there). The key is what the measurement reads and runs: the
    sampled images (path, size, modification time, boxes), the size, batch, augmentation and multiscale
    range, and the machine (CPU model, usable cores, host, the versions of torch, OpenCV, NumPy, Pillow
    and turboyolo, which decode and augment), so a changed file, flag, machine or release measures again.
    A kept measurement without the cache's costs is used only while the choice still cannot use them
    (``cache_side``: more free memory now may change that). A cache file that does not read as costs is
    ignored (JSON only: reading it runs no code); a cache folder that takes no writes only means
    measuring at every start."""
    subset = sample_subset(samples)
    try:
        path = _costs_path(subset, img_size, batch, augment, multiscale)
    except OSError:  # a sampled image is gone: measured (and named by the loader) as before
        path = None
    kept = _read_costs(path) if path is not None else None
    if kept is not None and (kept.warm_s is not None or not cache_side(kept.cold_s)):
        return kept, True
    costs = measure_costs(samples, img_size, batch, augment, multiscale=multiscale, cache_side=cache_side)
    if path is not None:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, json.dumps(dataclasses.asdict(costs)))
    return costs, False


def _costs_path(subset: Sequence[Sample], img_size: int, batch: int, augment: AugmentParams | None,
                multiscale) -> Path:
    digest = hashlib.sha1()
    for sample in subset:
        stat = os.stat(sample.image)
        named = f"{sample.image}\0{stat.st_size}\0{stat.st_mtime_ns}\0"
        digest.update(named.encode("utf-8", "surrogateescape"))
        digest.update(np.ascontiguousarray(sample.labels, np.float32).tobytes())
    params = {"img_size": img_size, "batch": batch, "multiscale": multiscale,
              "augment": dataclasses.asdict(augment) if augment is not None else None,
              "sample": SAMPLE_IMAGES, "cpu": cpu_model(), "cores": usable_cpus(), "host": platform.node(),
              "torch": torch.__version__, "opencv": cv2.__version__, "numpy": np.__version__,
              "pillow": package_version("pillow"), "turboyolo": package_version("turboyolo"),
              "version": COSTS_CACHE_VERSION}
    digest.update(json.dumps(params, sort_keys=True, default=repr).encode())
    return cache_dir() / "pipeline" / f"{digest.hexdigest()[:24]}.json"


def _read_costs(path: Path) -> ImageCosts | None:
    try:
        item = json.loads(path.read_text(encoding="utf-8"))
        costs = ImageCosts(**item)
    except (OSError, ValueError, TypeError):
        return None
    values = dataclasses.astuple(costs)
    required = (costs.cold_s, costs.handoff_s, costs.worker_extra_s, costs.device_spread_decodes)
    if (any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                               or not math.isfinite(v) or v < 0) for v in values)
            or any(v is None for v in required) or costs.cold_s <= 0):
        return None
    return costs


def machine_facts(device: torch.device, cache_folder: Path) -> Machine:
    """Usable cores, free RAM, free disk at ``cache_folder`` (or its nearest existing parent)."""
    return Machine(usable_cpus(), available_bytes("ram", cache_folder), available_bytes("disk", cache_folder),
                   device.type, str(cache_folder))


def auto_pipeline(requested: dict[str, tuple[object, str]], data: str, spec: ModelSpec,
                  augment: AugmentParams | None, mini_batch: int, device: torch.device, world_size: int = 1,
                  multiscale=None, log=print, scans: tuple[ScanResult, ScanResult] | None = None,
                  beside: Callable[[], object] | None = None) -> PipelineChoice:
    """Measure what ``auto`` decides from (a sample of ``data``'s training images, this machine, the
    step's estimate) and choose (:func:`turboyolo.train.auto.choose_pipeline`). ``scans``: the (train,
    val) scans the run already has (default: scanned here). ``beside``: called once the step's rate is
    measured (by the clock, which other work would slow) and before the loader's measurement (by its
    thread's CPU time): other work of the start may run beside that one."""
    img_size = spec.net.width
    size = max(img_size, multiscale[1] if multiscale else 0)
    train = scans[0].samples if scans else scan_dataset(data, "train").samples
    if not train:  # the loaders name the problem
        fallback = {name: ("none" if value == AUTO else value, source) if name == "cache" else
                    ("cpu" if value == AUTO else value, source) if name == "augment_on" else
                    (0 if value is None else value, source) for name, (value, source) in requested.items()}
        return given_pipeline(fallback)
    val = scans[1].samples if scans else scan_dataset(data, "val").samples
    cache_bytes = estimate_bytes(train, size) + estimate_bytes(val, img_size)
    machine = machine_facts(device, default_cache_root(data, "train", size))
    if world_size > 1:  # the ranks of a node share its cores and memory
        machine = dataclasses.replace(machine, cores=max(1, machine.cores // world_size),
                                      free_ram=machine.free_ram // world_size)
    step_s, how = estimate_step_s(spec, img_size, device)
    if beside is not None:
        beside()
    unsupported = device_augment_unsupported(augment)

    def cache_side(cold_s: float) -> bool:
        # whether the choice could read a cache's costs: with the cold cost alone (any stand-in for the
        # others), does it choose a cache or the device path? If not, it never reads them
        probe = choose_pipeline(requested, ImageCosts(cold_s, cold_s), machine, step_s, cache_bytes,
                                unsupported)
        return probe.cache != "none" or probe.augment_on == "device"

    costs, kept = kept_costs(train, img_size, mini_batch, augment, multiscale, cache_side)
    cached = (f"{1000 * costs.warm_s:.2f} ms from a cache" if costs.warm_s is not None else
              "a cache not measured (this run reads the files)")
    earlier = " (an earlier start's measurement of the same images, from the cache)" if kept else ""
    log(f"input pipeline: measured on {len(sample_subset(train))} training images{earlier}: "
        f"{1000 * costs.cold_s:.1f} ms per image from the files, {cached}"
        + (f", {1000 * costs.device_s:.2f} ms with device augmentation" if costs.device_s is not None else "")
        + f"; step ~{1000 * step_s:.2f} ms per image ({how})")
    return choose_pipeline(requested, costs, machine, step_s, cache_bytes, unsupported)
