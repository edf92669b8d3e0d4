"""Fixtures of the audit tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from turboyolo.audit import folds as folds_module
from turboyolo.audit import job as job_module
from turboyolo.infer.predict import Prediction


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every test here on one intra-op thread (tests/conftest.py ``one_thread``)."""


class FakeTrainer:
    """Stands in for the trainer: a "checkpoint" holding the fold's config, and a record of each call;
    ``cut_at`` (a fold folder name) raises KeyboardInterrupt there after its checkpoint is written, as a
    session cut in the middle of that fold's training would."""

    def __init__(self):
        self.calls: list[tuple[str, str]] = []
        self.cut_at: str | None = None

    def __call__(self, config, quiet=True):
        if config.resume:
            self.calls.append(("resume", Path(config.resume).parents[2].name))
            return None
        folder = Path(config.output.project)
        self.calls.append(("new", folder.name))
        checkpoint = folder / config.output.name / "weights" / "last.pt"
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"config": config.as_dict()}, checkpoint)
        if folder.name == self.cut_at:
            raise KeyboardInterrupt("session cut")
        return None


class FakePredictor:
    """Stands in for the fold's model: sees every label of the image (confidence 0.9); ``by`` records
    which checkpoint predicted each image."""

    def __init__(self):
        self.predicted: list[str] = []
        self.by: dict[str, str] = {}

    def __call__(self, weights, cfg, samples, args, log=print):
        found = {}
        for sample in samples:
            height, width = sample.hw
            labels = np.asarray(sample.labels, np.float64).reshape(-1, 5)
            cx, cy, w, h = (labels[:, k] for k in range(1, 5))
            boxes = np.stack([(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width,
                              (cy + h / 2) * height], 1)
            key = str(Path(sample.image).resolve())
            found[key] = Prediction(boxes, np.full(len(boxes), 0.9), labels[:, 0].astype(int), width, height)
            self.predicted.append(key)
            self.by[key] = str(weights)
        return found, []


@pytest.fixture
def fakes(monkeypatch):
    """The folds' trainer and predictor faked (:class:`FakeTrainer`, :class:`FakePredictor`): the audit's
    own plumbing, fast."""
    trainer, predictor = FakeTrainer(), FakePredictor()
    monkeypatch.setattr(folds_module, "fit", trainer)
    monkeypatch.setattr(job_module, "predict_images", predictor)
    return trainer, predictor
