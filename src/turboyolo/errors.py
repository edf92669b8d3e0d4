"""The project's user-facing error: its message names the file or flag and the fix.

The CLI prints it without a traceback and exits non-zero. Library code raises it for anything a user
can correct (a bad file, a bad flag, missing data); programming errors stay ordinary exceptions.
"""

from __future__ import annotations

import os
from pathlib import Path


class TurboYoloError(Exception):
    """A problem the user can fix; ``str(err)`` says what and how."""


class ConfigError(TurboYoloError):
    """A malformed or unsupported Darknet .cfg, .data or data.yaml."""


class WeightsError(TurboYoloError):
    """A weights file that does not fit the network it is loaded into."""


class DataError(TurboYoloError):
    """A data set that cannot be used (missing lists, no images, unreadable files)."""


class AssetError(TurboYoloError):
    """A pinned download that could not be fetched or verified."""


class FlagError(TurboYoloError):
    """A command-line value (or the matching Python API argument) that cannot work."""


class OutputError(TurboYoloError):
    """An output folder or file that cannot be written (read-only folder, full disk, no permission)."""


class CheckpointError(OutputError):
    """A checkpoint that could not be written; the message names the last good one to resume from."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during training, after the run saved its exact position; ``str()`` says how to resume."""


def writable_folder(folder: str | os.PathLike, flag: str, create: bool = True) -> Path:
    """``folder`` once it can take files, else an :class:`OutputError` that names it, why (a file where a
    folder should be, a read-only file system, no permission) and the fix (``flag``: the option that
    chooses the folder). ``create``: make it when missing; else only check that it could be made (its
    nearest existing folder takes files), so a command that fails later leaves no empty folder."""
    folder = Path(folder)
    fix = f"choose a writable folder with {flag}" if flag else "choose a writable folder"
    blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise OutputError(f"{printable(folder)}: cannot write there: {printable(blocker)} is a file, not a "
                          f"folder; {fix}, or move that file")
    existing = next((p for p in (folder, *folder.parents) if p.is_dir()), Path("."))
    if create:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            existing = folder
        except OSError as err:
            raise OutputError(f"{printable(folder)}: cannot create the folder ({err.strerror or err}); "
                              f"{fix}, or make its parent writable") from None
    if not os.access(existing, os.W_OK | os.X_OK):
        why = "a read-only file system" if _read_only(existing) else "no permission to write"
        where = "" if existing == folder else f" (in {printable(existing)})"
        raise OutputError(f"{printable(folder)}: cannot write there{where}: {why}; {fix}, or make it "
                          "writable")
    return folder


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def printable(text: object) -> str:
    """``text`` as it can be printed or written to a UTF-8 report whatever bytes its paths hold.

    A file name that is not valid UTF-8 reaches Python as a str with surrogate escapes
    (``os.fsdecode``); printing or encoding it raises UnicodeEncodeError. Here each such byte becomes
    ``\\xNN`` (``caf\\xe9.jpg``), so the user can still find the file.
    """
    text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    raw = text.encode("utf-8", "surrogateescape") if _only_escapes(text) else text.encode(
        "utf-8", "backslashreplace")
    return raw.decode("utf-8", "backslashreplace")


def _only_escapes(text: str) -> bool:
    """True when every surrogate in ``text`` is a byte escape (U+DC80..U+DCFF) of ``surrogateescape``."""
    return all(not 0xD800 <= ord(ch) <= 0xDFFF or 0xDC80 <= ord(ch) <= 0xDCFF for ch in text)
