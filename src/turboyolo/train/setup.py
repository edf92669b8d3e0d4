"""What a run starts from, set up before :func:`turboyolo.train.fit.fit`'s loop: the run directory (new, or
the one ``--resume`` continues) with its ``model.cfg`` and ``config.yaml``, the cfg with the flags applied,
the loaders, the anchor check, and the training state (model, optimizer, schedule, loss, EMA)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import yaml
from torch.nn.parallel import DistributedDataParallel

from turboyolo.devices import amp_dtype_for, resolve_device
from turboyolo.errors import FlagError, WeightsError
from turboyolo.formats.darknet_cfg import (
    ModelSpec,
    format_cfg,
    parse_anchor_list,
    parse_cfg,
    parse_cfg_text,
    training_only_notes,
)
from turboyolo.formats.datasets import load_data_config
from turboyolo.model.darknet import Darknet
from turboyolo.model.layers import DarknetBatchNorm2d
from turboyolo.model.loading import init_head_priors, load_pretrained, read_training_checkpoint
from turboyolo.model.zoo import ARCHITECTURES, make_spec, with_anchors, with_classes
from turboyolo.rundir import (
    RESUME_OUTPUT,
    check_outputs,
    check_outside,
    next_run_dir,
    resume_run_dir,
    reuse_note,
    run_outputs,
)
from turboyolo.train import distributed
from turboyolo.train.anchors import check_anchors
from turboyolo.train.checkpoint import restore
from turboyolo.train.config import RESUMABLE, TrainConfig
from turboyolo.train.defaults import resolve
from turboyolo.train.engine import TrainState
from turboyolo.train.loaders import RunData, build_loaders
from turboyolo.train.loss import YoloLoss
from turboyolo.train.optim import ModelEMA, build_optimizer, lr_at
from turboyolo.train.plan import Plan, describe, legacy_plan, make_plan, refit


@dataclass
class Run:
    """Where a run writes and what it starts from (a fresh start or a checkpoint)."""

    config: TrainConfig
    spec: ModelSpec
    env: distributed.DistEnv
    run_dir: Path
    quiet: bool
    say: Callable[..., None]
    resume_state: dict | None = None
    made_here: bool = False  # this call created run_dir (so a failed start may remove it)
    batches_per_epoch: int = 0  # training mini-batches per epoch on this rank (known once the data is)

    @property
    def weights_dir(self) -> Path:
        return self.run_dir / "weights"

    @property
    def max_iterations(self) -> int:
        chosen = self.config.schedule.max_batches
        return self.spec.net.max_batches if chosen is None else chosen

    def iterations_per_epoch(self) -> int:
        subdivisions = max(self.spec.net.subdivisions // self.env.world_size, 1)
        return max(-(-self.batches_per_epoch // subdivisions), 1)  # an epoch's last iteration may be partial

    def planned_epochs(self) -> int:
        """Epochs until the run's planned end: --epochs, or fewer when --max-batches comes first."""
        epochs = self.config.schedule.epochs
        if self.max_iterations and self.batches_per_epoch:
            epochs = min(epochs, -(-self.max_iterations // self.iterations_per_epoch()))
        return epochs

    def planned_iterations(self) -> int:
        by_epochs = self.config.schedule.epochs * self.iterations_per_epoch()
        return min(self.max_iterations, by_epochs) if self.max_iterations else by_epochs

    def discard(self) -> None:
        if self.made_here and self.env.is_main and not any(self.weights_dir.glob("*.pt")):
            shutil.rmtree(self.run_dir, ignore_errors=True)


def open_run(config: TrainConfig, quiet: bool) -> Run:
    """The run directory (new, or the one ``--resume`` continues), its cfg and config, the console."""
    env = distributed.init(resolve_device(config.runtime.device).type)
    quiet = quiet or not env.is_main  # one console, one log, one set of checkpoints: rank 0's
    say = (lambda *a: None) if quiet else print
    resume_state, made_here = None, False
    if config.resume:
        resume_state = read_training_checkpoint(config.resume)
        saved = TrainConfig.from_dict(resume_state["config"], source=f"{config.resume} (its config)")
        ignored = [name for name in config.given if name not in RESUMABLE + RESUME_OUTPUT]
        if ignored:
            say(f"--resume continues the run as it was set up; ignored: {', '.join(ignored)} "
                f"(only {', '.join(RESUMABLE)} may change)")
        run_dir, made_here, where = distributed.broadcast_object(  # the output rule of rundir.py
            resume_run_dir(config.resume, config.output, config.given) if env.is_main else None)
        say(f"--resume writes into {run_dir} ({where})")
        config = saved.resumed(config)
        spec = parse_cfg_text(resume_state["cfg_text"], f"{config.resume}:cfg_text")
    else:
        spec = apply_overrides(load_cfg(config, say), config, say)
        config = resolve(config, spec)  # the cfg's augmentation and loss values, written into config.yaml
        output = config.output
        check_outside(Path(output.project) / output.name, load_data_config(config.data).folders(),
                      "--project")  # the output rule (rundir.py): a run never lands in its own data
        made = next_run_dir(output.project, output.name, output.exist_ok) if env.is_main else None
        run_dir = Path(distributed.broadcast_object(str(made) if made else None))
        made_here = not config.output.exist_ok
        inputs = {"--weights": config.weights, "--cfg": config.cfg, "--data": config.data,
                  "--hyp": config.hyp}
        check_outputs(run_outputs(run_dir), inputs, overwrite=True)  # --exist-ok never writes over them
        if output.exist_ok and env.is_main and (note := reuse_note(run_dir)):
            say(f"note: {note}")
    run = Run(config, spec, env, run_dir, quiet, say, resume_state, made_here)

    for note in training_only_notes(spec):
        say(f"note: {note}")
    run.weights_dir.mkdir(parents=True, exist_ok=True)
    if env.is_main:
        (run_dir / "model.cfg").write_text(format_cfg(spec))
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config.as_dict(), sort_keys=False))
    return run


def load_cfg(config: TrainConfig, say: Callable[..., None]) -> ModelSpec:
    """The network ``--cfg`` names: a ``.cfg`` file, or an architecture (``yolov3-tiny``, ``yolov4-tiny``,
    ...: its canonical cfg, written for the data set's class count)."""
    if Path(config.cfg).exists() or config.cfg not in ARCHITECTURES:
        return parse_cfg(config.cfg)
    names = load_data_config(config.data).names
    if config.data_args.single_cls:
        names = ["item"]
    if not names:
        raise FlagError(f"--cfg {config.cfg}: {config.data} names no classes, so the network's class count "
                        "is unknown; add a names file to the data set, or write a cfg with `turboyolo cfg`")
    say(f"network: {config.cfg}, its canonical cfg for the data set's {len(names)} classes")
    return make_spec(config.cfg, num_classes=len(names))


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


def check_batching(spec: ModelSpec, world_size: int) -> int:
    """Images per mini-batch (per process); the cfg's batch must split into its subdivisions."""
    net = spec.net
    if net.batch % net.subdivisions:
        raise FlagError(f"batch={net.batch} is not a multiple of subdivisions={net.subdivisions} "
                        "(cfg [net] or --batch/--subdivisions)")
    if net.subdivisions % world_size:
        raise FlagError(f"subdivisions={net.subdivisions} must be a multiple of the {world_size} processes: "
                        "each accumulates subdivisions / processes mini-batches per iteration "
                        "(cfg [net] or --subdivisions)")
    return net.batch // net.subdivisions


def load_data(run: Run, mini_batch: int) -> RunData:
    """Both loaders; under torchrun local rank 0 scans and builds the caches, the others then open them."""
    env = run.env

    def build() -> RunData:
        return build_loaders(run.config, run.spec, mini_batch, env.rank, env.world_size, log=run.say,
                             report=run.run_dir / "scan_report.txt")

    ready = run.run_dir / f".data-ready-node{env.rank - env.local_rank}"
    return distributed.once_per_node(env, ready, build) or build()


def fit_to_data(run: Run, data: RunData) -> ModelSpec:
    """The cfg the run trains: on a fresh start the anchor check (``--autoanchor`` may replace them,
    then model.cfg is rewritten); the training set's size fixes the epochs ``--close-mosaic`` counts."""
    run.batches_per_epoch = len(data.train)
    if run.resume_state is None:
        loss = run.config.loss
        fit_anchors = loss.autoanchor and not loss.anchors  # anchors given with --anchors: only checked
        spec = check_anchors(run.spec, data.train_scan.samples, autoanchor=fit_anchors,
                             data=run.config.data, cfg=run.config.cfg, say=run.say)
        if spec is not run.spec and run.env.is_main:
            (run.run_dir / "model.cfg").write_text(format_cfg(spec))
        run.spec = spec
    return run.spec


def run_plan(run: Run) -> Plan:
    """The plan of the run: the checkpoint's on ``--resume`` (so the curve continues unchanged), else
    fitted to the planned iterations (:func:`turboyolo.train.plan.make_plan`)."""
    net, config = run.spec.net, run.config
    if run.resume_state is not None:
        saved = run.resume_state.get("plan")
        try:
            plan = (Plan.from_dict(saved) if saved else
                    legacy_plan(config, net, run.planned_iterations(), run.planned_epochs()))
        except (TypeError, KeyError, ValueError, AttributeError) as err:
            raise WeightsError(f"{config.resume}: damaged checkpoint: its plan cannot be read ({err!r}); "
                               "resume from another checkpoint, or --weights it into a new run") from None
        planned = run.planned_iterations()
        if plan.iterations != planned and config.optim.lr_schedule == "fitted":
            iteration = int(run.resume_state.get("iteration", 0))
            before = lr_at(plan.schedule, iteration + 1)
            started = plan.iterations
            plan = refit(plan, planned, run.planned_epochs())
            plan = replace(plan, description=describe(plan, config, net, run.iterations_per_epoch()))
            after = lr_at(plan.schedule, iteration + 1)
            run.say(f"note: --resume with a new length: the run now plans {planned} iterations (it was "
                    f"started for {started}); the fitted decay now ends at iteration {planned}, so the rate "
                    f"of iteration {iteration + 1} is {after:.3g} (was {before:.3g})")
        return plan
    plan = make_plan(config, net, run.planned_iterations(), run.planned_epochs(), run.iterations_per_epoch())
    if run.env.is_main:  # config.yaml: the options (read back by --config) and what they came to (not read)
        (run.run_dir / "config.yaml").write_text(
            yaml.safe_dump({**config.as_dict(), "plan": plan.as_dict()}, sort_keys=False))
    return plan


def build_state(config: TrainConfig, spec: ModelSpec, env: distributed.DistEnv, device: torch.device,
                resume_state: dict | None, say: Callable[..., None], plan: Plan) -> TrainState:
    """Model (pretrained, frozen, on the device), optimizer, schedule, loss, EMA; restored on resume."""
    runtime, loss = config.runtime, config.loss
    torch.manual_seed(runtime.seed)
    model = Darknet(spec)
    if resume_state is None:
        fresh = {head.layer_index - 1 for head in model.heads}
        if config.weights:
            lines, kept = load_pretrained(model, config.weights)
            fresh = set(kept)
            for line in lines:
                say(line)
        init_head_priors(model, fresh)
    frozen = tuple(model.layers[: runtime.freeze])
    for param in (p for module in frozen for p in module.parameters()):
        param.requires_grad_(False)
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d) and runtime.bn_momentum is not None:
            module.momentum = runtime.bn_momentum
        if isinstance(module, DarknetBatchNorm2d):
            module.darknet_training = runtime.bn_train == "darknet"
    if runtime.sync_bn and env.enabled:
        model = distributed.convert_sync_batchnorm(model, device)
    model.to(device)
    if runtime.channels_last:
        model.to(memory_format=torch.channels_last)
    net = spec.net
    say(plan.description)
    amp_dtype = amp_dtype_for(device, runtime.amp)
    state = TrainState(
        model=model,
        optimizer=build_optimizer(model, plan.optimizer),
        schedule=plan.schedule,
        loss_fn=YoloLoss(model.heads, box_loss=loss.box_loss or "cfg", iou_thresh=loss.assign_iou_thres,
                         anchor_ratio=loss.anchor_ratio, obj_iou=loss.obj_iou,
                         gains=(loss.box_gain, loss.obj_gain, loss.cls_gain),
                         label_smoothing=loss.label_smoothing or 0.0),
        images_per_iteration=net.batch // env.world_size,  # DDP averages over ranks: per-rank share
        subdivisions=net.subdivisions // env.world_size,
        world_size=env.world_size,
        frozen=frozen,
        ema=ModelEMA(model, plan.ema_decay, plan.ema_ramp) if runtime.ema else None,
        scaler=torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None,
        plan=plan,
    )
    if resume_state is not None:
        restore(state, resume_state)
        say(f"resumed {config.resume}: iteration {state.iteration}, epoch {state.epoch}, "
            f"mini-batch {state.epoch_batches}")
    if env.enabled:

        device_ids = [device.index] if device.type == "cuda" else None
        state.ddp = DistributedDataParallel(model, device_ids=device_ids)
    state.forward = torch.compile(state.ddp or model) if runtime.compile else state.ddp
    return state
