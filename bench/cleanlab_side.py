"""cleanlab's object-detection scores of the labels and predictions that bench/audit_injected.py writes.

Runs in cleanlab's own venv (``/work/venvs/cleanlab/bin/python bench/cleanlab_side.py IN.json OUT.json``);
turboyolo never imports cleanlab. IN: ``{"num_classes": K, "images": [{"bboxes": [[x1, y1, x2, y2]...],
"labels": [c...], "predictions": [[[x1, y1, x2, y2, conf]...] per class]}...]}``; OUT: per image the
label quality score (``get_label_quality_scores``), whether ``find_label_issues`` flags it, and the
per-box overlooked (per predicted box), swap and badloc (per given box) scores (NaN: no score).
"""

from __future__ import annotations

import json
import sys

import cleanlab
import numpy as np
from cleanlab.object_detection.filter import find_label_issues
from cleanlab.object_detection.rank import (
    compute_badloc_box_scores,
    compute_overlooked_box_scores,
    compute_swap_box_scores,
    get_label_quality_scores,
)


def main() -> int:
    source, target = sys.argv[1:3]
    data = json.loads(open(source).read())
    labels, predictions = [], []
    for image in data["images"]:
        labels.append({"bboxes": np.asarray(image["bboxes"], np.float32).reshape(-1, 4),
                       "labels": np.asarray(image["labels"], np.int64)})
        predictions.append(np.array([np.asarray(rows, np.float32).reshape(-1, 5)
                                     for rows in image["predictions"]], dtype=object))
    quality = get_label_quality_scores(labels, predictions, verbose=False)
    issues = find_label_issues(labels, predictions)

    def lists(scores):
        return [[None if not np.isfinite(v) else float(v) for v in np.asarray(s, np.float64).ravel()]
                for s in scores]

    out = {"version": cleanlab.__version__, "quality": [float(q) for q in quality],
           "issues": [bool(v) for v in issues],
           "overlooked": lists(compute_overlooked_box_scores(labels=labels, predictions=predictions)),
           "swap": lists(compute_swap_box_scores(labels=labels, predictions=predictions)),
           "badloc": lists(compute_badloc_box_scores(labels=labels, predictions=predictions))}
    open(target, "w").write(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
