"""Which label files a model wrote: a sidecar manifest per labels folder.

``turboyolo label`` records each file it writes in ``<labels folder>/.turboyolo-autolabels.json`` with the
SHA-1 of its content. A file counts as model-made while its content still matches; once a person edits
it (content changes) it counts as human again, with no extra step. ``turboyolo review`` records every
file a person saves (or accepts unchanged) as reviewed, with the SHA-1 of what was saved. Label files
themselves stay plain YOLO text, readable by every tool.

A label file's :func:`label_status`: ``model`` (written by a model, neither edited nor reviewed since),
``reviewed`` (saved in ``turboyolo review``, unchanged since), ``human`` (any other existing file) or
``none`` (no file). For the data scan: :func:`count_statuses` counts them over a split's label files.

Every change of a manifest (read, change, rename) happens under :func:`labels_lock`, a lock file beside it
(``.turboyolo-autolabels.lock``) held with ``flock``: two processes (two ``turboyolo review`` servers, a
review and a ``turboyolo label`` run) never lose each other's records. The review holds the same lock
while it checks and writes a label file, so one save of one file happens at a time across processes.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from turboyolo.errors import OutputError, printable

MANIFEST_NAME = ".turboyolo-autolabels.json"
LOCK_NAME = ".turboyolo-autolabels.lock"
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
        with labels_lock(folder):
            files = read_manifest(folder)
            for path in paths:
                files[path.name] = {"sha1": _sha1(path), "created": stamp, **info}
            _write_manifest(folder, files)


def record_reviewed(label_path: str | Path, sha1: str | None = None) -> None:
    """Mark ``label_path`` reviewed by a person (its content's SHA-1, or ``sha1``): its status is
    ``reviewed`` until the file changes again. The model's record, if any, is kept beside it."""
    label_path = Path(label_path)
    with labels_lock(label_path.parent):
        files = read_manifest(label_path.parent)
        entry = dict(files.get(label_path.name, {}))
        entry.update(reviewed_sha1=sha1 or _sha1(label_path), reviewed=time.strftime("%Y-%m-%dT%H:%M:%S"))
        files[label_path.name] = entry
        _write_manifest(label_path.parent, files)


_held = threading.local()  # the folders whose lock this thread holds: {real path: depth}


@contextmanager
def labels_lock(folder: str | Path) -> Iterator[None]:
    """Held while a labels folder's files or manifest change: an exclusive ``flock`` on its
    :data:`LOCK_NAME` (made when missing, with the folder), so other threads and processes wait for it.
    Re-entrant in one thread (a save holds it while :func:`record_reviewed` takes it again).

    Raises:
        OutputError: the folder cannot take the lock file (read-only, no permission): nothing there can
            be written anyway, so nothing is.
    """
    folder = Path(folder)
    key = os.path.realpath(folder)
    depth = getattr(_held, "folders", {})
    _held.folders = depth
    if depth.get(key):
        depth[key] += 1
        try:
            yield
        finally:
            depth[key] -= 1
        return
    handle = _open_lock(folder)
    try:
        _lock_file(handle, folder)
        depth[key] = 1
        try:
            yield
        finally:
            depth.pop(key, None)
            _unlock_file(handle)
    finally:
        os.close(handle)


_PROCESS_LOCK = threading.Lock()  # where there is no flock (not POSIX): this process's threads only


def _lock_file(handle: int, folder: Path) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        _PROCESS_LOCK.acquire()
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
    except OSError as err:  # a file system without locks
        raise OutputError(f"{printable(folder)}: cannot lock {LOCK_NAME} there ({err.strerror or err}): "
                          "label files and their review records are not saved without it") from None


def _unlock_file(handle: int) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        _PROCESS_LOCK.release()
        return
    fcntl.flock(handle, fcntl.LOCK_UN)


def _open_lock(folder: Path) -> int:
    """The lock file's descriptor (never through a link: ``O_NOFOLLOW``)."""
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            return os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT | nofollow, 0o666)
        except PermissionError:  # another user's lock file in a shared folder: a lock needs no write
            return os.open(folder / LOCK_NAME, os.O_RDONLY | nofollow)
    except OSError as err:
        raise OutputError(f"{printable(folder)}: cannot write there ({err.strerror or err}): label files and "
                          "their review records cannot be saved; make the folder writable") from None


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
