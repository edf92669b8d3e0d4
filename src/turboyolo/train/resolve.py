"""Resolve the run once: flags, ``--config``, ``--hyp``, the cfg, turboyolo's defaults and the automatic
choices become one frozen :class:`ResolvedRun` holding every effective value and where it came from.

The one place that decides a value (the options left unset take the cfg's value or turboyolo's default
here, the ``auto`` pipeline settings are added by :meth:`ResolvedRun.with_pipeline`, the anchors the
data calls for by :meth:`ResolvedRun.with_spec`, the plan by :meth:`ResolvedRun.with_plan`). Everything
downstream reads its slice: the loaders (sizes, batch, cache, workers, augmentation), the model and
optimizer state (loss, BatchNorm, plan), the stop rule, the evaluations, ``turboyolo test`` (a
checkpoint's ``eval`` group) and the doctor. The run directory's ``config.yaml`` is
:meth:`ResolvedRun.as_dict`, written once: its option groups hold concrete values (no ``None``, no
``auto``), so ``--config config.yaml`` reruns the run with the same choices and ``--resume`` keeps them;
``sources`` says where each came from (flag, recipe, cfg, default, auto and why), ``pipeline`` what the
automatic choices predicted and ``plan`` what the schedule came to (neither is read back).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from turboyolo.data.augment import AugmentParams
from turboyolo.formats.darknet_cfg import ModelSpec, YoloSpec, parse_anchor_list
from turboyolo.model.zoo import with_anchors, with_classes
from turboyolo.train.auto import PipelineChoice
from turboyolo.train.config import OPTION_GROUP, TrainConfig
from turboyolo.train.defaults import first_yolo, resolve
from turboyolo.train.plan import Plan

# options whose unset value is the cfg's (when the cfg says: else turboyolo's default)
FROM_CFG = ("img_size", "batch", "subdivisions", "max_batches", "degrees", "jitter", "hue", "saturation",
            "exposure", "fliplr")


@dataclass(frozen=True)
class ResolvedRun:
    """Every effective value of a run, once.

    Attributes:
        config: the options, each with its effective value (no ``None`` left for a later default; no
            ``auto`` once :meth:`with_pipeline` has run). A private copy: nothing outside changes it.
        spec: the network as trained: the cfg with ``--img-size``, ``--batch``, ``--subdivisions``,
            ``--max-batches``, ``--anchors`` (or the fitted ones) and ``--single-cls`` applied.
        sources: option name -> ``flag``, ``recipe`` (``--config``/``--hyp``), ``cfg``, ``default``,
            ``resumed`` or ``auto: <reason>``.
        pipeline: the automatic choice of the input pipeline and its prediction (None until made).
        plan: optimizer, schedule, EMA, close-mosaic (None until the data is known).
    """

    config: TrainConfig
    spec: ModelSpec
    sources: Mapping[str, str] = field(default_factory=dict)
    pipeline: PipelineChoice | None = None
    plan: Plan | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    # ------------------------------------------------------------------ slices
    @property
    def img_size(self) -> int:
        return self.spec.net.width

    @property
    def val_img_size(self) -> int:
        return self.config.eval.val_img_size or self.img_size

    @property
    def max_iterations(self) -> int:
        """``--max-batches`` (the cfg's ``max_batches`` when unset; 0: the epochs decide)."""
        return int(self.config.schedule.max_batches or 0)

    @property
    def mini_batch(self) -> int:
        """Images per mini-batch (per process): ``batch / subdivisions``."""
        net = self.spec.net
        return max(1, net.batch // max(net.subdivisions, 1))

    @property
    def multiscale(self) -> tuple[int, int] | None:
        size = self.img_size
        return ((int(size * 0.67) // 32 * 32, int(size * 1.5) // 32 * 32)
                if self.config.augment.multiscale else None)

    @property
    def augment(self) -> AugmentParams | None:
        """The training augmentation (None with ``--no-augment``)."""
        aug = self.config.augment
        if not aug.augment:
            return None
        return AugmentParams(degrees=aug.degrees, scale=tuple(aug.aug_scale), translate=aug.translate,
                             jitter=aug.jitter, hue=aug.hue, saturation=aug.saturation,
                             exposure=aug.exposure, flip=aug.fliplr, flipud=aug.flipud, mosaic=aug.mosaic,
                             mixup=aug.mixup)

    # ------------------------------------------------------------------ completing it
    def with_pipeline(self, choice: PipelineChoice) -> ResolvedRun:
        """The run with the input pipeline settings of ``choice`` (auto ones with their reasons)."""
        config = self.config.replace(cache=choice.cache, augment_on=choice.augment_on,
                                     workers=choice.workers)
        config.given = self.config.given
        sources = dict(self.sources)
        for decision in choice.decisions:
            if decision.source == "auto":
                sources[decision.name] = f"auto: {decision.reason}"
        return dataclasses.replace(self, config=config, sources=sources, pipeline=choice)

    def with_subdivisions(self, subdivisions: int, reason: str) -> ResolvedRun:
        """The run with ``subdivisions`` chosen by ``auto`` (CUDA: the mini-batch that fits); the default
        evaluation batch follows the mini-batch."""
        config, spec = copy.deepcopy(self.config), self.spec.with_net(subdivisions=subdivisions)
        config.schedule = dataclasses.replace(config.schedule, subdivisions=subdivisions)
        sources = {**self.sources, "subdivisions": f"auto: {reason}"}
        if sources.get("eval_batch") == "default":
            mini = max(1, spec.net.batch // subdivisions)
            config.eval = dataclasses.replace(config.eval, eval_batch=2 * mini)
        return dataclasses.replace(self, config=config, spec=spec, sources=sources)

    def with_spec(self, spec: ModelSpec, reason: str) -> ResolvedRun:
        """The run with another network (the anchors fitted to the data); ``reason`` names why."""
        sources = {**self.sources, "anchors": reason}
        return dataclasses.replace(self, spec=spec, sources=sources)

    def with_plan(self, plan: Plan) -> ResolvedRun:
        """The run with its plan; the options the plan decided (optimizer, rate, momentum, weight decay,
        EMA, close-mosaic) take its values, so ``config.yaml`` holds no ``None`` a rerun could decide
        differently."""
        config, sources = copy.deepcopy(self.config), dict(self.sources)
        opt = plan.optimizer
        planned = {"optim": {"optimizer": opt.name, "lr": opt.lr, "momentum": opt.momentum,
                             "weight_decay": opt.weight_decay},
                   "runtime": {"ema_decay": plan.ema_decay, "ema_ramp": plan.ema_ramp},
                   "augment": {"close_mosaic": plan.close_mosaic}}
        how = "cfg" if config.optim.lr_schedule == "darknet" else "default"
        for group, values in planned.items():
            unset = {name: value for name, value in values.items() if getattr(getattr(config, group), name)
                     is None}
            setattr(config, group, dataclasses.replace(getattr(config, group), **unset))
            for name in unset:
                sources[name] = f"{how}: the plan ({config.optim.lr_schedule} schedule)"
        return dataclasses.replace(self, config=config, sources=sources, plan=plan)

    def as_dict(self) -> dict:
        """What ``config.yaml`` and every checkpoint store: the options (read back by ``--config``), then
        where each came from, the pipeline's prediction and the plan (not read back)."""
        out = self.config.as_dict()
        out["sources"] = dict(self.sources)
        if self.pipeline is not None:
            out["pipeline"] = self.pipeline.as_dict()
        if self.plan is not None:
            out["plan"] = self.plan.as_dict()
        return out


def resolve_options(config: TrainConfig, spec: ModelSpec, say: Callable[..., None] = print,
                    sources: Mapping[str, str] | None = None) -> ResolvedRun:
    """Flags, recipe, cfg and defaults -> :class:`ResolvedRun` (the pipeline's ``auto`` settings stay
    ``auto`` until :meth:`ResolvedRun.with_pipeline`).

    ``sources``: where the values came from when known already (a resumed run's); else worked out from
    ``config.given`` and ``config.from_file``.
    """
    spec = apply_overrides(spec, config, say)
    filled = resolve(config, spec)  # the cfg's augmentation and loss values, or turboyolo's defaults
    net = spec.net
    mini = max(1, net.batch // max(net.subdivisions, 1))
    schedule = filled.schedule
    max_batches = net.max_batches if schedule.max_batches is None else schedule.max_batches
    resolved = copy.deepcopy(filled)
    resolved.data_args = dataclasses.replace(filled.data_args, img_size=net.width)
    resolved.schedule = dataclasses.replace(schedule, batch=net.batch, subdivisions=net.subdivisions,
                                            max_batches=max_batches)
    resolved.eval = dataclasses.replace(filled.eval, val_img_size=filled.eval.val_img_size or net.width,
                                        eval_batch=filled.eval.eval_batch or 2 * mini)
    if sources is None:
        sources = option_sources(config, resolved, spec)
    return ResolvedRun(resolved, spec, sources)


def option_sources(given: TrainConfig, resolved: TrainConfig, spec: ModelSpec) -> dict[str, str]:
    """Where each option's value came from: flag, recipe (``--config``/``--hyp``), cfg or default."""
    flags = set(given.given) - set(given.from_file)
    cfg_says = _cfg_keys(spec)
    out = {}
    for name in OPTION_GROUP:
        if name in flags:
            out[name] = "flag"
        elif name in given.from_file:
            out[name] = "recipe"
        elif name in cfg_says and given.get(name) is None:
            out[name] = "cfg"
        else:
            out[name] = "default"
    return out


def _cfg_keys(spec: ModelSpec) -> set[str]:
    """The options the cfg gives a value for."""
    keys = set(FROM_CFG)
    yolo = first_yolo(spec)
    heads = [layer for layer in spec.layers if isinstance(layer, YoloSpec)]
    if spec.net.mosaic is not None:
        keys.add("mosaic")
    if yolo is not None and "label_smooth_eps" in dict(yolo.extra):
        keys.add("label_smoothing")
    if any(h.iou_loss for h in heads):
        keys.add("box_loss")
    if any(h.iou_thresh is not None for h in heads):
        keys.add("assign_iou_thres")
    return keys


def apply_overrides(spec: ModelSpec, config: TrainConfig, say: Callable[..., None] = print) -> ModelSpec:
    """The cfg with ``--batch``, ``--subdivisions``, ``--img-size``, ``--max-batches``, ``--anchors`` and
    ``--single-cls`` applied.

    ``--batch B`` without ``--subdivisions`` means B images per mini-batch (subdivisions=1), as
    ``--batch`` means in other PyTorch trainers, unless B is the cfg's own batch (then its subdivisions
    stay); a line says so.
    """
    schedule, changes = config.schedule, {}
    if schedule.batch:
        changes["batch"] = schedule.batch
    if schedule.subdivisions:
        changes["subdivisions"] = schedule.subdivisions
    elif schedule.batch and schedule.batch != spec.net.batch and spec.net.subdivisions != 1:
        changes["subdivisions"] = 1
        say(f"--batch {schedule.batch} without --subdivisions: {schedule.batch} images per mini-batch "
            f"(subdivisions=1; the cfg's subdivisions={spec.net.subdivisions} split its "
            f"batch={spec.net.batch}); "
            "--subdivisions N accumulates N smaller mini-batches per iteration when memory is short")
    if config.data_args.img_size:
        changes["width"] = changes["height"] = config.data_args.img_size
    if schedule.max_batches:  # 0 means "epochs decide"; the schedule keeps the cfg's max_batches
        changes["max_batches"] = schedule.max_batches
    spec = spec.with_net(**changes) if changes else spec
    if config.loss.anchors:
        spec = with_anchors(spec, parse_anchor_list(config.loss.anchors))
    return with_classes(spec, 1) if config.data_args.single_cls else spec
