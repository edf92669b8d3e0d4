"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

from synth import make_dataset


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    """Every test here on one intra-op thread (tests/conftest.py ``one_thread``)."""


@pytest.fixture
def synth(tmp_path):
    return make_dataset(tmp_path / "data", num_train=8, num_val=4)
