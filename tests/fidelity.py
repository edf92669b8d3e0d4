"""Matching of turboyolo detections against Darknet's reference output (shared by tests and bench)."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "darknet" / "yolov3-tiny_valid.json"


def compare(reference: list[dict], ours: list[dict], images: dict[str, dict], net: int = 416) -> dict:
    """For each reference box, the same-class box of ours that best matches it.

    Returns the worst score difference and worst edge difference (in network pixels) among
    reference boxes with score >= 0.05, and the worst score difference among those >= 0.0055,
    plus any reference boxes left without a match.
    """
    worst_strong_score = worst_edge = worst_weak_score = 0.0
    unmatched = []
    for ref in reference:
        info = images[ref["file"]]
        scale = net / max(info["width"], info["height"])  # original -> network pixels
        candidates = [
            d for d in ours if d["file_name"] == ref["file"] and d["category_id"] == ref["class_index"]
        ]
        best, best_cost = None, None
        for det in candidates:
            edge = max(abs(a - b) for a, b in zip(_xyxy(ref["bbox"]), _xyxy(det["bbox"]))) * scale
            cost = edge + 100 * abs(det["score"] - ref["score"])
            if best_cost is None or cost < best_cost:
                best, best_cost = (edge, abs(det["score"] - ref["score"])), cost
        if best is None:
            unmatched.append(ref)
            continue
        edge, score_diff = best
        if ref["score"] >= 0.05:
            worst_strong_score = max(worst_strong_score, score_diff)
            worst_edge = max(worst_edge, edge)
        if ref["score"] >= 0.0055:
            worst_weak_score = max(worst_weak_score, score_diff)
            if score_diff > 0.005 or edge > 1.0:
                unmatched.append(ref)
    return {
        "strong_score": worst_strong_score,
        "strong_edge": worst_edge,
        "weak_score": worst_weak_score,
        "unmatched": [r for r in unmatched if r["score"] >= 0.0055],
    }


def _xyxy(box):
    x, y, w, h = box
    return x, y, x + w, y + h


def load_fixture():
    data = json.loads(FIXTURE.read_text())
    return data["detections"], {img["file"]: img for img in data["images"]}
