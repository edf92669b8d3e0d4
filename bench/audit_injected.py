"""How well `turboyolo audit` finds label mistakes we put there, beside cleanlab on the same predictions.

1. The data set (both splits) is copied with its labels changed by a seeded draw: ~10% of the boxes
   dropped (missing), ~5% given another class (class), ~5% moved and resized to IoU 0.1-0.5 with where
   they were (location), and ~3% as many boxes added around background (spurious: at most IoU 0.05 with any
   box); `truth.json` records every change.
2. `turboyolo audit` runs on the copy (folds fine-tuned from `--weights`), or `--predictions` reuses the
   out-of-sample predictions of an earlier audit of the same copy (then only the scoring runs again).
3. The same predictions and labels go to cleanlab (`bench/cleanlab_side.py`, run by the Python of
   `--cleanlab-python`, its own venv: cleanlab is never imported here): `get_label_quality_scores`,
   `find_label_issues` and the per-box scores of its object-detection module; once as they are, once
   with the confidences divided by the median confidence of the predictions that match a label (clipped
   at 1): cleanlab's fixed thresholds (0.95 "sure", 0.5 "unsure") expect a detector's softmax-like
   scores, and YOLO's objectness x class score rarely passes 0.95.
4. Average precision, per kind, of each ranking at finding the injected mistakes: **box level**, the
   boxes ranked by the method's score for that kind (ours: the rows of that kind in label_issues.csv;
   cleanlab: its overlooked / swap / badloc box scores, badloc also for spurious), a missing box found
   by a row or a predicted box of IoU >= 0.5 with it; **image level**, the images ranked by the overall
   image score, the images holding a mistake of that kind against all others (`any`: every kind).
   Original mistakes of the data set count against every method alike; ``--checked`` (images) and
   ``--checked-boxes`` (boxes, judged from the pool of ``bench/audit_pool.py``) add the ones a person
   confirmed to the key, for every method alike (levels ``image, checked``, ``box, checked`` and
   ``box, checked + border``).

Rows go to bench/results/audit_injected.csv; a markdown table is printed.

Usage::

    .venv/bin/python bench/audit_injected.py --data /root/.cache/turboyolo/datasets/bccd/bccd.data \
        --out /work/data/audit-bccd [--seed 1] [--epochs 10] [--img-size 416] \
        [--predictions /work/data/audit-bccd/runs/audit/predictions.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from defaults_250 import commit, machine  # noqa: E402

FIELDS = ("date", "machine", "data", "seed", "folds", "epochs", "img_size", "method", "level", "kind",
          "positives", "ap", "audit_minutes", "commit")
RATES = {"missing": 0.10, "class": 0.05, "location": 0.05}
SPURIOUS_RATE = 0.03
KINDS = ("missing", "class", "location", "spurious")
CLEANLAB_PYTHON = "/work/venvs/cleanlab/bin/python"
STRETCH = 0.5  # cleanlab's second run: confidences / their median over the predictions that match a label


# ------------------------------------------------------------------------------------------- injection
def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of one xyxy box ``a`` with each of ``b`` ``[n, 4]``."""
    b = np.asarray(b, np.float64).reshape(-1, 4)
    lt, rb = np.maximum(a[:2], b[:, :2]), np.minimum(a[2:], b[:, 2:])
    inter = np.clip(rb - lt, 0, None).prod(1)
    union = (a[2:] - a[:2]).prod() + (b[:, 2:] - b[:, :2]).prod(1) - inter
    return inter / np.maximum(union, 1e-9)


def _moved(box: np.ndarray, width: int, height: int, rng: np.random.Generator) -> np.ndarray | None:
    """``box`` shifted and resized (inside the image) to IoU 0.1-0.5 with itself; None after 200 tries."""
    w, h = box[2] - box[0], box[3] - box[1]
    for _ in range(200):
        scale = np.exp(rng.uniform(-0.7, 0.7, 2))
        nw, nh = w * scale[0], h * scale[1]
        cx = (box[0] + box[2]) / 2 + rng.uniform(-1, 1) * w
        cy = (box[1] + box[3]) / 2 + rng.uniform(-1, 1) * h
        new = np.array([cx - nw / 2, cy - nh / 2, cx + nw / 2, cy + nh / 2])
        new = np.clip(new, 0, [width, height, width, height])
        if new[2] - new[0] < 4 or new[3] - new[1] < 4:
            continue
        if 0.1 <= _iou(box, new[None])[0] <= 0.5:
            return new
    return None


def _background_box(boxes: np.ndarray, sizes: np.ndarray, width: int, height: int,
                    rng: np.random.Generator) -> np.ndarray | None:
    """A box of a size drawn from the data set's boxes, placed where it overlaps no box (IoU <= 0.05)."""
    for _ in range(300):
        w, h = sizes[rng.integers(len(sizes))]
        w, h = min(w, width - 2), min(h, height - 2)
        x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
        new = np.array([x, y, x + w, y + h])
        if not len(boxes) or _iou(new, boxes).max() <= 0.05:
            return new
    return None


def inject(source: str, out: Path, seed: int) -> tuple[Path, list[dict]]:
    """Copy ``source``'s two splits into ``out`` with injected mistakes; returns the copy's .data and the
    truth (one entry per image: its injected mistakes)."""
    from turboyolo.boxes import cxcywh_to_xyxy
    from turboyolo.data.scan import scan_dataset
    from turboyolo.formats.datasets import load_data_config, write_darknet_data
    from turboyolo.formats.labels import write_names

    rng = np.random.default_rng(seed)
    config = load_data_config(source)
    samples = {split: scan_dataset(source, split, config.names).samples for split in ("train", "val")}
    all_boxes = [cxcywh_to_xyxy(np.asarray(s.labels[:, 1:], np.float64)) * ([s.hw[1], s.hw[0]] * 2)
                 for split in samples.values() for s in split if len(s.labels)]
    sizes = np.concatenate([b[:, 2:] - b[:, :2] for b in all_boxes])
    total = sum(len(b) for b in all_boxes)
    images = [(split, s) for split, items in samples.items() for s in items]
    spurious_at = rng.choice(len(images), size=int(round(SPURIOUS_RATE * total)), replace=True)
    if out.exists():
        shutil.rmtree(out)
    truth, lists = [], {"train": [], "val": []}
    for index, (split, sample) in enumerate(images):
        height, width = sample.hw
        target = out / "images" / split / sample.image.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sample.image, target)
        lists[split].append(str(target))
        rows, mistakes = _inject_image(sample, width, height, rng, int((spurious_at == index).sum()), sizes,
                                       len(config.names))
        label = out / "labels" / split / f"{target.stem}.txt"
        label.parent.mkdir(parents=True, exist_ok=True)
        label.write_text("".join(f"{int(c)} {(x1 + x2) / 2 / width:.6f} {(y1 + y2) / 2 / height:.6f} "
                                 f"{(x2 - x1) / width:.6f} {(y2 - y1) / height:.6f}\n"
                                 for c, x1, y1, x2, y2 in rows))
        truth.append({"image": str(target), "width": width, "height": height, "mistakes": mistakes})
    for split, paths in lists.items():
        (out / f"{split}.txt").write_text("".join(f"{p}\n" for p in paths))
    write_names(out / "classes.names", config.names)
    data = write_darknet_data(out / "injected.data", len(config.names), out / "train.txt", out / "val.txt",
                              out / "classes.names")
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return data, truth


def _inject_image(sample, width: int, height: int, rng: np.random.Generator, spurious: int,
                  sizes: np.ndarray, num_classes: int) -> tuple[list[list[float]], list[dict]]:
    from turboyolo.boxes import cxcywh_to_xyxy

    labels = np.asarray(sample.labels, np.float64).reshape(-1, 5)
    boxes = cxcywh_to_xyxy(labels[:, 1:]) * [width, height, width, height]
    rows, mistakes = [], []
    for cls, box in zip(labels[:, 0].astype(int), boxes):
        draw = rng.random()
        if draw < RATES["missing"]:
            mistakes.append({"kind": "missing", "class": int(cls), "box": box.tolist()})
            continue
        if draw < RATES["missing"] + RATES["class"]:
            if num_classes > 1:  # one class: the box stays as it is
                new_cls = int((cls + rng.integers(1, num_classes)) % num_classes)
                mistakes.append({"kind": "class", "class": new_cls, "box": box.tolist(), "was": int(cls)})
                rows.append([new_cls, *box])
                continue
        elif draw < RATES["missing"] + RATES["class"] + RATES["location"]:
            moved = _moved(box, width, height, rng)
            if moved is not None:
                mistakes.append({"kind": "location", "class": int(cls), "box": moved.tolist(),
                                 "was": box.tolist()})
                rows.append([cls, *moved])
                continue
        rows.append([cls, *box])
    for _ in range(spurious):
        taken = np.concatenate([boxes, np.asarray([r[1:] for r in rows]).reshape(-1, 4)])  # dropped ones too
        placed = _background_box(taken, sizes, width, height, rng)
        if placed is not None:
            cls = int(rng.integers(num_classes))
            mistakes.append({"kind": "spurious", "class": cls, "box": placed.tolist()})
            rows.append([cls, *placed])
    return rows, mistakes


# ------------------------------------------------------------------------------------------ evaluation
def average_precision(scores: list[float], hits: list[bool], positives: int) -> float:
    """AP of a ranking: the mean over the positives of the precision at each one found (0 for those never
    ranked); ties broken against the method (positives after negatives of the same score)."""
    if positives == 0:
        return float("nan")
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], hits[i]))
    found, total = 0, 0.0
    for rank, i in enumerate(order, start=1):
        if hits[i]:
            found += 1
            total += found / rank
    return total / positives


def _match_given(rows: list, mistakes: list[dict], kind: str) -> tuple[list[float], list[bool]]:
    """Scores and hits of ranked given boxes against the injected mistakes of ``kind`` (a given box hits
    when it is the injected box: same class, IoU >= 0.9); ``rows``: (image, class, box, score)."""
    truth: dict[str, list] = {}
    for mistake in mistakes:
        if mistake["kind"] == kind:
            truth.setdefault(mistake["image"], []).append(mistake)
    scores, hits = [], []
    for image, cls, box, score in rows:
        candidates = [m for m in truth.get(image, ()) if m["class"] == cls and not m.get("_used")]
        hit = next((m for m in candidates if _iou(np.asarray(box), np.asarray([m["box"]]))[0] >= 0.9), None)
        if hit is not None:
            hit["_used"] = True
        scores.append(score)
        hits.append(hit is not None)
    for mistake in mistakes:
        mistake.pop("_used", None)
    return scores, hits


def _match_missing(rows: list, mistakes: list[dict]) -> tuple[list[float], list[bool]]:
    """Scores and hits of ranked predicted boxes against the dropped boxes (IoU >= 0.5, each dropped box
    found once: the best-ranked box that covers it; later ones count as false)."""
    dropped: dict[str, list] = {}
    for mistake in mistakes:
        if mistake["kind"] == "missing":
            dropped.setdefault(mistake["image"], []).append(mistake)
    order = sorted(range(len(rows)), key=lambda i: -rows[i][3])
    scores, hits = [], []
    for i in order:
        image, _, box, score = rows[i]
        free = [m for m in dropped.get(image, ()) if not m.get("_used")]
        ious = _iou(np.asarray(box), np.asarray([m["box"] for m in free])) if free else np.zeros(0)
        hit = free[int(np.argmax(ious))] if len(ious) and ious.max() >= 0.5 else None
        if hit is not None:
            hit["_used"] = True
        scores.append(score)
        hits.append(hit is not None)
    for mistake in mistakes:
        mistake.pop("_used", None)
    return scores, hits


def _flat(truth: list[dict]) -> list[dict]:
    return [{**m, "image": os.path.realpath(t["image"])} for t in truth for m in t["mistakes"]]


def evaluate_ours(run_dir: Path, truth: list[dict], checked: list[dict] | None = None,
                  boxes: dict[str, list[dict]] | None = None) -> dict[tuple[str, str], tuple[float, int]]:
    """(level, kind) -> (AP, positives) of the audit's label_issues.csv and image_ranking.csv; with
    ``checked`` (:func:`with_checked`), the image level against that key too (level ``image, checked``);
    with ``boxes`` (level -> a key of :func:`with_checked_boxes`), box-level ``missing`` against each."""
    import csv

    out = _box_level(lambda kind: our_rows(run_dir, kind), _flat(truth))
    for level, key in (boxes or {}).items():
        out.update(_box_level(lambda kind: our_rows(run_dir, kind), _flat(key), level, ("missing",)))
    with open(run_dir / "image_ranking.csv", newline="") as handle:
        ranking = {os.path.realpath(row["image"]): float(row["score"]) for row in csv.DictReader(handle)}
    out.update(_image_level(ranking, truth))
    if checked is not None:
        out.update(_image_level(ranking, checked, "image, checked"))
    return out


def _box_level(rows_of, mistakes: list[dict], level: str = "box", kinds=KINDS
               ) -> dict[tuple[str, str], tuple[float, int]]:
    out = {}
    for kind in kinds:
        rows = rows_of(kind)
        positives = sum(1 for m in mistakes if m["kind"] == kind)
        matched = _match_missing(rows, mistakes) if kind == "missing" else _match_given(rows, mistakes, kind)
        out[(level, kind)] = (average_precision(*matched, positives), positives)
    return out


def _image_level(ranking: dict[str, float], truth: list[dict], level: str = "image"
                 ) -> dict[tuple[str, str], tuple[float, int]]:
    out = {}
    for kind in (*KINDS, "any"):
        holding = {os.path.realpath(t["image"]) for t in truth
                   if any(kind in ("any", m["kind"]) for m in t["mistakes"])}
        images = list(ranking)
        hits = [image in holding for image in images]
        out[(level, kind)] = (average_precision([ranking[i] for i in images], hits, sum(hits)), sum(hits))
    return out


def with_checked(truth: list[dict], path: str) -> list[dict]:
    """The image-level key with the data set's own mistakes that a person confirmed: ``path`` is a CSV
    (image, original_mistake yes/no, what was seen) of images looked at by eye, such as
    bench/results/bccd_unboxed_checked.csv (the images of BCCD that two injections left without a mistake;
    yes where a whole cell, not cut by the border, has no box). A ``yes`` image holds a mistake of kind
    ``missing`` (no box: only the image level uses this key). Images named there and not in ``truth`` are
    an error (another data set's file)."""
    import csv

    with open(path, newline="") as handle:
        seen = {row["image"]: row["original_mistake"].strip().lower() == "yes"
                for row in csv.DictReader(handle)}
    by_stem = {Path(t["image"]).stem: t for t in truth}
    unknown = sorted(set(seen) - set(by_stem))
    if unknown:
        raise SystemExit(f"{path}: {len(unknown)} image(s) not in this copy, e.g. {unknown[0]}")
    return [{**t, "mistakes": [*t["mistakes"], {"kind": "missing", "checked": True}]}
            if seen.get(Path(t["image"]).stem) else t for t in truth]


def with_checked_boxes(truth: list[dict], path: str, verdicts: tuple[str, ...] = ("yes",)) -> list[dict]:
    """The box-level key with the data set's own unboxed objects that a person confirmed: ``path`` is a CSV
    (image, class, x1, y1, x2, y2 in the image's pixels, verdict, ...) of candidate boxes looked at by eye,
    such as bench/results/bccd_unboxed_boxes.csv (made by ``bench/audit_pool.py``: the rows that the
    methods' rankings put first and the injection's key calls wrong; verdict ``yes``: a whole object with
    no label, ``cut``: an object cut by the image border with no label, ``no``: anything else). A box
    whose verdict is in ``verdicts`` is added as a missing box (kind ``missing``); the others change
    nothing. Images named there and not in ``truth`` are an error."""
    import csv

    added: dict[str, list[dict]] = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            if row["verdict"].strip().lower() in verdicts:
                box = [float(row[k]) for k in ("x1", "y1", "x2", "y2")]
                added.setdefault(row["image"], []).append({"kind": "missing", "class": int(row["class"]),
                                                           "box": box, "checked": True})
    by_stem = {Path(t["image"]).stem: t for t in truth}
    unknown = sorted(set(added) - set(by_stem))
    if unknown:
        raise SystemExit(f"{path}: {len(unknown)} image(s) not in this copy, e.g. {unknown[0]}")
    return [{**t, "mistakes": [*t["mistakes"], *added.get(Path(t["image"]).stem, ())]} for t in truth]


def stretch_factor(evidences, quantile: float) -> float:
    """The confidence below which ``quantile`` of the predictions that match a label of their class lie:
    dividing by it puts the detector's confidences on the scale cleanlab's fixed thresholds expect (it
    treats >= 0.95 as sure and < 0.5 as unsure; YOLO's objectness x class rarely passes 0.95)."""
    matched = []
    for ev in evidences:
        ious = ev.ious()
        if ious.size:
            hit = ((ious >= 0.5) & (ev.preds[:, 5:6] == ev.labels[None, :, 0])).any(1)
            matched.append(ev.preds[hit, 4])
    return float(np.quantile(np.concatenate(matched), quantile))


def cleanlab_side(run_dir: Path, data: Path, python: str, stretch: float | None = None) -> dict:
    """cleanlab fed the audit's predictions and the copy's labels (``bench/cleanlab_side.py`` in its own
    venv); with ``stretch`` (a quantile), the confidences divided by :func:`stretch_factor` first (clipped
    at 1). Returns the images' keys, their given boxes and predictions, cleanlab's output and the factor."""
    from turboyolo.audit.job import collect, evidence_of, read_predictions

    audited = collect(data)
    predictions = read_predictions(str(run_dir / "predictions.json"), audited)
    evidences = [evidence_of(s, predictions[os.path.realpath(s.image)]) for s in audited.samples
                 if os.path.realpath(s.image) in predictions]
    num_classes = len(audited.names)
    factor = stretch_factor(evidences, stretch) if stretch else 1.0
    images, pred_rows = [], []
    for ev in evidences:
        ev.preds[:, 4] = np.minimum(ev.preds[:, 4] / factor, 1.0)
        per_class = [ev.preds[ev.preds[:, 5] == k][:, :5].tolist() for k in range(num_classes)]
        images.append({"bboxes": ev.labels[:, 1:5].tolist(), "labels": ev.labels[:, 0].astype(int).tolist(),
                       "predictions": per_class})
        pred_rows.append([row for k in range(num_classes) for row in ev.preds[ev.preds[:, 5] == k].tolist()])
    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "in.json", Path(tmp) / "out.json"
        source.write_text(json.dumps({"num_classes": num_classes, "images": images}))
        subprocess.run([python, str(Path(__file__).with_name("cleanlab_side.py")), str(source), str(target)],
                       check=True)
        result = json.loads(target.read_text())
    return {"keys": [os.path.realpath(ev.image) for ev in evidences], "evidences": evidences,
            "pred_rows": pred_rows, "result": result, "factor": factor}


def cleanlab_rows(side: dict, kind: str) -> list:
    """cleanlab's boxes for ``kind`` as (image, class, box, score), a higher score likelier a mistake (1 -
    its score): the overlooked score per predicted box for missing, swap for class, badloc for location
    and spurious."""
    keys, evidences, result = side["keys"], side["evidences"], side["result"]
    if kind == "missing":
        return [(key, int(p[5]), p[:4], 1 - s) for key, preds, scores in zip(keys, side["pred_rows"],
                                                                             result["overlooked"])
                for p, s in zip(preds, scores) if s is not None]
    name = {"class": "swap", "location": "badloc", "spurious": "badloc"}[kind]
    return [(key, int(c), box, 1 - s) for key, ev, scores in zip(keys, evidences, result[name])
            for (c, *box), s in zip(ev.labels.tolist(), scores) if s is not None]


def our_rows(run_dir: Path, kind: str) -> list:
    """The audit's rows of ``kind`` in label_issues.csv as (image, class, box, score)."""
    from turboyolo.formats.issues import read_issues

    return [(os.path.realpath(r.image), r.cls, r.box, r.score)
            for r in read_issues(run_dir) if r.kind == kind]


def evaluate_cleanlab(run_dir: Path, data: Path, truth: list[dict], python: str, stretch: float | None = None,
                      checked: list[dict] | None = None, boxes: dict[str, list[dict]] | None = None
                      ) -> tuple[dict[tuple[str, str], tuple[float, int]], str]:
    """The same (level, kind) table for cleanlab (:func:`cleanlab_side`); ``checked`` and ``boxes``: as
    :func:`evaluate_ours`."""
    side = cleanlab_side(run_dir, data, python, stretch)
    keys, result, factor = side["keys"], side["result"], side["factor"]
    out = _box_level(lambda kind: cleanlab_rows(side, kind), _flat(truth))
    for level, key in (boxes or {}).items():
        out.update(_box_level(lambda kind: cleanlab_rows(side, kind), _flat(key), level, ("missing",)))
    ranking = {key: 1 - q for key, q in zip(keys, result["quality"])}
    out.update(_image_level(ranking, truth))
    if checked is not None:
        out.update(_image_level(ranking, checked, "image, checked"))
    flagged = {key for key, flag in zip(keys, result["issues"]) if flag}
    holding = {os.path.realpath(t["image"]) for t in truth if t["mistakes"]}
    note = (f"cleanlab {result['version']}{f' (confidences / {factor:.3f})' if stretch else ''} "
            f"find_label_issues flags {len(flagged)} of {len(keys)} images: {len(flagged & holding)} hold an "
            f"injected mistake ({len(holding)} do)")
    return out, note


# ---------------------------------------------------------------------------------------------- driver
def run(args: argparse.Namespace) -> int:
    from turboyolo.audit.job import AuditArgs, AuditRequest, run_audit
    from turboyolo.options import RunDirArgs

    out = Path(args.out)
    if (out / "set" / "truth.json").exists():  # made by an earlier call with this --out
        data, truth = out / "set" / "injected.data", json.loads((out / "set" / "truth.json").read_text())
    else:
        data, truth = inject(args.data, out / "set", args.seed)
    counts = {kind: sum(m["kind"] == kind for t in truth for m in t["mistakes"]) for kind in KINDS}
    held = sum(bool(t["mistakes"]) for t in truth)
    print(f"injected into {data}: {counts} in {held} of {len(truth)} images")
    audit = AuditArgs(folds=args.folds, epochs=args.epochs, img_size=args.img_size, config=args.config,
                      seed=args.seed, workers=args.workers, predictions=args.predictions)
    started = time.time()
    report = run_audit(AuditRequest(str(data), args.weights, None, audit,
                                    RunDirArgs(project=str(out / "runs"), name="audit")))
    print(report.summary())
    minutes = report.minutes if not args.predictions else float("nan")
    checked = with_checked(truth, args.checked) if args.checked else None
    boxes = {"box, checked": with_checked_boxes(truth, args.checked_boxes),
             "box, checked + border": with_checked_boxes(truth, args.checked_boxes, ("yes", "cut"))
             } if args.checked_boxes else None
    ours = evaluate_ours(report.run_dir, truth, checked, boxes)
    theirs, note = evaluate_cleanlab(report.run_dir, data, truth, args.cleanlab_python, checked=checked,
                                     boxes=boxes)
    stretched, note2 = evaluate_cleanlab(report.run_dir, data, truth, args.cleanlab_python, STRETCH, checked,
                                         boxes)
    print(f"\n{Path(args.data).name}, seed {args.seed}: {counts}; audit {minutes:.1f} min "
          f"({time.time() - started:.0f} s this call); {note}; {note2}\n")
    print("| level | kind | injected | turboyolo audit AP | cleanlab AP | cleanlab AP, confidences "
          "stretched |\n|---|---|---|---|---|---|")
    levels = ("box", "box, checked", "box, checked + border", "image", "image, checked")
    for key in sorted(ours, key=lambda k: (levels.index(k[0]), (*KINDS, "any").index(k[1]))):
        print(f"| {key[0]} | {key[1]} | {ours[key][1]} | {ours[key][0]:.3f} | {theirs[key][0]:.3f} | "
              f"{stretched[key][0]:.3f} |")
    if args.record:
        _record(args, {"turboyolo": ours, "cleanlab": theirs, "cleanlab-stretched": stretched}, minutes)
    return 0


def _record(args, tables: dict, minutes) -> None:
    import csv
    import datetime

    path = Path(__file__).parent / "results" / "audit_injected.csv"
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, FIELDS)
        if new:
            writer.writeheader()
        for method, table in tables.items():
            for (level, kind), (ap, positives) in table.items():
                writer.writerow({"date": datetime.datetime.now().isoformat(timespec="minutes"),
                                 "machine": machine(), "data": Path(args.data).name, "seed": args.seed,
                                 "folds": args.folds, "epochs": args.epochs, "img_size": args.img_size,
                                 "method": method, "level": level, "kind": kind, "positives": positives,
                                 "ap": f"{ap:.4f}", "audit_minutes": f"{minutes:.1f}", "commit": commit()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the data set to copy (.data / data.yaml)")
    parser.add_argument("--out", required=True, help="work folder: set/ (the copy), runs/ (the audits)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the injection and of the audit")
    parser.add_argument("--weights", default="yolov3-tiny")
    parser.add_argument("--config", default=None, help="recipe of each fold's training (e.g. trees)")
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--img-size", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--predictions", default=None,
                        help="an earlier audit's predictions.json of this copy: only score again")
    parser.add_argument("--cleanlab-python", default=CLEANLAB_PYTHON)
    parser.add_argument("--checked", default=None,
                        help="CSV of images a person looked at (image,original_mistake,what was seen): the "
                             "image level is also scored with their confirmed own mistakes in the key")
    parser.add_argument("--checked-boxes", default=None,
                        help="CSV of candidate boxes a person looked at (bench/audit_pool.py): box-level "
                             "missing is also scored with the confirmed unboxed objects in the key")
    parser.add_argument("--record", action="store_true", help="append the rows to bench/results")
    return run(parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
