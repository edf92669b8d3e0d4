"""An audit stopped in a fold loses nothing: the same command again with ``--exist-ok`` keeps each fold's
predictions (or continues its training) when they are of the same images and settings, and trains anew,
saying why, when they are not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synth import make_dataset, make_image_folder, micro_cfg
from turboyolo.audit import folds as folds_module
from turboyolo.cli import main
from turboyolo.data.scan import scan_dataset
from turboyolo.formats.issues import read_issues
from turboyolo.model.loading import read_checkpoint


def test_a_rerun_keeps_the_finished_folds_and_continues_the_cut_one(tmp_path, capsys, fakes):
    trainer, predictor = fakes
    images = make_image_folder(tmp_path / "data", count=9, num_classes=2)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2)
    command = ["audit", "--data", str(images[0].parent), "--cfg", str(cfg), "--folds", "3", "--epochs", "2",
               "--project", str(tmp_path / "runs"), "--name", "audit"]
    run = tmp_path / "runs" / "audit"
    trainer.cut_at = "fold2"
    assert main(command) == 130  # cut in fold 2: fold 1 predicted, fold 2 has a checkpoint
    assert trainer.calls == [("new", "fold1"), ("new", "fold2")] and len(predictor.predicted) == 3
    assert (run / "folds" / "fold1" / "predictions.json").is_file()
    assert not (run / "folds" / "fold2" / "predictions.json").exists()
    first = json.loads((run / "folds" / "fold1" / "predictions.json").read_text())["images"]

    trainer.cut_at, trainer.calls, predictor.predicted = None, [], []
    capsys.readouterr()
    assert main([*command, "--exist-ok"]) == 0
    out = capsys.readouterr().out
    assert "fold 1/3: its predictions are kept from an earlier call" in out
    assert "fold 2: continuing its earlier training" in out
    assert trainer.calls == [("resume", "fold2"), ("new", "fold3")]  # fold 1 neither trains nor predicts
    assert len(predictor.predicted) == 6 and not set(predictor.predicted) & set(first)
    issues = read_issues(run)
    assert {Path(row.image).name for row in issues} == {image.name for image in images}
    assert len(json.loads((run / "image_ids.json").read_text())) == 9

    # a finished fold whose predictions were lost: its checkpoint predicts again, nothing trains
    (run / "folds" / "fold1" / "predictions.json").unlink()
    trainer.calls, predictor.predicted = [], []
    assert main([*command, "--exist-ok"]) == 0
    assert trainer.calls == [("resume", "fold1")] and len(predictor.predicted) == 3
    assert json.loads((run / "folds" / "fold1" / "predictions.json").read_text())["images"] == first


def test_a_rerun_with_other_settings_or_images_trains_anew_and_says_why(tmp_path, capsys, fakes):
    trainer, predictor = fakes
    images = make_image_folder(tmp_path / "data", count=6, num_classes=2)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2)
    command = ["audit", "--data", str(images[0].parent), "--cfg", str(cfg), "--folds", "2", "--epochs", "2",
               "--project", str(tmp_path / "runs"), "--name", "audit", "--exist-ok"]
    assert main(command) == 0
    trainer.calls = []
    capsys.readouterr()
    assert main([*command[:-1], "--epochs", "3", "--exist-ok"]) == 0
    out = capsys.readouterr().out
    assert "fold 1: its earlier training is not reused (other settings: epochs 2 -> 3): trained anew" in out
    assert trainer.calls == [("new", "fold1"), ("new", "fold2")]
    assert read_checkpoint(tmp_path / "runs" / "audit" / "folds" / "fold1" / "train" / "weights" /
                           "last.pt")["config"]["schedule"]["epochs"] == 3
    trainer.calls = []
    assert main([*command[:-1], "--epochs", "3", "--seed", "5", "--exist-ok"]) == 0
    out = capsys.readouterr().out
    assert "its train.txt lists other images: another data set, --folds or --seed" in out
    assert trainer.calls == [("new", "fold1"), ("new", "fold2")]
    trainer.calls = []
    assert main(command[:-1]) == 0  # without --exist-ok: a new run directory, nothing of the old one
    assert "kept" not in capsys.readouterr().out and trainer.calls == [("new", "fold1"), ("new", "fold2")]
    assert (tmp_path / "runs" / "audit2" / "label_issues.csv").is_file()


@pytest.mark.slow
@pytest.mark.full(covered_by="tests/audit/test_audit_resume.py::"
                  "test_a_rerun_keeps_the_finished_folds_and_continues_the_cut_one")
def test_a_fold_cut_in_its_training_continues_from_its_checkpoint(tmp_path, capsys, monkeypatch):
    """The real trainer: fold 2 stopped after one iteration, the rerun continues that checkpoint to the
    end of its epochs instead of starting over, and fold 1 keeps its weights and predictions."""
    from turboyolo.train.fit import fit

    data = make_dataset(tmp_path / "data", num_train=6, num_val=2, num_classes=2)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2, batch=2)
    command = ["audit", "--data", str(data), "--cfg", str(cfg), "--folds", "2", "--epochs", "2", "--batch",
               "2", "--workers", "0", "--project", str(tmp_path / "runs"), "--name", "audit"]

    def cut(config, quiet=True):
        if Path(config.output.project).name == "fold2" and not config.resume:
            fit(config, stop_at_iteration=1, quiet=quiet)
            raise KeyboardInterrupt("session cut")
        return fit(config, quiet=quiet)

    monkeypatch.setattr(folds_module, "fit", cut)
    assert main(command) == 130
    folds = tmp_path / "runs" / "audit" / "folds"
    assert read_checkpoint(folds / "fold2" / "train" / "weights" / "last.pt")["iteration"] == 1
    kept = (folds / "fold1" / "train" / "weights" / "last.pt").stat().st_mtime_ns
    capsys.readouterr()
    monkeypatch.setattr(folds_module, "fit", fit)
    assert main([*command, "--exist-ok"]) == 0
    out = capsys.readouterr().out
    assert "fold 1/2: its predictions are kept" in out and "fold 2: continuing its earlier training" in out
    assert (folds / "fold1" / "train" / "weights" / "last.pt").stat().st_mtime_ns == kept
    finished = read_checkpoint(folds / "fold2" / "train" / "weights" / "last.pt")
    assert finished["epoch"] == 2 and finished["iteration"] == 4  # 4 images, batch 2: 2 iterations an epoch
    assert len(json.loads((tmp_path / "runs" / "audit" / "image_ids.json").read_text())) == 8


def test_folds_list_images_as_the_data_set_does_so_a_linked_folder_keeps_its_labels(tmp_path, fakes):
    """``images/`` a link to where the photos are, ``labels/`` beside the link (as a data set on a
    mounted disk often is): each fold's lists name the images through the link, where the trainer finds
    their labels; and a fold trained anew never continues a checkpoint left from other images."""
    trainer, _ = fakes
    make_image_folder(tmp_path / "data", count=6, num_classes=2)
    (tmp_path / "data" / "images").rename(tmp_path / "photos")
    (tmp_path / "data" / "images").symlink_to(tmp_path / "photos", target_is_directory=True)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2)
    command = ["audit", "--data", str(tmp_path / "data" / "images"), "--cfg", str(cfg), "--folds", "2",
               "--project", str(tmp_path / "runs"), "--name", "audit", "--exist-ok"]
    assert main(command) == 0
    fold = tmp_path / "runs" / "audit" / "folds" / "fold1"
    scan = scan_dataset(fold / "fold.data", "train", ["a", "b"])
    assert len(scan.samples) == 3 and all(len(sample.labels) for sample in scan.samples)
    assert all(str(tmp_path / "data" / "images") in line for line in (fold / "train.txt").read_text().split())
    # a rerun on other images: the fold is trained anew, its old training folder gone before it starts
    stale = fold / "train" / "weights" / "stale.pt"
    stale.write_bytes(b"")
    assert main([*command, "--seed", "7"]) == 0
    assert not stale.exists() and ("new", "fold1") in trainer.calls
