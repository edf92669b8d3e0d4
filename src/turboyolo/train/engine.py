"""The training loop, its step and the evaluation loop, written out explicitly.

How a mini-batch is trained and an iteration applied is a :class:`TrainStep`, chosen once when the run is
set up: :class:`AutogradStep` (PyTorch's autograd, the default) or Darknet's own arithmetic
(:class:`turboyolo.exact.step.DarknetStep`, selected in :mod:`turboyolo.train.engines`). The loop
(:func:`train_one_epoch`) is the same for both.

One *iteration* (Darknet's "batch") = ``subdivisions`` mini-batches whose gradients accumulate; the loss
of every mini-batch is its per-image sum divided by the images per iteration, so ``subdivisions`` does not
scale the loss or the rate. It does set what batch norm normalises over in training (each mini-batch's own
statistics, as in Darknet), so a run with other subdivisions learns other weights. Loss values are read
back from the device only every ``log_interval`` iterations; one flag is read every iteration: whether the
loss and the gradients are finite.

Divergence: an iteration whose loss or gradient is NaN or inf is skipped (nothing reaches the weights,
the optimizer or the EMA; BatchNorm statistics are put back as they were before its forward passes),
counted and named; after ``MAX_SKIPPED_IN_A_ROW`` in a row the run stops with :class:`NonFiniteLoss`,
naming the iteration, the loss term and the last checkpoint, which is left as it was.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from torch import nn

from turboyolo.boxes import Letterbox
from turboyolo.data.loader import move_to_device
from turboyolo.errors import TurboYoloError
from turboyolo.model.postprocess import CapCounts, decode, nms_options, postprocess
from turboyolo.options import MAX_CANDIDATES, MAX_DET
from turboyolo.train import distributed
from turboyolo.train.loss import LOSS_NAMES, YoloLoss
from turboyolo.train.metrics import (
    EVAL_CONF_THRES,
    EVAL_IOU_THRES,
    EVAL_NMS_THRES,
    EvalResult,
    EvalTiming,
    evaluate_detections,
)
from turboyolo.train.optim import ModelEMA, Schedule, lr_at, set_lr
from turboyolo.train.plan import Plan

MAX_SKIPPED_IN_A_ROW = 3  # iterations with a NaN or inf loss or gradient before the run stops


class NonFiniteLoss(TurboYoloError):
    """The loss stayed NaN or infinite; the message names the iteration, the term and the checkpoint."""


@dataclass
class TrainState:
    """Everything that changes during training (what a checkpoint stores)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: Schedule
    loss_fn: YoloLoss
    images_per_iteration: int
    subdivisions: int
    ema: ModelEMA | None = None
    scaler: torch.amp.GradScaler | None = None
    iteration: int = 0  # completed iterations (the next update is iteration + 1, as Darknet counts)
    epoch: int = 0
    epoch_batches: int = 0  # mini-batches of `epoch` already consumed
    seen: int = 0  # images trained on
    best_fitness: float = -1.0
    best_epoch: int | None = None  # completed epochs when the best fitness was measured (--patience)
    last_checkpoint: str | None = None
    frozen: tuple[nn.Module, ...] = ()  # layers that stay in eval mode (frozen BN statistics)
    forward: nn.Module | None = None  # what runs the forward pass: DDP and/or torch.compile of `model`
    ddp: nn.Module | None = None  # the DistributedDataParallel wrapper under torchrun (for no_sync)
    epoch_start_sample: int = 0  # global sample position the current epoch (re)started at
    world_size: int = 1
    plan: Plan | None = None  # optimizer, schedule, EMA and close-mosaic settings of the run (checkpointed)
    skipped: int = 0  # iterations skipped for a NaN or inf loss or gradient (this process's run)
    skipped_in_a_row: int = 0
    last_checkpoint_iteration: int | None = None  # the iteration `last_checkpoint` holds
    # images whose labels are model-made and unreviewed, trained without background loss (--unreviewed ignore)
    no_background: frozenset[str] = frozenset()
    # how a mini-batch is trained and an iteration applied (chosen once: turboyolo.train.engines)
    step: TrainStep = field(default_factory=lambda: AutogradStep())


def _no_background(state: TrainState, metas, device: torch.device) -> torch.Tensor | None:
    """``[B]`` bool: the batch's images in ``state.no_background`` (None when there are none)."""
    if not state.no_background:
        return None
    return torch.tensor([path in state.no_background for path in metas.paths], device=device)


@dataclass
class StepOptions:
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    amp_dtype: torch.dtype | None = None
    clip_norm: float = 10.0
    channels_last: bool = False
    log_interval: int = 10
    say: Callable[[str], object] = print  # where a skipped iteration is named


class TrainStep(Protocol):
    """How one iteration trains: a strategy chosen once when the run is set up
    (:func:`turboyolo.train.engines.choose_step`). The loop owns the iteration (the rate, the batch-norm
    statistics an iteration that is skipped puts back, accumulation over the mini-batches, the counts);
    the step owns the arithmetic."""

    def begin(self, state: TrainState) -> None:
        """An iteration starts (before its first mini-batch)."""

    def mini_batch(self, state: TrainState, options: StepOptions, x: torch.Tensor, targets: torch.Tensor,
                   metas, last_micro: bool) -> torch.Tensor:
        """Forward, loss and backward of one mini-batch ``x`` (on the device, float in [0, 1]), its
        gradients added to the iteration's; its loss terms ``[len(LOSS_NAMES)]``, detached."""

    def apply(self, state: TrainState, options: StepOptions, terms: torch.Tensor) -> bool:
        """The iteration's update (and the EMA's); False, with nothing applied, when the iteration's loss
        ``terms`` or its gradients are NaN or inf."""


def autocast(options: StepOptions):
    """Mixed precision as ``options.amp_dtype`` says (nothing when ``None``)."""
    if options.amp_dtype is None:
        return nullcontext()
    return torch.autocast(options.device.type, dtype=options.amp_dtype)


def _no_sync(state: TrainState, last_micro: bool):
    if state.ddp is None or last_micro:
        return nullcontext()
    return state.ddp.no_sync()


@dataclass
class EpochStats:
    """Running sums of one epoch (loss terms per image, images, data wait), kept on the device."""

    device: torch.device
    terms: torch.Tensor | None = None
    images: int = 0
    wait_s: float = 0.0
    start: float = field(default_factory=time.perf_counter)

    def add(self, terms: torch.Tensor, images: int) -> None:
        self.terms = terms.detach().clone() if self.terms is None else self.terms + terms.detach()
        self.images += images

    def summary(self) -> dict[str, float]:
        """Mean loss terms per image, images/s, data-wait share and seconds (one device sync)."""
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        means = ((self.terms / max(self.images, 1)).tolist() if self.terms is not None
                 else [0.0] * len(LOSS_NAMES))
        return {**dict(zip(LOSS_NAMES, means)), "loss": sum(means), "images_per_s": self.images / elapsed,
                "data_wait": self.wait_s / elapsed, "seconds": elapsed}


def train_one_epoch(state: TrainState, batches: Iterable, num_batches: int, options: StepOptions,
                    stats: EpochStats | None = None) -> Iterator[dict]:
    """Train over ``batches`` (the rest of ``state.epoch``, from mini-batch ``state.epoch_batches``).

    A generator: it yields after every update, with the logged values at log points (every
    ``log_interval`` iterations and at the epoch's end: loss terms per image, loss, lr, images/s,
    data-wait share) and ``{}`` in between. The caller decides whether to go on; stopping the loop
    between two yields leaves ``state`` exactly at an iteration boundary.

    Args:
        batches: iterable of ``(images uint8 [B,3,H,W], targets [N,6], metas)``.
        num_batches: mini-batches in the whole epoch (the last iteration of the epoch may be partial).
        stats: the epoch's running sums (filled here; :meth:`EpochStats.summary` at the end).
    """
    stats = stats if stats is not None else EpochStats(options.device)
    model, optimizer = state.model, state.optimizer
    model.train()
    for module in state.frozen:
        module.eval()
    logged_terms = torch.zeros(len(LOSS_NAMES), device=options.device)
    logged_images = 0
    step_terms = torch.zeros(len(LOSS_NAMES), device=options.device)  # this iteration's, until it is taken
    step_images = 0
    epoch_start_images = state.seen
    micro = 0  # mini-batches accumulated into the current iteration
    norms = BatchNormState(model)
    step = state.step
    iterator = iter(batches)
    optimizer.zero_grad(set_to_none=True)
    while state.epoch_batches < num_batches:
        before = time.perf_counter()
        try:
            images, targets, metas = next(iterator)
        except StopIteration:
            break
        stats.wait_s += time.perf_counter() - before
        if micro == 0:
            set_lr(optimizer, lr_at(state.schedule, state.iteration + 1))
            norms.save()
            step.begin(state)
        # Under DDP gradients are all-reduced only on the iteration's last mini-batch.
        last_micro = micro + 1 >= state.subdivisions or state.epoch_batches + 1 >= num_batches
        x = move_to_device(images, options.device, channels_last=options.channels_last)
        step_terms += step.mini_batch(state, options, x, targets, metas, last_micro)
        step_images += images.shape[0]
        state.seen += images.shape[0]
        state.epoch_batches += 1
        micro += 1
        if micro < state.subdivisions and state.epoch_batches < num_batches:
            continue
        micro = 0
        if step.apply(state, options, step_terms):
            stats.add(step_terms, step_images)
            logged_terms += step_terms
            logged_images += step_images
            state.skipped_in_a_row = 0
        else:
            norms.restore()
            _skipped(state, options, step_terms)
        step_terms.zero_()
        step_images = 0
        state.iteration += 1
        if state.iteration % options.log_interval and state.epoch_batches < num_batches:
            yield {}
            continue
        per_image = (logged_terms / max(logged_images, 1)).tolist()  # the one sync per log interval
        elapsed = max(time.perf_counter() - stats.start, 1e-9)
        logged_terms.zero_()
        logged_images = 0
        yield {**dict(zip(LOSS_NAMES, per_image)), "loss": sum(per_image),
               "lr": optimizer.param_groups[0]["lr"],
               "images_per_s": (state.seen - epoch_start_images) / elapsed,
               "data_wait": stats.wait_s / elapsed}


class AutogradStep:
    """The default :class:`TrainStep`: the forward under autocast, the loss, autograd's backward
    (gradients accumulate over the iteration's mini-batches; under DDP they are all-reduced on its last),
    then the clipped, scaled optimizer step and the EMA."""

    def begin(self, state: TrainState) -> None:
        pass

    def mini_batch(self, state: TrainState, options: StepOptions, x: torch.Tensor, targets: torch.Tensor,
                   metas, last_micro: bool) -> torch.Tensor:
        with _no_sync(state, last_micro):
            with autocast(options):
                # not `state.forward or model`: bool() of torch.compile's wrapper calls len(), which raises
                outputs = (state.model if state.forward is None else state.forward)(x)
            total, terms = state.loss_fn(outputs, targets, tuple(x.shape[2:]),
                                         no_background=_no_background(state, metas, x.device))
            loss = total / state.images_per_iteration
            if state.scaler is not None:
                state.scaler.scale(loss).backward()
            else:
                loss.backward()
        return terms.detach()

    def apply(self, state: TrainState, options: StepOptions, terms: torch.Tensor) -> bool:
        """Clip and apply the accumulated gradients; False, with nothing applied, when the iteration's loss
        terms or gradients are NaN or inf (the one sync of every iteration). With a GradScaler, gradients
        that overflow float16 are its business (it skips and lowers its scale): only the loss is
        checked."""
        params = [p for group in state.optimizer.param_groups for p in group["params"] if p.grad is not None]
        if state.scaler is not None:
            state.scaler.unscale_(state.optimizer)
        finite = torch.isfinite(terms).all()
        norm = _clipped_norm(params, options.clip_norm)
        if state.scaler is None and norm is not None:
            finite = finite & torch.isfinite(norm)
        bad = distributed.all_reduce_sum((~finite).to(torch.float32).reshape(1))  # every rank skips together
        if bool(bad.item()):
            state.optimizer.zero_grad(set_to_none=True)
            if state.scaler is not None:
                state.scaler.update()  # unscale_ was called: the scaler expects an update before the next
            return False
        if state.scaler is not None:
            state.scaler.step(state.optimizer)
            state.scaler.update()
        else:
            state.optimizer.step()
        state.optimizer.zero_grad(set_to_none=True)
        if state.ema is not None:
            state.ema.update(state.model)
        return True


BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


class BatchNormState:
    """The BatchNorm running statistics of a model, saved before an iteration's forward passes and put
    back when the iteration is skipped: a NaN in one batch would otherwise reach them (and every later
    evaluation) even though no weight is updated. Saved as one flat copy per device and dtype (one
    ``torch.cat`` each, not a copy per buffer: this runs every iteration)."""

    def __init__(self, model: nn.Module):
        self.groups: dict[tuple, list[torch.Tensor]] = {}
        for module in model.modules():
            if isinstance(module, BATCH_NORMS):
                for buffer in module.buffers():
                    self.groups.setdefault((buffer.device, buffer.dtype), []).append(buffer)
        self.saved = {key: torch.cat([b.detach().reshape(-1) for b in group])
                      for key, group in self.groups.items()}

    def save(self) -> None:
        for key, group in self.groups.items():
            torch.cat([b.detach().reshape(-1) for b in group], out=self.saved[key])

    def restore(self) -> None:
        for key, group in self.groups.items():
            parts = torch.split(self.saved[key], [b.numel() for b in group])
            with torch.no_grad():
                for buffer, saved in zip(group, parts):
                    buffer.copy_(saved.view_as(buffer))


def _skipped(state: TrainState, options: StepOptions, terms: torch.Tensor) -> None:
    """Count and name a skipped iteration; stop the run after ``MAX_SKIPPED_IN_A_ROW`` in a row."""
    state.skipped += 1
    state.skipped_in_a_row += 1
    values = dict(zip(LOSS_NAMES, terms.tolist()))
    bad = [name for name, value in values.items() if not math.isfinite(value)]
    what = (f"loss term {', '.join(bad)} is {values[bad[0]]}" if bad
            else "a gradient is NaN or inf (the loss terms are finite)")
    where = f"iteration {state.iteration + 1} (epoch {state.epoch + 1})"
    if state.skipped_in_a_row < MAX_SKIPPED_IN_A_ROW:
        options.say(f"warning: {where}: {what}; skipped, the weights did not take it "
                    f"({state.skipped_in_a_row} in a row, {state.skipped} in this run)")
        return
    if state.last_checkpoint:
        kept = (f"the last good checkpoint, {state.last_checkpoint} (iteration "
                f"{state.last_checkpoint_iteration}), is left as it was: continue from it with `turboyolo "
                f"train --resume {state.last_checkpoint}` and a lower learning rate (--lr)")
    else:
        kept = "no checkpoint was written yet: start again with a lower learning rate (--lr)"
    raise NonFiniteLoss(f"training diverged at {where}: {what}, {MAX_SKIPPED_IN_A_ROW} iterations in a row "
                        f"(each skipped: the weights never took a NaN or inf); {kept}; if it happens at "
                        "once, look for a broken image or label")


def _clipped_norm(params: list[torch.Tensor], clip_norm: float) -> torch.Tensor | None:
    """The gradients' total norm (NaN or inf when one of them is), clipped to ``clip_norm`` when > 0."""
    if not params:
        return None
    if clip_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, clip_norm, foreach=True)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader,
    *,
    device: torch.device,
    num_classes: int,
    conf_thres: float = EVAL_CONF_THRES,
    iou_thres: float = EVAL_IOU_THRES,
    nms_thres: float = EVAL_NMS_THRES,
    eval_conf: float = 0.001,
    max_det: int = MAX_DET,
    max_candidates: int | None = MAX_CANDIDATES,
    amp_dtype: torch.dtype | None = None,
    backend: str = "builtin",
    keep_predictions: int = 0,
) -> tuple[EvalResult | None, list]:
    """mAP of ``model`` on a validation ``loader`` (letterboxed, no augmentation).

    Under torchrun each rank evaluates its shard of the loader; rank 0 gets the result, the others
    ``(None, [])``.

    Detections stay on the device until the loop ends (no per-batch sync); COCO matching runs on the
    original-image boxes. ``conf_thres`` is where precision / recall / F1 and the confusion matrix are
    read, with matches at ``iou_thres``; detections down to ``eval_conf`` enter the AP computation and
    the curves (see :func:`turboyolo.train.metrics.evaluate_detections`). ``max_det`` and
    ``max_candidates`` cap the NMS (:func:`turboyolo.model.postprocess.postprocess`); the result's
    ``caps`` counts where they bit and its ``timing`` splits the time (loading, inference, decode + NMS,
    metrics).

    Returns the result and, for the first ``keep_predictions`` images, (path, detections [n, 6]).
    """
    was_training = model.training
    model.eval()
    nms_args = dict(conf_thres=eval_conf, nms_thres=nms_thres, max_det=max_det, max_candidates=max_candidates)
    dets_cpu, gt_labels, sizes, paths, timing, caps = _detect_all(model, loader, device, amp_dtype, nms_args)
    if was_training:
        model.train()
    paths, dets_cpu, gt_labels, sizes = _gather_shards(paths, dets_cpu, gt_labels, sizes)
    caps = _sum_caps(distributed.all_gather_objects(caps))
    if paths is None:  # not rank 0: its shard went to rank 0, which computes the numbers
        return None, []
    gt_labels = [g if g is not None else np.zeros((0, 5), np.float32) for g in gt_labels]
    started = time.perf_counter()
    result = evaluate_detections(
        dets_cpu, gt_labels, sizes, num_classes,
        conf_thres=conf_thres, iou_thres=iou_thres, max_det=max_det, backend=backend,
    )
    timing.metrics_s = time.perf_counter() - started
    result.timing, result.caps = timing, caps
    return result, list(zip(paths[:keep_predictions], dets_cpu[:keep_predictions]))


def _detect_all(model: nn.Module, loader, device: torch.device, amp_dtype: torch.dtype | None, nms: dict):
    """Every image's detections (numpy, original pixels), labels, size and path; the time split of
    loading, inference and decode + NMS; the NMS caps' counts."""
    labels_by_path = {str(s.image): s.labels for s in loader.dataset.samples}
    all_dets, gt_labels, sizes, paths = [], [], [], []
    options = StepOptions(device=device, amp_dtype=amp_dtype)
    clock, timing, caps = DeviceClock(device), EvalTiming(), CapCounts()
    batches = iter(loader)
    while True:
        waited = time.perf_counter()
        try:
            images, _, metas = next(batches)
        except StopIteration:
            break
        timing.loading_s += time.perf_counter() - waited
        start = clock.mark()
        x = move_to_device(images, device)
        with autocast(options):
            outputs = model(x)
        inferred = clock.mark()
        letterboxes = [Letterbox.from_meta(m) for m in metas]
        all_dets.extend(postprocess(decode(outputs, model.heads), letterboxes=letterboxes, multi_label=True,
                                    caps=caps, **nms, **nms_options(model.heads)))
        clock.add("inference", start, inferred)
        clock.add("nms", inferred, clock.mark())
        for meta in metas:
            gt_labels.append(labels_by_path.get(str(meta.path)))
            sizes.append(tuple(meta.orig_hw))
            paths.append(meta.path)
    dets_cpu = [d.float().cpu().numpy() for d in all_dets]
    seconds = clock.seconds()
    timing.images, timing.inference_s, timing.nms_s = len(paths), seconds["inference"], seconds["nms"]
    return dets_cpu, gt_labels, sizes, paths, timing, caps


class DeviceClock:
    """Seconds between marks on the device's own clock: CUDA events, read once at the end (no sync per
    batch), or the host's clock elsewhere."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.spans: list[tuple[str, object, object]] = []

    def mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def add(self, name: str, start, end) -> None:
        self.spans.append((name, start, end))

    def seconds(self) -> dict[str, float]:
        """Total seconds per name."""
        if self.cuda and self.spans:
            torch.cuda.synchronize()
        totals: dict[str, float] = {"inference": 0.0, "nms": 0.0}
        for name, start, end in self.spans:
            span = start.elapsed_time(end) / 1000 if self.cuda else end - start
            totals[name] = totals.get(name, 0.0) + span
        return totals


def _sum_caps(shards: list[CapCounts]) -> CapCounts:
    """The caps' counts of every rank's shard, summed."""
    total = shards[0]
    for other in shards[1:]:
        total.images += other.images
        total.max_det += other.max_det
        total.candidates += other.candidates
        total.most_candidates = max(total.most_candidates, other.most_candidates)
    return total


def _gather_shards(paths, dets, gts, sizes):
    """Under torchrun every rank evaluated its shard: collect them on rank 0 and drop the sampler's
    padding (images repeated to even out the shards). Other ranks get ``None``s back."""
    shards = distributed.all_gather_objects((paths, dets, gts, sizes))
    if len(shards) == 1:
        return paths, dets, gts, sizes
    if not distributed.read_env().is_main:
        return None, None, None, None
    merged: dict = {}
    for shard in shards:
        for path, det, gt, size in zip(*shard):
            merged.setdefault(str(path), (path, det, gt, size))
    ordered = [merged[key] for key in sorted(merged)]
    return tuple(list(column) for column in zip(*ordered)) if ordered else ([], [], [], [])
