"""Measuring the stages :mod:`turboyolo.doctor.verdict` reasons about, on the user's data and hardware.

Every per-image stage is timed as CPU time of this process (one thread), after a warm-up, over
``repeats`` passes of a fixed subset of the split; the median pass is reported. The loader is
measured with :func:`turboyolo.doctor.throughput.measure_loader` (CPU of the main process and every
worker), the step with a device synchronisation around each repeat.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from turboyolo.data.augment import AugmentParams, augment_sample, sample_rng
from turboyolo.data.cache import estimate_bytes, prepare_cache
from turboyolo.data.decode import decode_image
from turboyolo.data.device_augment import augment_batch, place_on_canvas, plan_sample
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import Sample, scan_dataset
from turboyolo.devices import usable_cpus
from turboyolo.doctor.throughput import measure_loader
from turboyolo.doctor.verdict import GPU_RATES, StageTimings, assumed_step_s
from turboyolo.errors import DataError
from turboyolo.model.darknet import Darknet
from turboyolo.train.checkpoint import CheckpointWriter
from turboyolo.train.config import OptimArgs
from turboyolo.train.engine import StepOptions, autocast
from turboyolo.train.loss import YoloLoss
from turboyolo.train.optim import build_optimizer
from turboyolo.train.plan import fitted_optimizer


@dataclass
class DoctorOptions:
    img_size: int
    batch: int
    subdivisions: int
    device: torch.device
    workers: int  # the configuration's worker count (measured, plus worker_counts)
    worker_counts: tuple[int, ...]
    cache: str = "none"  # none | ram | disk
    augment_on: str = "cpu"
    amp_dtype: torch.dtype | None = None
    assume_step_ms: float | None = None
    assume_gpu: str | None = None
    images: int = 32  # subset size for the per-image stages
    repeats: int = 3
    loader_batches: int = 3


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


def forward_flops(spec, img_size: int) -> float:
    """Forward FLOPs (2 x multiply-adds) of one image, counted on the meta device (no compute)."""
    spec = spec.with_net(width=img_size, height=img_size)
    with torch.device("meta"):
        model = Darknet(spec)
        x = torch.empty(1, 3, img_size, img_size)
    with FlopCounterMode(display=False) as counter:
        model(x)
    return float(counter.get_total_flops())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_step(spec, options: DoctorOptions) -> tuple[float, object, object]:
    """Median seconds of forward + backward + optimizer on a random mini-batch; also the model and
    optimizer (for the checkpoint measurement)."""
    model = Darknet(spec).to(options.device)
    optimizer = build_optimizer(model, fitted_optimizer(OptimArgs(), spec.net))
    loss_fn = YoloLoss(model.heads)
    mini = max(1, options.batch // options.subdivisions)
    images = torch.rand(mini, 3, options.img_size, options.img_size, device=options.device)
    targets = torch.tensor([[i, 0, 0.5, 0.5, 0.2, 0.3] for i in range(mini)], dtype=torch.float32)
    step_options = StepOptions(device=options.device, amp_dtype=options.amp_dtype)
    times = []
    for repeat in range(options.repeats + 1):
        _sync(options.device)
        start = time.perf_counter()
        with autocast(step_options):
            outputs = model(images)
        loss, _ = loss_fn(outputs, targets, (options.img_size, options.img_size))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(options.device)
        if repeat:  # the first is the warm-up
            times.append(time.perf_counter() - start)
    return statistics.median(times), model, optimizer


def measure_checkpoint(model, optimizer, folder: Path) -> tuple[float, float]:
    """(seconds a full-state save blocks training, seconds until it is on disk) with the run's writer."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    writer = CheckpointWriter()
    path = folder / "doctor-checkpoint.pt"
    try:
        writer.save(state, [path])  # warm-up: allocates the reused buffers
        writer.wait()
        start = time.perf_counter()
        writer.save(state, [path])
        blocking = time.perf_counter() - start
        writer.wait()
        total = time.perf_counter() - start
    finally:
        writer.close()
        path.unlink(missing_ok=True)
    return blocking, total


def measure_copy(options: DoctorOptions) -> float:
    """Seconds per image of a pinned uint8 batch copy to the device (0 on the CPU)."""
    if options.device.type != "cuda":
        return 0.0
    mini = max(1, options.batch // options.subdivisions)
    host = torch.empty(mini, 3, options.img_size, options.img_size, dtype=torch.uint8).pin_memory()
    times = []
    for _ in range(options.repeats + 1):
        _sync(options.device)
        start = time.perf_counter()
        host.to(options.device, non_blocking=True)
        _sync(options.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) / mini


def measure_device_augment(options: DoctorOptions) -> float:
    """Device seconds per image of ``augment_batch`` (warp + HSV) on a mini-batch of canvases."""
    mini = max(1, options.batch // options.subdivisions)
    size = options.img_size
    canvases = torch.randint(0, 255, (mini, 3, size, size), dtype=torch.uint8, device=options.device)
    theta = torch.tensor([[1.0, 0.1, 0.0], [-0.1, 1.0, 0.0]]).repeat(mini, 1, 1)
    hsv = torch.tensor([0.05, 1.2, 0.8]).repeat(mini, 1)
    times = []
    for _ in range(options.repeats + 1):
        _sync(options.device)
        start = time.perf_counter()
        augment_batch(canvases, theta, hsv, size)
        _sync(options.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) / mini


def measure(data, split: str, spec, options: DoctorOptions, run_dir: Path, log=print) -> StageTimings:
    """All stages on a subset of ``split`` of ``data`` (:class:`turboyolo.doctor.verdict.StageTimings`)."""
    cv2.setNumThreads(1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        scan = scan_dataset(data, split)
        log(scan.summary())
        if not scan.samples:
            raise DataError(f"{data}: no usable {split} images (see the scan report)")
        rng = np.random.default_rng(0)
        pick = sorted(rng.choice(len(scan.samples), min(options.images, len(scan.samples)), replace=False))
        subset = [scan.samples[int(i)] for i in pick]
        log(f"doctor: {len(subset)} of {len(scan.samples)} images, {options.repeats} repeats per stage")
        per_image = measure_per_image(subset, options, log)
        loader_rates, loader_cpu_s = measure_loaders(subset, options, run_dir, log)
        copy_s = measure_copy(options)
        step = measure_training_step(spec, options, run_dir, log)
    finally:
        torch.set_num_threads(threads)
    return StageTimings(
        **per_image, loader_cpu_s=loader_cpu_s, loader_images_per_s=loader_rates, copy_s=copy_s, **step,
        batch=options.batch, subdivisions=options.subdivisions, img_size=options.img_size,
        cores=usable_cpus(), workers=options.workers, cached=options.cache != "none",
        augment_on=options.augment_on, dataset_images=len(scan.samples),
        cache_bytes=estimate_bytes(scan.samples, options.img_size))


def measure_per_image(subset: Sequence[Sample], options: DoctorOptions, log=print) -> dict[str, float]:
    """CPU seconds per image of decoding, reading a cached image, augmenting, and the CPU side of
    ``--augment-on device``: :class:`StageTimings`'s ``decode_s``, ``cache_read_s``, ``augment_s``,
    ``device_plan_s``."""
    size, params, repeats = options.img_size, AugmentParams.from_net(), options.repeats
    decode_s = median_pass(lambda s: decode_image(s.image, size), subset, repeats)
    decoded = [(s, *decode_image(s.image, size)) for s in subset]
    cache_read_s = median_pass(lambda d: np.array(d[1], copy=True), decoded, repeats)
    augment_s = median_pass(lambda d: augment_sample(d[1], d[0].labels, d[2], size, params,
                                                     sample_rng(0, 0, 0)), decoded, repeats)
    canvas = np.empty((size, size, 3), np.uint8)

    def device_plan(d):
        plan_sample(d[1].shape[:2], d[2], d[0].labels, size, size, params, sample_rng(0, 0, 0))
        place_on_canvas(d[1], size, out=canvas)

    device_plan_s = median_pass(device_plan, decoded, repeats)
    log(f"  decode {1000 * decode_s:.2f} ms, cache read {1000 * cache_read_s:.3f} ms, augment "
        f"{1000 * augment_s:.2f} ms, device-augment CPU side {1000 * device_plan_s:.3f} ms per image")
    return dict(decode_s=decode_s, cache_read_s=cache_read_s, augment_s=augment_s,
                device_plan_s=device_plan_s)


def measure_loaders(subset: Sequence[Sample], options: DoctorOptions, run_dir: Path,
                    log=print) -> tuple[dict[int, float], float]:
    """Images/s of the loader at each worker count, and its CPU seconds per image (with one worker when
    one was measured: no training in the same process; else at the configured count)."""
    cache = None
    if options.cache != "none":
        root = run_dir / "prepared" if options.cache == "disk" else None
        cache = prepare_cache(subset, options.img_size, root, memory=options.cache, workers=1,
                              log=lambda *_: None)
    mini = max(1, options.batch // options.subdivisions)
    loader_rates, loader_cpu = {}, {}
    for workers in sorted(set(options.worker_counts) | {options.workers}):
        loader = build_loader(subset, img_size=options.img_size, batch_size=mini,
                              augment=AugmentParams.from_net(), workers=workers, shuffle=True, cache=cache,
                              augment_on=options.augment_on)
        m = measure_loader(loader, options.loader_batches * mini)
        del loader
        loader_rates[workers], loader_cpu[workers] = m.images_per_s, m.cpu_s / m.images
        log(f"  loader, {workers} worker(s): {m.images_per_s:,.1f} images/s, "
            f"{1000 * m.cpu_s / m.images:.2f} ms CPU per image")
    return loader_rates, loader_cpu.get(1, loader_cpu.get(options.workers))


def measure_training_step(spec, options: DoctorOptions, run_dir: Path, log=print) -> dict:
    """The step (measured, or assumed in data-only mode), the device augmentation (measured with the
    step) and the checkpoint write: :class:`StageTimings`'s ``step_s``, ``step_source``,
    ``device_augment_s``, ``checkpoint_s``, ``checkpoint_write_s``."""
    mini = max(1, options.batch // options.subdivisions)
    device_augment_s = 0.0
    if options.assume_step_ms is None and options.assume_gpu is None:
        step_s, model, optimizer = measure_step(spec, options)
        source = f"measured on {options.device}"
        device_augment_s = measure_device_augment(options)
    else:
        if options.assume_step_ms is not None:
            step_s, source = options.assume_step_ms / 1000, f"assumed {options.assume_step_ms:g} ms"
        else:
            flops = forward_flops(spec, options.img_size)
            step_s = assumed_step_s(options.assume_gpu, flops, mini)
            source = (f"assumed {options.assume_gpu.upper()}: 3 x {flops / 1e9:.1f} GFLOP per image at "
                      f"{GPU_RATES[options.assume_gpu] / 1e12:.0f} TFLOP/s x MFU 0.35")
        model = Darknet(spec)
        optimizer = build_optimizer(model, fitted_optimizer(OptimArgs(), spec.net))
        for p in model.parameters():  # optimizer state as after a step (momentum buffers exist)
            p.grad = torch.zeros_like(p)
        optimizer.step()
    log(f"  step {1000 * step_s:.1f} ms per mini-batch of {mini} ({source})")
    with tempfile.TemporaryDirectory(dir=run_dir) as tmp:
        checkpoint_s, checkpoint_write_s = measure_checkpoint(model, optimizer, Path(tmp))
    log(f"  checkpoint: blocks {checkpoint_s:.2f} s, on disk after {checkpoint_write_s:.2f} s")
    return dict(step_s=step_s, step_source=source, device_augment_s=device_augment_s,
                checkpoint_s=checkpoint_s, checkpoint_write_s=checkpoint_write_s)
