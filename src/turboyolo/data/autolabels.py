"""Which label files a model wrote: a sidecar manifest per labels folder.

``turboyolo label`` records each file it writes in ``<labels folder>/.turboyolo-autolabels.json`` with the
SHA-1 of its content. A file counts as model-made while its content still matches; once a person edits
it (content changes) it counts as human again, with no extra step. ``turboyolo review`` records every
file a person saves (or accepts unchanged) as reviewed, with the SHA-1 of what was saved. Label files
themselves stay plain YOLO text, readable by every tool.

A label file's :func:`label_status`: ``model`` (written by a model, neither edited nor reviewed since),
``reviewed`` (saved in ``turboyolo review``, unchanged since), ``human`` (any other existing file) or
``none`` (no file). For the data scan: :func:`count_statuses` counts them over a split's label files.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

MANIFEST_NAME = ".turboyolo-autolabels.json"
STATUSES = ("model", "reviewed", "human", "none")


def _sha1(path: Path) -> str | None:
    try:
        return hashlib.sha1(path.read_bytes()).hexdigest()
    except OSError:
        return None


def read_manifest(labels_dir: str | Path) -> dict[str, dict]:
    """``{file name: record}`` of one labels folder (empty when there is no manifest)."""
    path = Path(labels_dir) / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return dict(data.get("files", {}))
    except (OSError, ValueError, AttributeError):
        return {}


def record_model_labels(label_paths: Iterable[Path], **info) -> None:
    """Add written ``label_paths`` to their folders' manifests with ``info`` (weights, conf, ...)."""
    by_folder: dict[Path, list[Path]] = {}
    for path in label_paths:
        by_folder.setdefault(Path(path).parent, []).append(Path(path))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    for folder, paths in by_folder.items():
        files = read_manifest(folder)
        for path in paths:
            files[path.name] = {"sha1": _sha1(path), "created": stamp, **info}
        _write_manifest(folder, files)


def record_reviewed(label_path: str | Path, sha1: str | None = None) -> None:
    """Mark ``label_path`` reviewed by a person (its content's SHA-1, or ``sha1``): its status is
    ``reviewed`` until the file changes again. The model's record, if any, is kept beside it."""
    label_path = Path(label_path)
    files = read_manifest(label_path.parent)
    entry = dict(files.get(label_path.name, {}))
    entry.update(reviewed_sha1=sha1 or _sha1(label_path), reviewed=time.strftime("%Y-%m-%dT%H:%M:%S"))
    files[label_path.name] = entry
    _write_manifest(label_path.parent, files)


def _write_manifest(folder: Path, files: dict[str, dict]) -> None:
    """The manifest written atomically (temporary file + rename): a reader never sees half of it."""
    manifest = folder / MANIFEST_NAME
    tmp = manifest.with_name(f".{manifest.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps({"version": 1, "files": files}, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, manifest)


def label_status(label_path: str | Path, manifest: dict[str, dict] | None = None,
                 sha1: str | None = None) -> str:
    """``model``, ``reviewed``, ``human`` or ``none`` (see the module's text); ``sha1``: the file's, when
    the caller has it already."""
    label_path = Path(label_path)
    sha1 = sha1 or _sha1(label_path)
    if sha1 is None:
        return "none"
    manifest = read_manifest(label_path.parent) if manifest is None else manifest
    entry = manifest.get(label_path.name) or {}
    if entry.get("reviewed_sha1") == sha1:
        return "reviewed"
    return "model" if entry.get("sha1") == sha1 else "human"


def is_model_made(label_path: str | Path, manifest: dict[str, dict] | None = None) -> bool:
    """True when ``label_path`` was written by a model and not edited since."""
    label_path = Path(label_path)
    manifest = read_manifest(label_path.parent) if manifest is None else manifest
    return label_status(label_path, manifest) == "model"


def count_model_made(label_paths: Iterable[str | Path]) -> tuple[int, int]:
    """(model-made, other) among existing ``label_paths``; one manifest read per folder."""
    counts = count_statuses(label_paths)
    return counts["model"], counts["human"] + counts["reviewed"]


def count_statuses(label_paths: Iterable[str | Path]) -> dict[str, int]:
    """How many of ``label_paths`` are in each of :data:`STATUSES`; one manifest read per folder."""
    manifests: dict[Path, dict[str, dict]] = {}
    counts = dict.fromkeys(STATUSES, 0)
    for path in map(Path, label_paths):
        manifest = manifests.setdefault(path.parent, read_manifest(path.parent))
        counts[label_status(path, manifest)] += 1
    return counts
