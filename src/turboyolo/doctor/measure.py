"""Measuring the stages :mod:`turboyolo.doctor.verdict` reasons about, on the user's data and hardware,
for the run ``turboyolo train`` would resolve (:func:`resolved_run`: its augmentation, mosaic included).

Every per-image stage is timed as CPU time of this process (one thread), after a warm-up, over
``repeats`` passes of a fixed subset of the split; the median pass is reported. The loader's cost per
image for each setting is measured as ``auto`` measures it (:func:`turboyolo.train.facts.measure_costs`,
the same code), its wall-clock images/s with :func:`turboyolo.data.timing.measure_loader`. The step is
``turboyolo train``'s: :func:`turboyolo.train.engine.train_one_epoch` on a state built by
:func:`turboyolo.train.setup.build_state` (:func:`step_seconds`); the checkpoint is the one it writes.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch

from turboyolo.data.augment import AugmentParams, augment_sample, sample_rng
from turboyolo.data.cache import default_cache_root, estimate_bytes, prepare_cache
from turboyolo.data.decode import decode_image
from turboyolo.data.device_augment import augment_batch, place_on_canvas, plan_sample, sampled_region
from turboyolo.data.device_loader import device_augment_unsupported
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import Sample
from turboyolo.data.timing import measure_loader, median_pass, ring_round_batches
from turboyolo.devices import usable_cpus
from turboyolo.doctor.verdict import StageTimings
from turboyolo.errors import DataError
from turboyolo.train.anchors import check_anchors
from turboyolo.train.auto import AUTO, PipelineChoice, choose_pipeline
from turboyolo.train.checkpoint import CheckpointWriter, checkpoint_dict
from turboyolo.train.config import TrainConfig
from turboyolo.train.distributed import DistEnv
from turboyolo.train.engine import StepOptions, TrainState, train_one_epoch
from turboyolo.train.facts import GPU_RATES, assumed_step_s, forward_flops, machine_facts, measure_costs
from turboyolo.train.loaders import scan_splits
from turboyolo.train.plan import make_plan
from turboyolo.train.resolve import ResolvedRun, resolve_options
from turboyolo.train.setup import build_state

PLANNED_ITERATIONS = 1000  # the plan the doctor's state is built with (its numbers do not change the step)


@dataclass
class DoctorOptions:
    img_size: int
    batch: int
    subdivisions: int
    device: torch.device
    workers: int | None  # the configuration's worker count (None: auto's); measured, plus worker_counts
    worker_counts: tuple[int, ...]
    cache: str = "auto"  # auto | none | ram | disk
    augment_on: str = "auto"  # auto | cpu | device
    amp: str = "auto"
    amp_dtype: torch.dtype | None = None
    assume_step_ms: float | None = None
    assume_gpu: str | None = None
    assume_cpus: int | None = None  # predict for this many cores (None: this process's usable cores)
    images: int = 32  # subset size for the per-image stages
    repeats: int = 3
    epochs: int | None = None  # the run's length (None: train's default), for the share the start takes
    loader_batches: int = 3
    cfg: str = "model.cfg"  # what train would read (the resolved run names them)
    data: str = "data"

    @property
    def mini_batch(self) -> int:
        return max(1, self.batch // self.subdivisions)


def resolved_run(spec, options: DoctorOptions) -> ResolvedRun:
    """The run ``turboyolo train`` would resolve for this cfg and these settings (its augmentation,
    loss, BatchNorm and plan), without the pipeline settings (the doctor measures those)."""
    length = {"epochs": options.epochs} if options.epochs else {}
    config = TrainConfig.build(cfg=options.cfg, data=options.data, img_size=options.img_size,
                               batch=options.batch, subdivisions=options.subdivisions,
                               device=str(options.device), amp=options.amp, **length)
    resolved = resolve_options(config, spec, say=lambda *_: None)
    plan = make_plan(resolved.config, resolved.spec.net, PLANNED_ITERATIONS, 10, PLANNED_ITERATIONS // 10)
    return resolved.with_plan(plan)


def train_state(resolved: ResolvedRun, device: torch.device) -> TrainState:
    """The training state as ``turboyolo train`` builds it (:func:`turboyolo.train.setup.build_state`:
    model, optimizer, loss, EMA, scaler)."""
    return build_state(resolved, DistEnv(), device, None, lambda *_: None)


def synthetic_batches(mini: int, size: int, count: int, seed: int = 0) -> Iterator:
    """``count`` mini-batches ``(uint8 images [mini, 3, size, size], targets [N, 6], None)``."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 255, (mini, 3, size, size), dtype=torch.uint8, generator=generator)
    targets = torch.tensor([[i, 0, 0.5, 0.5, 0.2, 0.3] for i in range(mini)], dtype=torch.float32)
    for _ in range(count):
        yield images, targets, None


def step_seconds(state: TrainState, options: StepOptions, mini: int, size: int, repeats: int) -> float:
    """Median seconds per mini-batch of :func:`turboyolo.train.engine.train_one_epoch` (the step
    ``turboyolo train`` runs: accumulation, AMP, clipping, the optimizer, the EMA) over ``repeats``
    iterations after one warm-up iteration."""
    subdivisions = state.subdivisions
    count = (repeats + 1) * subdivisions
    state.epoch_batches = 0
    times, last = [], None
    for _ in train_one_epoch(state, synthetic_batches(mini, size, count), count, options):
        _sync(options.device)
        now = time.perf_counter()
        if last is not None:
            times.append((now - last) / subdivisions)
        last = now
    return statistics.median(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_checkpoint(state: TrainState, resolved: ResolvedRun, folder: Path) -> tuple[float, float]:
    """(seconds a checkpoint save blocks training, seconds until it is on disk): the checkpoint
    ``turboyolo train`` writes, with its writer."""
    checkpoint = checkpoint_dict(state, resolved.as_dict(), "")
    writer = CheckpointWriter()
    path = folder / "doctor-checkpoint.pt"
    try:
        writer.save(checkpoint, [path])  # warm-up: allocates the reused buffers
        writer.wait()
        start = time.perf_counter()
        writer.save(checkpoint, [path])
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
    mini = options.mini_batch
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
    mini = options.mini_batch
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
    """All stages on a subset of ``split`` of ``data`` (:class:`turboyolo.doctor.verdict.StageTimings`),
    with the run ``turboyolo train`` would resolve: its augmentation (mosaic included), its model and
    step, its ``auto`` choice of the input pipeline (the configuration measured where ``auto`` is asked)."""
    cv2.setNumThreads(1)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        resolved = resolved_run(spec, options)
        scans, startup = measure_startup(resolved, options, log)
        scan = scans[0] if split == "train" else scans[1]
        log(scan.summary())
        if not scan.samples:
            raise DataError(f"{data}: no usable {split} images (see the scan report)")
        rng = np.random.default_rng(0)
        pick = sorted(rng.choice(len(scan.samples), min(options.images, len(scan.samples)), replace=False))
        subset = [scan.samples[int(i)] for i in pick]
        log(f"doctor: {len(subset)} of {len(scan.samples)} images, {options.repeats} repeats per stage")
        augment = resolved.augment
        per_image = measure_per_image(subset, options, augment, log)
        costs = measure_costs(subset, options.img_size, options.mini_batch, augment, count=len(subset),
                              handoff=True)
        step = measure_training_step(resolved, options, run_dir, log)
        copy_s = measure_copy(options)
        cache_bytes = estimate_bytes(scan.samples, options.img_size)
        choice = auto_choice(options, costs, step, copy_s, cache_bytes, augment, data)
        for line in choice.lines():
            log(f"  auto: {line}")
        options = _with_choice(options, choice)
        loader_rates, loader_cpu_s = measure_loaders(subset, options, augment, run_dir, log)
    finally:
        torch.set_num_threads(threads)
    return StageTimings(
        **per_image, loader_cpu_s=loader_cpu_s, loader_images_per_s=loader_rates, copy_s=copy_s, **step,
        batch=options.batch, subdivisions=options.subdivisions, img_size=options.img_size,
        cores=options.assume_cpus or usable_cpus(), workers=options.workers, cached=options.cache != "none",
        augment_on=options.augment_on, dataset_images=len(scan.samples), cache_bytes=cache_bytes,
        handoff_s=costs.handoff_s, costs=vars(costs), auto=choice.lines(),
        device_unsupported=device_augment_unsupported(augment), **startup)


def measure_startup(resolved: ResolvedRun, options: DoctorOptions, log=print) -> tuple[tuple, dict]:
    """What ``turboyolo train`` does before its first step that depends on the data set, timed (wall) as
    it does it: both splits' scans, the anchor check (with ``--autoanchor`` its fit, kept for the next
    start as train keeps it) and, when a pipeline setting is ``auto``, the pipeline measurement.

    Returns ((train scan, val scan), :class:`StageTimings`' ``startup_s``, ``startup_cold`` and
    ``planned_images``)."""
    config, parts = resolved.config, {}
    start = time.perf_counter()
    train_scan, val_scan = scan_splits(config)
    parts["scan"] = time.perf_counter() - start
    cold = train_scan.cached < train_scan.found or val_scan.cached < val_scan.found
    start = time.perf_counter()
    fit = config.loss.autoanchor and not config.loss.anchors  # as train's start (setup.fit_to_data)
    check_anchors(resolved.spec, train_scan.samples, autoanchor=fit, data=config.data, cfg=config.cfg,
                  say=lambda *_: None)
    parts["anchor check"] = time.perf_counter() - start
    if train_scan.samples and (AUTO in (options.cache, options.augment_on) or options.workers is None):
        start = time.perf_counter()
        measure_costs(train_scan.samples, options.img_size, options.mini_batch, resolved.augment,
                      multiscale=resolved.multiscale)
        parts["pipeline measurement"] = time.perf_counter() - start
    planned = config.schedule.epochs * len(train_scan.samples)
    if resolved.max_iterations:
        planned = min(planned, resolved.max_iterations * options.batch)
    log("  start-up before the first step: " + ", ".join(f"{name} {s:.1f} s" for name, s in parts.items())
        + (" (the scan checked files: a first start)" if cold else ""))
    return (train_scan, val_scan), dict(startup_s=parts, startup_cold=cold, planned_images=planned)


def auto_choice(options: DoctorOptions, costs, step: dict, copy_s: float, cache_bytes: int,
                augment: AugmentParams | None, data) -> PipelineChoice:
    """What ``turboyolo train`` would choose here (:func:`turboyolo.train.auto.choose_pipeline`), the
    settings given with the doctor's flags kept."""
    requested = {"cache": (options.cache, "flag"), "augment_on": (options.augment_on, "flag"),
                 "workers": (options.workers, "flag")}
    machine = machine_facts(options.device, default_cache_root(data, "train", options.img_size))
    if options.assume_gpu or options.assume_step_ms:  # data-only mode: the step runs on a GPU
        machine = dataclasses.replace(machine, device="cuda")
    if options.assume_cpus:
        machine = dataclasses.replace(machine, cores=options.assume_cpus)
    step_s = step["step_s"] / options.mini_batch + copy_s
    unsupported = device_augment_unsupported(augment)
    return choose_pipeline(requested, costs, machine, step_s, cache_bytes, unsupported,
                           device_step_s=step_s + step["device_augment_s"])


def _with_choice(options: DoctorOptions, choice: PipelineChoice) -> DoctorOptions:
    return DoctorOptions(**{**vars(options), "cache": choice.cache, "augment_on": choice.augment_on,
                            "workers": choice.workers})


def measure_per_image(subset: Sequence[Sample], options: DoctorOptions, params: AugmentParams | None,
                      log=print) -> dict[str, float]:
    """CPU seconds per image of decoding, reading a cached image, augmenting (one sample's warp and
    colour), and the CPU side of ``--augment-on device``: :class:`StageTimings`'s ``decode_s``,
    ``cache_read_s``, ``augment_s``, ``device_plan_s``."""
    size, repeats = options.img_size, options.repeats
    params = params or AugmentParams.from_net()
    decode_s = median_pass(lambda s: decode_image(s.image, size), subset, repeats)
    decoded = [(s, *decode_image(s.image, size)) for s in subset]
    cache_read_s = median_pass(lambda d: np.array(d[1], copy=True), decoded, repeats)
    augment_s = median_pass(lambda d: augment_sample(d[1], d[0].labels, d[2], size, params,
                                                     sample_rng(0, 0, 0)), decoded, repeats)
    canvas = np.empty((size, size, 3), np.uint8)

    def device_plan(d):  # as the loader does it: the numbers, then the region the warp reads
        theta = plan_sample(d[1].shape[:2], d[2], d[0].labels, size, size, params, sample_rng(0, 0, 0))[0]
        place_on_canvas(d[1], size, out=canvas, region=sampled_region(theta, (0, 0, size, size), size, size))

    device_plan_s = median_pass(device_plan, decoded, repeats)
    log(f"  decode {1000 * decode_s:.2f} ms, cache read {1000 * cache_read_s:.3f} ms, augment "
        f"{1000 * augment_s:.2f} ms, device-augment CPU side {1000 * device_plan_s:.3f} ms per image")
    return dict(decode_s=decode_s, cache_read_s=cache_read_s, augment_s=augment_s,
                device_plan_s=device_plan_s)


def measure_loaders(subset: Sequence[Sample], options: DoctorOptions, augment: AugmentParams | None,
                    run_dir: Path, log=print) -> tuple[dict[int, float], float]:
    """Wall-clock images/s of the loader at each worker count (the configuration's settings), and its CPU
    seconds per image (with one worker when one was measured, else at the configured count)."""
    cache = None
    if options.cache != "none":
        root = run_dir / "prepared" if options.cache == "disk" else None
        cache = prepare_cache(subset, options.img_size, root, memory=options.cache, workers=1,
                              log=lambda *_: None)
    loader_rates, loader_cpu = {}, {}
    if options.augment_on == "device" and device_augment_unsupported(augment) is not None:
        augment = None  # explicit --augment-on device: as train would refuse it, measure the plain path
    here = max(1, usable_cpus() - 1)  # more workers than this machine has cores measure nothing new
    configured = min(options.workers, here)  # (--assume-cpus: the workers of the planned machine)
    skipped = sorted(w for w in {*options.worker_counts, options.workers} if w > here)
    if skipped:
        log(f"  loader not measured at {', '.join(map(str, skipped))} worker(s): this machine has "
            f"{usable_cpus()} usable cores (the prediction for them uses the cost per image measured here)")
    for workers in sorted({w for w in options.worker_counts if w <= here} | {configured}):
        loader = build_loader(subset, img_size=options.img_size, batch_size=options.mini_batch,
                              augment=augment, workers=workers, shuffle=True, cache=cache,
                              augment_on=options.augment_on)
        batches = max(options.loader_batches, ring_round_batches(loader))
        m = measure_loader(loader, batches * options.mini_batch)
        del loader
        loader_rates[workers], loader_cpu[workers] = m.images_per_s, m.cpu_s / m.images
        log(f"  loader, {workers} worker(s): {m.images_per_s:,.1f} images/s, "
            f"{1000 * m.cpu_s / m.images:.2f} ms CPU per image")
    return loader_rates, loader_cpu.get(1, loader_cpu[configured])


def measure_training_step(resolved: ResolvedRun, options: DoctorOptions, run_dir: Path, log=print) -> dict:
    """The step (``turboyolo train``'s, on its state; or assumed in data-only mode), the device
    augmentation (measured with the step) and the checkpoint write: :class:`StageTimings`'s ``step_s``,
    ``step_source``, ``device_augment_s``, ``checkpoint_s``, ``checkpoint_write_s``."""
    mini, spec = options.mini_batch, resolved.spec
    device_augment_s = 0.0
    data_only = options.assume_step_ms is not None or options.assume_gpu is not None
    state = train_state(resolved, torch.device("cpu") if data_only else options.device)
    if not data_only:
        step_options = StepOptions(device=options.device, amp_dtype=options.amp_dtype,
                                   clip_norm=resolved.config.runtime.clip_norm,
                                   channels_last=resolved.config.runtime.channels_last, log_interval=1,
                                   say=lambda *_: None)
        step_s = step_seconds(state, step_options, mini, options.img_size, options.repeats)
        source = f"measured on {options.device}"
        device_augment_s = measure_device_augment(options)
    elif options.assume_step_ms is not None:
        step_s, source = options.assume_step_ms / 1000, f"assumed {options.assume_step_ms:g} ms"
    else:
        flops = forward_flops(spec, options.img_size)
        step_s = assumed_step_s(options.assume_gpu, flops, mini)
        source = (f"assumed {options.assume_gpu.upper()}: 3 x {flops / 1e9:.1f} GFLOP per image at "
                  f"{GPU_RATES[options.assume_gpu] / 1e12:.0f} TFLOP/s x MFU 0.35")
    log(f"  step {1000 * step_s:.1f} ms per mini-batch of {mini} ({source})")
    with tempfile.TemporaryDirectory(dir=run_dir) as tmp:
        checkpoint_s, checkpoint_write_s = measure_checkpoint(state, resolved, Path(tmp))
    log(f"  checkpoint: blocks {checkpoint_s:.2f} s, on disk after {checkpoint_write_s:.2f} s")
    return dict(step_s=step_s, step_source=source, device_augment_s=device_augment_s,
                checkpoint_s=checkpoint_s, checkpoint_write_s=checkpoint_write_s)
