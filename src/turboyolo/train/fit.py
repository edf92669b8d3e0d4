"""``fit(config)``: the training loop, readable top to bottom.

Setup (run directory, data, model, optimizer) is done by the named helpers of
:mod:`turboyolo.train.setup`; the loop itself is in :func:`fit`: per epoch,
:func:`turboyolo.train.engine.train_one_epoch` yields after every update and ``fit`` monitors, logs and
asks :class:`StopRule` (the one place that decides to stop) whether to go on; then one end-of-epoch path
evaluates, keeps the best weights and writes the checkpoint. A run that stops mid-epoch takes the same
path: its checkpoint keeps the exact position for ``--resume``.

Differences from PyTorch-YOLOv3's trainer: the optimizer and schedule are fitted to the planned run
(:mod:`turboyolo.train.plan`; ``--schedule darknet``: the cfg's); burn-in and LR steps count
Darknet iterations of ``batch`` images from 1; the loss is divided by the images per iteration; EMA
weights are evaluated; checkpoints hold the full state and ``--resume`` continues exactly.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from turboyolo.devices import amp_dtype_for, channels_last_for, usable_cpus
from turboyolo.errors import OutputError, TrainingInterrupted, printable
from turboyolo.formats.darknet_cfg import ModelSpec, format_cfg
from turboyolo.model.loading import (
    export_weights,
    save_darknet_weights,
)
from turboyolo.train import distributed
from turboyolo.train.checkpoint import CheckpointWriter, checkpoint_dict
from turboyolo.train.config import EvalArgs, TrainConfig
from turboyolo.train.defaults import describe
from turboyolo.train.engine import EpochStats, StepOptions, TrainState, evaluate, train_one_epoch
from turboyolo.train.gpu_monitor import GpuMonitor, data_wait_advice
from turboyolo.train.loaders import RunData
from turboyolo.train.logger import Progress, RunLogger, SilentLogger
from turboyolo.train.metrics import EvalResult
from turboyolo.train.setup import (
    Run,
    anchor_check,
    build_state,
    check_batching,
    choose_input_pipeline,
    fit_to_data,
    load_data,
    open_run,
    run_plan,
    write_run_files,
)
from turboyolo.train.stop import INTERRUPTED, StopRule

VAL_PLOT_IMAGES = 48  # validation images drawn per evaluation: val_batch0..2, 16 each
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)  # the disk said no


@dataclass
class FitResult:
    """What a finished run hands back (the Python API returns it)."""

    run_dir: Path
    metrics: dict[str, float] = field(default_factory=dict)  # the last evaluation's numbers
    best_fitness: float = -1.0
    iterations: int = 0
    epochs: int = 0  # completed epochs
    minutes: float = 0.0  # training time, evaluations excluded
    stop_reason: str = ""


@dataclass
class Session:
    """What the loop's pieces share while one run trains: its setup, data and state, the outputs, the
    stop rule, and the running figures (the last evaluation, the training time)."""

    run: Run
    data: RunData
    state: TrainState
    options: StepOptions
    logger: RunLogger | SilentLogger
    writer: CheckpointWriter
    monitor: GpuMonitor
    progress: Progress
    stop: StopRule
    cfg_text: str
    advice: str  # what to change when the step waits for data (GpuMonitor.data_wait_warning)
    result: EvalResult | None = None  # the last evaluation
    slow_data: str = ""  # set when the data-wait stayed far above the prediction: the progress line says
    train_seconds: float = 0.0  # evaluations excluded


def fit(config: TrainConfig, *, stop_at_iteration: int | None = None, quiet: bool = False) -> FitResult:
    """Train as ``config`` says (see :mod:`turboyolo.train.config`); returns the run directory and numbers.

    ``stop_at_iteration`` ends the run after that iteration as an interruption would (last.pt written,
    nothing evaluated), so tests can resume it.
    """
    run = open_run(config, quiet)
    device = run.device
    data = None
    try:
        check_batching(run.spec, run.env.world_size)
        anchors = anchor_check(run)  # a fresh run's: in a thread beside the pipeline's measurement
        # --cache, --augment-on, --workers (and CUDA --subdivisions): given, or auto (measured)
        choose_input_pipeline(run, anchors.start if anchors and run.env.world_size == 1 else None)
        mini_batch = check_batching(run.spec, run.env.world_size)
        data = load_data(run, mini_batch)
        if run.env.is_main:
            data.write_report(run.run_dir)
        plan = run_plan(run, data)
        start_first_batches(run, data, plan.close_mosaic)  # the workers make them while the start goes on
        fit_to_data(run, data, anchors)  # the anchors, as the check found them
        write_run_files(run)  # config.yaml and model.cfg, once: every value the run uses
        state = build_state(run.resolved, run.env, device, run.resume_state, run.say)
    except BaseException:
        run.discard()  # a failed start leaves no half-made run directory behind
        if data is not None:
            data.close()  # nor loader workers started early, alive while anything holds the traceback
        raise
    config, env, say = run.config, run.env, run.say
    stop = StopRule(config.schedule.epochs, run.max_iterations, config.schedule.time_limit_min * 60.0,
                    stop_at_iteration, broadcast=env.enabled and config.schedule.time_limit_min > 0,
                    patience=config.schedule.patience, planned_iterations=run.planned_iterations(),
                    distributed_run=env.enabled)
    if run.resume_state is not None and stop.reason(state, 0.0) not in (None, INTERRUPTED):
        return finished_already(run, state, stop.reason(state, 0.0))
    try:
        with contextlib.ExitStack() as closing:  # closed in reverse order, however the loop ends
            session = open_session(run, data, state, device, stop, closing)
            state.no_background = frozenset(str(s.image) for s in data.train.dataset.samples if s.partial)
            reason = stop.reason(state, 0.0)
            say(f"training on {device}: {len(data.train.dataset)} images, {len(data.train)} "
                f"mini-batches/epoch; run {run.run_dir}")
            for line in describe(config):
                say(line)
            closing.callback(catch_ctrl_c(stop, say))
            while reason is None:
                reason, stats, gpu_readings = train_epoch(session)
                reason = end_of_epoch(session, reason, stats, gpu_readings)
    except OSError as err:
        if err.errno not in WRITE_ERRNOS:
            raise
        raise output_failure(err, run) from err  # results.csv, plots, logs: the folder stopped taking writes
    weights_dir = run.weights_dir
    if stop.ctrl_c:
        raise TrainingInterrupted(f"stopped at iteration {state.iteration} (epoch {state.epoch + 1}); "
                                  f"{weights_dir / 'last.pt'} holds that exact position: continue with "
                                  f"`turboyolo train --resume {weights_dir / 'last.pt'}`")
    message = stop.message(reason, state)
    if message:
        say(message)
    if env.is_main and reason != INTERRUPTED:
        finish_outputs(state, run.spec, weights_dir, run.run_dir, say)
    result = session.result
    return FitResult(run.run_dir, result.as_dict() if result is not None else {}, state.best_fitness,
                     state.iteration, state.epoch, session.train_seconds / 60.0, reason or "")


def finished_already(run: Run, state: TrainState, reason: str) -> FitResult:
    """``--resume`` of a run that has reached its end: say so and leave its files as they are."""
    schedule = run.config.schedule
    end = (f"its {run.max_iterations} iterations (--max-batches)" if reason == "max_batches" else
           f"its {schedule.epochs} epochs (--epochs)")
    run.say(f"--resume {run.config.resume}: the run is finished: it trained {end} and stopped at "
            f"iteration {state.iteration}, epoch {state.epoch}; nothing to train, its weights stay as they "
            "are. To train it longer, resume with a larger --epochs (or --max-batches)")
    return FitResult(run.run_dir, {}, state.best_fitness, state.iteration, state.epoch, 0.0, "finished")


def open_session(run: Run, data: RunData, state: TrainState, device: torch.device, stop: StopRule,
                 closing: contextlib.ExitStack) -> Session:
    """The loop's outputs (logger, checkpoint writer, GPU monitor, progress bar), each closed by
    ``closing``; at the very end the run's process group, and the scan report with the files that broke."""
    config, env = run.config, run.env
    closing.callback(distributed.cleanup)
    logger = (RunLogger(run.run_dir, config.as_dict(), wandb=config.output.wandb) if env.is_main
              else SilentLogger())
    closing.callback(logger.close)
    writer = CheckpointWriter()
    closing.callback(writer.close)
    monitor = GpuMonitor(device)
    closing.callback(monitor.close)
    progress = Progress(enabled=not run.quiet)
    closing.callback(progress.close)
    closing.callback(_report_broken_files, run, data)
    options = StepOptions(device=device, amp_dtype=amp_dtype_for(device, config.runtime.amp),
                          clip_norm=config.runtime.clip_norm,
                          channels_last=channels_last_for(device, config.runtime.channels_last),
                          log_interval=config.output.log_interval, say=run.say)
    advice = run.resolved.pipeline.advice or data_wait_advice(
        config.data_args.cache, config.data_args.augment_on, data.train.workers, usable_cpus())
    return Session(run, data, state, options, logger, writer, monitor, progress, stop, format_cfg(run.spec),
                   advice)


def _report_broken_files(run: Run, data: RunData) -> None:
    if run.env.is_main and (data.train.replaced or data.val.dropped):
        with contextlib.suppress(OSError):  # the files that broke during the run join the scan's list
            data.write_report(run.run_dir)


def train_epoch(session: Session) -> tuple[str | None, EpochStats, list[dict]]:
    """The updates of one epoch (or what is left of it), each followed by a readout every log interval and
    :meth:`StopRule.reason`; returns why the run stops (``None``: go on), the epoch's losses and GPU
    readings."""
    run, data, state, options = session.run, session.data, session.state, session.options
    close_mosaic = state.plan.close_mosaic
    data.train.set_epoch(state.epoch, state.epoch_start_sample,
                         mix=mixing(state.epoch, run, close_mosaic, run.say),
                         upcoming=lambda epoch: planned_mixing(epoch, run, close_mosaic))
    batches = data.train if state.epoch_batches == 0 else data.train.remaining(state.epoch_batches)
    pictures = None
    if state.iteration == 0:  # train_batch0..2.jpg: the first batches as the network sees them, each
        # drawn after its step (off the path to the first step); a fresh run's labels.jpg after the first
        labels = ([s.labels for s in data.train.dataset.samples]
                  if state.epoch == 0 and run.resume_state is None else None)
        batches = pictures = session.logger.first_batches(batches, data.names, labels)
    session.progress.start(state.epoch + 1, run.planned_epochs(), len(data.train), state.epoch_batches)
    monitor, reason = session.monitor, None
    stats, gpu_readings, epoch_start = EpochStats(options.device), [], time.perf_counter()
    for values in train_one_epoch(state, monitor.wrap(batches), len(data.train), options, stats):
        if values:
            gpu = monitor.read()
            values.update(gpu)
            gpu_readings.append(gpu)
            predicted = run.resolved.pipeline.data_wait if run.resolved.pipeline.images_per_s else None
            warning = monitor.data_wait_warning(values["data_wait"], session.advice, predicted)
            if warning:
                run.say(warning)
                session.slow_data = session.advice.split(";")[0]
                if run.env.is_main:  # the run directory says so too
                    with open(run.run_dir / "data_wait.txt", "a") as note:
                        note.write(f"iteration {state.iteration}: {warning}\n")
            session.progress.update(state, {**values, "note": session.slow_data})
            session.logger.scalars(values, state.iteration)
        session.writer.poll()  # a checkpoint write that failed in the background stops the run now
        reason = session.stop.reason(state, session.train_seconds + time.perf_counter() - epoch_start)
        if reason is not None:
            break
    if hasattr(pictures, "close"):  # a run that stopped after a batch it has not drawn yet draws it now
        pictures.close()
    session.progress.close()
    session.train_seconds += time.perf_counter() - epoch_start
    return reason, stats, gpu_readings


def end_of_epoch(session: Session, reason: str | None, stats: EpochStats,
                 gpu_readings: list[dict]) -> str | None:
    """The one end-of-epoch path, for a finished epoch or a stop in the middle of one: count the epoch,
    evaluate when due, keep the best weights, write ``results.csv``'s row and the checkpoint(s). Returns
    why the run stops (``None``: go on)."""
    run, data, state, stop = session.run, session.data, session.state, session.stop
    finished = state.epoch_batches >= len(data.train)
    if finished:
        state.epoch += 1
        state.epoch_batches = state.epoch_start_sample = 0
        reason = reason or stop.reason(state, session.train_seconds)
    if data.train.replaced_summary():
        run.say(data.train.replaced_summary())
    weights_dir = run.weights_dir
    paths, evaluated = [weights_dir / "last.pt"], None
    interval = run.config.eval.evaluation_interval
    if interval and reason != INTERRUPTED and (reason is not None or state.epoch % interval == 0):
        evaluated = evaluate_now(session, reason, finished)
        if evaluated is not None and improves_best(state, evaluated):
            paths.append(weights_dir / "best.pt")
        reason = reason or stop.after_evaluation(state)
    keep_every = run.config.output.checkpoint_interval
    if finished and keep_every and state.epoch % keep_every == 0:
        paths.append(weights_dir / f"epoch{state.epoch}.pt")
    if finished or evaluated is not None:
        session.logger.epoch_row(epoch_row(state, stats, gpu_readings, session.train_seconds, evaluated,
                                           finished))
    state.last_checkpoint = str(weights_dir / "last.pt")
    state.last_checkpoint_iteration = state.iteration
    if run.env.is_main:
        session.writer.save(checkpoint_dict(state, run.resolved.as_dict(), session.cfg_text), paths)
    return reason


def evaluate_now(session: Session, reason: str | None, finished: bool) -> EvalResult | None:
    """Evaluate on the validation split, say the result and log it with the drawn predictions; ``None``
    on ranks other than 0 (they send rank 0 their shard)."""
    run, data, state, options = session.run, session.data, session.state, session.options
    keep = VAL_PLOT_IMAGES if run.env.is_main else 0
    evaluated, shown = validate(state, data, run.config.eval, options.device, options.amp_dtype, keep=keep)
    if data.val.dropped_summary():
        run.say(data.val.dropped_summary())
    if evaluated is not None:
        session.result = evaluated
        report_evaluation(evaluated, state, run.config.eval.verbose, data.names, session.train_seconds,
                          reason, finished, run.say)
        session.logger.evaluation(evaluated, data.names, epoch=state.epoch, iteration=state.iteration,
                                  shown=shown, labels=data.val_labels)
    return evaluated


# ---------------------------------------------------- the loop's helpers: mosaic switch, Ctrl-C, write errors
def start_first_batches(run: Run, data: RunData, close_mosaic: int) -> None:
    """A fresh run's training loader starts on its first batches as soon as the data and the plan are
    known, while the rest of the start runs (the anchors, the model, the outputs): the
    first step does not wait for a whole batch of decodes after all of that. The loop then takes these
    very batches (:meth:`~turboyolo.data.loader.DetectionLoader.start`; the epoch as
    :func:`train_epoch` sets it). A resumed run starts inside its epoch: its loader starts there."""
    if run.resume_state is not None:
        return
    data.train.set_epoch(0, 0, mix=mixing(0, run, close_mosaic, lambda *_: None),
                         upcoming=lambda epoch: planned_mixing(epoch, run, close_mosaic))
    data.train.start()


def mixing(epoch: int, run: Run, close_mosaic: int, say: Callable[..., None]) -> bool:
    """Whether mosaic and mixup may run in ``epoch`` (not in the last ``close_mosaic`` planned epochs)."""
    augment = run.config.augment
    if close_mosaic and epoch == run.planned_epochs() - close_mosaic and (augment.mosaic or augment.mixup):
        say(f"epoch {epoch + 1}: mosaic and mixup off for the last {close_mosaic} epochs (--close-mosaic)")
    return not close_mosaic or epoch < run.planned_epochs() - close_mosaic


def planned_mixing(epoch: int, run: Run, close_mosaic: int) -> bool | None:
    """:func:`mixing` of a later ``epoch`` (no message), None past the run's planned end: what the
    training loader makes ahead of time."""
    return None if epoch >= run.planned_epochs() else mixing(epoch, run, close_mosaic, lambda *_: None)


def catch_ctrl_c(stop: StopRule, say: Callable[..., None]) -> Callable[[], None]:
    """The first Ctrl-C asks :class:`StopRule` to stop after the current iteration (the checkpoint then
    keeps the exact position); a second one stops at once. Returns the function that restores the
    previous handler. Only the main thread can take signals: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        if stop.ctrl_c:
            raise KeyboardInterrupt
        stop.ctrl_c = True
        say("\nCtrl-C: stopping after this iteration and saving its exact position (again to stop at once)")

    previous = signal.signal(signal.SIGINT, handler)
    return lambda: signal.signal(signal.SIGINT, previous)


def output_failure(err: OSError, run: Run) -> OutputError:
    """A write into the run directory failed (full disk, read-only, permission): what to do about it."""
    last = run.weights_dir / "last.pt"
    resume = (f"; {last} holds the last saved state: free space and continue with `turboyolo train --resume "
              f"{last}`" if last.exists() else "")
    return OutputError(f"could not write {printable(err.filename or run.run_dir)}: {err.strerror or err}"
                       f"{resume}")


# ------------------------------------------------------------------------------------ evaluation, output
def validate(state: TrainState, data: RunData, settings: EvalArgs, device: torch.device,
             amp_dtype: torch.dtype | None, keep: int = 0) -> tuple[EvalResult | None, list]:
    """The EMA weights (or the model's) on the validation split; ``None`` on ranks other than 0."""
    model = state.ema.module if state.ema is not None else state.model
    return evaluate(model, data.val, device=device, num_classes=len(data.names),
                    conf_thres=settings.conf_thres, iou_thres=settings.iou_thres,
                    nms_thres=settings.nms_thres, amp_dtype=amp_dtype, keep_predictions=keep)


def improves_best(state: TrainState, result: EvalResult) -> bool:
    """Fitness = 0.1 mAP@0.5 + 0.9 mAP@0.5:0.95 (as YOLOv5); True (and recorded) when it beats the best."""
    fitness = result.map50 * 0.1 + result.map50_95 * 0.9
    if fitness <= state.best_fitness:
        return False
    state.best_fitness, state.best_epoch = fitness, state.epoch
    return True


def report_evaluation(result: EvalResult, state: TrainState, verbose: bool, names: list[str],
                      train_seconds: float, reason: str | None, finished: bool,
                      say: Callable[..., None]) -> None:
    """One console line (and the per-class table with ``--verbose``)."""
    where = f"epoch {state.epoch}"
    if not finished:  # e.g. "time limit at iteration 7 (epoch 2 unfinished)"
        why = (reason or "stop").replace("_", " ")
        where = f"{why} at iteration {state.iteration} (epoch {state.epoch + 1} unfinished)"
    say(f"{where}: {result.headline()}  {result.summary()}  "
        f"{train_seconds / 60:.2f} min")
    for line in result.notes():  # where an NMS cap bit; inference / NMS / metrics time
        say(f"  {line}")
    if verbose:
        say(result.table(names))


def epoch_row(state: TrainState, stats: EpochStats, gpu_readings: list[dict], train_seconds: float,
              result: EvalResult | None, finished: bool) -> dict:
    """One ``results.csv`` row: the epoch's mean losses and speed, GPU means, the evaluation's numbers."""
    row = {"epoch": state.epoch if finished else state.epoch + 1, "iteration": state.iteration,
           "minutes": train_seconds / 60, "lr": state.optimizer.param_groups[0]["lr"], **stats.summary()}
    for key in ("gpu_util", "gpu_mem_gb", "gpu_idle"):
        readings = [g[key] for g in gpu_readings if key in g]
        if readings:
            row[key] = sum(readings) / len(readings)
    if result is not None:
        row.update(result.as_dict())
    return row


def finish_outputs(state: TrainState, spec: ModelSpec, weights_dir: Path, run_dir: Path,
                   say: Callable[..., None]) -> None:
    """Darknet ``.weights`` of the final (EMA) and best weights; where everything is."""
    final = state.ema.module if state.ema is not None else state.model
    save_darknet_weights(final, weights_dir / "last.weights", seen=state.seen)
    if (weights_dir / "best.pt").exists():
        export_weights(weights_dir / "best.pt", spec, weights_dir / "best.weights")
    say(f"weights: {weights_dir} (last.pt, best.pt, last.weights, best.weights); "
        f"results: {run_dir / 'results.csv'}, {run_dir / 'results.png'}; "
        f"TensorBoard: {run_dir / 'tensorboard'}")

