"""``turboyolo train``: train a Darknet .cfg on a data set (PyTorch-YOLOv3's flags work unchanged).

Differences from PyTorch-YOLOv3's trainer: the optimizer is the cfg's (SGD unless it says ``adam=1`` or
``optimizer=adam``; PyTorch-YOLOv3 uses Adam when the cfg names none); burn-in and LR steps count
Darknet iterations of ``batch`` images from 1; the loss is divided by the images per iteration; EMA
weights are evaluated; checkpoints hold the full state and ``--resume`` continues exactly.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from turboyolo.cli import add_model_flags, add_run_flags


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_flags(parser)
    add_run_flags(parser, "train")
    parser.add_argument("--logdir", dest="project", help="alias of --project (PyTorch-YOLOv3's name)")
    parser.add_argument("-d", "--data", help=".data file or data.yaml of the data set")
    parser.add_argument("-e", "--epochs", type=int, default=300, help="passes over the training set")
    parser.add_argument(
        "--max-batches",
        type=int,
        default=None,
        help="stop after this many iterations (default: the cfg's max_batches; 0 = epochs only)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="print the per-class table every evaluation"
    )
    parser.add_argument(
        "--n-cpu",
        "--workers",
        dest="workers",
        type=int,
        default=None,
        help="loader worker processes (default: CPUs - 1)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=int,
        default=1,
        help="also keep weights/epoch<N>.pt every N epochs (last.pt and best.pt always)",
    )
    parser.add_argument(
        "--evaluation-interval", type=int, default=1, help="evaluate every N epochs (0: never)"
    )
    parser.add_argument(
        "--multiscale-training",
        dest="multiscale",
        action="store_true",
        help="draw the input size per batch from 0.67x..1.5x --img-size",
    )
    parser.add_argument(
        "--iou-thres", type=float, default=0.5, help="IoU for precision/recall at --conf-thres"
    )
    parser.add_argument("--conf-thres", type=float, default=0.1, help="score where P, R and F1 are read")
    parser.add_argument("--nms-thres", type=float, default=0.5, help="IoU of per-class NMS in evaluation")
    parser.add_argument("--seed", type=int, default=0, help="random seed (-1 behaves as 0)")
    parser.add_argument("--resume", help="checkpoint (weights/last.pt) to continue exactly where it stopped")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    parser.add_argument(
        "--amp",
        default="auto",
        choices=("auto", "off", "bf16", "fp16"),
        help="mixed precision (auto: bf16 or fp16 on CUDA, off on CPU)",
    )
    parser.add_argument("--batch", type=int, default=None, help="images per iteration (overrides the cfg)")
    parser.add_argument(
        "--subdivisions", type=int, default=None, help="mini-batches per iteration (overrides the cfg)"
    )
    parser.add_argument("--img-size", type=int, default=None, help="network input side (overrides the cfg)")
    parser.add_argument("--val-img-size", type=int, default=None,
                        help="input side of the evaluations (default: the training size); small objects "
                             "trained on random zooms are often found better a size up")
    parser.add_argument(
        "--cache",
        default="none",
        choices=("none", "ram", "disk"),
        help="decode each image once into a prepared cache",
    )
    parser.add_argument("--augment-on", default="cpu", choices=("cpu", "device"),
                        help="where affine/letterbox, HSV and flip run: the loader's CPU processes, or the "
                        "training device as batched tensor ops (the loader then only copies cached uint8 "
                        "images; use with --cache)")
    parser.add_argument(
        "--ema",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="evaluate and export an exponential moving average of the weights",
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument("--sync-bn", action="store_true",
                        help="SyncBatchNorm across GPUs under torchrun (CUDA only)")
    parser.add_argument("--channels-last", action="store_true", help="channels_last memory format")
    parser.add_argument("--freeze", type=int, default=0,
                        help="keep the first N layers (weights and BN statistics) as loaded")
    parser.add_argument("--ema-decay", type=float, default=0.9999,
                        help="EMA decay (ramps up over --ema-ramp)")
    parser.add_argument("--ema-ramp", type=float, default=2000.0, help="iterations of the EMA decay ramp")
    parser.add_argument("--box-loss", default="darknet", choices=("darknet", "giou"))
    parser.add_argument("--assign-iou-thres", dest="assign_iou_thresh", type=float, default=1.0,
                        help="also train every anchor whose shape IoU with a box exceeds this "
                        "(AlexeyAB's iou_thresh, e.g. 0.213; 1 = best anchor only)")
    parser.add_argument("--aug-scale", nargs=2, type=float, default=(0.75, 1.25), metavar=("MIN", "MAX"),
                        help="random zoom range of the training augmentation")
    parser.add_argument("--anchor-ratio", type=float, default=0.0,
                        help="train every anchor within this w/h factor of a box (YOLOv5: 4; 0 = off)")
    parser.add_argument("--obj-iou", action="store_true",
                        help="objectness target = IoU of the assigned prediction instead of 1")
    parser.add_argument("--clip-norm", type=float, default=10.0, help="gradient-norm clip (0: off)")
    parser.add_argument(
        "--time-limit",
        dest="time_limit_min",
        type=float,
        default=0.0,
        help="stop after this many minutes of training (0: none)",
    )
    parser.add_argument(
        "--wandb", action="store_true", help="also log to Weights & Biases (WANDB_MODE=offline works)"
    )


def config_from_args(args: argparse.Namespace):
    from turboyolo.train.config import TrainConfig

    return TrainConfig(
        cfg=args.cfg or "",
        data=args.data or "",
        weights=args.weights,
        resume=args.resume,
        epochs=args.epochs,
        max_batches=args.max_batches,
        batch=args.batch,
        subdivisions=args.subdivisions,
        img_size=args.img_size,
        val_img_size=args.val_img_size,
        workers=args.workers,
        device=args.device,
        amp=args.amp,
        cache=args.cache,
        augment_on=args.augment_on,
        ema=args.ema,
        compile=args.compile,
        sync_bn=args.sync_bn,
        channels_last=args.channels_last,
        multiscale=args.multiscale,
        checkpoint_interval=args.checkpoint_interval,
        evaluation_interval=args.evaluation_interval,
        iou_thres=args.iou_thres,
        conf_thres=args.conf_thres,
        nms_thres=args.nms_thres,
        box_loss=args.box_loss, freeze=args.freeze,
        assign_iou_thresh=args.assign_iou_thresh, anchor_ratio=args.anchor_ratio, obj_iou=args.obj_iou,
        aug_scale_min=args.aug_scale[0], aug_scale_max=args.aug_scale[1],
        ema_decay=args.ema_decay, ema_ramp=args.ema_ramp,
        clip_norm=args.clip_norm,
        seed=max(args.seed, 0),
        project=args.project,
        name=args.name,
        exist_ok=args.exist_ok,
        wandb=args.wandb,
        verbose=args.verbose,
        time_limit_min=args.time_limit_min,
    )


def run(args: argparse.Namespace) -> int:
    run_dir = fit(config_from_args(args))
    print(f"run directory: {run_dir}")
    return 0


def fit(config, *, stop_at_iteration: int | None = None, quiet: bool = False) -> Path:
    """Train as ``config`` says; returns the run directory.

    ``stop_at_iteration`` ends the run after that iteration as an interruption would (last.pt written,
    nothing else changed), so tests can resume it.
    """
    import time

    import torch

    from turboyolo.formats.darknet_cfg import format_cfg, parse_cfg, parse_cfg_text
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.loading import read_checkpoint, save_darknet_weights
    from turboyolo.rundir import next_run_dir
    from turboyolo.train import distributed
    from turboyolo.train.checkpoint import CheckpointWriter, set_rng_state
    from turboyolo.train.config import TrainConfig
    from turboyolo.train.engine import StepOptions, TrainState, amp_dtype_for, evaluate, train_one_epoch
    from turboyolo.train.logger import Progress, RunLogger
    from turboyolo.train.loss import YoloLoss
    from turboyolo.train.optim import ModelEMA, Schedule, build_optimizer

    env = distributed.init(_device(config.device).type)
    quiet = quiet or not env.is_main  # one console, one log, one set of checkpoints: rank 0's
    say = (lambda *a: None) if quiet else print
    resume_state = None
    if config.resume:
        resume_state = read_checkpoint(config.resume)
        saved = TrainConfig.from_dict(resume_state["config"])
        # Only the run length may change on resume; everything that shapes the numbers is the saved one.
        saved.epochs = max(saved.epochs, config.epochs) if config.epochs != 300 else saved.epochs
        saved.resume = config.resume
        config = saved
        spec = parse_cfg_text(resume_state["cfg_text"], f"{config.resume}:cfg_text")
        run_dir = Path(config.resume).resolve().parent.parent
    else:
        spec = _apply_overrides(parse_cfg(config.cfg), config)
        made = next_run_dir(config.project, config.name, config.exist_ok) if env.is_main else None
        run_dir = Path(distributed.broadcast_object(str(made) if made else None))
    weights_dir = run_dir / "weights"
    weights_dir.mkdir(parents=True, exist_ok=True)
    if env.is_main:
        (run_dir / "model.cfg").write_text(format_cfg(spec))
        _write_config(run_dir / "config.yaml", config.as_dict())

    device = distributed.device_for(env, None if config.device == "auto" else str(_device(config.device)))
    torch.manual_seed(config.seed)
    net = spec.net
    if net.batch % net.subdivisions:
        from turboyolo.train.config import FlagError

        raise FlagError(
            f"batch={net.batch} is not a multiple of subdivisions={net.subdivisions} "
            "(cfg [net] or --batch/--subdivisions)"
        )
    if net.subdivisions % env.world_size:
        from turboyolo.train.config import FlagError

        raise FlagError(
            f"subdivisions={net.subdivisions} must be a multiple of the {env.world_size} processes: each "
            "accumulates subdivisions / processes mini-batches per iteration (cfg [net] or --subdivisions)"
        )
    mini_batch = net.batch // net.subdivisions
    ready = run_dir / f".data-ready-node{env.rank - env.local_rank}"
    loaders = distributed.once_per_node(env, ready, lambda: _loaders(config, spec, mini_batch, env))
    # local rank 0 scanned and built the caches; the others now find them ready
    train_loader, val_loader, names = loaders or _loaders(config, spec, mini_batch, env)

    model = Darknet(spec)
    if resume_state is None:
        fresh = {head.layer_index - 1 for head in model.heads}
        if config.weights:
            lines, fresh = _load_reporting(model, config.weights)
            for line in lines:
                say(line)
        init_head_priors(model, fresh)
    frozen = tuple(model.layers[: config.freeze])
    for module in frozen:
        for param in module.parameters():
            param.requires_grad_(False)
    if config.bn_momentum is not None:
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.momentum = config.bn_momentum
    if config.sync_bn and env.enabled:
        model = distributed.convert_sync_batchnorm(model, device)
    model.to(device)
    if config.channels_last:
        model.to(memory_format=torch.channels_last)
    amp_dtype = amp_dtype_for(device, config.amp)
    schedule = Schedule.from_net(net)
    optimizer = build_optimizer(model, net)
    say(
        f"optimizer: {net.optimizer.upper()} lr {net.learning_rate} momentum {net.momentum} "
        f"decay {net.decay} "
        f"(from the cfg; PyTorch-YOLOv3 would use Adam when the cfg names no optimizer); "
        f"batch {net.batch} = {net.subdivisions} x {mini_batch}, burn_in {net.burn_in}, policy {net.policy}"
    )
    state = TrainState(
        model=model,
        optimizer=optimizer,
        schedule=schedule,
        loss_fn=YoloLoss(
            model.heads,
            box_loss=config.box_loss,
            iou_thresh=config.assign_iou_thresh,
            anchor_ratio=config.anchor_ratio,
            obj_iou=config.obj_iou,
            gains=(config.box_gain, config.obj_gain, config.cls_gain),
        ),
        images_per_iteration=net.batch // env.world_size,  # DDP averages over ranks: per-rank share
        subdivisions=net.subdivisions // env.world_size,
        world_size=env.world_size,
        frozen=frozen,
        ema=ModelEMA(model, config.ema_decay, config.ema_ramp) if config.ema else None,
        scaler=torch.amp.GradScaler("cuda") if amp_dtype == torch.float16 else None,
        max_iterations=net.max_batches if config.max_batches is None else config.max_batches,
    )
    if resume_state is not None:
        _restore(state, resume_state)
        set_rng_state(resume_state.get("rng", {}))
        say(
            f"resumed {config.resume}: iteration {state.iteration}, epoch {state.epoch}, "
            f"mini-batch {state.epoch_batches}"
        )
    if env.enabled:
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [device.index] if device.type == "cuda" else None
        state.ddp = DistributedDataParallel(model, device_ids=device_ids)
    state.forward = torch.compile(state.ddp or model) if config.compile else state.ddp
    options = StepOptions(
        device=device,
        amp_dtype=amp_dtype,
        clip_norm=config.clip_norm,
        channels_last=config.channels_last,
        log_interval=config.log_interval,
    )
    logger = RunLogger(run_dir, config.as_dict(), wandb=config.wandb) if env.is_main else _Silent()
    from turboyolo.data.loader import default_workers
    from turboyolo.train.gpu_monitor import GpuMonitor, data_wait_advice

    monitor = GpuMonitor(device)
    advice = data_wait_advice(config.cache, config.augment_on, train_loader.workers, default_workers() + 1)
    gpu_epoch: list[dict] = []
    writer = CheckpointWriter()
    cfg_text = format_cfg(spec)
    progress = Progress(enabled=not quiet)
    train_seconds = 0.0
    limit_s = config.time_limit_min * 60.0
    stopped = timed_out = False

    def checkpoint(paths):
        state.last_checkpoint = str(weights_dir / "last.pt")
        if env.is_main:
            writer.save(_checkpoint_dict(state, config, cfg_text), paths)

    def validate():
        eval_model = state.ema.module if state.ema is not None else model
        return evaluate(
            eval_model,
            val_loader,
            device=device,
            num_classes=len(names),
            conf_thres=config.conf_thres,
            iou_thres=config.iou_thres,
            nms_thres=config.nms_thres,
            amp_dtype=amp_dtype,
            keep_predictions=VAL_PLOT_IMAGES if env.is_main else 0,
        )

    val_labels = {str(s.image): s.labels for s in val_loader.dataset.samples}

    def improves_best(result) -> bool:
        fitness = result.map50 * 0.1 + result.map50_95 * 0.9
        if fitness <= state.best_fitness:
            return False
        state.best_fitness = fitness
        return True

    def on_iteration(st, values):
        nonlocal stopped, timed_out
        if values:
            gpu = monitor.read()
            if gpu:
                values.update(gpu)
                gpu_epoch.append(gpu)
                progress.update(st, values)
            warning = monitor.data_wait_warning(values["data_wait"], advice)
            if warning:
                say(warning)
            logger.scalars(values, st.iteration)
        if stop_at_iteration is not None and st.iteration >= stop_at_iteration:
            stopped = True
        if limit_s and train_seconds + (time.perf_counter() - epoch_start) >= limit_s:
            stopped = timed_out = True
        if env.enabled and limit_s:  # clocks differ between ranks: rank 0 decides for all
            stopped = bool(distributed.broadcast_object(stopped))
        return stopped

    say(
        f"training "
        f"on {device}: {len(train_loader.dataset)} images, {len(train_loader)} mini-batches/epoch; "
        f"run {run_dir}"
    )
    if resume_state is None:
        logger.label_statistics([s.labels for s in train_loader.dataset.samples], names)
    try:
        while state.epoch < config.epochs and not stopped:
            if state.max_iterations and state.iteration >= state.max_iterations:
                break
            train_loader.set_epoch(state.epoch, state.epoch_start_sample)
            batches = (
                train_loader
                if state.epoch_batches == 0
                else remaining_batches(train_loader, state.epoch_batches)
            )
            if state.iteration == 0:
                batches = logger.first_batches(batches, names)
            progress.start(state.epoch, config.epochs, len(train_loader), state.epoch_batches)
            epoch_start = time.perf_counter()
            gpu_epoch.clear()
            stats = train_one_epoch(state, monitor.wrap(batches), len(train_loader), options, on_iteration,
                                    progress)
            progress.close()
            train_seconds += time.perf_counter() - epoch_start
            finished = state.epoch_batches >= len(train_loader)
            if not finished:  # interrupted mid-epoch: keep the exact position and stop
                paths = [weights_dir / "last.pt"]
                if timed_out and config.evaluation_interval:  # the weights the run ends with count too
                    result, shown = validate()
                    if result is not None:
                        logger.evaluation(result, names, epoch=state.epoch, iteration=state.iteration,
                                          shown=shown, labels=val_labels)
                        say(f"time limit at iteration {state.iteration} (epoch {state.epoch + 1} "
                            f"unfinished): mAP@0.5 {result.map50:.4f}  mAP@0.5:0.95 {result.map50_95:.4f}  "
                            f"{result.summary()}")
                        if improves_best(result):
                            paths.append(weights_dir / "best.pt")
                checkpoint(paths)
                break
            state.epoch += 1
            state.epoch_batches = state.epoch_start_sample = 0
            row = {
                "epoch": state.epoch,
                "iteration": state.iteration,
                "minutes": train_seconds / 60,
                "lr": optimizer.param_groups[0]["lr"],
                **stats,
                **{k: sum(g[k] for g in gpu_epoch if k in g) / max(1, sum(k in g for g in gpu_epoch))
                   for k in ("gpu_util", "gpu_mem_gb", "gpu_idle") if any(k in g for g in gpu_epoch)},
            }
            done = (
                stopped
                or state.epoch >= config.epochs
                or bool(state.max_iterations and state.iteration >= state.max_iterations)
            )
            if config.evaluation_interval and (state.epoch % config.evaluation_interval == 0 or done):
                result, shown = validate()
                if result is None:  # not rank 0: its shard went to rank 0, which reports and keeps best.pt
                    logger.epoch_row(row)
                    checkpoint([])
                    continue
                row.update(result.as_dict())
                logger.evaluation(result, names, epoch=state.epoch, iteration=state.iteration,
                                  shown=shown, labels=val_labels)
                say(
                    f"epoch {state.epoch}: mAP@0.5 {result.map50:.4f}  mAP@0.5:0.95 {result.map50_95:.4f}  "
                    f"{result.summary()}  {train_seconds / 60:.2f} min"
                )
                if config.verbose:
                    say(result.table(names))
                paths = [weights_dir / "last.pt"]
                if improves_best(result):
                    paths.append(weights_dir / "best.pt")
            else:
                paths = [weights_dir / "last.pt"]
            if config.checkpoint_interval and state.epoch % config.checkpoint_interval == 0:
                paths.append(weights_dir / f"epoch{state.epoch}.pt")
            logger.epoch_row(row)
            checkpoint(paths)
    finally:
        progress.close()
        monitor.close()
        writer.close()
        logger.close()
        distributed.cleanup()
    if not env.is_main:
        return run_dir
    final = state.ema.module if state.ema is not None else model
    save_darknet_weights(final, weights_dir / "last.weights", seen=state.seen)
    if (weights_dir / "best.pt").exists():
        export_weights(weights_dir / "best.pt", spec, weights_dir / "best.weights")
    say(
        f"weights: {weights_dir} (last.pt, best.pt, last.weights, best.weights); "
        f"results: {run_dir / 'results.csv'}, {run_dir / 'results.png'}; "
        f"TensorBoard: {run_dir / 'tensorboard'}"
    )
    return run_dir


VAL_PLOT_IMAGES = 48  # val_batch0..2 mosaics of 16 images


def draw_predictions(shown, conf_thres: float) -> list:
    """HWC uint8 drawings of (image path, detections [n, 6] in original pixels) at ``conf_thres``."""
    import numpy as np
    from PIL import Image, ImageDraw

    drawings = []
    for path, dets in shown:
        try:
            image = Image.open(path).convert("RGB")
        except OSError:
            continue
        draw = ImageDraw.Draw(image)
        for x1, y1, x2, y2, score, _ in np.asarray(dets).reshape(-1, 6):
            if score >= conf_thres:
                draw.rectangle([float(x1), float(y1), float(x2), float(y2)], outline=(255, 40, 40), width=2)
        drawings.append(np.asarray(image))
    return drawings


class _Silent:
    """The logger of ranks other than 0: they train, rank 0 writes."""

    def scalars(self, *args, **kwargs) -> None:
        pass

    def label_statistics(self, *args, **kwargs) -> None:
        pass

    def first_batches(self, batches, names):
        return batches

    def evaluation(self, *args, **kwargs) -> dict:
        return {}

    def epoch_row(self, *args, **kwargs) -> None:
        pass

    def images(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass


def init_head_priors(model, layers) -> None:
    """Objectness bias of freshly initialised head convolutions: logit(0.01).

    With a zero bias every one of the thousands of cells starts at p = 0.5, so the first iterations
    are dominated by a huge "no object" loss whose gradient also shakes the pretrained layers.
    """
    import math

    import torch

    with torch.no_grad():
        for head in model.heads:
            index = head.layer_index - 1
            conv = getattr(model.layers[index], "conv", None)
            if index not in layers or conv is None or conv.bias is None:
                continue
            bias = conv.bias.view(len(head.mask), -1)
            bias[:, 4] = math.log(0.01 / 0.99)
            bias[:, 5:] = 0.0


def _load_reporting(model, weights) -> tuple[list[str], set[int]]:
    lines, skipped = load_pretrained(model, weights, return_skipped=True)
    return lines, set(skipped)


def load_pretrained(model, weights: str | Path, return_skipped: bool = False, checkpoint: dict | None = None):
    """Load ``weights`` (Darknet .weights or checkpoint) into ``model``: everything whose shape fits.

    Returns lines to print naming what was skipped (and, with ``return_skipped``, the skipped layer
    indices). Darknet's ``seen`` is not carried over (the schedule of this run starts at iteration 1).
    ``checkpoint``: the checkpoint ``weights`` names, when the caller has already read it.
    """
    from turboyolo.errors import WeightsError
    from turboyolo.model.loading import (
        checkpoint_model_state,
        is_checkpoint,
        load_darknet_weights,
        load_matching,
        read_checkpoint,
        transfer_darknet_weights,
    )

    path = Path(weights)
    if not path.exists():
        raise WeightsError(
            f"{path}: no such weights file (--pretrained-weights); "
            "`turboyolo fetch yolov3-tiny` gets the COCO tiny weights"
        )
    if is_checkpoint(path):
        state = checkpoint if checkpoint is not None else read_checkpoint(path)
        loaded, skipped = load_matching(model, checkpoint_model_state(state))
        layers = sorted({int(n.split(".")[1]) for n in skipped if n.startswith("layers.")})
        lines = [
            f"loaded {len(loaded)} tensors from {path}"
            + (f"; kept the initialisation of layers {layers} (shapes differ)" if layers else "")
        ]
        return (lines, layers) if return_skipped else lines
    try:
        load_darknet_weights(model, path)
        lines, layers = [f"loaded {path} (all layers)"], []
    except WeightsError:
        _, skipped, seeded = transfer_darknet_weights(model, path)
        layers = [index for index in skipped if index not in seeded]
        lines = [
            f"loaded {path} into every layer whose shape matches (another class count)"
            + (f"; heads {seeded}: box and objectness outputs from the source, class outputs new"
               if seeded else "")
            + (f"; layers {layers} keep their initialisation" if layers else "")
        ]
    return (lines, layers) if return_skipped else lines


def export_weights(checkpoint_path: Path, spec, out: Path) -> Path:
    """Darknet ``.weights`` from a checkpoint (its EMA weights when present)."""
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.loading import checkpoint_model_state, read_checkpoint, save_darknet_weights

    state = read_checkpoint(checkpoint_path)
    model = Darknet(spec)
    model.load_state_dict(checkpoint_model_state(state))
    return save_darknet_weights(model, out, seen=int(state.get("seen", 0)))


def remaining_batches(loader, skip: int):
    """The batches of the loader's current epoch after the first ``skip`` (mid-epoch resume).

    The data pipeline derives every batch from (seed, epoch, index), so skipping in the sampler yields
    exactly the batches the interrupted run would have seen; no image of the skipped part is decoded.
    """
    import itertools

    import torch

    from turboyolo.data.loader import collate

    if hasattr(loader, "remaining"):  # --augment-on device: the loader knows its batch-level dataset
        return loader.remaining(skip)
    sampler = loader.batch_sampler

    class _Tail(torch.utils.data.Sampler):
        def __iter__(self):
            return itertools.islice(iter(sampler), skip, None)

        def __len__(self):
            return max(len(sampler) - skip, 0)

    return torch.utils.data.DataLoader(
        loader.dataset,
        batch_sampler=_Tail(),
        num_workers=min(loader.workers, 1),
        collate_fn=collate,
        pin_memory=loader.pin_memory,
        worker_init_fn=_one_thread if loader.workers else None,
    )


def _one_thread(_: int) -> None:
    import torch

    torch.set_num_threads(1)


def _apply_overrides(spec, config):
    changes = {}
    if config.batch:
        changes["batch"] = config.batch
    if config.subdivisions:
        changes["subdivisions"] = config.subdivisions
    if config.img_size:
        changes["width"] = changes["height"] = config.img_size
    if config.max_batches:  # 0 means "epochs decide"; the schedule keeps the cfg's max_batches
        changes["max_batches"] = config.max_batches
    return spec.with_net(**changes) if changes else spec


def _device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.isdigit():
        return torch.device(f"cuda:{name}")
    return torch.device(name)


def _loaders(config, spec, mini_batch: int, env=None):
    from turboyolo.data.augment import AugmentParams
    from turboyolo.data.loader import build_loader
    from turboyolo.data.scan import scan_dataset
    from turboyolo.formats.darknet_cfg import YoloSpec

    net = spec.net
    img_size = net.width
    val_size = config.val_img_size or img_size
    train_scan = scan_dataset(config.data, "train")
    val_scan = scan_dataset(config.data, "val", train_scan.names)
    names = train_scan.names or val_scan.names
    jitter = next((layer.jitter for layer in spec.layers if isinstance(layer, YoloSpec)), 0.3)
    extra = dict(net.extra)
    augment = AugmentParams.from_net(
        angle=net.angle,
        saturation=max(net.saturation, 1.0),
        exposure=max(net.exposure, 1.0),
        hue=net.hue,
        jitter=min(jitter, 0.3),
        flip=extra.get("flip", "1") != "0",
        scale=(config.aug_scale_min, config.aug_scale_max),
    )
    multiscale = (
        (int(img_size * 0.67) // 32 * 32, int(img_size * 1.5) // 32 * 32) if config.multiscale else None
    )
    cache = val_cache = None
    if config.augment_on == "device" and config.cache == "none":
        print("note: --augment-on device without --cache decodes every original each epoch; "
              "--cache ram (or disk) lets the loader only copy images")
    if config.cache != "none":
        from turboyolo.data.cache import prepare_cache

        side = multiscale[1] if multiscale else img_size
        root = Path(config.data).resolve().parent / ".turboyolo-cache"
        cache = prepare_cache(
            train_scan.samples,
            side,
            root / f"train-{side}" if config.cache == "disk" else None,
            memory=config.cache,
        )
        val_cache = prepare_cache(
            val_scan.samples,
            val_size,
            root / f"val-{val_size}" if config.cache == "disk" else None,
            memory=config.cache,
        )
    train_loader = build_loader(
        train_scan.samples,
        img_size=img_size,
        batch_size=mini_batch,
        augment=augment if config.augment else None,
        workers=config.workers,
        shuffle=True,
        seed=config.seed,
        multiscale=multiscale,
        cache=cache,
        augment_on=config.augment_on,
        rank=env.rank if env else 0,
        world_size=env.world_size if env else 1,
    )
    val_loader = build_loader(
        val_scan.samples,
        img_size=val_size,
        batch_size=config.eval_batch or 2 * mini_batch,
        augment=None,
        workers=config.workers,
        shuffle=False,
        seed=config.seed,
        cache=val_cache,
        rank=env.rank if env else 0,  # evaluation is sharded too; rank 0 merges the shards
        world_size=env.world_size if env else 1,
    )
    return train_loader, val_loader, list(names)


def _checkpoint_dict(state, config, cfg_text: str) -> dict:
    from turboyolo.train.checkpoint import FORMAT, VERSION, rng_state

    model = state.model
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": model.state_dict(),
        "ema": state.ema.state_dict() if state.ema is not None else None,
        "ema_updates": state.ema.updates if state.ema is not None else 0,
        "optimizer": state.optimizer.state_dict(),
        "scaler": state.scaler.state_dict() if state.scaler is not None else {},
        "iteration": state.iteration,
        "epoch": state.epoch,
        "epoch_batches": state.epoch_batches,
        "epoch_start_sample": state.epoch_start_sample,
        "world_size": state.world_size,
        "mini_batch": _mini_batch_of(state),
        "seen": state.seen,
        "best_fitness": state.best_fitness,
        "rng": rng_state(),
        "config": config.as_dict(),
        "cfg_text": cfg_text,
    }


def _mini_batch_of(state) -> int:
    return state.images_per_iteration // max(state.subdivisions, 1)


def _restore(state, saved: dict) -> None:
    state.model.load_state_dict(saved["model"])
    state.optimizer.load_state_dict(saved["optimizer"])
    if state.ema is not None and saved.get("ema") is not None:
        state.ema.load_state_dict(saved["ema"])
        state.ema.updates = int(saved.get("ema_updates", 0))
    if state.scaler is not None and saved.get("scaler"):
        state.scaler.load_state_dict(saved["scaler"])
    state.iteration, state.epoch = int(saved["iteration"]), int(saved["epoch"])
    state.epoch_batches, state.seen = int(saved["epoch_batches"]), int(saved["seen"])
    state.epoch_start_sample = int(saved.get("epoch_start_sample", 0))
    saved_world = int(saved.get("world_size", 1))
    if saved_world != state.world_size and state.epoch_batches:
        # Resume on another world size: continue at the same global sample and re-shard the rest.
        consumed = state.epoch_batches * int(saved.get("mini_batch", 0)) * saved_world
        state.epoch_start_sample += consumed
        state.epoch_batches = 0
    state.best_fitness = float(saved.get("best_fitness", -1.0))


def _write_config(path: Path, values: dict) -> None:
    import yaml

    path.write_text(yaml.safe_dump(values, sort_keys=False))


# Anchors fitted to the trees boxes at 416 (`turboyolo anchors --data trees.data --num 6`): COCO's two
# largest tiny anchors (135x169, 344x319) are no crown's best anchor.
DEMO_ANCHORS = ((16, 17), (25, 29), (37, 35), (44, 49), (59, 59), (85, 86))
# Adam (scale-free in the loss). 2e-3 beat 1e-3 on trees from 90 iterations on (0.229 vs 0.209 mAP@0.5).
DEMO_LR = 0.002
DEMO_BURN_IN = 15
DEMO_ASSIGN_IOU = 0.213  # AlexeyAB's iou_thresh: ~4 anchors train on a typical crown instead of 1
# Nothing frozen: freezing layers 0-7 halves the backward time but learnt less per iteration on trees
# (0.185 vs 0.209 mAP@0.5 after 90 iterations); freezing layers 0-3 ran 1.24x the iterations but ended
# at 0.31 instead of 0.37.
DEMO_FREEZE = 0
# Training runs on 416 crops of the tiles zoomed 1.0-1.5x; evaluation (and the demo's detect) feeds
# whole tiles at 512 (1.23x), where the small crowns cover more cells. Same weights, zoom 0.75-1.25:
# 0.389 at 512 vs 0.352 at 416; zoom 1.0-1.5 then reached 0.42 at 512 in 7.6 minutes.
DEMO_VAL_SIZE = 512
DEMO_ZOOM = (1.0, 1.5)
# The cosine spans the iterations the probe predicts for the budget. The real loop is ~10% slower than
# the probe (loader, EMA, epoch ends), so the LR is near its floor when the time limit stops the run;
# a 1.3x span kept 25% of the peak LR at the end and finished 0.38-0.40 instead of 0.41-0.42 (seed 1).
DEMO_COSINE_SPAN = 1.0


def demo_finetune(data_dir: Path, weights: Path, out_project: Path, minutes: float = 8.0, *,
                  seed: int = 0, quiet: bool = False, learning_rate: float = DEMO_LR,
                  cosine_span: float = DEMO_COSINE_SPAN, **overrides) -> Path:
    """Fine-tune COCO yolov3-tiny on the trees sample within ``minutes`` of training; returns the run dir.

    Writes ``demo-yolov3-tiny-trees.cfg`` (one class, anchors for 16-70 px crowns, Adam with a 15-iteration
    burn-in and a cosine decay over the iterations that fit the budget), loads every COCO layer and the
    heads' box and objectness outputs (Darknet's ``seen`` is not carried over), trains every layer on
    416 crops zoomed 1.0-1.5x with GIoU box loss, extra anchors above shape IoU 0.213 and EMA, and
    evaluates every 3 epochs at ``DEMO_VAL_SIZE`` (evaluation time is not counted in the budget).
    """
    import time

    import torch

    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec
    from turboyolo.train.config import TrainConfig

    data_dir, out_project = Path(data_dir), Path(out_project)
    out_project.mkdir(parents=True, exist_ok=True)
    budget_s = minutes * 60.0
    start = time.perf_counter()
    threads = torch.get_num_threads()
    # Every core computes: the loader worker only augments cached 416 tiles (data-wait ~1%), and one
    # intra-op thread instead of two made each iteration 1.8x slower on the 2-core machine.
    torch.set_num_threads(torch.multiprocessing.cpu_count() or threads)
    try:
        spec = make_spec("yolov3-tiny", num_classes=1, width=416, height=416, batch=8, subdivisions=1,
                         learning_rate=learning_rate, anchors=DEMO_ANCHORS)
        seconds_per_iteration = _probe_iteration_seconds(spec)
        left = budget_s - (time.perf_counter() - start)
        # The run ends on the time limit, not on max_batches: on a shared CPU the real speed varies; a
        # slower run then stops a little before the LR floor, a faster one idles briefly at it.
        iterations = max(DEMO_BURN_IN + 10, int(cosine_span * left / seconds_per_iteration))
        spec = spec.with_net(burn_in=DEMO_BURN_IN, power=2.0, policy="cosine", max_batches=iterations,
                             optimizer="adam",
                             steps=(iterations + 1,), scales=(1.0,), saturation=1.5, exposure=1.5, hue=0.05)
        cfg_path = write_cfg(spec, out_project / "demo-yolov3-tiny-trees.cfg")
        if not quiet:
            print(f"demo cfg {cfg_path}: {seconds_per_iteration:.2f} s per iteration of 8 images measured, "
                  f"so {iterations} iterations (cosine LR from {learning_rate}, burn-in {DEMO_BURN_IN})")
        config = TrainConfig(
            cfg=str(cfg_path), data=str(data_dir / "trees.data"), weights=str(weights), epochs=10_000,
            workers=1, project=str(out_project), name="trees-finetune", conf_thres=0.25, nms_thres=0.45,
            evaluation_interval=3, checkpoint_interval=0, freeze=DEMO_FREEZE, ema_decay=0.98, ema_ramp=20.0,
            bn_momentum=0.03, seed=seed, time_limit_min=(left - 2.0) / 60.0, eval_batch=10, max_batches=0,
            assign_iou_thresh=DEMO_ASSIGN_IOU, box_loss="giou", val_img_size=DEMO_VAL_SIZE,
            aug_scale_min=DEMO_ZOOM[0], aug_scale_max=DEMO_ZOOM[1])
        for key, value in overrides.items():  # experiments: any TrainConfig field
            setattr(config, key, value)
        return fit(config, quiet=quiet)
    finally:
        torch.set_num_threads(threads)


def _probe_iteration_seconds(spec) -> float:
    """Seconds of one training iteration on random images (the doctor's step measurement, median of 2)."""
    import torch

    from turboyolo.doctor.measure import DoctorOptions, measure_step

    net = spec.net
    options = DoctorOptions(img_size=net.width, batch=net.batch, subdivisions=net.subdivisions,
                            device=torch.device("cpu"), workers=0, worker_counts=(), repeats=2)
    seconds, _, _ = measure_step(spec, options)
    return seconds * net.subdivisions
