"""The engines a run trains with, chosen once when it is set up: PyTorch's (the default: autograd's step,
:class:`~turboyolo.train.engine.AutogradStep`, and turboyolo's loader) or Darknet's own float arithmetic
(:mod:`turboyolo.exact`: ``--arithmetic darknet``, ``--bn-train darknet``, ``--loader darknet``, all three
in ``--config darknet``).

This is the one module that imports :mod:`turboyolo.exact` (an import-linter contract in ``pyproject.toml``
says so), and only inside the functions that a run asking for it calls: a default run never loads it. It
translates the run's options into the exact package's terms and says what a Darknet-exact run cannot
reproduce.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from turboyolo.data.loader import DetectionLoader, default_workers
from turboyolo.data.scan import Sample
from turboyolo.formats.darknet_cfg import ModelSpec, YoloSpec
from turboyolo.train import distributed
from turboyolo.train.config import TrainConfig
from turboyolo.train.config_groups import RuntimeArgs
from turboyolo.train.engine import AutogradStep, TrainState, TrainStep
from turboyolo.train.optim import lr_at


def prepare_model(model: nn.Module, runtime: RuntimeArgs) -> None:
    """Swap Darknet's modules into ``model`` where the run asks for them (``--arithmetic darknet``: its
    convolution and leaky ReLU; ``--bn-train darknet``: its batch norm in training); a default run's
    model is left as built. Before the optimizer and the EMA are made."""
    arithmetic, batch_norm = runtime.arithmetic == "darknet", runtime.bn_train == "darknet"
    if arithmetic or batch_norm:
        from turboyolo.exact.modules import to_darknet

        to_darknet(model, arithmetic=arithmetic, batch_norm=batch_norm)


def choose_step(config: TrainConfig, state: TrainState, device: torch.device, amp_dtype,
                env: distributed.DistEnv, say: Callable[..., None]) -> TrainStep:
    """The run's :class:`~turboyolo.train.engine.TrainStep`: autograd's, or with ``--arithmetic darknet``
    and settings Darknet's step has (``--config darknet``'s), Darknet's whole step
    (:class:`turboyolo.exact.step.DarknetStep`); a line says which, and why not Darknet's."""
    if config.runtime.arithmetic != "darknet":
        return AutogradStep()
    from turboyolo.exact.step import DarknetStep, momentum_from_darknet, overwritten_deltas, unsupported

    reasons = _not_darknet_step(config, state, device, amp_dtype, env)
    layer = unsupported(state.model)
    reasons += [layer] if layer else []
    if reasons:
        # a resumed run's buffers of Darknet's step (another device now, say) become SGD's
        momentum_from_darknet(state.optimizer, state.images_per_iteration * env.world_size)  # the cfg's batch
        say("--arithmetic darknet: the forward pass in Darknet's float operations, the backward pass "
            f"PyTorch's ({'; '.join(reasons)}: Darknet's own step needs --config darknet's settings)")
        return AutogradStep()
    lost = overwritten_deltas(state.model)
    if lost:
        say(f"note: --arithmetic darknet: as Darknet's CPU code, the gradient that a later route or "
            f"shortcut sends into layer{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} is "
            "overwritten where the next layer is a 1x1 convolution (docs/DARKNET_TRAINING.md, item 15); "
            "--arithmetic torch keeps it")
    return DarknetStep(state.model, state.optimizer, state.images_per_iteration, rate_at=lr_at)


def _not_darknet_step(config: TrainConfig, state: TrainState, device: torch.device, amp_dtype,
                      env: distributed.DistEnv) -> list[str]:
    """What keeps a run with ``--arithmetic darknet`` from Darknet's whole step: settings that Darknet's
    loss or update do not have (the layers it does not transcribe: ``turboyolo.exact.step.unsupported``)."""
    runtime, loss_fn = config.runtime, state.loss_fn
    checks = [
        (device.type != "cpu", f"device {device.type}"),
        (amp_dtype is not None, "mixed precision"),
        (env.world_size > 1, "several processes"),
        (runtime.bn_train != "darknet", f"--bn-train {runtime.bn_train}"),
        (runtime.clip_norm > 0, f"--clip-norm {runtime.clip_norm:g}"),
        (runtime.freeze > 0, f"--freeze {runtime.freeze}"),
        (state.plan is not None and state.plan.optimizer.name != "sgd", "an optimizer other than SGD"),
        (any(loss_fn.box_kind(head) != "darknet" for head in loss_fn.heads), "a box loss other than darknet"),
        (loss_fn.obj_iou, "--obj-iou"),
        (loss_fn.iou_thresh not in (None, 1.0) or loss_fn.anchor_ratio > 0, "extra anchors per box"),
        (bool(loss_fn.label_smoothing), "--label-smoothing"),
        (tuple(loss_fn.gains) != (1.0, 1.0, 1.0), "loss gains"),
        (config.data_args.unreviewed == "ignore", "--unreviewed ignore"),
    ]
    return [why for failed, why in checks if failed]


def darknet_loader(config: TrainConfig, spec: ModelSpec, samples: Sequence[Sample], mini_batch: int,
                   rank: int, world_size: int, log: Callable[[str], None] = print) -> DetectionLoader:
    """``--loader darknet``'s training loader (:func:`turboyolo.exact.input.darknet_train_loader`): the
    cfg's ``[yolo]`` ``max``, the resolved jitter / hue / saturation / exposure and ``--fliplr`` (``config``
    is resolved, so every value is the effective one), and the run's options it does not apply."""
    from turboyolo.exact.augment import DarknetAugment
    from turboyolo.exact.input import DARKNET_MAX_BOXES, darknet_train_loader

    aug, net = config.augment, spec.net
    params = None
    if aug.augment:
        yolo = next((layer for layer in spec.layers if isinstance(layer, YoloSpec)), None)
        extra = dict(yolo.extra) if yolo is not None else {}
        max_boxes = int(extra.get("max", DARKNET_MAX_BOXES))
        params = DarknetAugment(jitter=float(aug.jitter), hue=float(aug.hue),
                                saturation=float(aug.saturation), exposure=float(aug.exposure),
                                flip=float(aug.fliplr), max_boxes=max_boxes)
    workers = config.data_args.workers
    return darknet_train_loader(samples, net_wh=(net.width, net.height), mini_batch=mini_batch,
                                batches_per_iteration=max(net.subdivisions // world_size, 1),
                                world_size=world_size, params=params,
                                workers=default_workers(world_size) if workers is None else workers,
                                seed=config.runtime.seed, rank=rank, ignored=unused_options(config), log=log)


def unused_options(config: TrainConfig) -> list[str]:
    """turboyolo's augmentation options set to something ``load_data_detection`` has no counterpart for."""
    aug, data = config.augment, config.data_args
    unused = [f"--{name.replace('_', '-')} {value}" for name, value in (
        ("degrees", aug.degrees), ("translate", aug.translate), ("mosaic", aug.mosaic), ("mixup", aug.mixup),
        ("flipud", aug.flipud)) if value]
    if tuple(aug.aug_scale) != (1, 1):
        unused.append(f"--aug-scale {aug.aug_scale[0]:g} {aug.aug_scale[1]:g}")
    flags = (("--multiscale", aug.multiscale), ("--image-weights", data.image_weights),
             ("--augment-on device", data.augment_on == "device"),
             (f"--cache {data.cache}", data.cache != "none"))
    unused += [flag for flag, on in flags if on]
    return unused
