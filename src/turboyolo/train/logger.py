"""Training output: a progress bar, TensorBoard, W&B (optional), ``results.csv``, ``per_class.csv``
and ``results.png``; figures and images written into the run directory are logged to TensorBoard and
W&B by :meth:`RunLogger.image_files`.

Everything here is fed already-synchronised Python numbers (the engine reads the device once per log
interval), so logging never adds a host-device sync.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from turboyolo.errors import TurboYoloError
from turboyolo.train.plots import (
    plot_first_batches,
    plot_labels,
    plot_val_batches,
    pyplot,
    save_evaluation_plots,
)

RESULT_COLUMNS = (
    "epoch",
    "iteration",
    "minutes",
    "lr",
    "box",
    "obj",
    "cls",
    "loss",
    "images_per_s",
    "data_wait",
    "precision",
    "recall",
    "f1",
    "mAP50",
    "mAP50-95",
    "gpu_util",  # mean NVML utilisation % over the epoch (CUDA runs with nvidia-ml-py)
    "gpu_mem_gb",
    "gpu_idle",  # share of the epoch's device time the GPU waited for the CPU (CUDA events)
)
# per_class.csv: one row per class and evaluation; P and R at --conf-thres, matched at --iou-thres.
PER_CLASS_COLUMNS = ("epoch", "iteration", "class", "images", "boxes", "P", "R", "AP50", "AP50-95")


class Progress:
    """One tqdm bar per epoch: loss terms, LR, images/s and the share of time spent waiting for data."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.bar = None

    def start(self, epoch: int, epochs: int, total: int, done: int = 0) -> None:
        if not self.enabled:
            return

        self.bar = tqdm(
            total=total,
            initial=done,
            desc=f"epoch {epoch}/{epochs}",
            unit="batch",
            file=sys.stdout,
            dynamic_ncols=True,
            leave=True,
            mininterval=0.5,
        )

    def update(self, state, values: dict) -> None:
        if self.bar is None:
            return
        self.bar.n = state.epoch_batches
        self.bar.set_postfix_str(
            f"box {values['box']:.3f} obj {values['obj']:.3f} cls {values['cls']:.3f} "
            f"lr {values['lr']:.2e} {values['images_per_s']:.1f} img/s wait {100 * values['data_wait']:.0f}%"
            + _gpu_postfix(values) + (f" ({values['note']})" if values.get("note") else ""),
            refresh=True,
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _gpu_postfix(values: dict) -> str:
    """`` GPU 97% idle 2% 41.2G`` for whichever of the GpuMonitor readings are present."""
    parts = []
    if "gpu_util" in values:
        parts.append(f"GPU {values['gpu_util']:.0f}%")
    if "gpu_idle" in values:
        parts.append(f"idle {100 * values['gpu_idle']:.0f}%")
    if "gpu_mem_gb" in values:
        parts.append(f"{values['gpu_mem_gb']:.1f}G")
    return (" " + " ".join(parts)) if parts else ""


class RunLogger:
    """results.csv, TensorBoard and (with ``wandb=True``) Weights & Biases for one run directory."""

    def __init__(self, run_dir: Path, config: dict, tensorboard: bool = True, wandb: bool = False):
        self.run_dir = Path(run_dir)
        self.csv_path = self.run_dir / "results.csv"
        self.per_class_path = self.run_dir / "per_class.csv"
        self.tb = None
        self.wandb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))
            except ImportError:
                print("tensorboard is not installed; `pip install tensorboard` for TensorBoard logs")
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError as err:

                raise TurboYoloError(
                    "--wandb needs the wandb package: pip install 'turboyolo[wandb]' "
                    "(set WANDB_MODE=offline to log without an account)"
                ) from err
            self.wandb = wandb_module.init(
                project="turboyolo", name=self.run_dir.name, config=config, dir=str(self.run_dir)
            )

    def scalars(self, values: dict, step: int, prefix: str = "train") -> None:
        if self.tb is not None:
            for key, value in values.items():
                self.tb.add_scalar(f"{prefix}/{key}", value, step)
        if self.wandb is not None:
            self.wandb.log({f"{prefix}/{k}": v for k, v in values.items()}, step=step)

    def image_files(
        self, files: Mapping[str, Path], step: int | None, prefix: str = "val"
    ) -> None:
        """Log images already written to the run directory (PNG/JPEG) as ``<prefix>/<key>``.

        ``files``: e.g. ``{"PR_curve": run_dir / "PR_curve.png"}``. TensorBoard gets the pixels, W&B a
        ``wandb.Image`` of the file (its offline run keeps a copy under ``files/media/images``).
        ``step`` None: W&B adds them to its current step (TensorBoard: step 0), for pictures made
        between two logged iterations.
        """
        if not files:
            return
        if self.tb is not None:

            for key, path in files.items():
                with Image.open(path) as image:
                    pixels = np.asarray(image.convert("RGB"))
                self.tb.add_image(f"{prefix}/{key}", pixels, step or 0, dataformats="HWC")
        if self.wandb is not None:
            import wandb as wandb_module

            images = {f"{prefix}/{key}": wandb_module.Image(str(path)) for key, path in files.items()}
            if step is None:
                self.wandb.log(images, commit=False)
            else:
                self.wandb.log(images, step=step)

    def label_statistics(self, labels: Sequence, names: Sequence[str], step: int | None = 0) -> Path:
        """``labels.jpg`` of the training labels (per image ``[N, 5]`` cls cx cy w h), logged as train/labels
        (at ``step``; None: with the next step's values).

        Call once in a run (not on resume: the file is already there).
        """
        path = plot_labels(labels, names, self.run_dir / "labels.jpg")
        self.image_files({"labels": path}, step, prefix="train")
        return path

    def first_batches(self, batches: Iterable, names: Sequence[str], labels: Sequence | None = None
                      ) -> Iterator:
        """Wrap the first epoch's batches: ``train_batch0..2.jpg`` as the network sees them, logged too;
        each drawn after its step (:func:`turboyolo.train.plots.plot_first_batches`: close the returned
        generator when the loop stops early). ``labels`` (a fresh run's training labels): ``labels.jpg``
        too, after the first step, so that step does not wait for it either."""
        after = ((lambda: self.label_statistics(labels, names, step=None)) if labels is not None else None)
        yield from plot_first_batches(
            batches, self.run_dir, names,
            on_written=lambda path: self.image_files({path.stem: path}, None, prefix="train"),
            after_first=after,
        )

    def evaluation(
        self,
        result,
        names: Sequence[str],
        *,
        epoch: int,
        iteration: int,
        shown: Sequence[tuple] = (),
        labels: Mapping[str, object] | None = None,
    ) -> dict[str, Path]:
        """Everything one evaluation leaves: val/ scalars, a per_class.csv block, the curve and confusion
        figures and the val_batch mosaics (written into the run directory and logged as val/<name>).

        Args:
            result: the :class:`turboyolo.train.metrics.EvalResult` (from ``evaluate_detections``).
            shown: ``(image path, detections [n, 6])`` pairs, ``evaluate``'s kept predictions.
            labels: image path (str) -> ``[m, 5]`` ground truth of the validation images.
        Returns the files written, by name.
        """
        self.scalars(result.as_dict(), iteration, prefix="val")
        if result.timing is not None:  # inference / decode+NMS per image, metrics
            self.scalars(result.timing.as_dict(), iteration, prefix="val_time")
        self.per_class(result, names, epoch, iteration)
        written = save_evaluation_plots(result, names, self.run_dir)
        if shown:
            batches = plot_val_batches(shown, labels or {}, self.run_dir, names, result.conf_thres)
            written.update({path.stem: path for path in batches})
        self.image_files(written, iteration, prefix="val")
        return written

    def epoch_row(self, row: dict) -> None:
        _append_rows(self.csv_path, RESULT_COLUMNS, [row])

    def per_class(self, result, names: Sequence[str], epoch: int, iteration: int) -> None:
        """Append the per-class rows of ``result`` (an ``EvalResult``) to ``per_class.csv``."""
        rows = [{"epoch": epoch, "iteration": iteration, **row} for row in result.per_class_rows(names)]
        _append_rows(self.per_class_path, PER_CLASS_COLUMNS, rows)

    def close(self) -> None:
        if self.csv_path.exists():
            plot_results(self.csv_path)  # once, at the end: matplotlib costs seconds on a small CPU
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _append_rows(path: Path, columns: Sequence[str], rows: list[dict]) -> None:
    """Append ``rows`` to a CSV file, writing the header when the file is new; floats as ``%.6g``."""
    new = not path.exists()
    with open(path, "a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        if new:
            writer.writeheader()
        for row in rows:
            writer.writerow(
                {k: (f"{row[k]:.6g}" if isinstance(row.get(k), float) else row.get(k, "")) for k in columns}
            )


def read_results(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def plot_results(csv_path: Path) -> Path | None:
    """``results.png`` beside ``results.csv``: losses, LR, throughput and mAP against epochs."""
    rows = read_results(csv_path)
    if not rows:
        return None
    plt = pyplot()
    def series(key):
        xs, ys = [], []
        for row in rows:
            if row.get(key) not in (None, ""):
                xs.append(float(row["epoch"]))
                ys.append(float(row[key]))
        return xs, ys

    panels = [
        ("loss", ("box", "obj", "cls", "loss")),
        ("lr", ("lr",)),
        ("images/s", ("images_per_s",)),
        ("P / R / F1", ("precision", "recall", "f1")),
        ("mAP", ("mAP50", "mAP50-95")),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for ax, (title, keys) in zip(axes, panels, strict=True):
        for key in keys:
            xs, ys = series(key)
            if xs:
                ax.plot(xs, ys, marker=".", label=key)
        ax.set_title(title)
        ax.set_xlabel("epoch")
        if ax.lines:
            ax.legend(fontsize=7)
    fig.tight_layout()
    out = csv_path.with_suffix(".png")
    fig.savefig(out, dpi=80)
    plt.close(fig)
    return out


class SilentLogger:
    """The logger of ranks other than 0 under torchrun: they train, rank 0 writes."""

    def scalars(self, *args, **kwargs) -> None:
        pass

    def label_statistics(self, *args, **kwargs) -> None:
        pass

    def first_batches(self, batches, names, labels=None):
        return batches

    def evaluation(self, *args, **kwargs) -> dict:
        return {}

    def epoch_row(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass
