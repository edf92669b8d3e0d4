"""Fixtures of the training tests."""

from __future__ import annotations

import pytest

from synth import make_dataset


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a shared 2-core machine two spinning threads run several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def synth(tmp_path):
    return make_dataset(tmp_path / "data", num_train=8, num_val=4)
