"""``turboyolo audit`` as a user types it: the run directory's files, the out-of-sample folds, scores that
find the mistakes in a label set, and bad input (no labels, one class, a model of other classes, an image
that does not decode) answered with a message or a counted skip, never a traceback; no label file is ever
written."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from synth import make_dataset, make_image_folder, micro_cfg
from turboyolo.cli import main
from turboyolo.formats.issues import read_issues


def _files(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def _labels_in_pixels(images: list[Path]) -> dict[str, list[list[float]]]:
    from turboyolo.data.decode import load_image

    out = {}
    for image in images:
        h, w = load_image(image).shape[:2]
        rows = [[float(v) for v in line.split()] for line in
                (image.parent.parent / "labels" / f"{image.stem}.txt").read_text().splitlines()]
        out[str(image)] = [[int(c), (cx - bw / 2) * w, (cy - bh / 2) * h, (cx + bw / 2) * w,
                            (cy + bh / 2) * h] for c, cx, cy, bw, bh in rows]
    return out


def _predictions(folder: Path, labels: dict[str, list[list[float]]], change) -> Path:
    """An audit's predictions.json + image_ids.json: a model that sees every label (confidence 0.9, and
    0.01 for the other class at the same place), as ``change(image, rows)`` edits them."""
    results, ids = [], {}
    for image_id, (image, rows) in enumerate(labels.items()):
        ids[image_id] = image
        for cls, x1, y1, x2, y2, score in change(image, [[*row, 0.9] for row in rows]):
            for k, conf in ((cls, score), (1 - cls, 0.01)):
                results.append({"image_id": image_id, "category_id": k, "bbox": [x1, y1, x2 - x1, y2 - y1],
                                "score": conf})
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "predictions.json").write_text(json.dumps(results))
    (folder / "image_ids.json").write_text(json.dumps(ids))
    return folder / "predictions.json"


def test_scores_from_predictions_find_a_wrong_class_and_a_missing_box(tmp_path, capsys):
    images = make_image_folder(tmp_path / "data", count=12, num_classes=2)
    labels = _labels_in_pixels(images)
    wrong, unlabelled = str(images[3]), str(images[7])

    def change(image, rows):
        if image == wrong:  # the model sees the first box as the other class
            rows[0] = [1 - rows[0][0], *rows[0][1:]]
        if image == unlabelled:  # and an object nobody labelled
            rows.append([0, 2.0, 2.0, 30.0, 30.0, 0.95])
        return rows

    predictions = _predictions(tmp_path / "earlier", labels, change)
    before = _files(tmp_path / "data")
    assert main(["audit", "--data", str(tmp_path / "data" / "images"), "--predictions", str(predictions),
                 "--project", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "scored >= 0.5: missing 1, class 1, location 0, spurious 0" in out
    run = tmp_path / "runs" / "exp"
    issues = read_issues(run)
    assert len([row for row in issues if row.given]) == sum(len(rows) for rows in labels.values())
    first, second = sorted(issues[:2], key=lambda row: row.kind)
    assert (first.kind, Path(first.image).name, first.cls, first.suggested_cls) == (
        "class", images[3].name, labels[wrong][0][0], 1 - labels[wrong][0][0])
    assert first.box == pytest.approx(labels[wrong][0][1:], abs=0.06)
    assert (second.kind, Path(second.image).name, second.suggested_box) == (
        "missing", images[7].name, pytest.approx((2, 2, 30, 30), abs=0.01))
    with open(run / "image_ranking.csv", newline="") as handle:
        ranking = list(csv.DictReader(handle))
    assert {Path(row["image"]).name for row in ranking[:2]} == {images[3].name, images[7].name}
    assert len(ranking) == 12 and float(ranking[2]["score"]) < 0.5
    assert {p.name for p in run.glob("sheet_*.jpg")} == {"sheet_class.jpg", "sheet_missing.jpg"}
    assert _files(tmp_path / "data") == before  # the audit never writes a label file


def test_an_audits_own_predictions_score_the_same_again_in_any_order(tmp_path, capsys):
    """predictions.json as the audit writes it (an image at a time) reads back to the same scores, whatever
    the order of its results (interleaved images) and with an image the model saw nothing in."""
    images = make_image_folder(tmp_path / "data", count=8, num_classes=2)
    labels = _labels_in_pixels(images)
    empty = str(images[5])

    def change(image, rows):
        if image == empty:
            return []
        rows[-1] = [*rows[-1][:5], 0.3]  # one weaker sign per image
        return rows

    predictions = _predictions(tmp_path / "earlier", labels, change)
    results = json.loads(predictions.read_text())
    predictions.write_text(json.dumps(results[::2] + results[1::2]))  # the images interleaved
    data = str(tmp_path / "data" / "images")
    assert main(["audit", "--data", data, "--predictions", str(predictions), "--project",
                 str(tmp_path / "runs"), "--name", "first"]) == 0
    first = tmp_path / "runs" / "first"
    assert main(["audit", "--data", data, "--predictions", str(first / "predictions.json"), "--project",
                 str(tmp_path / "runs"), "--name", "again"]) == 0
    again = tmp_path / "runs" / "again"
    for name in ("label_issues.csv", "image_ranking.csv", "image_ids.json"):
        assert (first / name).read_text() == (again / name).read_text(), name
    written = json.loads((first / "predictions.json").read_text())
    assert sorted(map(json.dumps, written)) == sorted(map(json.dumps, json.loads((again / "predictions.json")
                                                                                 .read_text())))
    ids = {v: int(k) for k, v in json.loads((first / "image_ids.json").read_text()).items()}
    by_image = {image: sorted((r["category_id"], r["score"]) for r in written if r["image_id"] == ids[image])
                for image in labels}
    assert by_image[empty] == [] and len(written) == len(results)
    assert all(len(rows) == 2 * len(labels[image]) for image, rows in by_image.items() if image != empty)


def test_predictions_naming_an_image_their_ids_lack_are_refused(tmp_path, capsys):
    images = make_image_folder(tmp_path / "data", count=3, num_classes=2)
    predictions = _predictions(tmp_path / "earlier", _labels_in_pixels(images), lambda image, rows: rows)
    results = json.loads(predictions.read_text())
    predictions.write_text(json.dumps([*results, {**results[0], "image_id": 99}]))
    assert main(["audit", "--data", str(images[0].parent), "--predictions", str(predictions), "--project",
                 str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(predictions) in err and "image_id 99" in err


def test_an_image_that_does_not_decode_is_a_counted_skip(tmp_path, capsys):
    images = make_image_folder(tmp_path / "data", count=6, num_classes=2)
    labels = _labels_in_pixels(images)
    predictions = _predictions(tmp_path / "earlier", labels, lambda image, rows: rows)
    images[2].write_bytes(images[2].read_bytes()[:200])  # truncated: the scan refuses it
    assert main(["audit", "--data", str(tmp_path / "data" / "images"), "--predictions", str(predictions),
                 "--project", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "audit: 5 images" in out and "skipped 1 image(s)" in out and images[2].name in out
    assert images[2].name in (tmp_path / "runs" / "exp" / "skipped.txt").read_text()


def test_one_class_is_said_and_audited_without_class_mistakes(tmp_path, capsys):
    images = make_image_folder(tmp_path / "data", count=6, num_classes=1)
    labels = _labels_in_pixels(images)
    predictions = _predictions(tmp_path / "earlier", labels, lambda image, rows: rows)
    assert main(["audit", "--data", str(tmp_path / "data" / "images"), "--predictions", str(predictions),
                 "--project", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    assert "one class ('a'): no box can have the wrong class" in out
    assert not [row for row in read_issues(tmp_path / "runs" / "exp") if row.kind == "class"]


def test_a_data_set_without_labels_is_refused_with_the_fix(tmp_path, capsys):
    images = make_image_folder(tmp_path / "data", count=4)
    for label in (tmp_path / "data" / "labels").iterdir():
        label.unlink()
    assert main(["audit", "--data", str(images[0].parent), "--weights", "nothing.weights", "--project",
                 str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("turboyolo audit: error: ") and "Traceback" not in err
    assert "no image has a label file with boxes" in err and "turboyolo label" in err
    assert not (tmp_path / "runs").exists()


def test_a_model_of_other_classes_cannot_predict_as_it_is(tmp_path, capsys):
    from turboyolo.model.loading import build_model, save_darknet_weights

    images = make_image_folder(tmp_path / "data", count=4, num_classes=2)
    cfg = micro_cfg(tmp_path / "three.cfg", num_classes=3)
    weights = save_darknet_weights(build_model(cfg), tmp_path / "three.weights")
    code = main(["audit", "--data", str(images[0].parent), "--cfg", str(cfg), "--weights", str(weights),
                 "--folds", "0", "--project", str(tmp_path / "runs")])
    err = capsys.readouterr().err
    assert code == 1 and "a model of 3 classes" in err and "has 2 (a, b)" in err and "--folds 3" in err


def test_bad_values_name_their_flag(tmp_path, capsys):
    images = make_image_folder(tmp_path / "data", count=2)
    for flags, message in ((["--folds", "1"], "--folds must be 0 or at least 2"),
                           (["--conf-thres", "1.5"], "--conf-thres must be in [0, 1)"),
                           (["--predictions", str(tmp_path / "none.json")], "--predictions")):
        assert main(["audit", "--data", str(images[0].parent), "--project", str(tmp_path / "runs"),
                     *flags]) == 1
        assert message in capsys.readouterr().err


def test_each_image_is_predicted_once_by_a_fold_that_did_not_train_on_it(tmp_path, capsys, fakes):
    """The folds' plumbing with the trainer and the model faked (fast): every image is predicted once,
    by the checkpoint of a fold whose training list does not hold it."""
    trainer, predictor = fakes
    data = make_dataset(tmp_path / "data", num_train=8, num_val=5, num_classes=2)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2)
    assert main(["audit", "--data", str(data), "--cfg", str(cfg), "--folds", "3", "--project",
                 str(tmp_path / "runs")]) == 0
    folds = tmp_path / "runs" / "exp" / "folds"
    assert [name for _, name in trainer.calls] == ["fold1", "fold2", "fold3"]
    assert sorted(predictor.predicted) == sorted(set(predictor.predicted)) and len(predictor.predicted) == 13
    for image, checkpoint in predictor.by.items():
        fold = Path(checkpoint).parents[2]
        assert fold.parent == folds and image not in (fold / "train.txt").read_text().split()
        assert image in (fold / "held_out.txt").read_text().split()
    assert "fold 3/3" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.full(covered_by="tests/audit/test_audit_command.py::"
                  "test_each_image_is_predicted_once_by_a_fold_that_did_not_train_on_it")
def test_folds_predict_every_image_from_a_model_that_never_saw_it(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", num_train=8, num_val=4, num_classes=2)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2, batch=4, learning_rate=0.003,
                    extra="optimizer=adam")
    before = _files(tmp_path / "data")
    assert main(["audit", "--data", str(data), "--cfg", str(cfg), "--folds", "3", "--epochs", "1",
                 "--batch", "4", "--workers", "0", "--project", str(tmp_path / "runs")]) == 0
    run = tmp_path / "runs" / "exp"
    folds = sorted((run / "folds").glob("fold*"))
    held = [set((fold / "held_out.txt").read_text().split()) for fold in folds]
    trained = [set((fold / "train.txt").read_text().split()) for fold in folds]
    everything = set().union(*held)
    assert len(folds) == 3 and len(everything) == 12 and sum(map(len, held)) == 12
    assert all(not (h & t) and (h | t) == everything for h, t in zip(held, trained))
    assert all((fold / "train" / "weights" / "last.pt").is_file() for fold in folds)
    results = json.loads((run / "predictions.json").read_text())
    ids = json.loads((run / "image_ids.json").read_text())
    assert len(ids) == 12 and all(str(r["image_id"]) in ids and len(r["bbox"]) == 4 for r in results)
    issues = read_issues(run)
    boxes = sum(len((tmp_path / "data" / "labels" / split / f"{Path(i).stem}.txt").read_text().splitlines())
                for split in ("train", "val") for i in (tmp_path / "data" / "images" / split).iterdir())
    assert len([row for row in issues if row.given]) == boxes
    assert all(0 <= row.score <= 1 for row in issues)
    assert np.all(np.diff([row.score for row in issues]) <= 0)
    assert _files(tmp_path / "data") == before
    assert "fold 3/3" in capsys.readouterr().out


def test_folds_0_predicts_with_the_weights_as_they_are_and_warns_when_they_saw_these_labels(tmp_path, capsys):
    data = make_dataset(tmp_path / "data", num_train=4, num_val=2, num_classes=2)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2, batch=2)
    assert main(["train", "--cfg", str(cfg), "--data", str(data), "--epochs", "1", "--workers", "0",
                 "--evaluation-interval", "0", "--project", str(tmp_path / "runs")]) == 0
    checkpoint = tmp_path / "runs" / "exp" / "weights" / "last.pt"
    capsys.readouterr()
    assert main(["audit", "--data", str(data), "--weights", str(checkpoint), "--folds", "0",
                 "--project", str(tmp_path / "audits")]) == 0
    out = capsys.readouterr().out
    assert f"--weights {checkpoint} was trained on {data} itself" in out
    assert "--folds 0" in out and "audit: 6 images" in out
    assert not (tmp_path / "audits" / "exp" / "folds").exists()
    assert len(json.loads((tmp_path / "audits" / "exp" / "image_ids.json").read_text())) == 6


def test_a_val_split_that_does_not_scan_is_named_not_left_out(tmp_path, capsys):
    """A `valid =` naming a missing list (a typo) would leave half the data set unaudited: refused, named."""
    data = make_dataset(tmp_path / "data", num_train=4, num_val=2, num_classes=2)
    text = data.read_text()
    data.write_text("".join("valid = vall.txt\n" if line.startswith("valid") else line + "\n"
                            for line in text.splitlines()))
    assert main(["audit", "--data", str(data), "--folds", "0", "--project", str(tmp_path / "runs")]) == 1
    assert "vall.txt" in capsys.readouterr().err


def test_more_folds_than_images_is_refused_with_the_fix(tmp_path, capsys, fakes):
    images = make_image_folder(tmp_path / "data", count=2, num_classes=2)
    cfg = micro_cfg(tmp_path / "micro.cfg", num_classes=2)
    assert main(["audit", "--data", str(images[0].parent), "--cfg", str(cfg), "--folds", "3",
                 "--project", str(tmp_path / "runs")]) == 1
    err = capsys.readouterr().err
    assert "--folds 3 needs at least 3 usable images" in err and "has 2" in err and "Traceback" not in err
    assert fakes[0].calls == [] and not (tmp_path / "runs" / "exp").exists()
