"""The audit's folds: the images cut into parts, each part's model fine-tuned on the others, and what an
interrupted audit keeps.

A fold's folder (``<run>/folds/fold<N>``) holds its image lists (``train.txt``, ``held_out.txt``), its
training run (``train/``, with ``weights/last.pt``) and, once it has predicted its part,
``predictions.json`` (its held-out images' predictions, the checkpoint and settings they came from). The
same command run again into the same run directory (``--exist-ok``) keeps what a fold finished, after
checking it is what this call would make:

- predictions made by the fold's current checkpoint at this call's ``--conf-thres`` and ``--img-size``, for
  the same held-out images, are taken as they are;
- a checkpoint trained on the same images with the same settings (every training option the audit sets,
  ``--config``'s included, the cfg and the weights) continues where it stopped (the trainer's ``--resume``:
  a finished one trains no further), then predicts;
- anything else (other images: another data set, ``--folds`` or ``--seed``; other settings) is trained
  anew, with a line saying why.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from turboyolo.errors import TurboYoloError
from turboyolo.formats.datasets import write_darknet_data
from turboyolo.infer.predict import Prediction
from turboyolo.model.loading import read_checkpoint
from turboyolo.train.config import TrainConfig, read_config
from turboyolo.train.fit import fit

DEFAULT_EPOCHS = 8  # per fold, over the other folds' images
DEFAULT_BATCH = 8
PREDICTIONS = "predictions.json"  # a fold's kept predictions
# training options the audit passes that do not change what a fold's model learns
NOT_COMPARED = ("device", "workers", "project", "name", "exist_ok", "verbose")


def fold_parts(keys: list[str], folds: int, seed: int) -> list[list[str]]:
    """The images (real paths) cut into ``folds`` parts of near-equal size, shuffled by ``seed``."""
    keys = sorted(keys)
    order = np.random.default_rng(seed).permutation(len(keys))
    return [[keys[i] for i in order[k::folds]] for k in range(folds)]


@dataclass
class Fold:
    """Fold ``index`` (from 0) of the audit in ``run_dir``: the images it trains on and those it
    predicts (by real path), and ``listed``: each image's path as its data set lists it, which the fold's
    lists name so that the trainer finds its label file beside it (through a linked folder too)."""

    run_dir: Path
    index: int
    train: list[str]
    held_out: list[str]
    listed: dict[str, str]

    def as_listed(self, keys: list[str]) -> list[str]:
        return sorted(self.listed[key] for key in keys)

    @property
    def folder(self) -> Path:
        return self.run_dir / "folds" / f"fold{self.index + 1}"

    @property
    def checkpoint(self) -> Path:
        return self.folder / "train" / "weights" / "last.pt"


def train_config(fold: Fold, audit: Any, cfg: str | None, weights: str | None) -> TrainConfig:
    """The training of ``fold`` as the audit's options (``audit``: its AuditArgs) set it."""
    base = read_config(audit.config) if audit.config else {}
    options = {"epochs": audit.epochs or base.get("epochs") or DEFAULT_EPOCHS,
               "batch": audit.batch or base.get("batch") or DEFAULT_BATCH, "seed": audit.seed,
               "device": audit.device, "evaluation_interval": 0, "checkpoint_interval": 0,
               "project": str(fold.folder), "name": "train", "exist_ok": True}
    if not audit.batch and "batch" in base:
        options.pop("batch")  # the recipe's batch with its subdivisions
    else:
        options["subdivisions"] = 1
    if audit.img_size:
        options["img_size"] = audit.img_size
    if audit.workers is not None:
        options["workers"] = audit.workers
    return TrainConfig.build(cfg or "", str(fold.folder / "fold.data"), weights, base=base, **options)


def train_fold(fold: Fold, config: TrainConfig, why_not: str | None, names_file: Path, audit: Any,
               log: Callable[[str], None]) -> str:
    """Fine-tune ``fold``'s model as ``config`` says, or continue its earlier training when that is the
    same (``why_not`` None: :func:`earlier_training`); returns its checkpoint (the EMA weights of its last
    iteration)."""
    name = f"fold {fold.index + 1}"
    if why_not is None:
        log(f"{name}: continuing its earlier training ({fold.checkpoint}: same images and settings; a "
            "finished one trains no further), then predicting the held-out images")
        options = {"device": audit.device}
        if audit.workers is not None:
            options["workers"] = audit.workers
        fit(TrainConfig.build(resume=str(fold.checkpoint), **options), quiet=not audit.verbose)
    else:
        if why_not:
            log(f"{name}: its earlier training is not reused ({why_not}): trained anew")
        shutil.rmtree(fold.folder / "train", ignore_errors=True)  # never continued into other images
        fold.folder.mkdir(parents=True, exist_ok=True)
        _write_list(fold.folder / "train.txt", fold.as_listed(fold.train))
        _write_list(fold.folder / "held_out.txt", fold.as_listed(fold.held_out))
        write_darknet_data(fold.folder / "fold.data", len(names_file.read_text().splitlines()),
                           fold.folder / "train.txt", fold.folder / "held_out.txt", names_file)
        (fold.folder / PREDICTIONS).unlink(missing_ok=True)
        fit(config, quiet=not audit.verbose)
    (fold.checkpoint.parent / "last.weights").unlink(missing_ok=True)  # last.pt holds the same
    return str(fold.checkpoint)


def earlier_training(fold: Fold, config: TrainConfig) -> str | None:
    """None when ``fold``'s checkpoint can be continued into this call's fold (same images, same
    settings); otherwise why not ("" when there is no earlier training at all)."""
    if not fold.checkpoint.is_file():
        return "" if not fold.folder.exists() else "it left no checkpoint"
    for file, mine in (("train.txt", fold.train), ("held_out.txt", fold.held_out)):
        if _read_list(fold.folder / file) != fold.as_listed(mine):
            return f"its {file} lists other images: another data set, --folds or --seed"
    try:
        saved = TrainConfig.from_dict(read_checkpoint(str(fold.checkpoint))["config"])
    except (TurboYoloError, OSError, KeyError, TypeError, ValueError) as err:
        return f"its checkpoint cannot be read: {err}"
    changed = [f"{key} {getattr(saved, key)} -> {getattr(config, key)}" for key in ("cfg", "weights")
               if getattr(saved, key) != getattr(config, key)]
    changed += [f"{name} {saved.get(name)} -> {config.get(name)}" for name in config.given
                if name not in NOT_COMPARED and saved.get(name) != config.get(name)]
    return f"other settings: {', '.join(changed)}" if changed else None


def _write_list(path: Path, keys: list[str]) -> None:
    path.write_text("".join(f"{key}\n" for key in keys), encoding="utf-8", errors="surrogateescape")


def _read_list(path: Path) -> list[str]:
    try:
        return sorted(path.read_text(encoding="utf-8", errors="surrogateescape").splitlines())
    except OSError:
        return []


# ----------------------------------------------------------------------------------- kept predictions
def _stamp(fold: Fold, audit: Any) -> dict:
    """What a fold's predictions depend on besides its images: the checkpoint (size and time) and the
    prediction settings."""
    info = os.stat(fold.checkpoint)
    return {"checkpoint": str(fold.checkpoint), "checkpoint_bytes": info.st_size,
            "checkpoint_mtime_ns": info.st_mtime_ns, "conf_thres": audit.conf_thres,
            "img_size": audit.img_size}


def save_predictions(fold: Fold, audit: Any, found: dict[str, Prediction],
                     failed: list[tuple[str, str]]) -> None:
    """Keep ``fold``'s predictions (written whole, then renamed into place)."""
    images = {key: {"size": [p.width, p.height],
                    "rows": np.concatenate([np.asarray(p.boxes, np.float64).reshape(-1, 4),
                                            np.asarray(p.scores, np.float64).reshape(-1, 1),
                                            np.asarray(p.classes, np.float64).reshape(-1, 1)], 1).tolist()}
              for key, p in found.items()}
    content = {**_stamp(fold, audit), "held_out": sorted(fold.held_out), "images": images,
               "failed": [list(item) for item in failed]}
    partial = fold.folder / (PREDICTIONS + ".partial")
    partial.write_text(json.dumps(content), encoding="utf-8", errors="surrogateescape")
    os.replace(partial, fold.folder / PREDICTIONS)


def kept_predictions(fold: Fold, audit: Any) -> tuple[dict[str, Prediction], list[tuple[str, str]]] | None:
    """``fold``'s kept predictions when they were made by its checkpoint as it is now, for the same
    held-out images at the same settings; else None."""
    path = fold.folder / PREDICTIONS
    if not path.is_file() or not fold.checkpoint.is_file():
        return None
    try:
        content = json.loads(path.read_text(encoding="utf-8", errors="surrogateescape"))
        same = all(content.get(key) == value for key, value in _stamp(fold, audit).items())
        if not same or content.get("held_out") != sorted(fold.held_out):
            return None
        found = {}
        for key, item in content["images"].items():
            rows = np.asarray(item["rows"], np.float64).reshape(-1, 6)
            found[key] = Prediction(rows[:, :4], rows[:, 4], rows[:, 5].astype(int), *item["size"])
        return found, [(str(a), str(b)) for a, b in content["failed"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # damaged: predicted again
