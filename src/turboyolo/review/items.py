"""The images of a review, their order, and their labels read with a version and saved without loss.

A review opens a data set (a data.yaml or .data: its train, val and ``unlabeled`` images; an image
folder; or a ``turboyolo label`` run directory: the images of its ``review.csv`` in that order). Each
image's label file is the data set's (:func:`turboyolo.formats.datasets.label_path_for`), read together
with the SHA-1 of its bytes: a save names the SHA-1 it started from, and a file changed on disk since
then is not overwritten (:class:`Conflict` carries what is on disk now), checked under the labels
folder's lock so that this holds across processes (two review servers on one data set). Every value of a
save is checked first (:func:`checked_rows`). Every save is atomic and marks the file reviewed in its
folder's provenance record (:func:`turboyolo.data.autolabels.record_reviewed`), so progress survives a
restart and ``turboyolo train`` counts reviewed labels apart from model-made ones.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import math
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from turboyolo.data.autolabels import label_status, labels_lock, read_manifest, record_reviewed
from turboyolo.errors import ConfigError, DataError, OutputError, printable, writable_folder
from turboyolo.formats.datasets import label_path_for, list_images, load_data_config, read_names, split_images
from turboyolo.formats.labels import format_yolo_rows, parse_yolo_labels
from turboyolo.formats.text import decode_text

ORDERS = ("review", "name", "unreviewed", "disagree", "issues")
SCORED = ("disagree", "issues")  # orders of the images a score names, highest first
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
    _label_roots: set[str] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self._by_key = {item.key: item for item in self.items}
        self._roots = set(map(os.path.realpath, {item.image.parent for item in self.items}))
        self._label_roots = set(map(os.path.realpath, {item.label.parent for item in self.items}))

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
        """The item of ``key`` whose files are the data set's: ``None`` for any other key, a key that
        leaves the data set (``../``), an image that is a link to a file outside the image folders or a
        label file that is a link to a file outside the label folders (neither is read nor written)."""
        item = self._by_key.get(key)
        if item is None or not _inside(item.image, self._roots):
            return None
        if os.path.lexists(item.label) and not _inside(item.label, self._label_roots):
            return None
        return item

    def status(self, item: Item, manifests: dict[Path, dict] | None = None) -> str:
        folder = item.label.parent
        manifest = read_manifest(folder) if manifests is None else manifests.setdefault(
            folder, read_manifest(folder))
        return label_status(item.label, manifest)

    def listing(self, order: str = "review", scores: dict[str, float] | None = None) -> list[dict]:
        """The items in ``order`` (:data:`ORDERS`), each ``{key, name, status}``; ``unreviewed``: only the
        model-made and unlabelled ones; ``disagree`` and ``issues``: only the images ``scores`` (key ->
        score) gives a score above 0, highest first (the model's disagreement, an audit's suspicion)."""
        return self.listing_and_progress(order, scores)[0]

    def listing_and_progress(self, order: str = "review", scores: dict[str, float] | None = None
                             ) -> tuple[list[dict], dict[str, int]]:
        """:meth:`listing` and :meth:`progress` from one reading of the label files (each a ``stat``:
        seconds at 100,000 images, so read once a request)."""
        rows = self._statuses()
        progress = _counted(rows)
        if order == "name":
            rows.sort(key=lambda row: str(row[0].image))
        elif order in SCORED:
            scores = scores or {}
            rows = [row for row in rows if scores.get(row[0].key, 0.0) > 0]
            rows.sort(key=lambda row: (-scores[row[0].key], row[0].rank))
        elif not self.from_review_csv:
            rows.sort(key=lambda row: (_STATUS_RANK[row[1]], row[0].rank))
        if order == "unreviewed":
            rows = [row for row in rows if row[1] in ("model", "none")]
        items = [{"key": item.key, "name": item.image.name, "status": status} for item, status in rows]
        return items, progress

    def progress(self) -> dict[str, int]:
        """How many label files are in each provenance status."""
        return _counted(self._statuses())

    def _statuses(self) -> list[tuple[Item, str]]:
        manifests: dict[Path, dict] = {}
        return [(item, self.status(item, manifests)) for item in self.items]

    def unwritable(self) -> list[str]:
        """Why label folders of the review cannot take a save (a read-only data set, no permission), one
        line per folder: their labels are shown, saving them is refused."""
        problems = []
        for folder in sorted({item.label.parent for item in self.items}):
            try:
                writable_folder(folder, "", create=False)
            except OutputError as err:
                problems.append(str(err).split("; choose")[0])
        return problems

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

    def save(self, item: Item, rows: object, base: str | None) -> LabelState:
        """Write ``rows`` as ``item``'s label file (atomically) and mark it reviewed; ``base``: the SHA-1
        the page read (None: no file). Unchanged rows keep the file's bytes (only the review is recorded).

        The check of ``base`` against the file, the write and the record happen under the labels folder's
        lock (:func:`turboyolo.data.autolabels.labels_lock`): of two saves from one version, in one
        process or two, exactly one succeeds, and no review record is lost.

        Raises:
            BadValue: a row that is not a box of a known class (:func:`checked_rows`; nothing is written).
            Conflict: the file's SHA-1 is no longer ``base`` (nothing is written).
            OutputError: the labels folder cannot be written.
        """
        clean = checked_rows(rows, len(self.names) or None)
        with labels_lock(item.label.parent):
            current = self.read(item)
            if current.sha1 != base:
                raise Conflict(current)
            text = format_yolo_rows(clean) if clean else ""
            try:
                if current.sha1 is None or current.error or format_yolo_rows(current.rows) != text:
                    _write_atomically(item.label, text)
                sha1 = hashlib.sha1(item.label.read_bytes()).hexdigest()
                record_reviewed(item.label, sha1)
            except OSError as err:
                raise OutputError(f"{printable(item.label)}: cannot write it ({err.strerror or err}); "
                                  "make its folder writable") from None
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


class BadValue(DataError):
    """A value of a save that is not what a label file may hold; ``field`` names it (``rows[2][3]``)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}; nothing was saved")
        self.field = field


MAX_CLASS = 2**31 - 1  # Darknet's class ids are C ints: the bound when the data set names no classes
COLUMNS = ("class", "cx", "cy", "w", "h")


def checked_rows(rows: object, num_classes: int | None) -> list[list[float]]:
    """The boxes of a save, checked, clipped to the image and rounded as they are written.

    ``rows``: a list of ``[class, cx, cy, w, h]``. Every value is a finite JSON number (never a bool, NaN
    or infinity); the class an integer (``2`` or ``2.0``, never ``1.7``) in ``0 .. num_classes - 1``
    (``0 .. 2**31 - 1`` when the data set names no classes); the centre on the image (``0 <= cx, cy <=
    1``); the size positive and at most the image's (``0 < w, h <= 1``). The clip: a box's edges are cut
    at the image's (a box dragged partly past an edge keeps the part on the image); after it, and the
    rounding to the 6 decimals written, its width and height must still be at least 0.000001.

    Raises:
        BadValue: the first value that is not so, by its place (``rows[1][3] (w)``).
    """
    if not isinstance(rows, list):
        raise BadValue("rows", f"expected a list of boxes [class, cx, cy, w, h], got {_kind(rows)}")
    clean = []
    for k, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != 5:
            raise BadValue(f"rows[{k}]", f"a box is [class, cx, cy, w, h], got {_short(row)}")
        values = [_number(value, f"rows[{k}][{j}] ({COLUMNS[j]})") for j, value in enumerate(row)]
        cls, cx, cy, w, h = values
        top = (num_classes or MAX_CLASS + 1) - 1
        if cls != int(cls) or not 0 <= cls <= top:
            named = f"one of the data set's {num_classes} classes" if num_classes else "a class id"
            raise BadValue(f"rows[{k}][0] (class)", f"class {_short(row[0])} is not {named} "
                           f"(an integer 0..{top})")
        for j, value in ((1, cx), (2, cy)):
            if not 0.0 <= value <= 1.0:
                raise BadValue(f"rows[{k}][{j}] ({COLUMNS[j]})", f"{_short(row[j])} is not within 0..1 "
                               "(the box's centre must be on the image)")
        for j, value in ((3, w), (4, h)):
            if not 0.0 < value <= 1.0:
                raise BadValue(f"rows[{k}][{j}] ({COLUMNS[j]})", f"{_short(row[j])} is not within (0, 1] "
                               "(a box's size is positive and at most the image's)")
        x1, x2 = max(0.0, cx - w / 2), min(1.0, cx + w / 2)  # the clip
        y1, y2 = max(0.0, cy - h / 2), min(1.0, cy + h / 2)
        box = [round(v, 6) for v in ((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1)]
        if box[2] <= 0 or box[3] <= 0:
            raise BadValue(f"rows[{k}]", f"{_short(row)} is less than 0.000001 wide or high on the image "
                           "(the precision of a label file)")
        clean.append([int(cls), *box])
    return clean


def _number(value: object, field: str) -> float:
    """``value`` as a float when it is a finite JSON number (no bool, no NaN or infinity)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadValue(field, f"expected a number, got {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        number = math.inf
    if not math.isfinite(number):
        raise BadValue(field, f"{_short(value)} is not a finite number")
    return number


def _kind(value: object) -> str:
    names = {bool: "true/false", str: "text", dict: "an object", list: "a list", type(None): "null"}
    return f"{names.get(type(value), type(value).__name__)} {_short(value)}"


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _write_atomically(path: Path, text: str) -> None:
    """The label file replaced in one step (temporary file + rename): never half written; the temporary
    file is made new (``O_EXCL``, never through a link) and removed if the write fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileExistsError:  # left by a process of the same id that died writing
            tmp.unlink()
            fd = os.open(tmp, flags, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _inside(path: Path, roots: set[str]) -> bool:
    """True when ``path``, its links followed, lies in one of the folders ``roots`` (real paths)."""
    return any(str(parent) in roots for parent in Path(os.path.realpath(path)).parents)


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


def _counted(rows: list[tuple[Item, str]]) -> dict[str, int]:
    counts = dict.fromkeys(_STATUS_RANK, 0)
    for _, status in rows:
        counts[status] += 1
    return counts
