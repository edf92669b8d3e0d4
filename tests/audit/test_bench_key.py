"""The answer keys of bench/audit_injected.py: the person-checked boxes (bench/audit_pool.py) count as
missing boxes in the box-level key of every method alike, only with the verdicts asked for, and a deeper
pool keeps the verdicts already given."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        import audit_injected
        import audit_pool

        yield audit_injected, audit_pool
    finally:
        sys.path.remove(str(BENCH))


def _truth(tmp_path: Path) -> list[dict]:
    """Two images: A with one dropped box, B with none injected."""
    return [{"image": str(tmp_path / "A.jpg"), "width": 100, "height": 100,
             "mistakes": [{"kind": "missing", "class": 0, "box": [10, 10, 30, 30]}]},
            {"image": str(tmp_path / "B.jpg"), "width": 100, "height": 100, "mistakes": []}]


def _write_key(path: Path, rows: list[tuple]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "class", "x1", "y1", "x2", "y2", "tile", "verdict", "seen_by"])
        for i, (image, box, verdict) in enumerate(rows, start=1):
            writer.writerow([image, 0, *box, i, verdict, ""])


def test_checked_boxes_join_the_key_by_verdict(bench, tmp_path):
    audit_injected, _ = bench
    key = tmp_path / "key.csv"
    _write_key(key, [("B", (50, 50, 70, 70), "yes"), ("B", (0, 40, 15, 60), "cut"),
                     ("A", (60, 60, 80, 80), "no")])
    truth = _truth(tmp_path)
    strict = audit_injected.with_checked_boxes(truth, str(key))
    border = audit_injected.with_checked_boxes(truth, str(key), ("yes", "cut"))
    count = {name: sum(m["kind"] == "missing" for t in k for m in t["mistakes"])
             for name, k in (("truth", truth), ("strict", strict), ("border", border))}
    assert count == {"truth": 1, "strict": 2, "border": 3}

    # a ranking whose first row is the unboxed object B holds: wrong by the injection's key, right by the
    # checked one, for whichever method ranked it (the key does not know who found it)
    image = {name: os.path.realpath(tmp_path / f"{name}.jpg") for name in "AB"}
    rows = [(image["B"], 0, [51, 51, 70, 70], 0.9), (image["A"], 0, [10, 10, 30, 31], 0.8)]
    for key_truth, expected in ((truth, 0.5), (strict, 1.0)):
        mistakes = audit_injected._flat(key_truth)
        positives = sum(m["kind"] == "missing" for m in mistakes)
        ap = audit_injected.average_precision(*audit_injected._match_missing(rows, mistakes), positives)
        assert ap == pytest.approx(expected)


def test_a_key_naming_another_data_set_is_refused(bench, tmp_path):
    audit_injected, _ = bench
    key = tmp_path / "key.csv"
    _write_key(key, [("C", (1, 1, 9, 9), "yes")])
    with pytest.raises(SystemExit, match="not in this copy"):
        audit_injected.with_checked_boxes(_truth(tmp_path), str(key))


def test_a_deeper_pool_keeps_the_verdicts_given(bench, tmp_path):
    _, audit_pool = bench
    first = [{"image": "A", "class": 0, "box": [1.0, 2.0, 3.0, 4.0], "seen": ["w:turboyolo:1"], "tile": 1}]
    path = tmp_path / "pool.csv"
    assert audit_pool.write_csv(path, first) == 0
    rows = list(csv.DictReader(path.open()))
    rows[0]["verdict"] = "yes"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, rows[0].keys())
        writer.writeheader()
        writer.writerows(rows)
    deeper = [{"image": "A", "class": 0, "box": [0.0, 0.0, 1.0, 1.0], "seen": ["w:cleanlab:9"], "tile": 1},
              {**first[0], "tile": 2}]
    assert audit_pool.write_csv(path, deeper) == 1
    verdicts = {row["tile"]: row["verdict"] for row in csv.DictReader(path.open())}
    assert verdicts == {"1": "", "2": "yes"}
