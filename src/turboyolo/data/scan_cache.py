"""The scan cache on disk: one ``.npz`` (a zip of plain ``.npy`` arrays, read with ``allow_pickle=False``)
per data set and split, column by column, so a warm start loads a large data set's label index in one
read with no per-image parsing.

Columns:
- ``images``, ``label_files``: the entries' image and label paths, UTF-8 (``surrogateescape``: names that
  are not UTF-8 come back as they were), joined by NUL (no path holds one);
- ``stats``: int64 ``[n, 4]`` image size, image mtime (ns), label size, label mtime (size -1: no file);
  ``num_classes``: int64 ``[n]`` (-1: none given): with the two paths, the entry's key;
- ``boxes``: float32 ``[M, 5]``, every entry's label rows one after the other; ``box_offsets``: int64
  ``[n + 1]`` (entry i's rows are ``boxes[box_offsets[i]:box_offsets[i + 1]]``), ``has_boxes``: bool ``[n]``;
- ``hw``: int32 ``[n, 2]`` (-1: none);
- ``fields``: UTF-8 JSON ``{name: [value per entry]}`` of every other field of the entry class (its
  status, reason, fixes, ...), a field left out when every entry has its default. Adding a field with a
  JSON value (str, int, float, bool, None, lists of them) to the entry class needs no change here.

Whatever a file holds, reading it runs no code: a planted, foreign, truncated or inconsistent file reads
as empty (the scan then checks the files again), and a cached entry is reused only when its key matches.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from pathlib import Path

import numpy as np

FORMAT = "turboyolo-scan-cache"
_COLUMNS = ("key", "labels", "hw")  # the entry fields stored as arrays; the others go to ``fields``
_SEP = "\0"


def _join(texts: list[str]) -> np.ndarray:
    return np.frombuffer(_SEP.join(texts).encode("utf-8", "surrogateescape"), np.uint8)


def _split(blob: np.ndarray, count: int) -> list[str]:
    texts = blob.tobytes().decode("utf-8", "surrogateescape").split(_SEP) if count else []
    if len(texts) != count:
        raise ValueError("path column length")
    return texts


def _stat_pair(stat) -> tuple[int, int]:
    return (-1, 0) if stat is None else (int(stat[0]), int(stat[1]))


def save_entries(path: Path, entries: dict[str, object], version: int) -> None:
    """Write ``entries`` (image path -> entry: a dataclass with ``key`` = [image, stat, label, stat,
    num_classes], ``labels`` (float32 [k, 5] or None), ``hw``) whole or not at all; a read-only or full
    cache folder only leaves the scan uncached."""
    items = list(entries.values())
    keys = [entry.key for entry in items]
    labels = [entry.labels for entry in items]
    rows = [np.asarray(rows, "<f4").reshape(-1, 5) for rows in labels if rows is not None]
    offsets = np.zeros(len(items) + 1, np.int64)
    offsets[1:] = np.cumsum([0 if rows is None else len(rows) for rows in labels])
    fields = {}
    for spec in dataclasses.fields(items[0]) if items else ():
        if spec.name in _COLUMNS:
            continue
        values = [getattr(entry, spec.name) for entry in items]
        default = spec.default_factory() if spec.default_factory is not dataclasses.MISSING else spec.default
        if default is dataclasses.MISSING or any(v != default for v in values):
            fields[spec.name] = values
    arrays = {
        "meta": _join([json.dumps({"format": FORMAT, "version": version, "count": len(items)})]),
        "images": _join([str(key[0]) for key in keys]),
        "label_files": _join([str(key[2]) for key in keys]),
        "stats": np.array([(*_stat_pair(k[1]), *_stat_pair(k[3])) for k in keys], np.int64).reshape(-1, 4),
        "num_classes": np.array([-1 if k[4] is None else k[4] for k in keys], np.int64),
        "boxes": np.concatenate(rows) if rows else np.zeros((0, 5), "<f4"),
        "box_offsets": offsets,
        "has_boxes": np.array([rows is not None for rows in labels], bool),
        "hw": np.array([(-1, -1) if e.hw is None else e.hw for e in items], np.int32).reshape(-1, 2),
        "fields": _join([json.dumps(fields)]),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as handle:
            np.savez(handle, **arrays)
        os.replace(tmp, path)
    except OSError:
        pass  # read-only cache location: scanning still works, just not cached


def load_entries(path: Path, entry_type: type, version: int, check) -> dict[str, object]:
    """The cached entries by image path; {} for a missing, foreign, older or broken file.

    ``check(columns)`` validates the rebuilt fields, ``{field name: [value per entry]}`` (a field whose
    values are all its default may be absent), and raises ``ValueError`` or ``TypeError`` when one is
    not what a check makes: then no entry is used (the files are checked again)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {name: stored[name] for name in stored.files}
        return _entries(arrays, entry_type, version, check)
    except (OSError, ValueError, KeyError, TypeError, IndexError, EOFError, zipfile.BadZipFile):
        return {}


def _entries(arrays: dict[str, np.ndarray], entry_type: type, version: int, check) -> dict[str, object]:
    meta = json.loads(_split(arrays["meta"], 1)[0])
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("version") != version:
        return {}
    count = int(meta["count"])
    images, label_files = _split(arrays["images"], count), _split(arrays["label_files"], count)
    stats, num_classes = arrays["stats"].astype(np.int64), arrays["num_classes"].astype(np.int64)
    boxes = np.ascontiguousarray(arrays["boxes"], np.float32).reshape(-1, 5)
    offsets, has_boxes = arrays["box_offsets"].astype(np.int64), arrays["has_boxes"].astype(bool)
    hw = arrays["hw"].astype(np.int64).reshape(-1, 2)
    fields = json.loads(_split(arrays["fields"], 1)[0])
    if (stats.shape != (count, 4) or num_classes.shape != (count,) or offsets.shape != (count + 1,)
            or has_boxes.shape != (count,) or hw.shape != (count, 2) or offsets[0] != 0
            or offsets[-1] != len(boxes) or np.any(np.diff(offsets) < 0)):
        raise ValueError("inconsistent columns")
    names = {f.name for f in dataclasses.fields(entry_type)} - set(_COLUMNS)
    if not isinstance(fields, dict) or not set(fields) <= names:
        raise ValueError("fields of another entry type")
    if any(not isinstance(values, list) or len(values) != count for values in fields.values()):
        raise ValueError("field column length")
    keys = [[image, None if a < 0 else [a, b], label, None if c < 0 else [c, d], None if k < 0 else k]
            for image, label, (a, b, c, d), k in zip(images, label_files, stats.tolist(),
                                                     num_classes.tolist())]
    starts = offsets.tolist()
    labels = [boxes[s:e] if f else None for s, e, f in zip(starts, starts[1:], has_boxes.tolist())]
    columns = {"key": keys, "labels": labels, "hw": [None if h < 0 else (h, w) for h, w in hw.tolist()],
               **fields}
    check(columns)
    rows = zip(*columns.values())
    return {image: entry_type(**dict(zip(columns, values))) for image, values in zip(images, rows)}
