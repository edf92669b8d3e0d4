"""The CPU step's defaults: huge pages for PyTorch's large tensors, OpenMP threads that sleep when they wait,
channels_last on the CPU only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from turboyolo.devices import channels_last_for

PROBE = ("import turboyolo, torch, resource, os; r = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
         "for _ in range(5): x = torch.ones(8_000_000)\n"
         "print(os.environ['THP_MEM_ALLOC_ENABLE'], resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r)")


def _probe(**env) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**environ, **env}, capture_output=True,
                         text=True, check=True, timeout=120).stdout.split()
    return out[0], int(out[1])


def test_import_turboyolo_turns_on_huge_pages_unless_the_user_chose():
    value, faults_on = _probe()
    assert value == "1"
    value, faults_off = _probe(THP_MEM_ALLOC_ENABLE="0")
    assert value == "0"  # the user's choice is kept
    # five fresh 32 MB tensors: 4 KB pages fault ~8,000 times each, huge pages a few dozen times
    setting = "/sys/kernel/mm/transparent_hugepage/enabled"
    if os.path.exists(setting) and "[never]" not in open(setting).read():
        assert faults_on * 4 < faults_off, (faults_on, faults_off)


@pytest.mark.parametrize("device,requested,expected", [
    ("cpu", None, True), ("cuda", None, False), ("cpu", False, False), ("cuda", True, True)])
def test_channels_last_default_is_per_device(device, requested, expected):
    assert channels_last_for(torch.device(device), requested) is expected


def test_train_flag_is_unset_by_default():
    from turboyolo.train.config import RuntimeArgs

    assert RuntimeArgs().channels_last is None


def test_import_turboyolo_makes_openmp_threads_wait_passively_unless_the_user_chose():
    """Set before torch loads its OpenMP library (the console script imports the package first), so the
    loaded torch runs under it; a value in the environment is kept."""
    probe = "import sys, os, turboyolo; print('torch' in sys.modules, os.environ['OMP_WAIT_POLICY'])"
    environ = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for env, expected in (({}, "PASSIVE"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE")):
        out = subprocess.run([sys.executable, "-c", probe], env={**environ, **env}, capture_output=True,
                             text=True, check=True, timeout=120).stdout.split()
        assert out == ["False", expected]
