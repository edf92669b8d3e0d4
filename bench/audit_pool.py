"""The boxes to look at by eye for a box-level key with a data set's own unboxed objects (pooling).

`bench/audit_injected.py` scores box-level `missing` against the boxes it dropped. A data set that already
lacked boxes (BCCD: whole red cells nobody boxed) makes every method's best rows look wrong to that key.
The fix used in retrieval evaluation (TREC pooling) is to judge what the methods put first: this script
takes, for each audit run given and each method on its predictions (turboyolo's missing rows, cleanlab's
overlooked scores as they are and with the confidences stretched), the rows among its first ``--depth``
that the injection's key calls wrong, maps them to the original data set, leaves out those an original label
covers (IoU >= 0.5: a label the benchmark moved or dropped, never an unboxed object), merges those of one
place (IoU >= 0.3, the first box seen kept), and writes

- ``--csv``: one row per candidate (image, class, x1 y1 x2 y2 in the image's pixels, tile, the methods
  and ranks that put it there) with an empty ``verdict`` for the person: ``yes`` when a whole object (not
  cut by the image border, not mostly hidden) sits in the box with no label on it, ``cut`` for such an
  object cut by the border, ``no`` otherwise (the verdicts of a file already there are kept);
- ``--sheets``: the candidates drawn as numbered tiles (red: the candidate; blue: the original labels).

`bench/audit_injected.py --checked-boxes CSV` then adds the ``yes`` boxes (and, in a second key, the
``cut`` ones) to the key of every method alike.
Only judged boxes count, so a method that finds unboxed objects the pool did not reach gets no credit for
them (nor does any other).

Usage::

    python bench/audit_pool.py --source ~/.cache/turboyolo/datasets/bccd/bccd.data \\
        --run work/audit-bccd/runs/audit --run work/audit-bccd-s2/runs/audit --depth 400 \\
        --csv bench/results/bccd_unboxed_boxes.csv --sheets work/pool
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
from audit_injected import (  # bench/ is on sys.path when run as a script
    CLEANLAB_PYTHON,
    STRETCH,
    _flat,
    _iou,
    _match_missing,
    cleanlab_rows,
    cleanlab_side,
    our_rows,
)

TILE, COLUMNS, ROWS = 200, 8, 6
MERGE_IOU = 0.3


def ranked_misses(rows: list, mistakes: list[dict]) -> list[tuple[int, tuple]]:
    """(rank, row) of the rows the injection's key calls wrong, best first (rank 1 is the first row)."""
    order = sorted(rows, key=lambda row: -row[3])  # as _match_missing orders them
    _, hits = _match_missing(rows, mistakes)
    return [(rank, row) for rank, (row, hit) in enumerate(zip(order, hits), start=1) if not hit]


def original_labels(source: str) -> dict[str, tuple[str, np.ndarray]]:
    """Image stem -> the original data set's image and its boxes [n, 4] in pixels (both splits)."""
    from turboyolo.boxes import cxcywh_to_xyxy
    from turboyolo.data.scan import scan_dataset
    from turboyolo.formats.datasets import load_data_config

    config = load_data_config(source)
    out = {}
    for split in ("train", "val"):
        for s in scan_dataset(source, split, config.names).samples:
            labels = np.asarray(s.labels, np.float64).reshape(-1, 5)
            out[Path(s.image).stem] = (str(s.image), cxcywh_to_xyxy(labels[:, 1:]) * ([s.hw[1], s.hw[0]] * 2))
    return out


def pool(runs: list[Path], source: str, depth: int, python: str) -> tuple[list[dict], dict]:
    labels = original_labels(source)
    candidates: dict[str, list[dict]] = {}
    counts = {"rows": 0, "labelled": 0, "merged": 0}
    for run_dir in runs:
        work = run_dir.parent.parent
        truth = json.loads((work / "set" / "truth.json").read_text())
        mistakes = _flat(truth)
        methods = {"turboyolo": our_rows(run_dir, "missing")}
        for name, stretch in (("cleanlab", None), ("cleanlab-stretched", STRETCH)):
            side = cleanlab_side(run_dir, work / "set" / "injected.data", python, stretch)
            methods[name] = cleanlab_rows(side, "missing")
        for method, rows in methods.items():
            for rank, (image, cls, box, _score) in ranked_misses(rows, mistakes):
                if rank > depth:
                    break
                counts["rows"] += 1
                stem, box = Path(image).stem, np.asarray(box, np.float64)
                given = labels[stem][1]
                if len(given) and _iou(box, given).max() >= 0.5:
                    counts["labelled"] += 1
                    continue
                seen = f"{work.name}:{method}:{rank}"
                same = [c for c in candidates.get(stem, ())
                        if _iou(box, np.asarray([c["box"]]))[0] >= MERGE_IOU]
                if same:
                    counts["merged"] += 1
                    same[0]["seen"].append(seen)
                    same[0]["best"] = min(same[0]["best"], rank)
                    continue
                candidates.setdefault(stem, []).append({"image": stem, "class": int(cls), "box": box.tolist(),
                                                        "seen": [seen], "best": rank})
    flat = sorted((c for items in candidates.values() for c in items),
                  key=lambda c: (c["image"], c["box"][0]))
    for tile, c in enumerate(flat, start=1):
        c["tile"] = tile
    return flat, counts


def write_csv(path: Path, flat: list[dict]) -> int:
    """The candidates to ``path``; the verdicts of a file already there are kept for the same image and
    box (a deeper pool adds rows and loses no judgement). Returns how many verdicts were kept."""
    kept: dict[tuple, str] = {}
    if path.exists():
        with path.open(newline="") as handle:
            kept = {(row["image"], *(row[k] for k in ("x1", "y1", "x2", "y2"))): row["verdict"]
                    for row in csv.DictReader(handle) if row["verdict"].strip()}
    rows = [[c["image"], c["class"], *(f"{v:.1f}" for v in c["box"]), c["tile"]] for c in flat]
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["image", "class", "x1", "y1", "x2", "y2", "tile", "verdict", "seen_by"])
        for row, c in zip(rows, flat):
            writer.writerow([*row, kept.get((row[0], *row[2:6]), ""), " ".join(c["seen"])])
    return sum((row[0], *row[2:6]) in kept for row in rows)


def draw_sheets(folder: Path, flat: list[dict], source: str) -> list[Path]:
    import cv2

    from turboyolo.data.decode import load_image, save_image

    labels = original_labels(source)
    folder.mkdir(parents=True, exist_ok=True)
    per_sheet, paths = COLUMNS * ROWS, []
    for start in range(0, len(flat), per_sheet):
        sheet = np.full((ROWS * TILE, COLUMNS * TILE, 3), 255, np.uint8)
        for slot, c in enumerate(flat[start:start + per_sheet]):
            image, given = labels[c["image"]]
            tile = _tile(load_image(image), c["box"], given)
            cv2.putText(tile, str(c["tile"]), (4, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (0, 0, 0), 3)
            cv2.putText(tile, str(c["tile"]), (4, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 1)
            row, col = divmod(slot, COLUMNS)
            sheet[row * TILE:(row + 1) * TILE, col * TILE:(col + 1) * TILE] = tile
            cv2.rectangle(sheet, (col * TILE, row * TILE), ((col + 1) * TILE - 1, (row + 1) * TILE - 1),
                          (255, 255, 255), 1)
        path = folder / f"pool_{start // per_sheet + 1:02d}.png"
        save_image(path, np.ascontiguousarray(sheet[..., ::-1]))  # RGB -> BGR
        paths.append(path)
    return paths


def _tile(image: np.ndarray, box: list[float], others: np.ndarray) -> np.ndarray:
    """A square around ``box`` (twice its larger side, at least 100 px), padded grey past the border,
    scaled to TILE: the candidate red, the original labels blue."""
    import cv2

    x1, y1, x2, y2 = box
    side = max(2.0 * max(x2 - x1, y2 - y1), 100.0)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    left, top = int(round(cx - side / 2)), int(round(cy - side / 2))
    size = int(round(side))
    height, width = image.shape[:2]
    canvas = np.full((size, size, 3), 128, np.uint8)
    sx1, sy1, sx2, sy2 = max(left, 0), max(top, 0), min(left + size, width), min(top + size, height)
    canvas[sy1 - top:sy2 - top, sx1 - left:sx2 - left] = image[sy1:sy2, sx1:sx2]
    scale = TILE / size
    tile = cv2.resize(canvas, (TILE, TILE), interpolation=cv2.INTER_AREA)

    def rect(b, color, thickness) -> None:
        p1 = (int(round((b[0] - left) * scale)), int(round((b[1] - top) * scale)))
        p2 = (int(round((b[2] - left) * scale)), int(round((b[3] - top) * scale)))
        cv2.rectangle(tile, p1, p2, color, thickness)

    for other in others:
        rect(other, (0, 0, 255), 1)  # RGB: blue
    rect(box, (255, 0, 0), 2)  # red
    return tile


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", required=True, help="the original data set the copies were made from")
    parser.add_argument("--run", action="append", required=True, type=Path,
                        help="an audit run of bench/audit_injected.py (WORK/runs/NAME); again for another")
    parser.add_argument("--depth", type=int, default=400, help="how deep into each ranking to look")
    parser.add_argument("--csv", required=True, type=Path)
    parser.add_argument("--sheets", type=Path, default=None, help="folder for the numbered contact sheets")
    parser.add_argument("--cleanlab-python", default=CLEANLAB_PYTHON)
    args = parser.parse_args()
    flat, counts = pool(args.run, args.source, args.depth, args.cleanlab_python)
    print(f"{counts['rows']} rows the key calls wrong at depth {args.depth}: {counts['labelled']} covered by "
          f"an original label, {counts['merged']} merged into another; {len(flat)} candidates")
    kept = write_csv(args.csv, flat)
    print(f"{args.csv}: {kept} verdicts kept, {len(flat) - kept} to judge")
    if args.sheets:
        for path in draw_sheets(args.sheets, flat, args.source):
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
