"""What a run starts from, set up before :func:`turboyolo.train.fit.fit`'s loop: the run directory (new, or
the one ``--resume`` continues), the run resolved once (:mod:`turboyolo.train.resolve`: flags, recipe, cfg,
defaults, then the ``auto`` input pipeline, the anchor check and the plan), its ``config.yaml`` and
``model.cfg`` written once, the loaders, and the training state (model, optimizer, schedule, loss, EMA)."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import yaml
from torch.nn.parallel import DistributedDataParallel

from turboyolo.data.scan import ScanResult
from turboyolo.devices import amp_dtype_for, channels_last_for, resolve_device
from turboyolo.errors import FlagError, WeightsError
from turboyolo.formats.darknet_cfg import (
    ModelSpec,
    format_cfg,
    parse_cfg,
    parse_cfg_text,
    training_only_notes,
)
from turboyolo.formats.datasets import load_data_config
from turboyolo.model.darknet import Darknet
from turboyolo.model.loading import init_head_priors, load_pretrained, read_training_checkpoint
from turboyolo.model.zoo import ARCHITECTURES, make_spec, with_anchors
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
from turboyolo.train.auto import AUTO, choose_subdivisions, given_pipeline
from turboyolo.train.checkpoint import restore
from turboyolo.train.config import OPTION_GROUP, RESUMABLE, TrainConfig, refuse_new_inputs
from turboyolo.train.defaults import first_yolo
from turboyolo.train.engine import TrainState
from turboyolo.train.engines import choose_step, prepare_model
from turboyolo.train.facts import auto_pipeline, step_memory
from turboyolo.train.loaders import RunData, build_loaders, scan_splits
from turboyolo.train.loss import YoloLoss
from turboyolo.train.optim import ModelEMA, build_optimizer, lr_at
from turboyolo.train.plan import Plan, describe, legacy_plan, make_plan, refit
from turboyolo.train.resolve import ResolvedRun, resolve_options


@dataclass
class Run:
    """Where a run writes, what it starts from (a fresh start or a checkpoint) and its resolved values
    (:class:`~turboyolo.train.resolve.ResolvedRun`, completed as the start goes: the pipeline, the
    anchors, the plan)."""

    resolved: ResolvedRun
    env: distributed.DistEnv
    device: torch.device  # this process's training device (resolved once)
    run_dir: Path
    quiet: bool
    say: Callable[..., None]
    resume_state: dict | None = None
    made_here: bool = False  # this call created run_dir (so a failed start may remove it)
    batches_per_epoch: int = 0  # training mini-batches per epoch on this rank (known once the data is)
    scans: tuple[ScanResult, ScanResult] | None = None  # both splits, scanned once per start

    def data_scans(self) -> tuple[ScanResult, ScanResult]:
        """The (train, val) scans of the run's data: scanned on the first call, then the same ones
        (the pipeline measurement and the loaders share them)."""
        if self.scans is None:
            self.scans = scan_splits(self.config)
        return self.scans

    @property
    def config(self) -> TrainConfig:
        return self.resolved.config

    @property
    def spec(self) -> ModelSpec:
        return self.resolved.spec

    @property
    def weights_dir(self) -> Path:
        return self.run_dir / "weights"

    @property
    def max_iterations(self) -> int:
        return self.resolved.max_iterations

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
    """The run directory (new, or the one ``--resume`` continues), its resolved values and device, the
    console. Nothing is written yet: :func:`write_run_files` writes ``config.yaml`` and ``model.cfg``
    once the run is fully resolved."""
    env = distributed.read_env()
    quiet = quiet or not env.is_main  # one console, one log, one set of checkpoints: rank 0's
    say = (lambda *a: None) if quiet else print
    resume_state, made_here = None, False
    if config.resume:
        resume_state = read_training_checkpoint(config.resume)
        saved = TrainConfig.from_dict(resume_state["config"], source=f"{config.resume} (its config)")
        refuse_new_inputs(saved, config)  # another cfg, data, weights or hyp: refused before a word
        ignored = [name for name in config.given if name not in RESUMABLE + RESUME_OUTPUT]
        if ignored:
            say(f"--resume continues the run as it was set up; ignored: {', '.join(ignored)} "
                f"(only {', '.join(RESUMABLE)} may change)")
        inputs = [f"--{key}" for key in ("cfg", "data", "weights", "hyp") if getattr(config, key)]
        if inputs:  # the run's own (others were refused): the checkpoint holds them
            say(f"--resume continues the run's own network, weights and data; ignored: {', '.join(inputs)} "
                "(the same as the run's: the checkpoint holds them)")
        sources = dict(resume_state["config"].get("sources") or dict.fromkeys(OPTION_GROUP, "resumed"))
        sources.update({name: "flag" for name in config.given if name in RESUMABLE})
        spec = parse_cfg_text(resume_state["cfg_text"], f"{config.resume}:cfg_text")
        resolved = resolve_options(saved.resumed(config), spec, say, sources)
    else:
        resolved = resolve_options(config, load_cfg(config, say), say)
    device = distributed.device_for(env, resolve_device(resolved.config.runtime.device))  # once
    env = distributed.init(device.type)
    if config.resume:
        run_dir, made_here, where = distributed.broadcast_object(  # the output rule of rundir.py
            resume_run_dir(config.resume, config.output, config.given) if env.is_main else None)
        say(f"--resume writes into {run_dir} ({where})")
    else:
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
    run = Run(resolved, env, device, run_dir, quiet, say, resume_state, made_here)
    for note in training_only_notes(resolved.spec):
        say(f"note: {note}")
    run.weights_dir.mkdir(parents=True, exist_ok=True)
    return run


def write_run_files(run: Run) -> None:
    """``config.yaml`` (every effective value with its source, the pipeline's prediction, the plan) and
    ``model.cfg`` (the network as trained), each written once, when the run is fully resolved."""
    if run.env.is_main:
        (run.run_dir / "model.cfg").write_text(format_cfg(run.spec))
        (run.run_dir / "config.yaml").write_text(yaml.safe_dump(run.resolved.as_dict(), sort_keys=False))


def choose_input_pipeline(run: Run, beside: Callable[[], object] | None = None) -> None:
    """``--cache``, ``--augment-on`` and ``--workers``: the given ones, and for ``auto`` what rank 0
    measures and chooses (:func:`turboyolo.train.facts.auto_pipeline`), one line per choice. ``beside``:
    work that may run beside the loader's measurement (started there, when there is one)."""
    if run.device.type == "cuda" and run.resume_state is None and run.resolved.sources.get(
            "subdivisions") in ("cfg", "default"):
        choose_subdivisions_on_device(run)
    resolved, args = run.resolved, run.config.data_args
    requested = {name: (getattr(args, name), resolved.sources.get(name, "flag"))
                 for name in ("cache", "augment_on", "workers")}
    if AUTO not in (args.cache, args.augment_on) and args.workers is not None:
        run.resolved = resolved.with_pipeline(given_pipeline(requested))
        return
    choice = None
    if run.env.is_main:
        choice = auto_pipeline(requested, run.config.data, run.spec, resolved.augment, resolved.mini_batch,
                               run.device, run.env.world_size, resolved.multiscale, log=run.say,
                               scans=run.data_scans(), beside=beside)
    choice = distributed.broadcast_object(choice)
    for line in choice.lines():
        run.say(line)
    run.resolved = resolved.with_pipeline(choice)


def choose_subdivisions_on_device(run: Run) -> None:
    """CUDA, ``--subdivisions`` not given: the largest mini-batch of the cfg's batch that fits in the free
    device memory (rank 0 measures, every rank takes its choice), one line saying so."""
    net, choice = run.spec.net, None
    if run.env.is_main:
        amp = amp_dtype_for(run.device, run.config.runtime.amp)
        per_image, fixed = step_memory(run.spec, run.device, amp)
        free = torch.cuda.mem_get_info(run.device)[0]
        choice = choose_subdivisions(net.batch, net.subdivisions, run.env.world_size, per_image, fixed, free)
    subdivisions, reason = distributed.broadcast_object(choice)
    run.say(f"--subdivisions {subdivisions} (auto): {reason}")
    if subdivisions != net.subdivisions:
        run.resolved = run.resolved.with_subdivisions(subdivisions, reason)


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
        return build_loaders(run.resolved, mini_batch, env.rank, env.world_size, log=run.say,
                             report=run.run_dir / "scan_report.txt", scans=run.data_scans())

    ready = run.run_dir / f".data-ready-node{env.rank - env.local_rank}"
    return distributed.once_per_node(env, ready, build) or build()


class AnchorCheck:
    """The anchor check of a fresh run (``--autoanchor`` may fit new ones) on the training boxes, in a
    thread started by :meth:`start` (a run in one process starts it beside its pipeline measurement,
    which times its own thread's CPU, :func:`turboyolo.data.timing.measure_loader`, so this one does not
    count there; else once the loaders are built), so that it runs while the start goes on;
    :meth:`anchors` waits for it and prints its lines then, in their place. NumPy's array work lets the
    other thread run."""

    def __init__(self, run: Run):
        self.run = run
        self.lines: list[str] = []
        self.spec: ModelSpec | None = None
        self.result: ModelSpec | None = None
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def start(self, samples=None) -> None:
        """Start the check (once) on ``samples`` (default: the run's training scan)."""
        if self.thread is not None:
            return
        run = self.run
        samples = run.data_scans()[0].samples if samples is None else samples
        self.spec = run.spec
        loss = run.config.loss
        autoanchor = loss.autoanchor and not loss.anchors  # given with --anchors: only checked
        self.thread = threading.Thread(target=self._run, args=(samples, autoanchor, run.config.data,
                                                               run.config.cfg),
                                       name="anchor-check", daemon=True)
        self.thread.start()

    def _run(self, samples, autoanchor: bool, data: str, cfg: str) -> None:
        try:
            self.result = check_anchors(self.spec, samples, autoanchor=autoanchor, data=data, cfg=cfg,
                                        say=self.lines.append)
        except BaseException as err:  # raised again in the caller's thread
            self.error = err

    def anchors(self, say: Callable[..., None], samples=None) -> tuple[tuple[float, float], ...] | None:
        """The fitted anchors (None: the cfg's stay), once the check is done (started now on ``samples``
        if it was not); its lines said first."""
        self.start(samples)
        self.thread.join()
        for line in self.lines:
            say(line)
        if self.error is not None:
            raise self.error
        if self.result is None or self.result is self.spec:
            return None
        return first_yolo(self.result).anchors


def anchor_check(run: Run) -> AnchorCheck | None:
    """A fresh run's anchor check, to start beside the pipeline measurement in a run of one process (under
    torchrun the ranks share the node's scan, made with the loaders: each checks in :func:`fit_to_data`);
    None on ``--resume`` (the checkpoint's anchors)."""
    if run.resume_state is not None:
        return None
    return AnchorCheck(run)


def fit_to_data(run: Run, data: RunData, check: AnchorCheck | None = None) -> ModelSpec:
    """The cfg the run trains: on a fresh start the anchor check (``--autoanchor`` may replace them: the
    resolved run then holds the fitted ones); ``check``: the run's, started already or started now."""
    if run.resume_state is None:
        check = check or AnchorCheck(run)
        anchors = check.anchors(run.say, data.train_scan.samples)
        if anchors is not None:
            run.resolved = run.resolved.with_spec(with_anchors(run.spec, anchors),
                                                  "auto: k-means on the training boxes (--autoanchor)")
    return run.spec


def run_plan(run: Run, data: RunData) -> Plan:
    """The plan of the run (also set on ``run.resolved``): the checkpoint's on ``--resume`` (so the curve
    continues unchanged), else fitted to the planned iterations (:func:`turboyolo.train.plan.make_plan`);
    the training set's size fixes the epochs (``--max-batches``) and what ``--close-mosaic`` counts."""
    run.batches_per_epoch = len(data.train)
    plan = _plan(run)
    run.resolved = run.resolved.with_plan(plan)
    return plan


def _plan(run: Run) -> Plan:
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
    return make_plan(config, net, run.planned_iterations(), run.planned_epochs(), run.iterations_per_epoch())


def build_state(resolved: ResolvedRun, env: distributed.DistEnv, device: torch.device,
                resume_state: dict | None, say: Callable[..., None]) -> TrainState:
    """Model (pretrained, frozen, on the device), optimizer, schedule, loss, EMA from the resolved run
    (its plan included); restored on resume."""
    config, spec, plan = resolved.config, resolved.spec, resolved.plan
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
    prepare_model(model, runtime)  # Darknet's modules where the run asks for them (train/engines.py)
    if runtime.sync_bn and env.enabled:
        model = distributed.convert_sync_batchnorm(model, device)
    model.to(device)
    if channels_last_for(device, runtime.channels_last):
        model.to(memory_format=torch.channels_last)
    net = spec.net
    say(plan.description)
    amp_dtype = amp_dtype_for(device, runtime.amp)
    state = TrainState(
        model=model,
        optimizer=build_optimizer(model, plan.optimizer),
        schedule=plan.schedule,
        loss_fn=YoloLoss(model.heads, box_loss=loss.box_loss, iou_thresh=loss.assign_iou_thres,
                         anchor_ratio=loss.anchor_ratio, obj_iou=loss.obj_iou,
                         gains=(loss.box_gain, loss.obj_gain, loss.cls_gain),
                         label_smoothing=loss.label_smoothing),
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
    state.step = choose_step(config, state, device, amp_dtype, env, say)  # once (train/engines.py)
    return state
