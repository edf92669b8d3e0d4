"""The images of a review, their order, and their labels read with a version and saved without loss.

A review opens a data set (a data.yaml or .data: its train, val and ``unlabeled`` images; an image
folder; or a ``turboyolo label`` run directory: the images of its ``review.csv`` in that order). Each
image's label file is the data set's (:func:`turboyolo.formats.datasets.label_path_for`), read together
with the SHA-1 of its bytes: a save names the SHA-1 it started from, and a file changed on disk since
then is not overwritten (:class:`Conflict` carries what is on disk now). Every save is atomic and marks
the file reviewed in its folder's provenance record (:func:`turboyolo.data.autolabels.record_reviewed`),
so progress survives a restart and ``turboyolo train`` counts reviewed labels apart from model-made ones.
"""

from __future__ import annotations

import csv
import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from turboyolo.data.autolabels import label_status, read_manifest, record_reviewed
from turboyolo.errors import ConfigError, DataError
from turboyolo.formats.datasets import label_path_for, list_images, load_data_config, read_names, split_images
from turboyolo.formats.labels import format_yolo_rows, parse_yolo_labels
from turboyolo.formats.text import decode_text

ORDERS = ("review", "name", "unreviewed", "disagree")
# the review order without a review.csv: what most needs a person first
_STATUS_RANK = {"model": 0, "none": 1, "human": 2, "reviewed": 3}


@dataclass
class Item:
    """One image of the review: its file, its label file and its key (its path in URLs)."""

    image: Path
    label: Path
    key: str
    rank: int  # position in review.csv, or in the listing


@dataclass
class LabelState:
    """A label file as read: rows ``[cls, cx, cy, w, h]`` relative, the SHA-1 of its bytes (None: no file),
    its provenance status, and the reason it cannot be edited (a malformed line), if any."""

    rows: list[list[float]]
    sha1: str | None
    status: str
    error: str | None = None
    text: str = ""

    def as_json(self) -> dict:
        return {"rows": self.rows, "sha1": self.sha1, "status": self.status, "error": self.error,
                "text": self.text}


class Conflict(Exception):  # noqa: N818 - an outcome the page shows, not a failure
    """The label file changed on disk since the page read it; ``disk`` is what it holds now."""

    def __init__(self, disk: LabelState):
        super().__init__("the label file changed on disk since it was loaded")
        self.disk = disk


@dataclass
class ReviewSet:
    """The images under review (see the module's text). ``names``: class names (may be empty)."""

    items: list[Item]
    names: list[str]
    source: str
    from_review_csv: bool = False
    _by_key: dict[str, Item] = field(default_factory=dict, repr=False)
    _roots: set[str] = field(default_factory=set, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self._by_key = {item.key: item for item in self.items}
        self._roots = {os.path.realpath(item.image.parent) for item in self.items}

    @classmethod
    def open(cls, data: str | Path, split: str = "all", names: list[str] | None = None) -> ReviewSet:
        """The review of ``data`` (see the module's text); ``split``: all, train, val or unlabeled.

        Raises:
            ConfigError, DataError: no such data set, or no images in it.
        """
        data = Path(data)
        csv_path = data / "review.csv"
        if data.is_dir() and csv_path.is_file():
            images = _review_csv_images(csv_path)
            names = names or _run_dir_names(data, images)
            return cls(_items(images), names or [], str(data), from_review_csv=True)
        config = load_data_config(data)  # a missing or malformed data file is named here
        if data.is_dir() and split == "all":
            images = list_images(data)
        else:
            images = _split_images(data, split)
        if not images:
            raise DataError(f"{data}: no images to review; pass a data.yaml, .data, image folder or a "
                            "`turboyolo label` run directory")
        if names is None:
            names = config.names
        return cls(_items(images), list(names or []), str(data))

    def find(self, key: str) -> Item | None:
        """The item of ``key`` whose file is the data set's: ``None`` for any other key, a key that
        leaves the data set (``../``) or an image that is a link to a file outside its folders."""
        item = self._by_key.get(key)
        if item is None:
            return None
        real = Path(os.path.realpath(item.image))
        return item if any(str(parent) in self._roots for parent in real.parents) else None

    def status(self, item: Item, manifests: dict[Path, dict] | None = None) -> str:
        folder = item.label.parent
        manifest = read_manifest(folder) if manifests is None else manifests.setdefault(
            folder, read_manifest(folder))
        return label_status(item.label, manifest)

    def listing(self, order: str = "review", disagreement: dict[str, float] | None = None) -> list[dict]:
        """The items in ``order`` (:data:`ORDERS`), each ``{key, name, status}``; ``unreviewed``: only the
        model-made and unlabelled ones; ``disagree``: only those the model disagrees with, most first."""
        manifests: dict[Path, dict] = {}
        rows = [(item, self.status(item, manifests)) for item in self.items]
        if order == "name":
            rows.sort(key=lambda row: str(row[0].image))
        elif order == "disagree":
            scores = disagreement or {}
            rows = [row for row in rows if scores.get(row[0].key, 0.0) > 0]
            rows.sort(key=lambda row: (-scores[row[0].key], row[0].rank))
        elif not self.from_review_csv:
            rows.sort(key=lambda row: (_STATUS_RANK[row[1]], row[0].rank))
        if order == "unreviewed":
            rows = [row for row in rows if row[1] in ("model", "none")]
        return [{"key": item.key, "name": item.image.name, "status": status} for item, status in rows]

    def progress(self) -> dict[str, int]:
        """How many label files are in each provenance status."""
        counts = dict.fromkeys(_STATUS_RANK, 0)
        manifests: dict[Path, dict] = {}
        for item in self.items:
            counts[self.status(item, manifests)] += 1
        return counts

    def read(self, item: Item) -> LabelState:
        """The label file of ``item`` as it is on disk now."""
        try:
            data = item.label.read_bytes()
        except FileNotFoundError:
            return LabelState([], None, "none")
        except OSError as err:
            return LabelState([], None, "none", f"{item.label}: unreadable ({err.strerror or err})")
        sha1 = hashlib.sha1(data).hexdigest()
        text = decode_text(data, errors="replace")
        check = parse_yolo_labels(text, len(self.names) or None)
        rows = [[int(r[0]), *(round(v, 6) for v in r[1:5])]
                for r in np.asarray(check.rows, np.float64).tolist()]
        error = f"{item.label}: {check.error}; fix the file, then reload" if check.error else None
        return LabelState(rows, sha1, label_status(item.label, sha1=sha1), error, text)

    def save(self, item: Item, rows: list[list[float]], base: str | None) -> LabelState:
        """Write ``rows`` as ``item``'s label file (atomically) and mark it reviewed; ``base``: the SHA-1
        the page read (None: no file). Unchanged rows keep the file's bytes (only the review is recorded).

        Raises:
            Conflict: the file's SHA-1 is no longer ``base`` (nothing is written).
            DataError: a row that is not a box of a known class.
        """
        clean = _clean_rows(rows, len(self.names) or None, item)
        with self._lock:
            current = self.read(item)
            if current.sha1 != base:
                raise Conflict(current)
            text = format_yolo_rows(clean) if clean else ""
            if current.sha1 is None or current.error or format_yolo_rows(current.rows) != text:
                _write_atomically(item.label, text)
            sha1 = hashlib.sha1(item.label.read_bytes()).hexdigest()
            record_reviewed(item.label, sha1)
            return self.read(item)


def disagreement(rows: list[list[float]], predictions: list[list[float]], iou: float = 0.5) -> float:
    """1 - F1 of the labels against the model's boxes (same class, IoU >= ``iou``, greedy by
    confidence): 0 when they agree box for box, 1 when nothing matches (0 when both are empty)."""
    if not rows and not predictions:
        return 0.0
    if not rows or not predictions:
        return 1.0
    truth = np.asarray(rows, np.float32).reshape(-1, 5)
    pred = np.asarray(sorted(predictions, key=lambda p: -p[5]), np.float32).reshape(-1, 6)
    from turboyolo.boxes import box_iou, cxcywh_to_xyxy  # torch: loaded with the model anyway

    ious = box_iou(cxcywh_to_xyxy(pred[:, 1:5]), cxcywh_to_xyxy(truth[:, 1:5]))
    ious[pred[:, :1] != truth[None, :, 0]] = 0
    used = np.zeros(len(truth), bool)
    matched = 0
    for k in range(len(pred)):
        candidates = np.where(~used & (ious[k] >= iou))[0]
        if len(candidates):
            used[candidates[np.argmax(ious[k, candidates])]] = True
            matched += 1
    return 1.0 - 2.0 * matched / (len(truth) + len(pred))


def _clean_rows(rows: list[list[float]], num_classes: int | None, item: Item) -> list[list[float]]:
    """Rows as the page sent them, checked and clipped to the image (6 decimals, as they are written)."""
    clean = []
    for row in rows:
        if len(row) != 5 or not all(isinstance(v, int | float) for v in row):
            raise DataError(f"{item.label}: a box must be [class, cx, cy, w, h], got {row!r}")
        cls = int(row[0])
        if cls < 0 or (num_classes is not None and cls >= num_classes):
            raise DataError(f"{item.label}: class {cls} is not one of the data set's {num_classes}")
        box = [float(v) for v in row[1:]]
        x1, y1 = max(0.0, box[0] - box[2] / 2), max(0.0, box[1] - box[3] / 2)
        x2, y2 = min(1.0, box[0] + box[2] / 2), min(1.0, box[1] + box[3] / 2)
        if x2 - x1 <= 1e-6 or y2 - y1 <= 1e-6:
            continue  # a box dragged entirely off the image
        if (x1, y1, x2, y2) != (box[0] - box[2] / 2, box[1] - box[3] / 2, box[0] + box[2] / 2,
                                box[1] + box[3] / 2):  # clipped to the image
            box = [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]
        clean.append([cls, *(round(v, 6) for v in box)])
    return clean


def _write_atomically(path: Path, text: str) -> None:
    """The label file replaced in one step (temporary file + rename): never half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _items(images: list[Path]) -> list[Item]:
    images = list(dict.fromkeys(Path(os.path.abspath(p)) for p in images))
    root = Path(os.path.commonpath([str(p.parent) for p in images]))
    return [Item(image, label_path_for(image), image.relative_to(root).as_posix(), rank)
            for rank, image in enumerate(images)]


def _split_images(data: Path, split: str) -> list[Path]:
    if split != "all":
        return split_images(data, split)
    images: list[Path] = []
    for name in ("train", "val", "unlabeled"):
        try:
            images += split_images(data, name)
        except (ConfigError, DataError):
            pass  # an empty split, no `unlabeled` entry: the others are reviewed (none at all: refused)
    return images


def _review_csv_images(path: Path) -> list[Path]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or "image" not in rows[0]:
        raise DataError(f"{path}: not a `turboyolo label` review list (no image column)")
    return [Path(row["image"]) for row in rows if not row.get("status", "").startswith("unreadable")]


def _run_dir_names(run_dir: Path, images: list[Path]) -> list[str] | None:
    """A label run's class names: its ``classes.names``, else a ``.names`` file near the images."""
    if (run_dir / "classes.names").is_file():
        return read_names(run_dir / "classes.names")
    return load_data_config(images[0].parent).names if images else None
