"""Up-front scan: check every image and label once (in parallel), cache the result, report.

Rules (each excluded or fixed file is listed with its reason in the report):
- missing or empty label file: background image (kept, counted);
- label line with a class id outside the names, NaN/inf, != 5 columns, commas, width/height <= 0:
  image excluded;
- box corners up to 0.01 outside [0, 1]: clipped (fixed); further out: excluded;
- duplicate boxes: removed (fixed);
- unreadable, truncated or zero-byte image: excluded. EXIF orientation is applied to sizes.
- a label file that Darknet's or PyTorch-YOLOv3's path rule would pick differently: warning.

The cache (``$TURBOYOLO_CACHE/scans``) is keyed per file by path, size and mtime, so an unchanged data
set scans instantly and a changed file is re-checked alone.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from turboyolo.data.autolabels import count_model_made
from turboyolo.data.decode import probe_image
from turboyolo.errors import DataError
from turboyolo.formats.datasets import label_path_disagreement, label_path_for, list_images, load_data_config
from turboyolo.formats.labels import parse_yolo_labels

SCAN_VERSION = 1


@dataclass
class Sample:
    """One usable image: its path, its boxes (float32 [N, 5] cls cx cy w h relative) and (h, w)."""

    image: Path
    labels: np.ndarray
    hw: tuple[int, int] | None = None


@dataclass
class ScanResult:
    """Outcome of a scan.

    Attributes:
        samples: usable images in list order.
        names: class names.
        excluded: (file, reason) of every image left out.
        fixed: (file, what was repaired) of every label file changed on the fly.
        warnings: label-path disagreements and other non-fatal notes.
        found, background: images listed; usable images without boxes.
        cached: images whose result came from the scan cache.
    """

    samples: list[Sample]
    names: list[str]
    excluded: list[tuple[str, str]] = field(default_factory=list)
    fixed: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    found: int = 0
    background: int = 0
    cached: int = 0
    model_made: int = 0  # label files written by `turboyolo label` and not edited since
    split: str = ""
    source: str = ""

    @property
    def labelled(self) -> int:
        return len(self.samples) - self.background

    @property
    def num_boxes(self) -> int:
        return int(sum(len(s.labels) for s in self.samples))

    def summary(self) -> str:
        """One line: images found, labelled, background, excluded, fixed (and boxes, warnings)."""
        line = (f"scan {self.split}: {self.found} images found, {self.labelled} labelled "
                f"({self.num_boxes} boxes), {self.background} background, {len(self.excluded)} excluded, "
                f"{len(self.fixed)} fixed")
        if self.model_made:
            line += f", {self.model_made} label files model-made (not yet reviewed)"
        if self.warnings:
            line += f", {len(self.warnings)} warnings"
        if self.cached:
            line += f" ({self.cached} from cache)"
        return line

    def report_text(self) -> str:
        lines = [self.summary(), f"source: {self.source}", ""]
        lines.append(f"excluded ({len(self.excluded)}):")
        lines += [f"  {path}: {reason}" for path, reason in self.excluded]
        lines.append(f"fixed ({len(self.fixed)}):")
        lines += [f"  {path}: {reason}" for path, reason in self.fixed]
        lines.append(f"warnings ({len(self.warnings)}):")
        lines += [f"  {w}" for w in self.warnings]
        return "\n".join(lines) + "\n"

    def write_report(self, path: str | Path) -> Path:
        """Write the full report (every excluded/fixed file with its reason) and return its path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.report_text(), encoding="utf-8")
        return path


def _stat_key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


@dataclass
class _Entry:
    key: tuple
    status: str  # "ok" or "excluded"
    reason: str = ""
    labels: np.ndarray | None = None
    hw: tuple[int, int] | None = None
    fixes: list[str] = field(default_factory=list)
    warning: str | None = None


def _check_one(image: Path, num_classes: int | None) -> _Entry:
    label = label_path_for(image)
    key = (str(image), _stat_key(image), str(label), _stat_key(label), num_classes)
    try:
        h, w, _ = probe_image(image)
    except DataError as err:
        return _Entry(key, "excluded", str(err).removeprefix(f"{image}: "))
    warning = label_path_disagreement(image, label)
    if key[3] is None:
        return _Entry(key, "ok", labels=np.zeros((0, 5), np.float32), hw=(h, w), warning=warning)
    try:
        text = label.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        return _Entry(key, "excluded", f"label file {label} unreadable ({err.strerror})")
    check = parse_yolo_labels(text, num_classes)
    if check.error:
        return _Entry(key, "excluded", f"label {label}: {check.error}", warning=warning)
    return _Entry(key, "ok", labels=check.rows, hw=(h, w), fixes=[f"label {label}: {f}" for f in check.fixes],
                  warning=warning)


def _cache_file(data_path: Path, split: str) -> Path:
    from turboyolo.assets import cache_dir

    digest = hashlib.sha1(f"{data_path.resolve()}|{split}|{SCAN_VERSION}".encode()).hexdigest()[:16]
    return cache_dir() / "scans" / f"{data_path.stem}-{split}-{digest}.pkl"


def _load_cache(path: Path) -> dict[str, _Entry]:
    try:
        with open(path, "rb") as handle:
            data = pickle.load(handle)
        return data if isinstance(data, dict) else {}
    except Exception:  # a broken cache is only a slower scan
        return {}


def _save_cache(path: Path, entries: dict[str, _Entry]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as handle:
            pickle.dump(entries, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        pass  # read-only cache location: scanning still works, just not cached


def scan_images(images: list[Path], names: list[str] | None, *, workers: int | None = None,
                cache_path: Path | None = None, split: str = "", source: str = "") -> ScanResult:
    """Scan an explicit list of images (see :func:`scan_dataset`)."""
    num_classes = len(names) if names is not None else None
    cached = _load_cache(cache_path) if cache_path else {}
    entries: dict[str, _Entry] = {}
    todo = []
    for image in images:
        old = cached.get(str(image))
        label = label_path_for(image)
        if old is not None and old.key == (str(image), _stat_key(image), str(label), _stat_key(label),
                                           num_classes):
            entries[str(image)] = old
        else:
            todo.append(image)
    from_cache = len(entries)
    if todo:
        workers = workers or min(32, (os.cpu_count() or 1) * 2)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for image, entry in zip(todo, pool.map(lambda p: _check_one(p, num_classes), todo), strict=True):
                entries[str(image)] = entry
        if cache_path:
            _save_cache(cache_path, entries)
    result = ScanResult([], list(names or []), found=len(images), cached=from_cache, split=split,
                        source=source)
    seen: set[str] = set()
    for image in images:
        if str(image) in seen:
            result.excluded.append((str(image), "listed twice (second entry ignored)"))
            continue
        seen.add(str(image))
        entry = entries[str(image)]
        if entry.warning:
            result.warnings.append(entry.warning)
        if entry.status != "ok":
            result.excluded.append((str(image), entry.reason))
            continue
        for fix in entry.fixes:
            result.fixed.append((str(image), fix))
        if len(entry.labels) == 0:
            result.background += 1
        result.samples.append(Sample(image, entry.labels, entry.hw))
    result.model_made = count_model_made(label_path_for(s.image) for s in result.samples)[0]
    return result


def scan_dataset(data_path: str | Path, split: str, names: list[str] | None = None, *,
                 workers: int | None = None, use_cache: bool = True, report_path: str | Path | None = None,
                 ) -> ScanResult:
    """Check every image and label of one split of a data set.

    Args:
        data_path: a ``.data`` file, a ``data.yaml`` or an image folder.
        split: ``train`` or ``val``.
        names: class names overriding the data set's (required when it has none and labels exist).
        workers: threads for the checks (default 2 x CPUs).
        use_cache: reuse/update the scan cache keyed by path, size and mtime.
        report_path: when given, write the report there.

    Returns:
        :class:`ScanResult` with the usable samples; ``summary()`` is the one-line summary.

    Raises:
        DataError: the split has no images at all.
    """
    data_path = Path(data_path)
    config = load_data_config(data_path)
    names = names if names is not None else config.names
    images: list[Path] = []
    for source in config.split(split):
        images += list_images(source)
    if not images:
        raise DataError(f"{data_path}: the {split} split lists no images; check its {split} entry")
    cache_path = _cache_file(data_path, split) if use_cache else None
    result = scan_images(images, names, workers=workers, cache_path=cache_path, split=split,
                         source=str(data_path))
    if report_path is not None:
        result.write_report(report_path)
    return result
