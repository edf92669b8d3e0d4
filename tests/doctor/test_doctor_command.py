"""``turboyolo doctor`` end to end on a tiny data set and model (data-only mode and a measured CPU step)."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import torch

from turboyolo.cli import main
from turboyolo.devices import usable_cpus
from turboyolo.doctor.measure import DoctorOptions, resolved_run, step_seconds, train_state
from turboyolo.formats.darknet_cfg import parse_cfg, write_cfg
from turboyolo.model.zoo import make_spec


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("TURBOYOLO_CACHE", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    for i in range(6):
        image = rng.integers(0, 255, (80 + 8 * i, 120, 3), np.uint8)
        cv2.imwrite(str(tmp_path / "images" / f"{i}.jpg"), image)
        (tmp_path / "labels" / f"{i}.txt").write_text("0 0.5 0.5 0.3 0.4\n1 0.3 0.3 0.2 0.2\n")
    cfg = write_cfg(make_spec("yolov3-tiny", num_classes=2, width=64, height=64, batch=4, subdivisions=2),
                    tmp_path / "tiny.cfg")
    return tmp_path, cfg


def _run(tmp_path, cfg, *extra):
    args = ["doctor", "--data", str(tmp_path / "images"), "--model", str(cfg),
            "--project", str(tmp_path / "runs"), "--images", "4", "--repeats", "1",
            "--worker-counts", "0", "--workers", "0", *extra]
    assert main(args) == 0
    run = sorted((tmp_path / "runs").iterdir())[-1]
    return run, json.loads((run / "doctor.json").read_text())


def test_data_only_mode_writes_markdown_and_json(tiny, capsys):
    tmp_path, cfg = tiny
    run, report = _run(tmp_path, cfg, "--assume-step-ms", "0.5")
    verdict, timings = report["verdict"], report["timings"]
    assert verdict["bottleneck"] in ("model step", "decode", "cache read", "augment", "hand-off", "workers")
    assert 0 <= verdict["data_wait"] <= 1 and verdict["expected_images_per_s"] > 0
    assert timings["step_source"] == "assumed 0.5 ms"
    assert timings["decode_s"] > 0 and timings["loader_images_per_s"]["0"] > 0
    # wall-clock predictions of the loader for workers 0 and the configured count x cache x augment
    assert {"workers 0, cache none, augment cpu", "workers 0, cache ram, augment cpu"} <= set(
        verdict["loader_predictions"]) and all(rate > 0 for rate in verdict["loader_predictions"].values())
    # what auto would choose, one line per setting (the device path builds mosaics too: either may win)
    assert any(line.startswith("--cache ") for line in timings["auto"])
    assert any(line.startswith(("--augment-on cpu (", "--augment-on device (")) for line in timings["auto"])
    assert any(line.startswith("--workers 0 (flag)") for line in timings["auto"])
    text = (run / "doctor.md").read_text()
    assert verdict["sentence"] in text and verdict["sentence"] in capsys.readouterr().out
    assert "What `auto` would choose" in text
    # the start's data-dependent parts, timed as train's start runs them; the planned run: 300 epochs
    assert set(timings["startup_s"]) == {"scan", "anchor check", "pipeline measurement"}
    assert timings["startup_cold"] is True and timings["planned_images"] == 300 * 6
    assert "| start-up before the first step" in text


def test_a_short_run_names_its_start(tiny):
    tmp_path, cfg = tiny
    _, report = _run(tmp_path, cfg, "--assume-step-ms", "0.5", "--epochs", "1", "--cache", "none",
                     "--augment-on", "cpu")  # every setting given: train would not measure the pipeline
    timings, verdict = report["timings"], report["verdict"]
    assert set(timings["startup_s"]) == {"scan", "anchor check"} and timings["planned_images"] == 6
    assert verdict["startup"].startswith("start-up is") and verdict["startup_share"] > 0.10


def test_assume_cpus_predicts_for_the_planned_machine(tiny):
    """`--assume-cpus 16`: auto's workers and the prediction are for 16 cores like these; the loader is
    measured only at worker counts this machine has cores for."""
    tmp_path, cfg = tiny
    args = ["doctor", "--data", str(tmp_path / "images"), "--model", str(cfg), "--project",
            str(tmp_path / "runs"), "--images", "4", "--repeats", "1", "--worker-counts", "0,64",
            "--assume-gpu", "h100"]
    assert main([*args, "--assume-cpus", "16"]) == 0
    report = json.loads((sorted((tmp_path / "runs").iterdir())[-1] / "doctor.json").read_text())
    timings = report["timings"]
    assert timings["cores"] == 16 and timings["workers"] == 15
    assert any(line.startswith("--workers 15 (auto)") for line in timings["auto"])
    measured = {int(w) for w in timings["loader_images_per_s"]}
    assert 0 in measured and max(measured) <= max(1, usable_cpus() - 1)
    assert main([*args, "--assume-cpus", "0"]) == 1  # a clear flag error, no traceback


@pytest.mark.slow
def test_measured_cpu_step_is_step_bound(tiny):
    tmp_path, cfg = tiny
    _, report = _run(tmp_path, cfg, "--device", "cpu", "--cache", "ram")
    assert report["timings"]["step_source"] == "measured on cpu"
    assert report["timings"]["step_s"] > 0 and report["timings"]["checkpoint_s"] > 0


def test_flag_errors(tiny):
    tmp_path, cfg = tiny
    assert main(["doctor", "--data", str(tmp_path / "images"), "--model", str(cfg), "--assume-step-ms", "-1",
                 "--project", str(tmp_path / "runs")]) == 1
    assert main(["doctor", "--data", str(tmp_path / "images"), "--project", str(tmp_path / "runs")]) == 1


def test_request_names_the_flag(tiny):
    from turboyolo.doctor.job import DoctorArgs, DoctorRequest
    from turboyolo.errors import FlagError

    tmp_path, cfg = tiny
    with pytest.raises(FlagError, match="--model/--cfg is required"):
        DoctorRequest(data=tmp_path / "images", cfg=None)
    with pytest.raises(FlagError, match="exclude each other"):
        DoctorRequest(tmp_path / "images", cfg, DoctorArgs(assume_step_ms=1.0, assume_gpu="h200"))


def test_step_is_train_s_step_on_a_state_built_as_train_builds_it(tiny, monkeypatch):
    """The stock cfg says SGD and mse boxes; `turboyolo train` fine-tunes with the fitted schedule's Adam,
    GIoU, the objectness IoU target and the EMA: the doctor's state is the one `build_state` makes, and
    its step is `engine.train_one_epoch` (one call per repeat plus the warm-up)."""
    from turboyolo.train import engine

    _, cfg = tiny
    spec = parse_cfg(cfg)
    assert spec.net.optimizer == "sgd"
    options = DoctorOptions(img_size=64, batch=4, subdivisions=2, device=torch.device("cpu"), workers=0,
                            worker_counts=(0,), repeats=2)
    resolved = resolved_run(spec, options)
    state = train_state(resolved, options.device)
    assert isinstance(state.optimizer, torch.optim.Adam)
    assert state.optimizer.param_groups[0]["lr"] == pytest.approx(0.002)
    assert state.ema is not None and state.subdivisions == 2 and state.loss_fn.obj_iou
    steps = []
    real = engine.AutogradStep.apply
    monkeypatch.setattr(engine.AutogradStep, "apply", lambda *a: steps.append(1) or real(*a))
    seconds = step_seconds(state, engine.StepOptions(say=lambda *_: None), 2, 64, options.repeats)
    assert seconds > 0 and len(steps) == options.repeats + 1 and state.iteration == options.repeats + 1
