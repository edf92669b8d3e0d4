"""The scores of :mod:`turboyolo.audit.scores` on hand-made labels and predictions: each kind of mistake
ranks above the boxes the model agrees with, and says the fix."""

from __future__ import annotations

import numpy as np
import pytest

from turboyolo.audit.calibration import Calibration, NothingThere, _isotonic
from turboyolo.audit.evidence import ImageEvidence
from turboyolo.audit.scores import ISSUE_FLOOR, Judges, image_score, score_all, score_image


def _clean_images(count: int, seed: int = 0) -> list[ImageEvidence]:
    """Images whose labels the model sees (same class, IoU ~0.8, confidence 0.6-0.95)."""
    rng = np.random.default_rng(seed)
    out = []
    for index in range(count):
        labels, preds = [], []
        for k in range(3):
            x, y = 20 + 60 * k, rng.uniform(10, 100)
            cls = int(rng.integers(2))
            labels.append([cls, x, y, x + 40, y + 40])
            preds.append([x + 2, y + 2, x + 42, y + 42, rng.uniform(0.6, 0.95), cls])
            preds.append([x + 2, y + 2, x + 42, y + 42, rng.uniform(0.0, 0.05), 1 - cls])  # multi-label
        out.append(ImageEvidence(f"clean{index}.jpg", 200, 160, np.array(labels, float),
                                 np.array(preds, float)))
    return out


def _one(labels, preds) -> ImageEvidence:
    return ImageEvidence("odd.jpg", 200, 160, np.array(labels, float).reshape(-1, 5),
                         np.array(preds, float).reshape(-1, 6))


@pytest.fixture
def calibration() -> Judges:
    clean = _clean_images(30)
    return Judges(Calibration(clean, 2), NothingThere(clean, 2), 2)


def test_agreeing_labels_score_low(calibration):
    rows = score_image(_clean_images(1, seed=5)[0], calibration)
    assert len(rows) == 3 and all(row.given for row in rows)
    assert max(row.score for row in rows) < 0.5
    # a box the model sees where it is, as its class, is no issue: "ok", no suggestion, not counted
    ok = [row for row in rows if row.score < ISSUE_FLOOR]
    assert ok and all(row.kind == "ok" and row.suggested_cls is None for row in ok)
    assert image_score("x", rows, 3).issues == 3 - len(ok)


def test_a_label_of_the_wrong_class_gets_the_class_the_model_sees(calibration):
    image = _one([[0, 20, 20, 60, 60]], [[21, 21, 61, 61, 0.9, 1], [21, 21, 61, 61, 0.01, 0]])
    [row] = score_image(image, calibration)
    assert (row.kind, row.suggested_cls) == ("class", 1) and row.score > 0.8


def test_a_badly_placed_label_gets_the_box_the_model_sees(calibration):
    # the model sees the object at (40..80); the label covers (20..60): IoU 1/3
    image = _one([[1, 20, 20, 60, 60]], [[40, 20, 80, 60, 0.9, 1]])
    [row] = score_image(image, calibration)
    assert row.kind == "location" and row.score > 0.8
    assert row.suggested_box == pytest.approx((40, 20, 80, 60)) and row.suggested_cls == 1
    # and that prediction is the suggestion, not also a missing box
    assert not [r for r in score_image(image, calibration) if r.kind == "missing"]


def test_a_label_around_nothing_is_spurious(calibration):
    image = _one([[0, 20, 20, 60, 60], [1, 120, 20, 160, 60]], [[121, 21, 161, 61, 0.9, 1]])
    rows = score_image(image, calibration)
    assert rows[0].kind == "spurious" and rows[0].score > 0.5
    assert rows[1].score < 0.1


def test_a_confident_unlabelled_object_is_missing_once_across_classes(calibration):
    image = _one([[0, 20, 20, 60, 60]], [[21, 21, 61, 61, 0.9, 0], [120, 80, 160, 120, 0.92, 1],
                                        [121, 80, 160, 121, 0.3, 0], [5, 130, 15, 140, 0.001, 0]])
    missing = [row for row in score_image(image, calibration) if row.kind == "missing"]
    assert len(missing) == 1  # one row for the place (its two classes), none for the faint box
    assert missing[0].cls == missing[0].suggested_cls == 1
    assert missing[0].box == pytest.approx((120, 80, 160, 120))
    assert missing[0].score > 0.8


def test_a_neighbour_seen_by_the_model_is_no_location_suggestion(calibration):
    # two touching labels, each matched: the other's prediction overlaps each a little
    image = _one([[0, 20, 20, 60, 60], [0, 50, 20, 90, 60]],
                 [[20, 20, 60, 60, 0.9, 0], [50, 20, 90, 60, 0.9, 0]])
    rows = score_image(image, calibration)
    assert all(row.kind == "ok" or row.score < 0.2 for row in rows), rows


def test_images_rank_by_their_mistakes_and_rows_come_worst_first():
    images = _clean_images(10)
    images.append(_one([[0, 20, 20, 60, 60]], [[21, 21, 61, 61, 0.9, 1]]))
    rows, ranking = score_all(images, 2)
    assert ranking[0].image == "odd.jpg" and ranking[0].kinds["class"] > 0.8 and ranking[0].chance > 0.8
    assert [row.score for row in rows] == sorted((row.score for row in rows), reverse=True)
    assert rows[0].image == "odd.jpg"
    assert image_score("x", [], 0).score == 0


def test_no_predictions_at_all_makes_every_label_spurious(calibration):
    rows = score_image(_one([[0, 20, 20, 60, 60]], []), calibration)
    assert rows[0].kind == "spurious" and rows[0].score > 0.5


def test_the_calibrated_chance_grows_with_the_confidence_and_stays_in_0_1():
    rng = np.random.default_rng(2)
    images = []
    for index in range(20):  # confident predictions match their label, faint ones sit on nothing
        labels = [[0, 10, 10, 50, 50]]
        preds = [[10, 10, 50, 50, rng.uniform(0.5, 1), 0], [100, 100, 140, 140, rng.uniform(0, 0.5), 0]]
        images.append(ImageEvidence(f"{index}.jpg", 200, 200, np.array(labels, float),
                                    np.array(preds, float)))
    chance = Calibration(images, 1)(np.linspace(0, 1, 11), np.zeros(11))
    assert np.all(np.diff(chance) >= 0) and chance[0] < 0.1 and chance[-1] > 0.9
    assert chance.min() >= 0 and chance.max() <= 1


def test_the_calibration_does_not_depend_on_the_order_of_tied_confidences():
    """Scores read back from predictions.json are rounded, so ties are common: the same predictions in
    another order give the same curve."""
    x = np.array([0.3, 0.5, 0.5, 0.7])
    curves = [_isotonic(x, np.array(y, bool)) for y in ([0, 0, 1, 1], [0, 1, 0, 1])]
    np.testing.assert_array_equal(curves[0][0], curves[1][0])
    np.testing.assert_array_equal(curves[0][1], curves[1][1])
    assert np.interp(0.45, *curves[0]) == pytest.approx(0.375)


def test_the_chance_of_nothing_there_falls_as_the_sign_of_an_object_grows():
    clean = _clean_images(30)
    nothing = NothingThere(clean, 2)
    chances = [nothing(sign, 0) for sign in (0.0, 0.1, 0.3, 0.6, 0.9)]
    assert chances == sorted(chances, reverse=True) and chances[0] > 0.5 and chances[-1] < 0.05


def test_a_contact_sheet_tile_of_a_whole_photo_box_needs_no_photo_sized_canvas():
    """A box as large as a camera photo is drawn into its 192-px tile from the photo itself: the crop's
    memory stays a tile's, not a canvas three times the photo's side (about 1 GB at 24 MP)."""
    import tracemalloc

    from turboyolo.audit.sheet import TILE, _crop
    from turboyolo.formats.issues import LabelIssue

    photo = np.random.default_rng(0).integers(0, 255, (2000, 3000, 3), np.uint8)
    whole = LabelIssue("p.jpg", "spurious", 0.9, 0, (0.0, 0.0, 3000.0, 2000.0), width=3000, height=2000)
    tracemalloc.start()
    try:
        tile = _crop(photo, whole, [])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tile.shape == (TILE, TILE, 3) and peak < photo.nbytes  # the old canvas: 13.5 x the photo
    small = LabelIssue("p.jpg", "spurious", 0.9, 0, (0.0, 0.0, 10.0, 10.0), width=3000, height=2000)
    corner = _crop(photo, small, [])  # the box at the photo's corner: grey where the crop leaves the photo
    assert (corner[5, 5] == 127).all() and not (corner[TILE - 5, TILE - 5] == 127).all()
