"""Messages that say what is true (issue 31, round three): weights for another network are called that,
not truncated; a cached asset with the wrong checksum is not "missing"; ``--resume`` refuses inputs it
would otherwise drop, prints the plan it refitted, and leaves a finished run as it is; a video cut short
says where it ended; a split without ground truth has no mAP."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from synth import make_dataset


def _train(cli, cfg, data, project, *extra):
    return cli("train", "--cfg", cfg, "--data", data, "--workers", 0, "--project", project,
               "--evaluation-interval", 0, "--checkpoint-interval", 0, *extra)


@pytest.mark.parametrize("flag", ["--cfg", "--data", "--weights"])
def test_resume_refuses_an_input_it_would_drop(trained_run_copy, cli, tmp_path, flag):
    run_dir, cfg, data = trained_run_copy
    other = tmp_path / f"other{flag.strip('-')}.x"
    other.write_text("x")
    run = cli("train", "--resume", run_dir / "weights" / "last.pt", flag, other, "--epochs", 2)
    run.assert_clean(1)
    assert f"{flag} {other} cannot change it" in run.output and "--resume" in run.output, run.output
    assert "drop" in run.output and "start a new run" in run.output


def test_resume_with_its_own_inputs_is_not_refused(trained_run_copy, cli):
    run_dir, cfg, data = trained_run_copy
    run = cli("train", "--resume", run_dir / "weights" / "last.pt", "--cfg", cfg, "--data", data)
    run.assert_clean(0)
    assert "the run is finished" in run.output


def test_resuming_a_finished_run_says_so_and_keeps_its_weights(trained_run_copy, cli):
    run_dir, _, _ = trained_run_copy
    weights = run_dir / "weights"
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in weights.iterdir()}
    run = cli("train", "--resume", weights / "last.pt")
    run.assert_clean(0)
    assert "the run is finished" in run.output and "1 epochs (--epochs)" in run.output, run.output
    assert "larger --epochs" in run.output
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in weights.iterdir()} == before


def test_resume_with_new_epochs_prints_the_refitted_plan(trained_run_copy, cli):
    run_dir, _, _ = trained_run_copy
    run = cli("train", "--resume", run_dir / "weights" / "last.pt", "--epochs", 2)
    run.assert_clean(0)
    lines = run.output.splitlines()
    refitted = next(i for i, line in enumerate(lines) if "--resume with a new length" in line)
    plan = next(i for i, line in enumerate(lines) if line.startswith("schedule:"))
    assert plan > refitted, run.output
    assert "4 planned iterations (2 epochs of 2)" in lines[plan], lines[plan]  # not the old 2 (1 epoch)


def test_a_checkpoint_config_value_of_the_wrong_type_is_named(trained_run_copy, cli):
    import torch

    run_dir, _, _ = trained_run_copy
    last = run_dir / "weights" / "last.pt"
    state = torch.load(last, weights_only=False)
    state["config"]["schedule"]["epochs"] = "ten"
    torch.save(state, last)
    run = cli("train", "--resume", last)
    run.assert_clean(1)
    assert str(last) in run.output and "epochs: expected an integer, got the text 'ten'" in run.output


def _yolov4_tiny_weights(path):
    """A complete yolov4-tiny .weights (random values: only the size tells the network)."""
    from turboyolo.model.darknet import Darknet
    from turboyolo.model.loading import save_darknet_weights
    from turboyolo.model.zoo import make_spec

    return save_darknet_weights(Darknet(make_spec("yolov4-tiny", num_classes=2)), path)


def test_weights_of_another_network_are_named_not_truncated(tmp_path, cli):
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec

    weights = _yolov4_tiny_weights(tmp_path / "yolov4-tiny.weights")
    data = make_dataset(tmp_path / "data", 2, 1)
    v3 = write_cfg(make_spec("yolov3-tiny", num_classes=1, width=64, height=64, batch=2, subdivisions=1),
                   tmp_path / "v3.cfg")
    run = _train(cli, v3, data, tmp_path / "runs", "--weights", weights, "--epochs", 1)
    run.assert_clean(1)
    assert "weights of another network" in run.output and "yolov4-tiny with 2 classes" in run.output
    assert "truncated" not in run.output and "fetch it again" not in run.output, run.output
    image = tmp_path / "data" / "images" / "val" / "val0.png"
    detect = cli("detect", image, "--cfg", v3, "--weights", weights, "--project", tmp_path / "d")
    detect.assert_clean(1)
    assert "weights of another network" in detect.output and "yolov4-tiny" in detect.output


def test_a_cut_weights_file_is_still_called_truncated(tmp_path, cli):
    from turboyolo.formats.darknet_cfg import write_cfg
    from turboyolo.model.zoo import make_spec

    whole = _yolov4_tiny_weights(tmp_path / "whole.weights").read_bytes()
    cut = tmp_path / "cut.weights"
    cut.write_bytes(whole[: len(whole) // 2 // 4 * 4])
    data = make_dataset(tmp_path / "data", 2, 1)
    v4 = write_cfg(make_spec("yolov4-tiny", num_classes=2, width=64, height=64, batch=2, subdivisions=1),
                   tmp_path / "v4.cfg")
    run = _train(cli, v4, data, tmp_path / "runs", "--weights", cut, "--epochs", 1)
    run.assert_clean(1)
    assert "truncated" in run.output and "another network" not in run.output, run.output


@pytest.mark.parametrize("how", ["short", "same size"])
def test_a_cached_asset_with_the_wrong_checksum_is_not_called_missing(tmp_path, cli, how):
    from turboyolo.assets import ASSETS, cache_dir

    asset = ASSETS["yolov3-tiny"]
    bad = cache_dir() / asset.filename  # the test's own cache (TURBOYOLO_CACHE), offline
    with open(bad, "wb") as handle:
        handle.truncate(1000 if how == "short" else asset.size)
    for run in (cli("fetch", "yolov3-tiny"),
                cli("detect", tmp_path, "--weights", "yolov3-tiny", "--project", tmp_path / "d")):
        run.assert_clean(1)
        assert "wrong checksum" in run.output and str(bad) in run.output, run.output
        assert "missing" not in run.output
    assert bad.exists()  # not deleted behind the user's back


def _video(path, frames=30):
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
    for index in range(frames):
        writer.write(np.full((48, 64, 3), index * 8, np.uint8))
    writer.release()
    return path


def test_a_video_cut_short_ends_with_a_note(tmp_path, cli, tiny_model):
    cfg, weights, _, _ = tiny_model
    whole = _video(tmp_path / "whole.avi")
    cut = tmp_path / "cut.avi"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    capture = cv2.VideoCapture(str(cut))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == 30  # the header still says 30
    capture.release()
    run = cli("detect", cut, whole, "--cfg", cfg, "--weights", weights, "--project", tmp_path / "d")
    run.assert_clean(0)  # frames were processed
    assert f"{cut}: the video ended at frame " in run.output and " of 30 " in run.output, run.output
    assert f"{whole}: the video ended" not in run.output


def test_a_split_without_ground_truth_has_no_map(tmp_path, cli, tiny_model):
    _, _, _, checkpoint = tiny_model
    data = make_dataset(tmp_path / "data", 2, 2, num_classes=2)
    for label in (tmp_path / "data" / "labels" / "val").iterdir():
        label.write_text("")
    run = cli("test", "--weights", checkpoint, "--data", data)
    run.assert_clean(0)
    assert "no ground truth in the split" in run.output and "mAP not measured" in run.output, run.output
    assert "mAP@0.5 0.0000" not in run.output


def test_a_checkpoint_with_a_damaged_plan_is_named(trained_run_copy, cli):
    import torch

    run_dir, _, _ = trained_run_copy
    last = run_dir / "weights" / "last.pt"
    state = torch.load(last, weights_only=False)
    state["plan"]["schedule"] = "fast"
    torch.save(state, last)
    run = cli("train", "--resume", last, "--epochs", 2)
    run.assert_clean(1)
    assert f"{last}: damaged checkpoint: its plan cannot be read" in run.output, run.output


def test_a_video_that_cannot_be_read_is_not_called_an_image(tmp_path, cli, tiny_model):
    cfg, weights, _, _ = tiny_model
    broken = tmp_path / "broken.avi"
    broken.write_bytes(b"not a video")
    run = cli("detect", broken, "--cfg", cfg, "--weights", weights, "--project", tmp_path / "d")
    run.assert_clean(0)
    assert "1 unreadable videos skipped" in run.output and "broken.avi" in run.output, run.output


def test_resume_names_the_runs_own_inputs_it_ignores(trained_run_copy, cli):
    """TRAINING.md: on --resume, options other than the resumable ones "are named as ignored"; the run's
    own --cfg, --data and --weights too (they were accepted without a word)."""
    import torch

    run_dir, cfg, data = trained_run_copy
    last = run_dir / "weights" / "last.pt"
    state = torch.load(last, weights_only=False)
    state["config"]["weights"] = str(run_dir / "start.weights")  # as a run started from weights
    torch.save(state, last)
    run = cli("train", "--resume", last, "--cfg", cfg, "--data", data, "--weights", run_dir / "start.weights",
              "--lr", 0.5)
    run.assert_clean(0)
    line = next(line for line in run.output.splitlines() if "ignored: --" in line)
    assert "--cfg" in line and "--data" in line and "--weights" in line, run.output
    assert any("ignored: lr" in line for line in run.output.splitlines()), run.output
