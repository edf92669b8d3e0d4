"""DDP on CPU with gloo: 2 processes under torchrun train like one process with the same global batch."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from turboyolo.formats.darknet_cfg import write_cfg
from turboyolo.model.zoo import make_spec

pytestmark = [pytest.mark.slow, pytest.mark.ddp]

# DDP reduces gradients in another order than one process sums them: equal up to float rounding.
TOLERANCE = 1e-4


def _no_bn_tiny_cfg(path: Path) -> Path:
    """yolov3-tiny without batch norm: per-rank BN statistics would differ from one process's."""
    from dataclasses import replace

    from turboyolo.formats.darknet_cfg import ConvSpec

    spec = make_spec(
        "yolov3-tiny", num_classes=2, width=64, height=64, batch=8, subdivisions=2, learning_rate=0.01
    )
    layers = tuple(
        replace(layer, batch_normalize=False) if isinstance(layer, ConvSpec) else layer
        for layer in spec.layers
    )
    spec = replace(spec, layers=layers, net=replace(spec.net, burn_in=0, policy="constant"))
    return write_cfg(spec, path)


def _dataset(root: Path, count: int = 16) -> Path:
    rng = np.random.default_rng(0)
    for split, n in (("train", count), ("val", 4)):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for i in range(n):
            image = np.full((80, 96, 3), 90, np.uint8)
            rows = []
            for _ in range(2):
                w, h = rng.integers(12, 30, 2)
                x, y = rng.integers(0, 96 - w), rng.integers(0, 80 - h)
                cls = int(rng.integers(0, 2))
                image[y : y + h, x : x + w] = (220, 40, 40) if cls == 0 else (40, 40, 220)
                rows.append(f"{cls} {(x + w / 2) / 96:.6f} {(y + h / 2) / 80:.6f} {w / 96:.6f} {h / 80:.6f}")
            Image.fromarray(image).save(root / "images" / split / f"{i}.png")
            (root / "labels" / split / f"{i}.txt").write_text("\n".join(rows) + "\n")
    (root / "data.yaml").write_text(
        f"path: {root}\ntrain: images/train\nval: images/val\nnames: [red, blue]\n"
    )
    return root / "data.yaml"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _own_tmp(tmp_path: Path) -> str:
    """A temporary folder inside the test's own: torchrun leaves a ``torchelastic_*`` folder in TMPDIR per
    launch, removed with the test's folder instead of piling up in /tmp."""
    folder = tmp_path / "tmp"
    folder.mkdir(exist_ok=True)
    return str(folder)


def _torchrun(nproc: int, *args: str) -> list[str]:
    """The command line of ``turboyolo ARGS`` in ``nproc`` processes on this machine."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(nproc),
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        "-m",
        "turboyolo",
        *args,
    ]


def _train(tmp_path, name, *extra, nproc: int = 1) -> Path:
    args = [
        "train",
        "--device",
        "cpu",
        "--n-cpu",
        "0",
        "--seed",
        "3",
        "--no-ema",
        "--evaluation-interval",
        "0",
        "--project",
        str(tmp_path / "runs"),
        "--name",
        name,
        *map(str, extra),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TURBOYOLO_OFFLINE": "1", "TMPDIR": _own_tmp(tmp_path)}
    cmd = _torchrun(nproc, *args) if nproc > 1 else [sys.executable, "-m", "turboyolo", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return tmp_path / "runs" / name


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return torch.load(run / "weights" / "last.pt", weights_only=True)["model"]


def _max_difference(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


def test_two_processes_equal_one_and_resume_in_one(tmp_path):
    cfg = _no_bn_tiny_cfg(tmp_path / "tiny.cfg")
    data = _dataset(tmp_path / "data")
    common = ("--cfg", cfg, "--data", data, "--schedule", "darknet")  # the cfg's rate, whatever the length
    ddp = _train(tmp_path, "ddp", *common, "--epochs", 1, nproc=2)
    one_epoch = _train(tmp_path, "single1", *common, "--epochs", 1)
    two_epochs = _train(tmp_path, "single2", *common, "--epochs", 2)
    saved = torch.load(ddp / "weights" / "last.pt", weights_only=True)
    assert saved["world_size"] == 2 and saved["iteration"] == 2  # 16 images / batch 8
    assert _max_difference(_weights(ddp), _weights(one_epoch)) < TOLERANCE
    # the DDP run's checkpoint continues in a single process as the straight run did
    # (--project/--name given: the resumed run is written there, the DDP run stays as it was)
    resumed = _train(tmp_path, "resumed", "--resume", ddp / "weights" / "last.pt", "--epochs", 2)
    assert torch.load(resumed / "weights" / "last.pt", weights_only=True)["iteration"] == 4
    assert torch.load(ddp / "weights" / "last.pt", weights_only=True)["iteration"] == 2
    assert _max_difference(_weights(resumed), _weights(two_epochs)) < TOLERANCE
    # and training moved the weights: the comparisons are not between untouched copies
    assert _max_difference(_weights(one_epoch), _weights(two_epochs)) > 10 * TOLERANCE


def test_subdivisions_must_divide_among_processes(tmp_path):
    cfg = _no_bn_tiny_cfg(tmp_path / "tiny.cfg")
    data = _dataset(tmp_path / "data", count=4)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": _own_tmp(tmp_path)}
    cmd = _torchrun(
        2,
        "train",
        "--cfg",
        str(cfg),
        "--data",
        str(data),
        "--device",
        "cpu",
        "--subdivisions",
        "1",
        "--epochs",
        "1",
        "--n-cpu",
        "0",
        "--project",
        str(tmp_path / "runs"),
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0
    assert "must be a multiple of the 2 processes" in proc.stderr
