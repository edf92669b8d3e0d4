from __future__ import annotations

import csv

import pytest

from turboyolo.cli import main
from turboyolo.data.autolabels import count_model_made, is_model_made


@pytest.fixture
def tiny_weights_file(tiny_cfg, tmp_path_factory):
    from turboyolo.model.loading import build_model, save_darknet_weights

    return save_darknet_weights(build_model(tiny_cfg), tmp_path_factory.mktemp("w") / "tiny.weights")


@pytest.mark.slow
def test_label_writes_only_missing_labels_and_a_review(boxes_dataset, tiny_cfg, tiny_weights_file, tmp_path):
    labels = sorted((boxes_dataset / "labels").glob("*.txt"))
    human = {p: p.read_text() for p in labels[:3]}
    for path in labels[3:]:
        path.unlink()
    args = [
        "label",
        "--cfg",
        str(tiny_cfg),
        "--weights",
        str(tiny_weights_file),
        "--data",
        str(boxes_dataset / "images"),
        "--conf-thres",
        "0.2",
        "--single-label",
        "--device",
        "cpu",
        "--project",
        str(tmp_path / "runs"),
    ]
    assert main(args) == 0
    assert all(p.read_text() == text for p, text in human.items())  # human labels untouched
    assert all(p.is_file() for p in labels)
    assert count_model_made(labels) == (3, 3)
    from turboyolo.data.scan import scan_dataset

    scan = scan_dataset(boxes_dataset / "images", "train", use_cache=False)
    assert scan.model_made == 3 and "label files: 3 human, 0 reviewed, 3 model-made" in scan.summary()
    with open(tmp_path / "runs" / "exp" / "review.csv") as handle:
        rows = list(csv.DictReader(handle))
    written = [r for r in rows if r["status"] == "written"]
    assert len(written) == 3 and [r["status"] for r in rows[3:]] == ["kept"] * 3
    with_boxes = [float(r["min_conf"]) for r in written if int(r["detections"])]
    assert with_boxes == sorted(with_boxes)
    assert (tmp_path / "runs" / "exp" / "contact_sheet.jpg").is_file()
    assert (tmp_path / "runs" / "exp" / "classes.names").read_text() == "a\n"  # `turboyolo review` reads it

    edited = labels[3]
    edited.write_text("0 0.5 0.5 0.2 0.2\n")  # a person corrects a model label: it counts as human now
    assert not is_model_made(edited) and count_model_made(labels) == (2, 4)
    assert main(args + ["--overwrite"]) == 0
    assert count_model_made(labels) == (6, 0)


def test_unlabeled_split_needs_an_entry(boxes_dataset, tiny_cfg, tiny_weights_file, tmp_path):
    data = tmp_path / "d.yaml"
    data.write_text(f"path: {boxes_dataset}\ntrain: images\nval: images\nnames: [obj]\n")
    args = ["label", "--cfg", str(tiny_cfg), "--weights", str(tiny_weights_file), "--data", str(data)]
    assert main(args) == 1
    data.write_text(f"path: {boxes_dataset}\ntrain: images\nval: images\nunlabeled: images\nnames: [obj]\n")
    from turboyolo.infer.labeling import split_images

    assert len(split_images(data, "unlabeled")) == 6


def test_run_label_is_the_job_without_the_cli(boxes_dataset, tiny_cfg, tiny_weights_file, tmp_path):
    from turboyolo.errors import FlagError
    from turboyolo.infer.labeling import LabelArgs, LabelRequest, run_label
    from turboyolo.infer.predict import PredictArgs

    with pytest.raises(FlagError, match="--nms-thres"):
        PredictArgs(nms_thres=1.5)
    (boxes_dataset / "labels" / "img000.txt").unlink()
    request = LabelRequest(tiny_weights_file, boxes_dataset / "images", tiny_cfg, PredictArgs(device="cpu"),
                           LabelArgs(split="train"), out_dir=tmp_path / "review")
    report = run_label(request)
    assert [r.status for r in report.rows].count("written") == 1 and len(report.rows) == 6
    assert report.summary().startswith("6 images: 1 labelled by the model")
    assert (tmp_path / "review" / "review.csv").is_file()


def test_a_label_a_person_saves_while_the_model_predicts_is_kept(boxes_dataset, tiny_cfg, tiny_weights_file,
                                                                 tmp_path, monkeypatch):
    """`label` decides which files to write before it predicts; a review save landing in between (the
    review server holds the same folder lock) is kept, never overwritten by the model's boxes."""
    from turboyolo.infer.predict import Predictor

    labels = sorted((boxes_dataset / "labels").glob("*.txt"))
    for path in labels:
        path.unlink()
    saved = labels[1]
    real_run = Predictor.run

    def run_while_a_person_saves(self, arrays, *args, **kwargs):
        if not saved.exists():
            saved.write_text("0 0.5 0.5 0.25 0.25\n")  # as the review server's save would, mid-run
        return real_run(self, arrays, *args, **kwargs)

    monkeypatch.setattr(Predictor, "run", run_while_a_person_saves)
    assert main(["label", "--cfg", str(tiny_cfg), "--weights", str(tiny_weights_file), "--data",
                 str(boxes_dataset / "images"), "--conf-thres", "0.2", "--device", "cpu",
                 "--project", str(tmp_path / "runs")]) == 0
    assert saved.read_text() == "0 0.5 0.5 0.25 0.25\n"
    assert not is_model_made(saved)
    assert all(p.is_file() for p in labels)
    with open(tmp_path / "runs" / "exp" / "review.csv") as handle:
        statuses = [row["status"] for row in csv.DictReader(handle)]
    assert statuses.count("kept") == 1 and statuses.count("written") == len(labels) - 1


def test_label_says_where_max_det_cut_what_it_wrote(boxes_dataset, tiny_cfg, tiny_weights_file, tmp_path,
                                                    capsys):
    """An untrained model sees boxes everywhere: each label file holds at most --max-det rows, and the
    summary says on how many images the cap dropped detections (they would train as background)."""
    for path in (boxes_dataset / "labels").glob("*.txt"):
        path.unlink()
    assert main(["label", "--cfg", str(tiny_cfg), "--weights", str(tiny_weights_file), "--data",
                 str(boxes_dataset / "images"), "--conf-thres", "0.001", "--max-det", "2", "--device", "cpu",
                 "--project", str(tmp_path / "runs")]) == 0
    labels = sorted((boxes_dataset / "labels").glob("*.txt"))
    assert labels and all(len(p.read_text().splitlines()) == 2 for p in labels)
    assert f"caps: 2 detections (--max-det) reached on {len(labels)} of {len(labels)} images" in \
        capsys.readouterr().err
