"""The project's user-facing error: its message names the file or flag and the fix.

The CLI prints it without a traceback and exits non-zero. Library code raises it for anything a user
can correct (a bad file, a bad flag, missing data); programming errors stay ordinary exceptions.
"""


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
