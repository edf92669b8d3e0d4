"""Which label files a model wrote: a sidecar manifest per labels folder.

``turboyolo label`` records each file it writes in ``<labels folder>/.turboyolo-autolabels.json`` with the
SHA-1 of its content. A file counts as model-made while its content still matches; once a person edits
it (content changes) it counts as human again, with no extra step. Label files themselves stay plain
YOLO text, readable by every tool.

For the data scan: :func:`count_model_made` splits a scan's labelled samples into model-made and human.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

MANIFEST_NAME = ".turboyolo-autolabels.json"


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
        manifest = folder / MANIFEST_NAME
        tmp = manifest.with_name(f".{manifest.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": 1, "files": files}, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, manifest)


def is_model_made(label_path: str | Path, manifest: dict[str, dict] | None = None) -> bool:
    """True when ``label_path`` was written by a model and not edited since."""
    label_path = Path(label_path)
    manifest = read_manifest(label_path.parent) if manifest is None else manifest
    entry = manifest.get(label_path.name)
    return entry is not None and entry.get("sha1") == _sha1(label_path)


def count_model_made(label_paths: Iterable[str | Path]) -> tuple[int, int]:
    """(model-made, other) among existing ``label_paths``; one manifest read per folder."""
    manifests: dict[Path, dict[str, dict]] = {}
    model, other = 0, 0
    for path in map(Path, label_paths):
        if not path.is_file():
            continue
        manifest = manifests.setdefault(path.parent, read_manifest(path.parent))
        if is_model_made(path, manifest):
            model += 1
        else:
            other += 1
    return model, other
