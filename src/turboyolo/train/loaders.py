"""The training and validation loaders of a run, from its resolved values
(:class:`~turboyolo.train.resolve.ResolvedRun`: sizes, batch, cache, workers, where augmentation runs and
what it is).

Scans both splits (the scan summary is printed), opens or builds the prepared caches at the folders
``turboyolo prepare`` writes (so a cache prepared ahead of time is the one training reads);
``--image-weights`` and ``--single-cls`` change what the loader draws.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from turboyolo.data.cache import default_cache_root, prepare_cache
from turboyolo.data.loader import DetectionLoader
from turboyolo.data.pipeline import build_loader
from turboyolo.data.scan import Sample, ScanResult, apply_unreviewed, scan_dataset, write_scan_report
from turboyolo.data.suspects import apply_suspects
from turboyolo.formats.issues import read_issues
from turboyolo.train.config import TrainConfig
from turboyolo.train.engines import darknet_loader
from turboyolo.train.resolve import ResolvedRun


@dataclass
class RunData:
    train: DetectionLoader
    val: DetectionLoader
    names: list[str]
    train_scan: ScanResult
    val_scan: ScanResult

    def write_report(self, run_dir: Path) -> Path:
        """``scan_report.txt``: both scans in full, then every image that failed to load since."""
        return write_scan_report(run_dir, [self.train_scan, self.val_scan],
                                 load_failures=[*self.train.replaced, *self.val.dropped])

    def close(self) -> None:
        """Both loaders' workers ended now (a start that failed; see DetectionLoader.close)."""
        self.train.close()
        self.val.close()

    @property
    def val_labels(self) -> dict[str, object]:
        """Validation image path -> its ground truth ``[m, 5]`` (for the val_batch pictures)."""
        return {str(sample.image): sample.labels for sample in self.val_scan.samples}


def scan_splits(config: TrainConfig) -> tuple[ScanResult, ScanResult]:
    """Both splits of ``config.data`` scanned (val with the training split's names), ``--unreviewed``
    applied to the training split (and ``--drop-suspect``): what a run's start scans, once."""
    train_scan = apply_unreviewed(scan_dataset(config.data, "train"), config.data_args.unreviewed)
    args = config.data_args
    if args.drop_suspect:  # what an audit flags (turboyolo audit): left out of training, never of evaluation
        apply_suspects(train_scan, read_issues(args.drop_suspect, "--drop-suspect"), args.suspect_score,
                       args.suspect_action)
    return train_scan, scan_dataset(config.data, "val", train_scan.names)


def build_loaders(resolved: ResolvedRun, mini_batch: int, rank: int = 0, world_size: int = 1,
                  log: Callable[[str], None] = print, report: Path | None = None,
                  scans: tuple[ScanResult, ScanResult] | None = None) -> RunData:
    """Scan (unless ``scans`` gives :func:`scan_splits`' result), (optionally) cache and wrap both splits
    as ``resolved`` says; ``mini_batch`` images per training batch.

    The scan summaries (and the first excluded files) are logged; ``report`` is where the full list goes.
    """
    config = resolved.config
    img_size, val_size = resolved.img_size, resolved.val_img_size
    train_scan, val_scan = scans or scan_splits(config)
    for scan in (train_scan, val_scan):
        log(scan.console_text(report=report))
    for scan in (train_scan, val_scan):
        scan.require_samples()  # names the split and its files; its own report outlives a failed start
    names = list(train_scan.names or val_scan.names)
    if config.data_args.single_cls:
        train_scan.samples = single_class(train_scan.samples)
        val_scan.samples = single_class(val_scan.samples)
        names = names if len(names) == 1 else ["item"]
        log(f"--single-cls: every box is class 0 ({names[0]!r})")
    weights = image_weights(train_scan.samples, len(names)) if config.data_args.image_weights else None
    multiscale = resolved.multiscale
    kind, workers, seed = config.data_args.cache, config.data_args.workers, config.runtime.seed
    cache = val_cache = None
    if config.data_args.augment_on == "device" and kind == "none":
        log("note: --augment-on device without --cache decodes every original each epoch; "
            "--cache ram (or disk) lets the loader only copy images")
    if kind != "none":
        side = multiscale[1] if multiscale else img_size
        # the folders `turboyolo prepare` fills, so a cache prepared ahead of time is the one read here
        cache = prepare_cache(train_scan.samples, side, _cache_root(config, "train", side), memory=kind,
                              log=log)
        val_cache = prepare_cache(val_scan.samples, val_size, _cache_root(config, "val", val_size),
                                  memory=kind, log=log)
    if config.augment.loader == "darknet":
        train = darknet_loader(config, resolved.spec, train_scan.list_entries(), mini_batch, rank,
                               world_size, log)
    else:
        train = build_loader(train_scan.samples, img_size=img_size, batch_size=mini_batch,
                             augment=resolved.augment, workers=workers, shuffle=True, seed=seed,
                             multiscale=multiscale, cache=cache, augment_on=config.data_args.augment_on,
                             rank=rank, world_size=world_size, image_weights=weights)
    # evaluation is sharded too (rank 0 merges the shards) and leaves out, never replaces, a broken image
    val = build_loader(val_scan.samples, img_size=val_size, batch_size=config.eval.eval_batch,
                       augment=None, workers=workers, shuffle=False, seed=seed, cache=val_cache, rank=rank,
                       world_size=world_size, drop_broken=True, rect=config.eval.rect)
    return RunData(train, val, names, train_scan, val_scan)


def _cache_root(config: TrainConfig, split: str, size: int):
    return default_cache_root(config.data, split, size) if config.data_args.cache == "disk" else None


def image_weights(samples: Sequence[Sample], num_classes: int) -> np.ndarray:
    """Per image, the sum over its boxes of 1 / (boxes of that class in the set), so images holding rare
    classes are drawn more often (Ultralytics' ``--image-weights`` from class counts). An image without
    boxes gets the smallest weight of a labelled one (it still teaches the background)."""
    classes = [s.labels[:, 0].astype(np.int64) for s in samples]
    counts = np.bincount(np.concatenate(classes) if classes else np.zeros(0, np.int64), minlength=num_classes)
    class_weight = np.where(counts > 0, 1.0 / np.maximum(counts, 1), 0.0)
    weights = np.array([class_weight[c].sum() for c in classes], np.float64)
    positive = weights[weights > 0]
    weights[weights == 0] = positive.min() if len(positive) else 1.0
    return weights


def single_class(samples: Sequence[Sample]) -> list[Sample]:
    """The samples with every box in class 0 (``--single-cls``)."""
    out = []
    for sample in samples:
        labels = sample.labels.copy()
        labels[:, 0] = 0
        out.append(replace(sample, labels=labels))
    return out
