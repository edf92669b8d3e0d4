"""Faults during training, as a user meets them: Ctrl-C (also while a checkpoint is written), kill -9,
a full disk, an output folder that cannot be written, a start that fails, a checkpoint that does not
fit. Each checks the exit code, that no traceback reaches the user, and what is left on disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from synth import make_dataset, micro_cfg

# the test of `make test` that covers the promise of a `full` one here (tests/conftest.py: the tiers)
SIGKILL_FORK = "tests/train/test_train.py::test_sigkill_during_checkpoint_write_resumes_from_previous[fork]"

SRC = Path(__file__).resolve().parents[2] / "src"


def _train_args(cfg: Path, data: Path, project: Path, *extra: str) -> list[str]:
    return ["train", "--cfg", str(cfg), "--data", str(data), "--workers", "1", "--project", str(project),
            "--evaluation-interval", "0", "--checkpoint-interval", "0", *extra]


def _start(args: list[str], **env) -> subprocess.Popen:
    """``python -m turboyolo args`` in its own process group (a terminal's Ctrl-C reaches the group)."""
    environment = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", **env}
    return subprocess.Popen([sys.executable, "-m", "turboyolo", *args], env=environment,
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace")


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _final_state(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {**{f"model.{k}": v for k, v in state["model"].items()},
            **{f"ema.{k}": v for k, v in state["ema"].items()}}


def _run(args: list[str], timeout: float = 300, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([sys.executable, "-m", "turboyolo", *args], env=environment, capture_output=True,
                          text=True, errors="replace", timeout=timeout)


@pytest.mark.slow
def test_ctrl_c_mid_epoch_saves_the_exact_position_and_resume_continues_it(tmp_path):
    data = make_dataset(tmp_path / "data", 8, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2, learning_rate=0.01)  # 4 iterations per epoch
    weights = tmp_path / "a" / "exp" / "weights"
    # the straight run below is planned shorter: everything fitted to a run's length is pinned (the cfg's
    # own rate, EMA, no mosaic) so that both runs train the same way
    pinned = ("--schedule", "darknet", "--ema-decay", "0.99", "--ema-ramp", "20", "--close-mosaic", "0")
    proc = _start(_train_args(cfg, data, tmp_path / "a", "--epochs", "200", *pinned))
    _wait_for(weights / "last.pt", proc)  # epoch 1 is done: Ctrl-C lands somewhere in a later one
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "Traceback" not in out + err
    assert "interrupted: stopped at iteration" in err and f"--resume {weights / 'last.pt'}" in err
    saved = torch.load(weights / "last.pt", weights_only=True)
    stopped_at = saved["iteration"]
    assert stopped_at >= 4 and saved["epoch"] * 4 + saved["epoch_batches"] == stopped_at  # where it was
    # resuming continues exactly: the same weights as a run that was never interrupted
    target = str(stopped_at + 3)
    resumed = _run(["train", "--resume", str(weights / "last.pt"), "--max-batches", target])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    straight = _run(_train_args(cfg, data, tmp_path / "b", "--epochs", "200", "--max-batches", target,
                                *pinned))
    assert straight.returncode == 0, straight.stderr[-2000:]
    a, b = _final_state(weights / "last.pt"), _final_state(tmp_path / "b" / "exp" / "weights" / "last.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow  # make test: the thread writer here, the fork writer in test_train.py's sigkill test
@pytest.mark.parametrize("writer", [pytest.param("fork", marks=pytest.mark.full(covered_by=SIGKILL_FORK)),
                                    "thread"])
def test_ctrl_c_while_a_checkpoint_is_written_keeps_both_whole(tmp_path, writer):
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    proc = _start(_train_args(cfg, data, tmp_path / "runs", "--epochs", "50"),
                  TURBOYOLO_CHECKPOINT_FAULT="sigint:2", TURBOYOLO_CHECKPOINT_WRITER=writer)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 130 and "Traceback" not in out + err, out[-2000:] + err[-2000:]
    weights = tmp_path / "runs" / "exp" / "weights"
    last = torch.load(weights / "last.pt", weights_only=True)  # whole: the write in progress finished
    assert last["iteration"] >= 4  # the 2nd write (epoch 2) finished, then the stop wrote its own
    assert not [p for p in weights.iterdir() if ".tmp" in p.name]
    resumed = _run(["train", "--resume", str(weights / "last.pt"), "--epochs", "3"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.full(covered_by=SIGKILL_FORK)  # killed at the worst moment, in the write
def test_kill_9_at_a_random_moment_leaves_a_checkpoint_that_resumes(tmp_path):
    data = make_dataset(tmp_path / "data", 8, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    weights = tmp_path / "runs" / "exp" / "weights"
    proc = _start(_train_args(cfg, data, tmp_path / "runs", "--epochs", "200"))
    _wait_for(weights / "last.pt", proc)
    time.sleep(float(torch.randint(1, 20, ()).item()) / 10)  # somewhere in the following epochs
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    saved = torch.load(weights / "last.pt", weights_only=True)  # never a partial file under its name
    resumed = _run(["train", "--resume", str(weights / "last.pt"), "--epochs", str(saved["epoch"] + 1)])
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr[-2000:]
    assert torch.load(weights / "last.pt", weights_only=True)["epoch"] == saved["epoch"] + 1


@pytest.mark.parametrize("writer", ["fork", pytest.param("thread", marks=pytest.mark.full(
    covered_by="tests/faults/test_training_faults.py::test_a_full_disk_during_a_checkpoint_write_stops_the_run_and_keeps_the_previous_one[fork]"))])
def test_a_full_disk_during_a_checkpoint_write_stops_the_run_and_keeps_the_previous_one(tmp_path, writer):
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    done = _run(_train_args(cfg, data, tmp_path / "runs", "--epochs", "5"),
                TURBOYOLO_CHECKPOINT_FAULT="enospc:2", TURBOYOLO_CHECKPOINT_WRITER=writer)
    weights = tmp_path / "runs" / "exp" / "weights"
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "could not write checkpoint" in done.stderr and "No space left on device" in done.stderr
    assert f"{weights / 'last.pt'} still holds the last good state" in done.stderr
    last = torch.load(weights / "last.pt", weights_only=True)
    assert last["epoch"] == 1  # the previous checkpoint, whole
    assert not [p for p in weights.iterdir() if ".tmp" in p.name]


def test_a_disk_without_room_refuses_the_write_before_it_starts(tmp_path, monkeypatch, capsys):
    import shutil

    from turboyolo.cli import main

    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real(path)._replace(free=1 << 20))
    code = main(_train_args(cfg, data, tmp_path / "runs", "--epochs", "2", "--workers", "0"))
    err = capsys.readouterr().err
    assert code == 1 and "the disk has 1 MB free and the checkpoint needs" in err
    assert "no checkpoint of this run was written yet" in err


def test_an_output_folder_that_cannot_be_written_is_named(tmp_path, capsys):
    from turboyolo.cli import main

    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = main(_train_args(cfg, data, blocker / "runs", "--epochs", "1"))
    err = capsys.readouterr().err
    assert code == 1 and "cannot create the run directory" in err and "--project" in err
    assert "Traceback" not in err


@pytest.mark.full(covered_by="tests/faults/test_read_only.py::test_every_writer_names_a_read_only_folder")
def test_read_only_output_folder(tmp_path, read_only):
    """A read-only --project (a read-only mount: refused to root too; see faults/conftest.py)."""
    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    project = tmp_path / "ro"
    project.mkdir()
    run = read_only(project, *_train_args(cfg, data, project, "--epochs", "1"))
    run.assert_clean(1)
    assert "cannot create the run directory" in run.output and "--project" in run.output, run.output
    assert ("Read-only file system" in run.output or "Permission denied" in run.output), run.output


def test_a_failed_start_leaves_no_run_directory(tmp_path, capsys):
    from turboyolo.cli import main

    data = make_dataset(tmp_path / "data", 4, 2)
    cfg = micro_cfg(tmp_path / "micro.cfg", batch=2)
    project = tmp_path / "runs"
    assert main(_train_args(cfg, data, project, "--weights", str(tmp_path / "missing.weights"))) == 1
    assert main(_train_args(cfg, tmp_path / "no-such.data", project)) == 1
    assert main(_train_args(cfg, data, project, "--batch", "3", "--subdivisions", "2")) == 1
    err = capsys.readouterr().err
    assert "missing.weights" in err and "no-such.data" in err and "batch=3" in err
    assert not project.exists() or not list(project.iterdir())  # no exp, exp2, exp3 left behind


def test_test_refuses_a_checkpoint_for_another_class_count(tmp_path, capsys):
    from turboyolo.cli import main
    from turboyolo.formats.darknet_cfg import format_cfg, parse_cfg
    from turboyolo.model.darknet import Darknet

    data = make_dataset(tmp_path / "data", 2, 2, num_classes=2)
    eighty = micro_cfg(tmp_path / "eighty.cfg", num_classes=80)
    two = micro_cfg(tmp_path / "two.cfg", num_classes=2)
    checkpoint = tmp_path / "eighty.pt"
    spec = parse_cfg(eighty)
    torch.save({"model": Darknet(spec).state_dict(), "cfg_text": format_cfg(spec)}, checkpoint)
    code = main(["test", "--weights", str(checkpoint), "--cfg", str(two), "--data", str(data),
                 "--workers", "0"])
    err = capsys.readouterr().err
    assert code == 1 and "eighty.pt" in err and "do not match the cfg" in err and "Traceback" not in err
