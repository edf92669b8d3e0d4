"""The review's data side without a server: orders, the model's disagreement, a label run directory."""

from __future__ import annotations

import csv

import pytest

from turboyolo.data.autolabels import record_model_labels
from turboyolo.errors import DataError
from turboyolo.review.items import ReviewSet, disagreement


def test_disagreement_is_zero_when_the_model_agrees_box_for_box_and_one_when_nothing_matches():
    labels = [[0, 0.3, 0.3, 0.2, 0.2], [1, 0.7, 0.7, 0.2, 0.2]]
    agree = [[1, 0.7, 0.7, 0.2, 0.2, 0.9], [0, 0.3, 0.3, 0.21, 0.2, 0.8]]
    assert disagreement(labels, agree) == 0.0
    assert disagreement(labels, [[1, 0.3, 0.3, 0.2, 0.2, 0.9]]) == 1.0  # right place, wrong class
    assert disagreement(labels, agree[:1]) == pytest.approx(1 - 2 / 3)  # one of two found
    assert disagreement([], []) == 0.0 and disagreement([], agree) == 1.0


def test_a_label_run_directory_is_reviewed_in_its_order_with_its_class_names(review_set, tmp_path):
    run = tmp_path / "runs" / "label" / "exp"
    run.mkdir(parents=True)
    (run / "classes.names").write_text("x\ny\nz\n")
    with open(run / "review.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "label", "status", "detections", "min_conf", "mean_conf"])
        for name, status in (("b.jpg", "written"), ("a.jpg", "kept"), ("c.png", "unreadable: broken")):
            writer.writerow([review_set / name, "", status, 0, 0, 0])
    record_model_labels([review_set.parent / "labels" / "b.txt"], weights="w.pt")
    review = ReviewSet.open(run)
    assert review.names == ["x", "y", "z"]
    assert [row["key"] for row in review.listing("review")] == ["b.jpg", "a.jpg"]
    assert [row["status"] for row in review.listing("review")] == ["model", "human"]
    assert [row["key"] for row in review.listing("unreviewed")] == ["b.jpg"]
    assert [row["key"] for row in review.listing("name")] == ["a.jpg", "b.jpg"]
    items, progress = review.listing_and_progress("unreviewed")
    assert [row["key"] for row in items] == ["b.jpg"]
    assert progress == review.progress() == {"model": 1, "reviewed": 0, "human": 1, "none": 0}


def test_a_data_file_reviews_its_splits_and_an_empty_one_is_refused(review_set, tmp_path):
    data = tmp_path / "d.yaml"
    data.write_text(f"path: {review_set}\ntrain: .\nval: .\nnames: [p, q]\n")
    review = ReviewSet.open(data)
    assert review.names == ["p", "q"] and len(review.items) == 3  # train and val are the same folder
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no images to review"):
        ReviewSet.open(tmp_path / "empty")
