"""Up-front scan: check every image and label once (in parallel), cache the result, report.

Rules (each excluded or fixed file is listed with its reason in the report):
- missing or empty label file: background image (kept, counted);
- each label line is judged on its own, and every bad one is named with its line number and reason:
  a class id outside the names (or not a whole number), NaN/inf, not a number, != 5 columns, commas,
  width/height <= 0, box corners more than 0.01 outside [0, 1]: the line cannot be used, and its image
  is excluded (dropping only the line would train its object as background); the lines are counted;
- box corners up to 0.01 outside [0, 1]: clipped (fixed, by line);
- duplicate boxes: removed (fixed);
- unreadable, truncated, damaged (bad PNG CRC, a JPEG segment libjpeg refuses: tables, frame, scan or
  progressive parameters), zero-byte or too large (a decompression bomb) image: excluded (the header and
  structure checks of :func:`turboyolo.data.decode.probe_image`, which every decode runs too; no pixel is
  decoded here). Damage inside the image data under an intact structure is found by the first decode the
  run makes of the file (the prepared cache's build, or the loader's first epoch), which replaces it,
  counts it and names it in the run's report. EXIF orientation is applied to sizes.
- a label file that Darknet's or PyTorch-YOLOv3's path rule would pick differently: warning;
- a folder link not followed again (a link loop) or an unreadable folder: warning.

The cache (``$TURBOYOLO_CACHE/scans/*.npz``) is keyed per file by path, size and mtime, so an unchanged
data set loads in one read and a changed file is re-checked alone. It holds plain arrays and JSON
(:mod:`turboyolo.data.scan_cache`), never pickle: a planted cache file can at worst make the scan re-check
files, never run code.

Every scan writes its report (every excluded, fixed and warned file with its reason) to a file it names
(``ScanResult.report``); :func:`write_scan_report` writes every split's report into a run directory
(``scan_report.txt``).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from turboyolo.assets import cache_dir
from turboyolo.data.autolabels import label_status, read_manifest
from turboyolo.data.decode import probe_image
from turboyolo.data.scan_cache import load_entries, save_entries
from turboyolo.devices import usable_cpus
from turboyolo.errors import DataError, printable
from turboyolo.formats.datasets import (
    LabelRules,
    label_path_for,
    label_paths_for,
    link_problem,
    list_images,
    load_data_config,
)
from turboyolo.formats.labels import parse_yolo_labels
from turboyolo.formats.text import read_text

# 5: the cache as plain arrays (.npz, scan_cache.py); 4: byte-order marks read, other formats' image data
# decoded; 3: every bad label line named and counted; 2: JSON cache (1 was pickle, never read again)
SCAN_VERSION = 5
REPORT_NAME = "scan_report.txt"


@dataclass(slots=True)  # no per-object __dict__: a large data set holds one per image
class Sample:
    """One usable image: its path, its boxes (float32 [N, 5] cls cx cy w h relative) and (h, w)."""

    image: Path
    labels: np.ndarray
    hw: tuple[int, int] | None = None
    partial: bool = False  # its boxes are model-made and unreviewed: no background loss (--unreviewed ignore)


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
    model_made: int = 0  # label files written by `turboyolo label`, neither edited nor reviewed since
    reviewed: int = 0  # label files a person saved in `turboyolo review`, unchanged since
    human: int = 0  # the other label files (drawn or edited by a person, or from elsewhere)
    unreviewed: list[str] = field(default_factory=list)  # images whose labels are model-made, unreviewed
    unreviewed_rule: str = ""  # what the split did with them (`turboyolo train --unreviewed`), when not kept
    suspect_rule: str = ""  # what `turboyolo train --drop-suspect` left out of the split (data/suspects.py)
    listed_again: dict[str, int] = field(default_factory=dict)  # image -> further entries of it in the list
    bad_label_lines: int = 0  # label lines that could not be used (their images are excluded)
    split: str = ""
    source: str = ""
    report: Path | None = None  # where the full report was written (every file with its reason)

    @property
    def labelled(self) -> int:
        return len(self.samples) - self.background

    def list_entries(self) -> list[Sample]:
        """The samples as the list names them, an image listed k times k times (Darknet's draw is over
        list entries: ``--loader darknet``)."""
        return [s for s in self.samples for _ in range(1 + self.listed_again.get(str(s.image), 0))]

    @property
    def num_boxes(self) -> int:
        return int(sum(len(s.labels) for s in self.samples))

    def summary(self) -> str:
        """One line: images found, labelled, background, excluded, fixed (and boxes, warnings)."""
        line = (f"scan {self.split}: {self.found} images found, {self.labelled} labelled "
                f"({self.num_boxes} boxes), {self.background} background, {len(self.excluded)} excluded"
                f"{f' ({self.bad_label_lines} bad label lines)' if self.bad_label_lines else ''}, "
                f"{len(self.fixed)} fixed")
        if self.model_made or self.reviewed:
            line += (f", label files: {self.human} human, {self.reviewed} reviewed, {self.model_made} "
                     f"model-made (not yet reviewed{self.unreviewed_rule})")
        if self.suspect_rule:
            line += f", {self.suspect_rule}"
        if self.warnings:
            line += f", {len(self.warnings)} warnings"
        if self.cached:
            line += f" ({self.cached} from cache)"
        return line

    def report_text(self) -> str:
        """Every excluded, fixed and warned file with its reason (file names that are not UTF-8 with
        ``\\xNN`` escapes, :func:`turboyolo.errors.printable`)."""
        lines = [self.summary(), f"source: {printable(self.source)}", ""]
        lines.append(f"excluded ({len(self.excluded)}):")
        lines += [f"  {printable(path)}: {printable(reason)}" for path, reason in self.excluded]
        lines.append(f"fixed ({len(self.fixed)}):")
        lines += [f"  {printable(path)}: {printable(reason)}" for path, reason in self.fixed]
        lines.append(f"warnings ({len(self.warnings)}):")
        lines += [f"  {printable(w)}" for w in self.warnings]
        return "\n".join(lines) + "\n"

    def console_text(self, limit: int = 10, report: str | Path | None = None) -> str:
        """The summary line, then the first ``limit`` excluded and fixed files with their reasons and the
        warnings, and where the rest are (``report``, else the scan's own report file), for the console."""
        lines = [self.summary()]
        shown = [f"  excluded {printable(path)}: {printable(reason)}" for path, reason in self.excluded]
        shown += [f"  fixed {printable(path)}: {printable(reason)}" for path, reason in self.fixed]
        shown += [f"  warning: {printable(w)}" for w in self.warnings]
        lines += shown[:limit]
        report = report or self.report
        if len(shown) > limit:
            lines.append(f"  and {len(shown) - limit} more, see {printable(report or 'the scan report')}")
        return "\n".join(lines)

    def require_samples(self, limit: int = 5) -> ScanResult:
        """``self`` when at least one image is usable; else a :class:`DataError` naming the split, the
        first ``limit`` files with their reasons and the report that lists them all."""
        if self.samples:
            return self
        named = "".join(f"\n  {printable(path)}: {printable(why)}" for path, why in self.excluded[:limit])
        more = f"\n  and {len(self.excluded) - limit} more" if len(self.excluded) > limit else ""
        where = f"; every file with its reason: {printable(self.report)}" if self.report else ""
        raise DataError(f"{printable(self.source)}: no usable image in the {self.split} split: "
                        f"{self.found} listed, {len(self.excluded)} excluded{where}{named}{more}")

    def write_report(self, path: str | Path) -> Path:
        """Write the full report (every excluded/fixed file with its reason) and return its path."""
        return _write_text(Path(path), self.report_text())


def write_scan_report(run_dir: str | Path, scans: Sequence[ScanResult],
                      load_failures: Iterable[tuple[str, str]] = ()) -> Path:
    """Write ``<run_dir>/scan_report.txt``: each scan's full report, then the images that failed to
    load after the scan (``load_failures``: (path, reason), e.g. a loader's ``replaced`` and ``dropped``
    lists; each file once). Call it again to rewrite it with more failures. Returns its path.
    """
    path = Path(run_dir) / REPORT_NAME
    parts = [scan.report_text() for scan in scans]
    failures = dict(load_failures)  # one line per file (the first reason), in order
    lines = [f"failed to load after the scan ({len(failures)}):"]
    lines += [f"  {printable(file)}: {printable(reason)}" for file, reason in failures.items()]
    parts.append("\n".join(lines) + "\n")
    return _write_text(path, "\n".join(parts))


def _write_text(path: Path, text: str) -> Path:
    """Write a report whole or not at all (temporary file + rename: two runs never interleave)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
    os.replace(tmp, path)
    return path


def _stat_key(path: str | Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _entry_key(image: str | Path, label: str | Path, num_classes: int | None) -> list:
    """What a cached entry must match to be reused (JSON values, so it compares equal after a load)."""
    return [str(image), _stat_key(image), str(label), _stat_key(label), num_classes]


@dataclass
class _Entry:
    key: list
    status: str  # "ok" or "excluded"
    reason: str = ""
    labels: np.ndarray | None = None
    hw: tuple[int, int] | None = None
    fixes: list[str] = field(default_factory=list)
    warning: str | None = None
    bad_lines: int = 0


_LABEL_RULES = LabelRules()  # the label rules of the current scan's folders (made anew by each _check_all)


def _check_one(image: Path, num_classes: int | None) -> _Entry:
    label, warning = _LABEL_RULES(image)
    key = _entry_key(image, label, num_classes)
    try:
        h, w, _ = probe_image(image)
    except DataError as err:
        return _Entry(key, "excluded", str(err).removeprefix(f"{image}: "))
    if key[3] is None:
        problem = link_problem(label)  # a broken link is not a missing label file (a background image)
        if problem:
            return _Entry(key, "excluded", f"label file {label}: {problem}; fix or remove the link",
                          warning=warning)
        return _Entry(key, "ok", labels=np.zeros((0, 5), np.float32), hw=(h, w), warning=warning)
    try:
        text = read_text(label, errors="replace")
    except OSError as err:
        return _Entry(key, "excluded", f"label file {label} unreadable ({err.strerror})")
    check = parse_yolo_labels(text, num_classes)
    if check.error:
        return _Entry(key, "excluded", f"label {label}: {check.error}", warning=warning,
                      bad_lines=check.bad_lines)
    return _Entry(key, "ok", labels=check.rows, hw=(h, w), fixes=[f"label {label}: {f}" for f in check.fixes],
                  warning=warning)


PROCESS_MIN = 2000  # fewer images to check than this: threads in this process (a start costs more)


def _check_all(images: list[Path], num_classes: int | None, workers: int | None) -> list[_Entry]:
    """:func:`_check_one` of every image, in order, on every core: the checks are mostly Python (they hold
    the GIL), so a long list is cut into chunks checked by forked processes, each with a few threads that
    overlap its file reads; a short one (or where processes cannot fork) uses threads here."""
    global _LABEL_RULES
    _LABEL_RULES = LabelRules()  # which folders exist is read anew by each scan (the processes inherit it)
    cpus = usable_cpus()
    threads = workers or min(32, cpus * 2)
    context = _fork_context()
    processes = min(cpus, threads)
    if len(images) < PROCESS_MIN or processes < 2 or context is None:
        return _check_chunk(images, num_classes, threads)
    size = max(64, min(1024, -(-len(images) // (processes * 8))))
    chunks = [images[i:i + size] for i in range(0, len(images), size)]
    pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_leave_ctrl_c_to_the_caller)
    try:
        done = pool.map(_check_chunk, chunks, [num_classes] * len(chunks),
                        [_THREADS_PER_PROCESS] * len(chunks))
        return [entry for chunk in done for entry in chunk]
    except BaseException:  # Ctrl-C: the chunks not started are dropped, not checked first
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        pool.shutdown()


_THREADS_PER_PROCESS = 4  # enough to keep a disk busy while the others parse


def _check_chunk(images: list[Path], num_classes: int | None, threads: int) -> list[_Entry]:
    """:func:`_check_one` of each image, in order: ``threads`` threads, each over a run of consecutive
    images (their file reads overlap; no task and no lock per image)."""
    step = -(-len(images) // max(1, threads))
    runs = [images[i:i + step] for i in range(0, len(images), step)]
    if len(runs) <= 1:
        return [_check_one(image, num_classes) for image in images]
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        done = pool.map(lambda run: [_check_one(image, num_classes) for image in run], runs)
        return [entry for run in done for entry in run]


def _leave_ctrl_c_to_the_caller() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _fork_context():
    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def _cache_file(data_path: Path, split: str) -> Path:
    digest = hashlib.sha1(f"{data_path.resolve()}|{split}|{SCAN_VERSION}".encode(errors="surrogateescape")
                          ).hexdigest()[:16]
    return cache_dir() / "scans" / f"{data_path.stem}-{split}-{digest}.npz"


def _check_entries(columns: dict[str, list]) -> None:
    """Raise ``ValueError`` when cached fields (``{field: [value per entry]}``, a field of default values
    may be absent) are not what :func:`_check_one` makes: the scan then checks the files again."""
    count = len(columns["key"])
    status = columns["status"]
    if not set(status) <= {"ok", "excluded"}:
        raise ValueError("status")
    if any(s == "ok" and (labels is None or hw is None)
           for s, labels, hw in zip(status, columns["labels"], columns["hw"])):
        raise ValueError("an ok entry without labels or size")
    for name, kind in (("reason", str), ("bad_lines", int)):
        if not all(type(value) is kind for value in columns.get(name, ())):
            raise ValueError(name)
    fixes = columns.get("fixes", ())
    if not all(type(item) is list and all(type(f) is str for f in item) for item in fixes):
        raise ValueError("fixes")
    if not all(w is None or type(w) is str for w in columns.get("warning", ())):
        raise ValueError("warning")
    if any(len(values) != count for values in columns.values()):
        raise ValueError("column length")


def _load_cache(path: Path) -> dict[str, _Entry]:
    """The cached entries by image path; {} for a missing, foreign or broken file (only a slower scan).
    Plain arrays and JSON (:mod:`turboyolo.data.scan_cache`): whatever the file holds, reading it runs
    no code."""
    return load_entries(path, _Entry, SCAN_VERSION, _check_entries)


def _save_cache(path: Path, entries: dict[str, _Entry]) -> None:
    save_entries(path, entries, SCAN_VERSION)


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off inside (restored after): building an index of a million
    small objects that form no cycles otherwise triggers full collections that walk them all again.
    Never around the checks (decoders may leave cycles to collect)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def scan_images(images: list[Path], names: list[str] | None, *, workers: int | None = None,
                cache_path: Path | None = None, split: str = "", source: str = "",
                notes: Sequence[str] = ()) -> ScanResult:
    """Scan an explicit list of images (see :func:`scan_dataset`); ``notes`` become warnings."""
    num_classes = len(names) if names is not None else None
    texts = [str(image) for image in images]
    entries, from_cache = _entries_for(images, texts, num_classes, cache_path, workers)
    result = ScanResult([], list(names or []), found=len(images), cached=from_cache, split=split,
                        source=source, warnings=list(notes))
    with collector_paused():
        _collect(result, images, texts, entries)
    return result


def _collect(result: ScanResult, images: list[Path], texts: list[str], entries: dict[str, _Entry]) -> None:
    """Fill ``result`` from the entries in list order: samples, exclusions, fixes, warnings, counts."""
    seen: set[str] = set()
    label_owner: dict[str, Path] = {}
    label_files: list[tuple[str, bool]] = []  # per sample: its label file, and whether it exists
    for image, text in zip(images, texts):
        if text in seen:
            result.excluded.append((text, "listed twice (second entry ignored; --loader darknet draws "
                                          "it as often as it is listed)"))
            result.listed_again[text] = result.listed_again.get(text, 0) + 1
            continue
        seen.add(text)
        entry = entries[text]
        owner = label_owner.setdefault(str(entry.key[2]), image)
        if owner != image:  # a.jpg and a.png: one label file read for two images
            result.warnings.append(f"{image}: reads the same label file {entry.key[2]} as "
                                   f"{owner.name}; rename one image unless they are one picture")
        if entry.warning:
            result.warnings.append(entry.warning)
        if entry.status != "ok":
            result.excluded.append((text, entry.reason))
            result.bad_label_lines += entry.bad_lines
            continue
        for fix in entry.fixes:
            result.fixed.append((text, fix))
        if len(entry.labels) == 0:
            result.background += 1
        result.samples.append(Sample(image, entry.labels, entry.hw))
        label_files.append((str(entry.key[2]), entry.key[3] is not None))
    count_label_statuses(result, label_files)


def _entries_for(images: list[Path], texts: list[str], num_classes: int | None, cache_path: Path | None,
                 workers: int | None) -> tuple[dict[str, _Entry], int]:
    """Each image's entry: the cached one where its key (paths, sizes, mtimes, class count) still holds,
    else a fresh check (:func:`_check_one`, in threads); the cache rewritten when anything was checked.
    Returns (entries by image path, how many came from the cache)."""
    with collector_paused():
        cached = _load_cache(cache_path) if cache_path else {}
        entries: dict[str, _Entry] = {}
        todo = [] if cached else list(images)
        for image, text, label in zip(images, texts, label_paths_for(texts)) if cached else ():
            old = cached.get(text)
            if old is not None and old.key == _entry_key(text, label, num_classes):
                entries[text] = old
            else:
                todo.append(image)
    from_cache = len(entries)
    if todo:
        for image, entry in zip(todo, _check_all(todo, num_classes, workers), strict=True):
            entries[str(image)] = entry
        if cache_path:
            with collector_paused():
                _save_cache(cache_path, entries)
    return entries, from_cache


def count_label_statuses(result: ScanResult, label_files: Sequence[tuple[str, bool]] | None = None) -> None:
    """Fill ``result``'s human / reviewed / model-made counts and its unreviewed images from the label
    files' provenance (:mod:`turboyolo.data.autolabels`).

    ``label_files``: per sample its label file and whether it exists (default: looked up). A folder's
    manifest is read once, and only a file the manifest names is hashed: a file it does not name (every
    file of a folder without one) is a person's."""
    if label_files is None:
        label_files = [(str(label), label.is_file()) for label in map(label_path_for,
                                                                       (s.image for s in result.samples))]
    manifests: dict[str, dict] = {}
    counts = {"model": 0, "reviewed": 0, "human": 0, "none": 0}
    for sample, (label, exists) in zip(result.samples, label_files, strict=True):
        folder, name = os.path.split(label)
        manifest = manifests.get(folder) if exists else None
        if exists and manifest is None:
            manifest = manifests[folder] = read_manifest(folder)
        if not exists:
            status = "none"
        elif name not in manifest:
            status = "human"  # what label_status says of a file the manifest does not name, unhashed
        else:
            status = label_status(label, manifest)
        counts[status] += 1
        if status == "model":
            result.unreviewed.append(str(sample.image))
    result.model_made, result.reviewed, result.human = counts["model"], counts["reviewed"], counts["human"]


UNREVIEWED_CHOICES = ("include", "exclude", "ignore")


def apply_unreviewed(result: ScanResult, rule: str) -> ScanResult:
    """What a split's model-made, unreviewed labels do in training (``turboyolo train --unreviewed``):
    ``include`` keeps them as labels, ``exclude`` leaves their images out, ``ignore`` keeps their boxes
    but gives the rest of those images no background ("no object") loss (:attr:`Sample.partial`)."""
    if rule not in UNREVIEWED_CHOICES:
        raise DataError(f"--unreviewed must be one of {', '.join(UNREVIEWED_CHOICES)}, got {rule!r}")
    if rule == "include" or not result.unreviewed:
        return result
    unreviewed = set(result.unreviewed)
    if rule == "exclude":
        result.samples = [s for s in result.samples if str(s.image) not in unreviewed]
        result.unreviewed_rule = "; their images left out: --unreviewed exclude"
    else:
        result.samples = [replace(s, partial=True) if str(s.image) in unreviewed else s
                          for s in result.samples]
        result.unreviewed_rule = "; their background ignored: --unreviewed ignore"
    return result


def _own_split_only(images: list[Path], config, split: str, notes: list[str]) -> list[Path]:
    """``images`` less those a link brought in from another split's folder (``images/train/v -> ../val``, or
    a file link to one of its images): evaluating on training images, or training on validation ones, is
    never what a link meant.
    Folders shared by both splits (an image folder data set) are left alone; one warning per folder."""
    def real_folders(name: str) -> list[str]:
        return [os.path.realpath(s) + os.sep for s in config.split(name) if Path(s).is_dir()]

    mine = real_folders(split)
    others = [o for o in real_folders("val" if split == "train" else "train")
              if not any(o.startswith(m) or m.startswith(o) for m in mine)]
    if not others:
        return images
    parents: dict[Path, str] = {}
    kept, dropped = [], {}
    for image in images:
        real = parents.get(image.parent)
        if real is None:  # once per folder: realpath walks every component
            real = parents[image.parent] = os.path.realpath(image.parent) + os.sep
        if os.path.islink(image):  # a file link into the other split's folder counts as well
            real = os.path.realpath(image)
        other = next((o for o in others if real.startswith(o)), None)
        if other is None or any(real.startswith(m) for m in mine):
            kept.append(image)
        else:
            dropped.setdefault(other, []).append(image)
    for other, lost in dropped.items():
        notes.append(f"{lost[0]}: {len(lost)} image(s) of the other split's folder {other.rstrip(os.sep)}, "
                     f"reached through a link; not listed in {split}")
    return kept


def scan_dataset(data_path: str | Path, split: str, names: list[str] | None = None, *,
                 workers: int | None = None, use_cache: bool = True, report_path: str | Path | None = None,
                 ) -> ScanResult:
    """Check every image and label of one split of a data set.

    Args:
        data_path: a ``.data`` file, a ``data.yaml`` or an image folder.
        split: ``train`` or ``val``.
        names: class names overriding the data set's (required when it has none and labels exist).
        workers: threads for the checks (default 2 x CPUs; a long list is checked in a process per CPU).
        use_cache: reuse/update the scan cache keyed by path, size and mtime.
        report_path: where to write the full report (``result.report``); default: beside the scan
            cache, ``$TURBOYOLO_CACHE/scans/<data>-<split>-<hash>.txt``.

    Returns:
        :class:`ScanResult` with the usable samples; ``summary()`` is the one-line summary.

    Raises:
        DataError: the split has no images at all.
    """
    data_path = Path(data_path)
    config = load_data_config(data_path)
    names = names if names is not None else config.names
    images: list[Path] = []
    notes: list[str] = []
    with collector_paused():  # a Path per listed image
        for source in config.split(split):
            images += list_images(source, notes)
    images = _own_split_only(images, config, split, notes)
    if not images:
        raise DataError(f"{data_path}: the {split} split lists no images; check its {split} entry")
    cache_path = _cache_file(data_path, split) if use_cache else None
    result = scan_images(images, names, workers=workers, cache_path=cache_path, split=split,
                         source=str(data_path), notes=notes)
    try:
        result.report = result.write_report(report_path or _cache_file(data_path, split).with_suffix(".txt"))
    except OSError:
        pass  # a read-only cache folder: the console still names the first files
    return result
