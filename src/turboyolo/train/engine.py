"""The training step and the evaluation loop, written out explicitly.

One *iteration* (Darknet's "batch") = ``subdivisions`` mini-batches whose gradients accumulate; the loss
of every mini-batch is its per-image sum divided by the images per iteration, so the update is the same
for any ``subdivisions``. Values are read back from the device only every ``log_interval`` iterations.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from torch import nn

from turboyolo.data.loader import move_to_device
from turboyolo.errors import TurboYoloError
from turboyolo.train.loss import LOSS_NAMES, YoloLoss
from turboyolo.train.metrics import EvalResult, evaluate_detections
from turboyolo.train.optim import ModelEMA, Schedule, lr_at, set_lr


class NonFiniteLoss(TurboYoloError):
    """The loss became NaN or infinite; the message names the iteration and the checkpoint to resume."""


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
    last_checkpoint: str | None = None
    max_iterations: int = 0  # 0 = no limit
    frozen: tuple[nn.Module, ...] = ()  # layers that stay in eval mode (frozen BN statistics)
    forward: nn.Module | None = None  # what runs the forward pass: DDP and/or torch.compile of `model`
    ddp: nn.Module | None = None  # the DistributedDataParallel wrapper under torchrun (for no_sync)
    epoch_start_sample: int = 0  # global sample position the current epoch (re)started at
    world_size: int = 1


@dataclass
class StepOptions:
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    amp_dtype: torch.dtype | None = None
    clip_norm: float = 10.0
    channels_last: bool = False
    log_interval: int = 10


def amp_dtype_for(device: torch.device, amp: str) -> torch.dtype | None:
    """``--amp``: off | bf16 | fp16 | auto (bf16 where the GPU has it, else fp16; off on CPU)."""
    if amp == "off" or (amp == "auto" and device.type != "cuda"):
        return None
    if amp == "bf16" or (amp == "auto" and torch.cuda.is_bf16_supported()):
        return torch.bfloat16
    return torch.float16


def _autocast(options: StepOptions):
    if options.amp_dtype is None:
        return nullcontext()
    return torch.autocast(options.device.type, dtype=options.amp_dtype)


def _no_sync(state: TrainState, last_micro: bool):
    if state.ddp is None or last_micro:
        return nullcontext()
    return state.ddp.no_sync()


def train_one_epoch(
    state: TrainState,
    batches: Iterable,
    num_batches: int,
    options: StepOptions,
    on_iteration: Callable[[TrainState, dict], bool] | None = None,
    progress=None,
) -> dict[str, float]:
    """Train over ``batches`` (the rest of ``state.epoch``, starting at mini-batch ``state.epoch_batches``).

    Args:
        batches: iterable of ``(images uint8 [B,3,H,W], targets [N,6], metas)``.
        num_batches: mini-batches in the whole epoch (the last iteration of the epoch may be partial).
        on_iteration: called after every update with the state and the logged values (or ``{}`` between
            log points); returning True stops the epoch early (checkpoint/limit handling lives there).
        progress: a :class:`turboyolo.train.logger.Progress` or None.

    Returns the epoch's mean loss terms per image, images/s and data-wait share.
    """
    model, optimizer, loss_fn = state.model, state.optimizer, state.loss_fn
    model.train()
    for module in state.frozen:
        module.eval()
    device = options.device
    running = torch.zeros(len(LOSS_NAMES), device=device)
    running_images = 0
    logged_terms = torch.zeros(len(LOSS_NAMES), device=device)
    logged_images = 0
    wait_s, start = 0.0, time.perf_counter()
    epoch_start_images = state.seen
    micro = 0  # mini-batches accumulated into the current iteration
    iterator = iter(batches)
    optimizer.zero_grad(set_to_none=True)
    stop = False
    while state.epoch_batches < num_batches and not stop:
        before = time.perf_counter()
        try:
            images, targets, _ = next(iterator)
        except StopIteration:
            break
        wait_s += time.perf_counter() - before
        if micro == 0:
            set_lr(optimizer, lr_at(state.schedule, state.iteration + 1))
        x = move_to_device(images, device, channels_last=options.channels_last)
        # Under DDP gradients are all-reduced only on the iteration's last mini-batch.
        last_micro = micro + 1 >= state.subdivisions or state.epoch_batches + 1 >= num_batches
        with _no_sync(state, last_micro):
            with _autocast(options):
                outputs = (state.forward or model)(x)
            total, terms = loss_fn(outputs, targets, tuple(x.shape[2:]))
            loss = total / state.images_per_iteration
            if state.scaler is not None:
                state.scaler.scale(loss).backward()
            else:
                loss.backward()
        running += terms
        logged_terms += terms
        batch_images = images.shape[0]
        running_images += batch_images
        logged_images += batch_images
        state.seen += batch_images
        state.epoch_batches += 1
        micro += 1
        if micro < state.subdivisions and state.epoch_batches < num_batches:
            continue
        micro = 0
        _step(state, options)
        state.iteration += 1
        values: dict = {}
        last = state.epoch_batches >= num_batches
        reached = state.max_iterations and state.iteration >= state.max_iterations
        if state.iteration % options.log_interval == 0 or last or reached:
            per_image = (logged_terms / max(logged_images, 1)).tolist()  # the one sync per log interval
            if not all(math.isfinite(v) for v in per_image):
                resume = (
                    f"resume from {state.last_checkpoint} with --resume and a lower learning_rate"
                    if state.last_checkpoint
                    else "no checkpoint was written yet; lower learning_rate"
                )
                raise NonFiniteLoss(
                    f"the loss became non-finite by iteration {state.iteration} "
                    f"(epoch {state.epoch}, terms {dict(zip(LOSS_NAMES, per_image))}); {resume}"
                )
            elapsed = time.perf_counter() - start
            values = {
                **dict(zip(LOSS_NAMES, per_image)),
                "loss": sum(per_image),
                "lr": optimizer.param_groups[0]["lr"],
                "images_per_s": (state.seen - epoch_start_images) / max(elapsed, 1e-9),
                "data_wait": wait_s / max(elapsed, 1e-9),
            }
            logged_terms.zero_()
            logged_images = 0
            if progress is not None:
                progress.update(state, values)
        if on_iteration is not None and on_iteration(state, values):
            stop = True
        if reached:
            stop = True
    elapsed = time.perf_counter() - start
    means = (running / max(running_images, 1)).tolist()
    return {
        **dict(zip(LOSS_NAMES, means)),
        "loss": sum(means),
        "images_per_s": running_images / max(elapsed, 1e-9),
        "data_wait": wait_s / max(elapsed, 1e-9),
        "seconds": elapsed,
    }


def _step(state: TrainState, options: StepOptions) -> None:
    params = [p for group in state.optimizer.param_groups for p in group["params"]]
    if state.scaler is not None:
        state.scaler.unscale_(state.optimizer)
    if options.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(params, options.clip_norm, foreach=True)
    if state.scaler is not None:
        state.scaler.step(state.optimizer)
        state.scaler.update()
    else:
        state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    if state.ema is not None:
        state.ema.update(state.model)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader,
    *,
    device: torch.device,
    num_classes: int,
    conf_thres: float = 0.25,
    iou_thres: float = 0.5,
    nms_thres: float = 0.5,
    eval_conf: float = 0.001,
    max_det: int = 300,
    amp_dtype: torch.dtype | None = None,
    backend: str = "pycocotools",
    keep_predictions: int = 0,
) -> tuple[EvalResult | None, list]:
    """mAP of ``model`` on a validation ``loader`` (letterboxed, no augmentation).

    Under torchrun each rank evaluates its shard of the loader; rank 0 gets the result, the others
    ``(None, [])``.

    Detections stay on the device until the loop ends (no per-batch sync); COCO matching runs on the
    original-image boxes. ``conf_thres`` is where precision / recall / F1 and the confusion matrix are
    read, with matches at ``iou_thres``; detections down to ``eval_conf`` enter the AP computation and
    the curves (see :func:`turboyolo.train.metrics.evaluate_detections`).

    Returns the result and, for the first ``keep_predictions`` images, (path, detections [n, 6]).
    """
    from turboyolo.boxes import Letterbox
    from turboyolo.model.postprocess import decode, postprocess

    was_training = model.training
    model.eval()
    labels_by_path = {str(s.image): s.labels for s in loader.dataset.samples}
    all_dets, gt_labels, sizes, paths = [], [], [], []
    options = StepOptions(device=device, amp_dtype=amp_dtype)
    for images, _, metas in loader:
        x = move_to_device(images, device)
        with _autocast(options):
            outputs = model(x)
        decoded = decode(outputs, model.heads)
        letterboxes = [Letterbox.from_meta(m) for m in metas]
        all_dets.extend(
            postprocess(
                decoded, eval_conf, nms_thres, multi_label=True, max_det=max_det, letterboxes=letterboxes
            )
        )
        for meta in metas:
            gt_labels.append(labels_by_path.get(str(meta.path)))
            sizes.append(tuple(meta.orig_hw))
            paths.append(meta.path)
    dets_cpu = [d.float().cpu().numpy() for d in all_dets]
    import numpy as np

    if was_training:
        model.train()
    paths, dets_cpu, gt_labels, sizes = _gather_shards(paths, dets_cpu, gt_labels, sizes)
    if paths is None:  # not rank 0: its shard went to rank 0, which computes the numbers
        return None, []
    gt_labels = [g if g is not None else np.zeros((0, 5), np.float32) for g in gt_labels]
    result = evaluate_detections(
        dets_cpu, gt_labels, sizes, num_classes,
        conf_thres=conf_thres, iou_thres=iou_thres, max_det=max_det, backend=backend,
    )
    return result, list(zip(paths[:keep_predictions], dets_cpu[:keep_predictions]))


def _gather_shards(paths, dets, gts, sizes):
    """Under torchrun every rank evaluated its shard: collect them on rank 0 and drop the sampler's
    padding (images repeated to even out the shards). Other ranks get ``None``s back."""
    from turboyolo.train import distributed

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
