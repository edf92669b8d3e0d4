"""``StopRule``: the one place that decides whether a training run goes on (``fit`` asks it after every
update, at the end of every epoch and after every evaluation)."""

from __future__ import annotations

from dataclasses import dataclass

from turboyolo.train import distributed
from turboyolo.train.engine import TrainState

INTERRUPTED = "interrupted"  # stopped as a crash would stop it: last.pt only, no evaluation


@dataclass
class StopRule:
    """The one place that decides whether the run goes on.

    :meth:`reason` is asked after every update and at the end of every epoch; :meth:`after_evaluation`
    after each evaluation (early stopping: ``patience`` epochs since the best fitness).
    """

    epochs: int
    max_iterations: int  # 0: no limit
    limit_s: float  # 0: no limit
    stop_at_iteration: int | None = None  # tests: stop as an interruption would
    broadcast: bool = False  # under torchrun with a time limit: rank 0's clock decides for all
    ctrl_c: bool = False  # set by the SIGINT handler (:func:`catch_ctrl_c`)
    patience: int = 0  # epochs without a better fitness before stopping (0: never)
    planned_iterations: int = 0  # where the schedule ends (--max-batches or --epochs), for the messages
    distributed_run: bool = False  # under torchrun: rank 0 (which evaluates) decides patience for all

    def reason(self, state: TrainState, train_seconds: float) -> str | None:
        """None to go on, else why the run stops (``interrupted``, ``max_batches``, ``epochs``, ...)."""
        why = None
        if self.ctrl_c or (self.stop_at_iteration is not None and state.iteration >= self.stop_at_iteration):
            why = INTERRUPTED
        elif self.max_iterations and state.iteration >= self.max_iterations:
            why = "max_batches"
        elif state.epoch >= self.epochs:
            why = "epochs"
        elif self.limit_s and train_seconds >= self.limit_s:
            why = "time_limit"
        return distributed.broadcast_object(why) if self.broadcast else why

    def after_evaluation(self, state: TrainState) -> str | None:
        """``"patience"`` when ``patience`` epochs passed since the best fitness, else None."""
        why = None
        if self.patience and state.best_epoch is not None and state.epoch - state.best_epoch >= self.patience:
            why = "patience"
        return distributed.broadcast_object(why) if self.distributed_run else why

    def message(self, reason: str | None, state: TrainState) -> str | None:
        """What the console says about a stop that is not the planned end (None when it is)."""
        if reason == "patience":
            return (f"stopped early at epoch {state.epoch}: no better fitness in the {self.patience} epochs "
                    f"since epoch {state.best_epoch} (--patience {self.patience}); best.pt is epoch "
                    f"{state.best_epoch}'s")
        if reason == "time_limit" and self.planned_iterations and state.iteration < self.planned_iterations:
            return (f"warning: --time-limit stopped the run at iteration {state.iteration} of the "
                    f"{self.planned_iterations} its schedule spans (--max-batches/--epochs): the learning "
                    "rate never reached the end of its schedule; give more time or fewer iterations")
        return None
